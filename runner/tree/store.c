/* The content store: the checkpoints' one object per distinct content, named by its SHA-256,
 * in a directory of the state dir; or the reset's pack, one unnamed file. See tree.h. */
#include "tree/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"
#include "core/sha256.h"
#include "core/fileio.h"
#include "tree/fsops.h"
#include "tree/node.h"

#define STORE_DIR "checkpoints"
#define OBJ_DIR "objects"

void tree_hex(const unsigned char sha[32], char out[65])
{
	static const char d[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = d[sha[i] >> 4];
		out[2 * i + 1] = d[sha[i] & 15];
	}
	out[64] = 0;
}

int tree_store_open(struct tree_store *s, int state_fd, struct error *e)
{
	s->dir_fd = s->obj_fd = s->pack_fd = -1;
	struct kstatx st;
	int rc = fs_statx(state_fd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return error_set(e, -rc, NULL, "checkpoints: cannot examine the state dir");
	s->excl[0] = (struct tree_inode){fs_dev(&st), st.ino};
	s->n_excl = 1;
	if (mkdirat(state_fd, STORE_DIR, 0700) < 0 && errno != EEXIST)
		return error_set(e, errno, NULL, "checkpoints: cannot create the store");
	s->dir_fd = openat(state_fd, STORE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s->dir_fd < 0)
		return error_set(e, errno, NULL, "checkpoints: cannot open the store");
	if (mkdirat(s->dir_fd, OBJ_DIR, 0700) < 0 && errno != EEXIST)
		return error_set(e, errno, NULL, "checkpoints: cannot create the object store");
	s->obj_fd = openat(s->dir_fd, OBJ_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s->obj_fd < 0)
		return error_set(e, errno, NULL, "checkpoints: cannot open the object store");
	if (!(s->buf = malloc(TREE_BUF_BYTES)))
		return error_set(e, ENOMEM, NULL, "checkpoints");
	return 0;
}

void tree_store_close(struct tree_store *s)
{
	if (s->obj_fd >= 0)
		close(s->obj_fd);
	if (s->dir_fd >= 0)
		close(s->dir_fd);
	if (s->pack_fd >= 0)
		close(s->pack_fd);
	s->obj_fd = s->dir_fd = s->pack_fd = -1;
	free(s->buf);
	s->buf = NULL;
	free(s->new_hex);
	s->new_hex = NULL;
	s->n_new = s->cap_new = 0;
}

void tree_store_rollback(struct tree_store *s)
{
	for (size_t i = 0; i < s->n_new; i++)
		unlinkat(s->obj_fd, s->new_hex[i], 0);
	s->n_new = 0;
	s->added = s->new_objects = 0;
}

/* An unnamed file in dir (linked later under its name), else a named one
 * (*tmpname set) to be renamed. */
static int tmp_open(int dir, char tmpname[64])
{
	tmpname[0] = 0;
	int fd = openat(dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd < 0 ? -errno : fd;
	static unsigned seq;
	for (int i = 0; i < 100; i++) {
		snprintf(tmpname, 64, ".tmp-%d-%u", (int)getpid(), seq++);
		fd = openat(dir, tmpname, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			return fd < 0 ? -errno : fd;
	}
	return -EEXIST;
}

static int tmp_link(int fd, const char *tmpname, int dir, const char *name)
{
	if (tmpname[0]) {
		if (renameat(dir, tmpname, dir, name) < 0) {
			int err = errno;
			unlinkat(dir, tmpname, 0);
			return -err;
		}
		return 0;
	}
	if (linkat(fd, "", dir, name, AT_EMPTY_PATH) == 0)
		return 0;
	char p[40];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, p, dir, name, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
}

/* The reset's pack: appended (a file that grew meanwhile is cut where its copy ended). */
static int pack_put(struct tree_store *s, int src, struct tree_ent *e, uint64_t *stored)
{
	uint64_t n = 0;
	int rc = fs_copy(src, NULL, UINT64_MAX, s->pack_fd, &n);
	if (rc < 0)
		return rc;
	e->pack_off = s->pack_len;
	s->pack_len += n;
	s->added += n;
	*stored = n;
	return s->used + s->added > s->max ? -TREE_EFULL : 0;
}

/* Cloned where the file system can (then the clone is hashed: what is stored is what was
 * hashed, whatever a task does to src meanwhile), else read once, hashed and written. */
int tree_store_put(struct tree_store *s, int src, uint64_t size, struct tree_ent *e,
		   uint64_t *stored, bool *cloned)
{
	*cloned = false;
	if (s->used + s->added + size > s->max)
		return -TREE_EFULL;
	if (s->pack_fd >= 0)
		return pack_put(s, src, e, stored);
	unsigned char *sha = e->sha;
	char tmpname[64];
	int tmp = tmp_open(s->obj_fd, tmpname);
	if (tmp < 0)
		return tmp;
	struct sha256 h;
	sha256_init(&h);
	uint64_t n = 0;
	int rc = 0;
	/* A clone is read back from the store (its own bytes are hashed); a
	 * copy is read from src and written as it is hashed. */
	*cloned = ioctl(tmp, FICLONE, src) == 0;
	for (;;) {
		ssize_t k = *cloned ? pread(tmp, s->buf, TREE_BUF_BYTES, (off_t)n)
				    : read(src, s->buf, TREE_BUF_BYTES);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			rc = -errno;
			break;
		}
		if (k == 0)
			break;
		sha256_update(&h, s->buf, (size_t)k);
		if (!*cloned && (rc = write_all(tmp, s->buf, (size_t)k)) < 0)
			break;
		n += (uint64_t)k;
		if (!*cloned && s->used + s->added + n > s->max) {
			rc = -TREE_EFULL; /* it grew while being copied */
			break;
		}
	}
	if (rc == 0 && s->used + s->added + n > s->max)
		rc = -TREE_EFULL;
	sha256_final(&h, sha);
	char hex[65];
	tree_hex(sha, hex);
	struct stat ost;
	if (rc == 0 && fstatat(s->obj_fd, hex, &ost, AT_SYMLINK_NOFOLLOW) == 0) {
		/* Already stored: shared. */
		if (tmpname[0])
			unlinkat(s->obj_fd, tmpname, 0);
		close(tmp);
		*stored = n;
		return 0;
	}
	if (rc == 0 && (rc = tmp_link(tmp, tmpname, s->obj_fd, hex)) == -EEXIST)
		rc = 0;
	else if (rc == 0) {
		if (s->n_new == s->cap_new) {
			size_t cap = s->cap_new ? s->cap_new * 2 : 256;
			char(*nh)[65] = realloc(s->new_hex, cap * sizeof(*nh));
			if (!nh)
				rc = -ENOMEM;
			else {
				s->new_hex = nh;
				s->cap_new = cap;
			}
		}
		if (rc == 0) {
			memcpy(s->new_hex[s->n_new++], hex, 65);
			s->added += n;
			s->new_objects++;
		}
	} else if (tmpname[0])
		unlinkat(s->obj_fd, tmpname, 0);
	close(tmp);
	*stored = n;
	return rc;
}

/* Hash only (a diff against the tree as it is). */
int tree_hash_fd(char *buf, int src, unsigned char sha[32], uint64_t *n)
{
	struct sha256 h;
	sha256_init(&h);
	*n = 0;
	for (;;) {
		ssize_t k = read(src, buf, TREE_BUF_BYTES);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		sha256_update(&h, buf, (size_t)k);
		*n += (uint64_t)k;
	}
	sha256_final(&h, sha);
	return 0;
}

int tree_slurp(int fd, size_t max, char **buf, size_t *len)
{
	char *b = malloc(max + 1);
	size_t n = 0;
	while (b && n < max) {
		ssize_t k = read(fd, b + n, max - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	close(fd);
	if (!b)
		return -ENOMEM;
	b[n] = 0;
	*buf = b;
	*len = n;
	return 0;
}

int tree_store_open_content(const struct tree_store *s, const struct tree_ent *e, uint64_t *off,
			    bool *owned)
{
	*owned = s->pack_fd < 0;
	*off = *owned ? 0 : e->pack_off;
	if (!*owned)
		return s->pack_fd;
	char hex[65];
	tree_hex(e->sha, hex);
	int fd = openat(s->obj_fd, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int tree_object_read(const struct tree_store *s, const unsigned char sha[32], size_t max,
		     char **buf, size_t *len)
{
	char hex[65];
	tree_hex(sha, hex);
	int fd = openat(s->obj_fd, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return tree_slurp(fd, max, buf, len);
}

static int cmp_sha(const void *a, const void *b)
{
	return memcmp(a, b, 32);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int tree_store_gc(struct tree_store *s, const struct tree_manifest *keep, unsigned n_keep,
		  uint64_t *bytes, struct error *e)
{
	size_t n = 0;
	for (unsigned i = 0; i < n_keep; i++)
		n += keep[i].n;
	unsigned char(*set)[32] = malloc((n ? n : 1) * 32);
	if (!set)
		return error_set(e, ENOMEM, NULL, "checkpoints");
	size_t k = 0;
	for (unsigned i = 0; i < n_keep; i++)
		for (size_t j = 0; j < keep[i].n; j++)
			if (keep[i].ent[j].flags & TREE_STORED)
				memcpy(set[k++], keep[i].ent[j].sha, 32);
	qsort(set, k, 32, cmp_sha);
	struct fs_iter *it = fs_iter_new(s->obj_fd);
	if (!it) {
		free(set);
		return error_set(e, ENOMEM, NULL, "checkpoints");
	}
	*bytes = 0;
	const char *name;
	int rc;
	while ((rc = fs_iter_next(it, &name)) > 0) {
		unsigned char sha[32];
		bool ok = strlen(name) == 64;
		for (int i = 0; ok && i < 32; i++) {
			int hi = hexval(name[2 * i]), lo = hexval(name[2 * i + 1]);
			ok = hi >= 0 && lo >= 0;
			sha[i] = (unsigned char)(hi << 4 | lo);
		}
		if (ok && bsearch(sha, set, k, 32, cmp_sha)) {
			struct stat st;
			if (fstatat(s->obj_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
				*bytes += (uint64_t)st.st_size;
			continue;
		}
		if (unlinkat(s->obj_fd, name, 0) < 0 && errno != ENOENT) {
			rc = -errno;
			break;
		}
	}
	free(it);
	free(set);
	if (rc < 0)
		return error_set(e, -rc, NULL, "checkpoints: cannot clean the object store");
	return 0;
}

int tree_store_retire(int state_fd)
{
	char name[64];
	for (unsigned i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), STORE_DIR ".dead.%u", i);
		if (syscall(SYS_renameat2, state_fd, STORE_DIR, state_fd, name,
			    1 /* NOREPLACE */) == 0)
			return 0;
		if (errno == ENOENT)
			return 0;
		if (errno != EEXIST)
			return -1;
	}
	errno = EEXIST;
	return -1;
}

int tree_remove_all(int dfd, const char *name)
{
	struct kstatx st;
	int rc = fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
	if (rc < 0)
		return rc == -ENOENT ? 0 : rc;
	struct tree_rm o = {.dev = fs_dev(&st),
			    .mnt_id = st.mnt_id,
			    .max_depth = TREE_MAX_DEPTH,
			    .hoist_fd = -1};
	return tree_remove(&o, dfd, name, &st, 0);
}

/* The retired stores found in one listing of the state dir (a few entries): not a lookup of
 * each of the thousand names tree_store_retire may use, which was a thousand failing statx
 * calls at the start of every checkpoint operation. */
void tree_store_purge_dead(int state_fd)
{
	static const char prefix[] = STORE_DIR ".dead.";
	int fd = openat(state_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	/* Named first, removed after: the listing is not changed under readdir. */
	char(*names)[32] = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (strncmp(de->d_name, prefix, sizeof(prefix) - 1) || len >= sizeof(names[0]))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 8;
			char(*nn)[32] = realloc(names, nc * sizeof(*nn));
			if (!nn)
				break; /* the next operation takes the rest */
			names = nn;
			cap = nc;
		}
		memcpy(names[n++], de->d_name, len + 1);
	}
	closedir(d);
	for (size_t i = 0; i < n; i++)
		tree_remove_all(state_fd, names[i]);
	free(names);
}
