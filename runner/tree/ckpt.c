/* Workspace checkpoints: take, store, diff, restore. See ckpt.h. */
#include "tree/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/sha256.h"
#include "core/util.h"
#include "tree/fsx.h"
#include "files/ident.h"
#include "tree/xattr.h"

#define STORE_DIR "checkpoints"
#define OBJ_DIR "objects"
#define BUF_BYTES (1u << 20)
#define MAGIC "FCKPT001"

/* ---- manifest ---- */

const char *ck_path(const struct ck_manifest *m, const struct ck_ent *e)
{
	return m->pool + e->path_off;
}

int ck_pathcmp(const char *a, const char *b)
{
	for (;; a++, b++) {
		unsigned ca = (unsigned char)*a, cb = (unsigned char)*b;
		if (ca == '/')
			ca = 1;
		if (cb == '/')
			cb = 1;
		if (ca != cb || !ca)
			return (int)ca - (int)cb;
	}
}

void ck_manifest_free(struct ck_manifest *m)
{
	free(m->ent);
	free(m->pool);
	memset(m, 0, sizeof(*m));
}

long ck_find(const struct ck_manifest *m, const char *path)
{
	if (!m)
		return -1;
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = ck_pathcmp(path, ck_path(m, &m->ent[mid]));
		if (c == 0)
			return (long)mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

static int pool_add(struct ck_manifest *m, const void *data, size_t len, uint32_t *off)
{
	if (m->pool_len + len + 1 > m->pool_cap) {
		size_t cap = m->pool_cap ? m->pool_cap * 2 : 65536;
		while (cap < m->pool_len + len + 1)
			cap *= 2;
		if (cap > UINT32_MAX)
			return -ENOMEM;
		char *p = realloc(m->pool, cap);
		if (!p)
			return -ENOMEM;
		m->pool = p;
		m->pool_cap = cap;
	}
	memcpy(m->pool + m->pool_len, data, len);
	m->pool[m->pool_len + len] = 0;
	*off = (uint32_t)m->pool_len;
	m->pool_len += len + 1;
	return 0;
}

static int ent_add(struct ck_manifest *m, uint32_t *idx)
{
	if (m->n >= CK_MAX_ENTRIES)
		return -EFBIG;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 1024;
		struct ck_ent *n = realloc(m->ent, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		m->ent = n;
		m->cap = cap;
	}
	*idx = (uint32_t)m->n++;
	memset(&m->ent[*idx], 0, sizeof(m->ent[0]));
	m->ent[*idx].parent = CK_NONE;
	return 0;
}

static enum ck_type type_of(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR:
		return CK_DIR;
	case S_IFREG:
		return CK_REG;
	case S_IFLNK:
		return CK_LNK;
	case S_IFIFO:
		return CK_FIFO;
	case S_IFCHR:
		return CK_CHR;
	case S_IFBLK:
		return CK_BLK;
	default:
		return CK_SOCK;
	}
}

static void ent_fill(struct ck_ent *e, const struct kstatx *st)
{
	e->ino = st->ino;
	e->dev = fsx_dev(st);
	e->size = st->size;
	e->rdev = fsx_rdev(st);
	e->ctime_sec = st->ctime.tv_sec;
	e->ctime_nsec = st->ctime.tv_nsec;
	e->mtime_sec = st->mtime.tv_sec;
	e->mtime_nsec = st->mtime.tv_nsec;
	e->atime_sec = st->atime.tv_sec;
	e->atime_nsec = st->atime.tv_nsec;
	e->mode = st->mode;
	e->uid = st->uid;
	e->gid = st->gid;
	e->nlink = st->nlink;
	e->type = (uint8_t)type_of(st->mode);
}

void ck_hex(const unsigned char sha[32], char out[65])
{
	static const char d[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = d[sha[i] >> 4];
		out[2 * i + 1] = d[sha[i] & 15];
	}
	out[64] = 0;
}

/* ---- store ---- */

int ck_store_open(struct ck_store *s, int state_fd, struct error *e)
{
	s->dir_fd = s->obj_fd = -1;
	struct kstatx st;
	int rc = fsx_statx(state_fd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return error_set(e, -rc, NULL, "checkpoints: cannot examine the state dir");
	s->excl_dev = fsx_dev(&st);
	s->excl_ino = st.ino;
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
	if (!(s->buf = malloc(BUF_BYTES)))
		return error_set(e, ENOMEM, NULL, "checkpoints");
	return 0;
}

void ck_store_close(struct ck_store *s)
{
	if (s->obj_fd >= 0)
		close(s->obj_fd);
	if (s->dir_fd >= 0)
		close(s->dir_fd);
	s->obj_fd = s->dir_fd = -1;
	free(s->buf);
	s->buf = NULL;
	free(s->new_hex);
	s->new_hex = NULL;
	s->n_new = s->cap_new = 0;
}

void ck_store_rollback(struct ck_store *s)
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

/* Content of src into the store: cloned where the file system can (then
 * the clone is hashed: what is stored is what was hashed, whatever a task
 * does to src meanwhile), else read once, hashed and written. */
static int store_put(struct ck_store *s, int src, uint64_t size, unsigned char sha[32],
		     uint64_t *stored, bool *cloned)
{
	*cloned = false;
	if (s->used + s->added + size > s->max)
		return -CK_EFULL;
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
		ssize_t k = *cloned ? pread(tmp, s->buf, BUF_BYTES, (off_t)n)
				    : read(src, s->buf, BUF_BYTES);
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
			rc = -CK_EFULL; /* it grew while being copied */
			break;
		}
	}
	if (rc == 0 && s->used + s->added + n > s->max)
		rc = -CK_EFULL;
	sha256_final(&h, sha);
	char hex[65];
	ck_hex(sha, hex);
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
static int hash_fd(char *buf, int src, unsigned char sha[32], uint64_t *n)
{
	struct sha256 h;
	sha256_init(&h);
	*n = 0;
	for (;;) {
		ssize_t k = read(src, buf, BUF_BYTES);
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

/* Up to max bytes of fd (closed here) into a new NUL-terminated buffer;
 * a read error ends it with what was read. */
static int slurp(int fd, size_t max, char **buf, size_t *len)
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

int ck_object_read(const struct ck_store *s, const unsigned char sha[32], size_t max, char **buf,
		   size_t *len)
{
	char hex[65];
	ck_hex(sha, hex);
	int fd = openat(s->obj_fd, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return slurp(fd, max, buf, len);
}

static int cmp_sha(const void *a, const void *b)
{
	return memcmp(a, b, 32);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int ck_store_gc(struct ck_store *s, const struct ck_manifest *keep, unsigned n_keep,
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
			if (keep[i].ent[j].flags & CK_HAS_SHA)
				memcpy(set[k++], keep[i].ent[j].sha, 32);
	qsort(set, k, 32, cmp_sha);
	struct fsx_iter *it = fsx_iter_new(s->obj_fd);
	if (!it) {
		free(set);
		return error_set(e, ENOMEM, NULL, "checkpoints");
	}
	*bytes = 0;
	const char *name;
	int rc;
	while ((rc = fsx_iter_next(it, &name)) > 0) {
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

/* ---- take ---- */

struct take {
	struct ck_store *s; /* the store; its excl is never entered */
	bool hash_only;     /* contents hashed, not stored */
	const struct ck_root *root;
	const struct ck_manifest *prev;
	struct ck_manifest *m;
	struct ck_take_stats *ts;
	char *hbuf; /* hashing buffer without a store */
	struct error *e;
	char path[PATH_MAX];
};

static bool foreign(const struct take *c, const struct kstatx *st)
{
	if (fsx_dev(st) != c->root->dev || (c->root->mnt_id && st->mnt_id != c->root->mnt_id))
		return true;
	return fsx_dev(st) == c->s->excl_dev && st->ino == c->s->excl_ino;
}

static int take_content(struct take *c, int dfd, const char *name, uint32_t idx)
{
	struct ck_manifest *m = c->m;
	struct ck_ent *e = &m->ent[idx];
	long p = ck_find(c->prev, c->path);
	if (p >= 0) {
		const struct ck_ent *pe = &c->prev->ent[p];
		if (pe->type == CK_REG && (pe->flags & CK_HAS_SHA) && pe->ino == e->ino &&
		    pe->dev == e->dev && pe->size == e->size && pe->ctime_sec == e->ctime_sec &&
		    pe->ctime_nsec == e->ctime_nsec) {
			/* Unchanged since the previous checkpoint (any write, chmod,
			 * chown, xattr change moves the ctime): not read again. */
			memcpy(e->sha, pe->sha, 32);
			e->flags |= CK_HAS_SHA;
			if (pe->xattr_len) {
				uint32_t off;
				if (pool_add(m, c->prev->pool + pe->xattr_off, pe->xattr_len,
					     &off) < 0)
					return error_set(c->e, ENOMEM, NULL, "checkpoint");
				e = &m->ent[idx];
				e->xattr_off = off;
				e->xattr_len = pe->xattr_len;
			}
			return 0;
		}
	}
	int src = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	struct kstatx st;
	if (src >= 0 &&
	    (fsx_statx(src, "", AT_EMPTY_PATH, &st) < 0 || (st.mode & S_IFMT) != S_IFREG)) {
		close(src);
		src = -1;
		errno = ESTALE;
	}
	if (src < 0 && errno == ENOENT && idx == m->n - 1) {
		m->n--; /* gone meanwhile: as if it were not there */
		c->ts->files--;
		return 0;
	}
	if (src < 0) {
		/* Not readable (or swapped meanwhile): named in the answer,
		 * never in the store. */
		e->flags |= CK_UNREADABLE;
		c->ts->unreadable++;
		return 0;
	}
	ent_fill(e, &st); /* as it is when read */
	char *blob;
	size_t blen;
	int rc = fsx_xattrs_take(src, &blob, &blen);
	if (rc == 0 && blen) {
		uint32_t off;
		rc = pool_add(m, blob, blen, &off);
		e = &m->ent[idx];
		e->xattr_off = off;
		e->xattr_len = (uint32_t)blen;
	}
	free(blob);
	if (rc < 0) {
		close(src);
		return error_set(c->e, -rc, NULL, "checkpoint: the attributes of %s", c->path);
	}
	uint64_t n = 0;
	bool cloned = false;
	if (!c->hash_only)
		rc = store_put(c->s, src, st.size, e->sha, &n, &cloned);
	else
		rc = hash_fd(c->hbuf, src, e->sha, &n);
	close(src);
	if (rc == -CK_EFULL) {
		error_set(c->e, 0, NULL, "%s", c->path);
		c->e->errnum = CK_EFULL; /* the caller words it: 507 */
		return -1;
	}
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "checkpoint: cannot copy %s", c->path);
	e->size = n;
	e->flags |= CK_HAS_SHA;
	c->ts->read_files++;
	c->ts->read_bytes += n;
	if (cloned)
		c->ts->cloned_files++;
	return 0;
}

struct nref {
	char *name;
};

static int cmp_nref(const void *a, const void *b)
{
	return strcmp(((const struct nref *)a)->name, ((const struct nref *)b)->name);
}

static int take_entry(struct take *c, int dfd, const char *name, uint32_t parent, int depth);

/* The kernel's own check, as the task user: faccessat2(AT_EACCESS) under its fsuid (the
 * runner's capabilities dropped with it, files/ident.h). It also needs search on dfd. */
static bool task_may(const struct files_ident *t, int dfd, const char *name, int mode)
{
	if (files_enter(t) < 0)
		return false;
	long rc = syscall(SYS_faccessat2, dfd, name, mode, AT_EACCESS | AT_SYMLINK_NOFOLLOW);
	files_leave();
	return rc == 0;
}

/* What the task user could do with the entry idx (dfd/name): the store's copy is taken as the
 * runner, and a diff or restore for the task shows or writes only what this says it could
 * read (docs/design.md §10.2, "For whom"). */
static void task_access(struct take *c, int dfd, const char *name, uint32_t idx)
{
	struct ck_ent *e = &c->m->ent[idx];
	const struct files_ident *t = c->s ? c->s->task : NULL;
	if (!t || e->type == CK_KEEP)
		return;
	bool seen = e->parent == CK_NONE ? c->root->task_reach
					 : (c->m->ent[e->parent].flags & CK_TASK_OK) != 0;
	if (!seen)
		return;
	e->flags |= CK_TASK_SEEN;
	if (e->type == CK_REG) {
		/* A file's own rights move its ctime: unchanged since the previous checkpoint
		 * (which checked it, from a directory it could enter), the answer stands. */
		long p = ck_find(c->prev, c->path);
		const struct ck_ent *pe = p >= 0 ? &c->prev->ent[p] : NULL;
		if (pe && pe->type == CK_REG && (pe->flags & CK_TASK_SEEN) && pe->ino == e->ino &&
		    pe->dev == e->dev && pe->ctime_sec == e->ctime_sec &&
		    pe->ctime_nsec == e->ctime_nsec) {
			e->flags |= pe->flags & CK_TASK_OK;
			return;
		}
	}
	int mode = e->type == CK_DIR ? R_OK | X_OK : e->type == CK_REG ? R_OK : F_OK;
	if (task_may(t, dfd, name, mode))
		e->flags |= CK_TASK_OK;
}

static int take_children(struct take *c, int fd, uint32_t di, int depth)
{
	if (depth >= CK_MAX_DEPTH)
		return error_set(c->e, 0, NULL, "checkpoint: %s is more than %d levels deep",
				 c->path, CK_MAX_DEPTH);
	struct fsx_iter *it = fsx_iter_new(fd);
	if (!it)
		return error_set(c->e, ENOMEM, NULL, "checkpoint");
	struct nref *v = NULL;
	size_t n = 0, cap = 0;
	const char *name;
	int rc;
	while ((rc = fsx_iter_next(it, &name)) > 0) {
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			struct nref *nv = realloc(v, cap * sizeof(*nv));
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
		}
		if (!(v[n].name = strdup(name))) {
			rc = -ENOMEM;
			break;
		}
		n++;
	}
	free(it);
	if (rc < 0) {
		for (size_t i = 0; i < n; i++)
			free(v[i].name);
		free(v);
		return error_set(c->e, -rc, NULL, "checkpoint: cannot list %s", c->path);
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_nref);
	size_t plen = strlen(c->path);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		size_t l = strlen(v[i].name);
		if (plen + 1 + l >= sizeof(c->path)) {
			rc = error_set(c->e, ENAMETOOLONG, NULL, "checkpoint: under %s", c->path);
			break;
		}
		c->path[plen] = '/';
		memcpy(c->path + plen + 1, v[i].name, l + 1);
		rc = take_entry(c, fd, v[i].name, di, depth + 1);
		c->path[plen] = 0;
	}
	for (size_t i = 0; i < n; i++)
		free(v[i].name);
	free(v);
	return rc < 0 ? -1 : 0;
}

/* c->path is the entry's path. */
static int take_entry(struct take *c, int dfd, const char *name, uint32_t parent, int depth)
{
	struct kstatx st;
	int rc = fsx_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
	if (rc == -ENOENT)
		return 0; /* gone meanwhile */
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "checkpoint: cannot examine %s", c->path);
	struct ck_manifest *m = c->m;
	uint32_t idx, off;
	if ((rc = ent_add(m, &idx)) < 0 || (rc = pool_add(m, c->path, strlen(c->path), &off)) < 0) {
		if (rc == -EFBIG)
			return error_set(c->e, 0, NULL, "checkpoint: more than %u entries",
					 CK_MAX_ENTRIES);
		return error_set(c->e, ENOMEM, NULL, "checkpoint");
	}
	struct ck_ent *e = &m->ent[idx];
	e->path_off = off;
	e->path_len = (uint32_t)strlen(c->path);
	e->parent = parent;
	ent_fill(e, &st);
	if (foreign(c, &st)) {
		e->type = CK_KEEP; /* a mount point or the state dir: never entered */
		return 0;
	}
	task_access(c, dfd, name, idx);
	switch (e->type) {
	case CK_DIR: {
		c->ts->dirs++;
		int fd = fsx_open_dir_checked(dfd, name, st.ino, c->root->dev, c->root->mnt_id);
		if (fd == -ENOENT || fd == -ESTALE || fd == -ENOTDIR || fd == -ELOOP) {
			m->n--; /* swapped meanwhile: as if it were not there */
			c->ts->dirs--;
			return 0;
		}
		if (fd < 0)
			return error_set(c->e, -fd, NULL, "checkpoint: cannot open %s", c->path);
		char *blob;
		size_t blen;
		rc = fsx_xattrs_take(fd, &blob, &blen);
		if (rc == 0 && blen && (rc = pool_add(m, blob, blen, &off)) == 0) {
			m->ent[idx].xattr_off = off;
			m->ent[idx].xattr_len = (uint32_t)blen;
		}
		free(blob);
		if (rc < 0) {
			close(fd);
			return error_set(c->e, -rc, NULL, "checkpoint: the attributes of %s",
					 c->path);
		}
		rc = take_children(c, fd, idx, depth);
		close(fd);
		return rc;
	}
	case CK_REG:
		c->ts->files++;
		rc = take_content(c, dfd, name, idx);
		if (idx < m->n)
			c->ts->bytes += m->ent[idx].size;
		return rc;
	case CK_LNK: {
		char target[PATH_MAX];
		ssize_t tl = readlinkat(dfd, name, target, sizeof(target));
		if (tl < 0 &&
		    (errno == EINVAL || errno == ENOENT)) { /* swapped or gone meanwhile */
			m->n--;
			return 0;
		}
		if (tl < 0 || (size_t)tl >= sizeof(target))
			return error_set(c->e, tl < 0 ? errno : ENAMETOOLONG, NULL,
					 "checkpoint: cannot read the symlink %s", c->path);
		if ((rc = pool_add(m, target, (size_t)tl, &off)) < 0)
			return error_set(c->e, ENOMEM, NULL, "checkpoint");
		m->ent[idx].target_off = off;
		m->ent[idx].target_len = (uint32_t)tl;
		c->ts->links++;
		return 0;
	}
	default:
		c->ts->other++;
		return 0;
	}
}

int ck_take(struct ck_store *store, bool hash_only, const struct ck_root *roots, unsigned n_roots,
	    const struct ck_manifest *prev, struct ck_manifest *out, struct ck_take_stats *ts,
	    struct error *e)
{
	memset(out, 0, sizeof(*out));
	memset(ts, 0, sizeof(*ts));
	struct take c =
		{.s = store, .hash_only = hash_only, .prev = prev, .m = out, .ts = ts, .e = e};
	if (hash_only && !(c.hbuf = malloc(BUF_BYTES)))
		return error_set(e, ENOMEM, NULL, "checkpoint");
	int rc = 0;
	for (unsigned i = 0; i < n_roots && rc == 0; i++) {
		c.root = &roots[i];
		snprintf(c.path, sizeof(c.path), "%s", roots[i].path);
		rc = take_entry(&c, roots[i].pfd, roots[i].name, CK_NONE, 0);
	}
	free(c.hbuf);
	if (rc < 0)
		ck_manifest_free(out);
	return rc;
}

/* ---- manifest files ---- */

int ck_save(int dir_fd, const char *name, const struct ck_manifest *m, struct error *e)
{
	char tmp[96];
	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	int fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return error_set(e, errno, NULL, "checkpoint: cannot write its manifest");
	uint64_t hdr[3] = {0, m->n, m->pool_len};
	memcpy(&hdr[0], MAGIC, 8);
	int rc = write_all(fd, (const char *)hdr, sizeof(hdr));
	if (rc == 0 && m->n)
		rc = write_all(fd, (const char *)m->ent, m->n * sizeof(*m->ent));
	if (rc == 0 && m->pool_len)
		rc = write_all(fd, m->pool, m->pool_len);
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(dir_fd, tmp, dir_fd, name) < 0)
		rc = -errno;
	if (rc < 0) {
		unlinkat(dir_fd, tmp, 0);
		return error_set(e, -rc, NULL, "checkpoint: cannot write its manifest");
	}
	return 0;
}

static int read_full(int fd, void *p, size_t n)
{
	char *b = p;
	while (n) {
		ssize_t k = read(fd, b, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

int ck_load(int dir_fd, const char *name, struct ck_manifest *m, struct error *e)
{
	memset(m, 0, sizeof(*m));
	int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return error_set(e, errno, NULL, "checkpoint: cannot read its manifest");
	uint64_t hdr[3];
	int rc = read_full(fd, hdr, sizeof(hdr));
	if (rc == 0 && (memcmp(hdr, MAGIC, 8) || hdr[1] > CK_MAX_ENTRIES || hdr[2] > UINT32_MAX))
		rc = -EINVAL;
	if (rc == 0) {
		m->n = m->cap = hdr[1];
		m->pool_len = m->pool_cap = hdr[2];
		m->ent = malloc((m->n ? m->n : 1) * sizeof(*m->ent));
		m->pool = malloc(m->pool_len + 1);
		if (!m->ent || !m->pool)
			rc = -ENOMEM;
	}
	if (rc == 0)
		rc = read_full(fd, m->ent, m->n * sizeof(*m->ent));
	if (rc == 0)
		rc = read_full(fd, m->pool, m->pool_len);
	close(fd);
	if (rc < 0) {
		ck_manifest_free(m);
		return error_set(e, -rc, NULL, "checkpoint: cannot read its manifest");
	}
	m->pool[m->pool_len] = 0;
	return 0;
}

/* ---- diff ---- */

static unsigned differs(const struct ck_manifest *ma, const struct ck_ent *a,
			const struct ck_manifest *mb, const struct ck_ent *b)
{
	unsigned w = 0;
	if (a->type != b->type)
		return CK_D_TYPE;
	if (a->type == CK_REG) {
		if (a->size != b->size ||
		    ((a->flags & b->flags & CK_HAS_SHA) && memcmp(a->sha, b->sha, 32)) ||
		    ((a->flags ^ b->flags) & CK_HAS_SHA))
			w |= CK_D_CONTENT;
		if (a->mtime_sec != b->mtime_sec || a->mtime_nsec != b->mtime_nsec)
			w |= CK_D_MTIME;
	}
	if (a->type == CK_LNK &&
	    (a->target_len != b->target_len ||
	     memcmp(ma->pool + a->target_off, mb->pool + b->target_off, a->target_len)))
		w |= CK_D_TARGET;
	if ((a->type == CK_CHR || a->type == CK_BLK) && a->rdev != b->rdev)
		w |= CK_D_CONTENT;
	if (a->type != CK_LNK && (a->mode & 07777) != (b->mode & 07777))
		w |= CK_D_MODE;
	if (a->uid != b->uid || a->gid != b->gid)
		w |= CK_D_OWNER;
	if (a->xattr_len != b->xattr_len ||
	    memcmp(ma->pool + a->xattr_off, mb->pool + b->xattr_off, a->xattr_len))
		w |= CK_D_XATTRS;
	return w;
}

void ck_diff(const struct ck_manifest *a, const struct ck_manifest *b, ck_diff_fn fn, void *arg)
{
	size_t i = 0, j = 0;
	while (i < a->n || j < b->n) {
		int c;
		if (i == a->n)
			c = 1;
		else if (j == b->n)
			c = -1;
		else
			c = ck_pathcmp(ck_path(a, &a->ent[i]), ck_path(b, &b->ent[j]));
		if (c < 0) {
			if (a->ent[i].type != CK_KEEP)
				fn(arg, &a->ent[i], NULL, 0);
			i++;
		} else if (c > 0) {
			if (b->ent[j].type != CK_KEEP)
				fn(arg, NULL, &b->ent[j], 0);
			j++;
		} else {
			const struct ck_ent *ea = &a->ent[i], *eb = &b->ent[j];
			if (ea->type != CK_KEEP && eb->type != CK_KEEP) {
				unsigned w = differs(a, ea, b, eb);
				if (w)
					fn(arg, ea, eb, w);
			}
			i++;
			j++;
		}
	}
}

/* The root holding path, and path's components after the root's own. */
static const struct ck_root *root_of(const struct ck_root *roots, unsigned n, const char *path,
				     const char **rest)
{
	for (unsigned i = 0; i < n; i++) {
		size_t l = strlen(roots[i].path);
		if (!strncmp(path, roots[i].path, l) && (path[l] == 0 || path[l] == '/')) {
			*rest = path + l;
			return &roots[i];
		}
	}
	return NULL;
}

/* The directory holding path (opened one component at a time from its
 * root, O_NOFOLLOW|O_DIRECTORY, never leaving the root's mount) and its
 * last component in *base. An fd or -errno. */
static int open_parent_of(const struct ck_root *roots, unsigned n_roots, const char *path,
			  const char **base, const struct ck_root **root)
{
	const char *rest;
	const struct ck_root *r = root_of(roots, n_roots, path, &rest);
	if (!r)
		return -ENOENT;
	*root = r;
	if (!*rest) {
		*base = r->name;
		int fd = dup(r->pfd);
		return fd < 0 ? -errno : fd;
	}
	if (r->fd < 0)
		return -ENOTDIR;
	int fd = dup(r->fd);
	if (fd < 0)
		return -errno;
	char comp[NAME_MAX + 1];
	for (;;) {
		rest++; /* the '/' */
		const char *slash = strchr(rest, '/');
		if (!slash) {
			*base = rest;
			return fd;
		}
		size_t l = (size_t)(slash - rest);
		if (l > NAME_MAX) {
			close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(comp, rest, l);
		comp[l] = 0;
		rest = slash;
		struct kstatx st;
		int rc = fsx_statx(fd, comp, AT_SYMLINK_NOFOLLOW, &st);
		int nfd = rc < 0 ? rc : fsx_open_dir_checked(fd, comp, st.ino, r->dev, r->mnt_id);
		close(fd);
		if (nfd < 0)
			return nfd;
		fd = nfd;
	}
}

int ck_read_current(const struct ck_root *roots, unsigned n_roots, const char *path, size_t max,
		    char **buf, size_t *len)
{
	const char *base;
	const struct ck_root *r;
	int dfd = open_parent_of(roots, n_roots, path, &base, &r);
	if (dfd < 0)
		return dfd;
	int fd = openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(dfd);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	return slurp(fd, max, buf, len);
}

/* ---- restore ---- */

struct rst {
	struct ck_store *s;
	const struct ck_manifest *m;
	const struct ck_root *root;
	uint32_t *kids, *kid_start; /* children of each entry, in order */
	ck_note_fn note;
	void *arg;
	unsigned failures;
	bool root_user;
	unsigned seq;
};

static void failed(struct rst *c, const char *path, const char *what, int err)
{
	char d[256];
	snprintf(d, sizeof(d), "%s%s%s", what, err ? ": " : "",
		 err == CK_EDEEP ? "more than 200 levels deep"
		 : err           ? strerror(err)
				 : "");
	c->note(c->arg, "failed", path, d);
	c->failures++;
}

/* The result rc of a step on path: -errno, reported as failed (what), else
 * noted as done (NULL: nothing to note). */
static void outcome(struct rst *c, const char *path, int rc, const char *what, const char *done)
{
	if (rc < 0)
		failed(c, path, what, -rc);
	else if (done)
		c->note(c->arg, done, path, NULL);
}

static int remove_tree_fd(int fd, uint64_t dev, uint64_t mnt, int depth);

static int remove_any(int dfd, const char *name, const struct kstatx *st, uint64_t dev,
		      uint64_t mnt, int depth)
{
	if ((st->mode & S_IFMT) != S_IFDIR)
		return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	if (depth >= CK_MAX_DEPTH)
		return -CK_EDEEP;
	int fd = fsx_open_dir_checked(dfd, name, st->ino, dev, mnt);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	int rc = remove_tree_fd(fd, dev, mnt, depth + 1);
	close(fd);
	if (rc < 0)
		return rc;
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static int remove_tree_fd(int fd, uint64_t dev, uint64_t mnt, int depth)
{
	if (geteuid() != 0) {
		struct stat st; /* a directory of ours made read-only */
		if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0700) != 0700)
			fchmod(fd, (st.st_mode | 0700) & 07777);
	}
	struct fsx_iter *it = fsx_iter_new(fd);
	if (!it)
		return -ENOMEM;
	const char *name;
	int rc;
	struct kstatx st;
	while ((rc = fsx_iter_next_stat(it, &name, &st)) > 0) {
		if (fsx_dev(&st) != dev || (mnt && st.mnt_id != mnt)) {
			rc = -EBUSY; /* a mount point: never removed */
			break;
		}
		if ((rc = remove_any(fd, name, &st, dev, mnt, depth)) < 0)
			break;
	}
	free(it);
	return rc;
}

int ck_remove_tree(int dfd, const char *name)
{
	struct kstatx st;
	int rc = fsx_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
	if (rc < 0)
		return rc == -ENOENT ? 0 : rc;
	return remove_any(dfd, name, &st, fsx_dev(&st), st.mnt_id, 0);
}

static struct timespec ts_of(int64_t sec, uint32_t nsec)
{
	return (struct timespec){.tv_sec = (time_t)sec, .tv_nsec = (long)nsec};
}

/* Owner, then xattrs, mode (a chown clears set-id bits, an ACL sets the
 * group bits), then times. */
static int set_attrs_fd(struct rst *c, int fd, const struct ck_ent *e)
{
	if (fchown(fd, e->uid, e->gid) < 0 && (c->root_user || errno != EPERM))
		return -errno;
	int xr = fsx_xattrs_restore(fd, c->m->pool + e->xattr_off, e->xattr_len, !c->root_user);
	if (xr < 0)
		return xr;
	if (fchmod(fd, e->mode & 07777) < 0)
		return -errno;
	struct timespec ts[2] = {ts_of(e->atime_sec, e->atime_nsec),
				 ts_of(e->mtime_sec, e->mtime_nsec)};
	if (futimens(fd, ts) < 0)
		return -errno;
	return 0;
}

static int set_attrs_at(struct rst *c, int dfd, const char *name, const struct ck_ent *e)
{
	if (fchownat(dfd, name, e->uid, e->gid, AT_SYMLINK_NOFOLLOW) < 0 &&
	    (c->root_user || errno != EPERM))
		return -errno;
	if (e->type != CK_LNK && fchmodat(dfd, name, e->mode & 07777, 0) < 0)
		return -errno;
	struct timespec ts[2] = {ts_of(e->atime_sec, e->atime_nsec),
				 ts_of(e->mtime_sec, e->mtime_nsec)};
	if (utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return 0;
}

static bool attrs_equal(const struct ck_ent *e, const struct kstatx *st)
{
	return st->uid == e->uid && st->gid == e->gid && (st->mode & 07777) == (e->mode & 07777) &&
	       st->mtime.tv_sec == e->mtime_sec && st->mtime.tv_nsec == e->mtime_nsec;
}

static bool xattrs_equal(struct rst *c, int fd, const struct ck_ent *e)
{
	char *blob;
	size_t len;
	if (fsx_xattrs_take(fd, &blob, &len) < 0)
		return false;
	bool eq = len == e->xattr_len && (!len || !memcmp(blob, c->m->pool + e->xattr_off, len));
	free(blob);
	return eq;
}

/* Put dfd/name in place from tmp (renameat over what is there; a
 * directory in the way is removed first). */
static int put_in_place(struct rst *c, int dfd, const char *tmp, const char *name)
{
	if (renameat(dfd, tmp, dfd, name) == 0)
		return 0;
	int err = errno;
	if (err == EISDIR || err == ENOTEMPTY || err == EEXIST || err == ENOTDIR) {
		struct kstatx st;
		int rc = fsx_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
		if (rc == 0)
			rc = remove_any(dfd, name, &st, c->root->dev, c->root->mnt_id, 0);
		if (rc == 0 && renameat(dfd, tmp, dfd, name) == 0)
			return 0;
		err = rc < 0 ? -rc : errno;
	}
	unlinkat(dfd, tmp, 0);
	return -err;
}

static void tmp_name(struct rst *c, char out[64])
{
	snprintf(out, 64, ".forceai-restore-%d-%u", (int)getpid(), c->seq++);
}

static int write_file(struct rst *c, int dfd, const char *name, const struct ck_ent *e)
{
	char hex[65], tmp[64];
	ck_hex(e->sha, hex);
	/* The store is the runner's (0700): its object is opened as the runner, everything
	 * else of a restore for the task as the task user. */
	if (c->s->as_task)
		files_leave();
	int src = openat(c->s->obj_fd, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	int err = errno;
	if (c->s->as_task && files_enter(c->s->task) < 0) {
		if (src >= 0)
			close(src);
		return -EPERM; /* never goes on as the runner */
	}
	if (src < 0)
		return -err;
	int dst = -1;
	for (int i = 0; i < 100 && dst < 0; i++) {
		tmp_name(c, tmp);
		dst = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (dst < 0 && errno != EEXIST)
			break;
	}
	if (dst < 0) {
		int err = errno;
		close(src);
		return -err;
	}
	int rc = 0;
	if (ioctl(dst, FICLONE, src) < 0) {
		uint64_t copied = 0;
		loff_t off = 0;
		rc = fsx_copy(src, &off, e->size, dst, &copied);
	}
	close(src);
	if (rc == 0)
		rc = set_attrs_fd(c, dst, e);
	if (close(dst) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0) {
		unlinkat(dfd, tmp, 0);
		return rc;
	}
	return put_in_place(c, dfd, tmp, name);
}

static int make_node(struct rst *c, int dfd, const char *name, const struct ck_ent *e)
{
	char tmp[64];
	int rc = -EEXIST;
	for (int i = 0; i < 100 && rc == -EEXIST; i++) {
		tmp_name(c, tmp);
		if (e->type == CK_LNK) {
			char target[PATH_MAX];
			memcpy(target, c->m->pool + e->target_off, e->target_len);
			target[e->target_len] = 0;
			rc = symlinkat(target, dfd, tmp) < 0 ? -errno : 0;
		} else {
			mode_t t = e->type == CK_FIFO  ? S_IFIFO
				   : e->type == CK_CHR ? S_IFCHR
						       : S_IFBLK;
			rc = mknodat(dfd, tmp, t | 0600, (dev_t)e->rdev) < 0 ? -errno : 0;
		}
	}
	if (rc < 0)
		return rc;
	if ((rc = set_attrs_at(c, dfd, tmp, e)) < 0) {
		unlinkat(dfd, tmp, 0);
		return rc;
	}
	return put_in_place(c, dfd, tmp, name);
}

static void restore_entry(struct rst *c, int dfd, const char *name, uint32_t idx, int depth);

static bool is_kid(struct rst *c, uint32_t di, const char *name, size_t plen)
{
	uint32_t lo = c->kid_start[di], hi = c->kid_start[di + 1];
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const char *p = ck_path(c->m, &c->m->ent[c->kids[mid]]) + plen + 1;
		int r = strcmp(name, p);
		if (r == 0)
			return true;
		if (r < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return false;
}

static void restore_children(struct rst *c, int fd, uint32_t di, int depth)
{
	const struct ck_ent *d = &c->m->ent[di];
	const char *dpath = ck_path(c->m, d);
	size_t plen = d->path_len;
	if (!c->root_user) {
		struct stat st; /* a directory of ours made read-only */
		if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0700) != 0700)
			fchmod(fd, (st.st_mode | 0700) & 07777);
	}
	/* What was added since: removed. */
	struct fsx_iter *it = fsx_iter_new(fd);
	if (!it) {
		failed(c, dpath, "out of memory", 0);
		return;
	}
	const char *name;
	int rc;
	char path[PATH_MAX];
	while ((rc = fsx_iter_next(it, &name)) > 0) {
		if (is_kid(c, di, name, plen) || !strncmp(name, ".forceai-restore-", 17))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dpath, name);
		struct kstatx st;
		if ((rc = fsx_statx(fd, name, AT_SYMLINK_NOFOLLOW, &st)) == -ENOENT)
			continue;
		if (rc == 0 && (fsx_dev(&st) != c->root->dev ||
				(c->root->mnt_id && st.mnt_id != c->root->mnt_id) ||
				(fsx_dev(&st) == c->s->excl_dev && st.ino == c->s->excl_ino)))
			continue; /* a mount point, the state dir: not ours */
		if (rc == 0)
			rc = remove_any(fd, name, &st, c->root->dev, c->root->mnt_id, depth + 1);
		outcome(c, path, rc, "cannot remove what was added", "removed");
		/* The listing goes on: getdents copes with removals. */
	}
	free(it);
	if (rc < 0)
		failed(c, dpath, "cannot list", -rc);
	for (uint32_t k = c->kid_start[di]; k < c->kid_start[di + 1]; k++) {
		uint32_t ci = c->kids[k];
		restore_entry(c, fd, ck_path(c->m, &c->m->ent[ci]) + plen + 1, ci, depth + 1);
	}
}

/* A restore for the task user: false when e is left as it is. What it could not list and
 * enter, or read, when the checkpoint was taken is not written back for it (its content, its
 * entries' names would be disclosed), nor touched when it is still there. */
static bool task_left(struct rst *c, const struct ck_ent *e, bool exists, enum ck_type cur,
		      const struct kstatx *st)
{
	if ((e->flags & CK_TASK_OK) || e->type == CK_SOCK ||
	    (e->type != CK_DIR && e->type != CK_REG && (e->flags & CK_TASK_SEEN)))
		return true;
	const char *path = ck_path(c->m, e);
	if (e->type == CK_DIR && exists && cur == CK_DIR && st->ino == e->ino &&
	    fsx_dev(st) == e->dev)
		return false; /* the same directory: nothing of it is the task's to restore */
	if (e->type == CK_REG && exists && cur == CK_REG && st->ino == e->ino &&
	    fsx_dev(st) == e->dev && st->ctime.tv_sec == e->ctime_sec &&
	    st->ctime.tv_nsec == e->ctime_nsec && st->size == e->size)
		return false; /* untouched since */
	failed(c, path,
	       e->type == CK_DIR ? "the task user could not list and enter it when the checkpoint "
				   "was taken: left as it is"
				 : "the task user could not read it when the checkpoint was taken: "
				   "left as it is",
	       0);
	return false;
}

static void restore_entry(struct rst *c, int dfd, const char *name, uint32_t idx, int depth)
{
	const struct ck_ent *e = &c->m->ent[idx];
	const char *path = ck_path(c->m, e);
	if (e->type == CK_KEEP)
		return;
	if (depth >= CK_MAX_DEPTH) {
		failed(c, path, "too deep", 0);
		return;
	}
	struct kstatx st;
	int rc = fsx_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
	bool exists = rc == 0;
	if (rc < 0 && rc != -ENOENT) {
		failed(c, path, "cannot examine", -rc);
		return;
	}
	if (exists &&
	    (fsx_dev(&st) != c->root->dev || (c->root->mnt_id && st.mnt_id != c->root->mnt_id))) {
		failed(c, path, "a mount point is there now: left as it is", 0);
		return;
	}
	enum ck_type cur = exists ? type_of(st.mode) : 0;
	if (c->s->as_task && !task_left(c, e, exists, cur, &st))
		return;
	/* A checkpoint's own path is replaced or recreated only where its
	 * parent may be written too. */
	bool is_root = e->parent == CK_NONE && !c->root->replaceable;
	switch (e->type) {
	case CK_DIR: {
		const char *action = NULL;
		if (exists && cur != CK_DIR) {
			if (is_root) {
				failed(c, path,
				       "is no longer a directory (a checkpoint's own path is "
				       "never replaced)",
				       0);
				return;
			}
			rc = remove_any(dfd, name, &st, c->root->dev, c->root->mnt_id, depth);
			if (rc < 0) {
				failed(c, path, "cannot remove what replaced the directory", -rc);
				return;
			}
			exists = false;
			action = "replaced";
		}
		if (!exists) {
			if (is_root) {
				failed(c, path,
				       "is gone (a checkpoint's own path is never recreated)", 0);
				return;
			}
			if (mkdirat(dfd, name, 0700) < 0) {
				failed(c, path, "cannot create", errno);
				return;
			}
			if ((rc = fsx_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st)) < 0) {
				failed(c, path, "cannot examine", -rc);
				return;
			}
			if (!action)
				action = "created";
		}
		int fd = fsx_open_dir_checked(dfd, name, st.ino, c->root->dev, c->root->mnt_id);
		if (fd < 0) {
			failed(c, path, "cannot open", -fd);
			return;
		}
		/* Whether it differed before: the restore's own renames in it move
		 * its mtime, which is put back without being a change to report. */
		struct kstatx now;
		bool was_same = fsx_statx(fd, "", AT_EMPTY_PATH, &now) == 0 &&
				attrs_equal(e, &now) && xattrs_equal(c, fd, e);
		restore_children(c, fd, idx, depth);
		/* The directory's own attributes, after all changes in it. */
		bool same = fsx_statx(fd, "", AT_EMPTY_PATH, &now) == 0 && attrs_equal(e, &now) &&
			    xattrs_equal(c, fd, e);
		if (!same) {
			if ((rc = set_attrs_fd(c, fd, e)) < 0)
				failed(c, path, "cannot set its owner, mode, times or attributes",
				       -rc);
			else if (!action && !was_same)
				action = "attributes";
		}
		close(fd);
		if (action)
			c->note(c->arg, action, path, NULL);
		return;
	}
	case CK_REG: {
		if (!(e->flags & CK_HAS_SHA)) {
			failed(c, path,
			       "was not readable when the checkpoint was taken: left as it is", 0);
			return;
		}
		if (exists && cur == CK_REG && st.ino == e->ino && fsx_dev(&st) == e->dev &&
		    st.ctime.tv_sec == e->ctime_sec && st.ctime.tv_nsec == e->ctime_nsec &&
		    st.size == e->size)
			return; /* untouched since */
		if (exists && cur == CK_REG && st.size == e->size && !is_root) {
			/* Same size: maybe only its attributes changed. */
			int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
			unsigned char sha[32];
			uint64_t n;
			struct kstatx fst;
			if (fd >= 0 && fsx_statx(fd, "", AT_EMPTY_PATH, &fst) == 0 &&
			    fst.ino == st.ino && (fst.nlink == 1 || e->nlink > 1) &&
			    hash_fd(c->s->buf, fd, sha, &n) == 0 && n == e->size &&
			    !memcmp(sha, e->sha, 32)) {
				bool same = attrs_equal(e, &fst) && xattrs_equal(c, fd, e);
				rc = same ? 0 : set_attrs_fd(c, fd, e);
				close(fd);
				outcome(c, path, rc,
					"cannot set its owner, mode, times or attributes",
					same ? NULL : "attributes");
				return;
			}
			if (fd >= 0)
				close(fd);
		}
		rc = write_file(c, dfd, name, e);
		outcome(c, path, rc, "cannot write", exists ? "replaced" : "created");
		return;
	}
	case CK_SOCK:
		if (!exists || cur != CK_SOCK)
			failed(c, path, "a socket cannot be recreated", 0);
		return;
	default: { /* symlinks, FIFOs, devices */
		if (exists && cur == e->type) {
			bool same = true;
			if (cur == CK_LNK) {
				char target[PATH_MAX];
				ssize_t tl = readlinkat(dfd, name, target, sizeof(target));
				same = tl == (ssize_t)e->target_len &&
				       !memcmp(target, c->m->pool + e->target_off, e->target_len);
			} else {
				same = fsx_rdev(&st) == e->rdev;
			}
			if (same) {
				if (attrs_equal(e, &st) ||
				    (cur == CK_LNK && st.uid == e->uid && st.gid == e->gid &&
				     st.mtime.tv_sec == e->mtime_sec &&
				     st.mtime.tv_nsec == e->mtime_nsec))
					return;
				rc = set_attrs_at(c, dfd, name, e);
				outcome(c, path, rc, "cannot set its owner, mode or times",
					"attributes");
				return;
			}
		}
		if (is_root && exists && cur == CK_DIR) {
			failed(c, path,
			       "is a directory now (a checkpoint's own path is never replaced)", 0);
			return;
		}
		rc = make_node(c, dfd, name, e);
		outcome(c, path, rc, "cannot create", exists ? "replaced" : "created");
		return;
	}
	}
}

static const struct ck_manifest *sort_m;

static int cmp_link(const void *a, const void *b)
{
	const struct ck_ent *x = &sort_m->ent[*(const uint32_t *)a],
			    *y = &sort_m->ent[*(const uint32_t *)b];
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* Hard links: names that shared an inode in the checkpoint share one again
 * (each was restored as a file of its own first): the later names are
 * linked to the first under a temporary name, renamed over theirs. */
static void restore_links(struct rst *c, const struct ck_root *roots, unsigned n_roots)
{
	const struct ck_manifest *m = c->m;
	uint32_t *v = malloc((m->n ? m->n : 1) * sizeof(uint32_t));
	size_t n = 0;
	for (size_t i = 0; v && i < m->n; i++)
		if (m->ent[i].type == CK_REG && m->ent[i].nlink > 1 &&
		    (m->ent[i].flags & CK_HAS_SHA) &&
		    (!c->s->as_task || (m->ent[i].flags & CK_TASK_OK)))
			v[n++] = (uint32_t)i;
	if (!v)
		return;
	sort_m = m;
	qsort(v, n, sizeof(uint32_t), cmp_link);
	for (size_t k = 1; k < n; k++) {
		const struct ck_ent *first = &m->ent[v[k - 1]], *e = &m->ent[v[k]];
		if (first->dev != e->dev || first->ino != e->ino)
			continue;
		size_t f = k - 1; /* the group's first */
		while (f > 0 && m->ent[v[f - 1]].dev == e->dev && m->ent[v[f - 1]].ino == e->ino)
			f--;
		first = &m->ent[v[f]];
		const char *fb, *eb, *path = ck_path(m, e);
		const struct ck_root *fr, *er;
		int ffd = open_parent_of(roots, n_roots, ck_path(m, first), &fb, &fr);
		int efd = ffd < 0 ? ffd : open_parent_of(roots, n_roots, path, &eb, &er);
		struct kstatx a, b;
		int rc = efd < 0 ? efd : fsx_statx(ffd, fb, AT_SYMLINK_NOFOLLOW, &a);
		if (rc == 0)
			rc = fsx_statx(efd, eb, AT_SYMLINK_NOFOLLOW, &b);
		if (rc == 0 && (a.mode & S_IFMT) == S_IFREG &&
		    (fsx_dev(&a) != fsx_dev(&b) || a.ino != b.ino)) {
			char tmp[64];
			rc = -EEXIST;
			for (int i = 0; i < 100 && rc == -EEXIST; i++) {
				tmp_name(c, tmp);
				rc = linkat(ffd, fb, efd, tmp, 0) < 0 ? -errno : 0;
			}
			c->root = er;
			if (rc == 0)
				rc = put_in_place(c, efd, tmp, eb);
			if (rc == 0 && e->parent != CK_NONE) {
				/* The link and rename moved the directory's times. */
				const struct ck_ent *d = &m->ent[e->parent];
				struct timespec ts[2] = {ts_of(d->atime_sec, d->atime_nsec),
							 ts_of(d->mtime_sec, d->mtime_nsec)};
				if (futimens(efd, ts) < 0)
					rc = -errno;
			}
			if (rc == 0)
				c->note(c->arg, "linked", path, NULL);
		}
		if (rc < 0)
			failed(c, path, "cannot link it to its first name again", -rc);
		if (ffd >= 0)
			close(ffd);
		if (efd >= 0)
			close(efd);
	}
	free(v);
}

unsigned ck_restore(struct ck_store *s, const struct ck_manifest *m, const struct ck_root *roots,
		    unsigned n_roots, ck_note_fn note, void *arg)
{
	/* For the task user, what it may not do (chown, trusted.*) is a failure, as for root. */
	struct rst c = {.s = s,
			.m = m,
			.note = note,
			.arg = arg,
			.root_user = geteuid() == 0 || s->as_task};
	/* Children of each entry, in manifest (name) order: a counting sort. */
	c.kid_start = calloc(m->n + 2, sizeof(uint32_t));
	c.kids = malloc((m->n ? m->n : 1) * sizeof(uint32_t));
	if (!c.kid_start || !c.kids) {
		free(c.kid_start);
		free(c.kids);
		note(arg, "failed", "", "out of memory");
		return 1;
	}
	for (size_t i = 0; i < m->n; i++)
		if (m->ent[i].parent != CK_NONE)
			c.kid_start[m->ent[i].parent + 1]++;
	for (size_t i = 0; i < m->n + 1; i++)
		c.kid_start[i + 1] += c.kid_start[i];
	uint32_t *fill = malloc((m->n + 1) * sizeof(uint32_t));
	if (fill) {
		memcpy(fill, c.kid_start, (m->n + 1) * sizeof(uint32_t));
		for (size_t i = 0; i < m->n; i++)
			if (m->ent[i].parent != CK_NONE)
				c.kids[fill[m->ent[i].parent]++] = (uint32_t)i;
		free(fill);
		for (size_t i = 0; i < m->n; i++) {
			if (m->ent[i].parent != CK_NONE)
				continue;
			const char *p = ck_path(m, &m->ent[i]);
			for (unsigned r = 0; r < n_roots; r++)
				if (!strcmp(roots[r].path, p)) {
					c.root = &roots[r];
					restore_entry(&c, roots[r].pfd, roots[r].name, (uint32_t)i,
						      0);
				}
		}
		restore_links(&c, roots, n_roots);
	} else {
		note(arg, "failed", "", "out of memory");
		c.failures++;
	}
	free(c.kid_start);
	free(c.kids);
	return c.failures;
}

int ck_store_retire(int state_fd)
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

void ck_purge_dead(int state_fd)
{
	char name[64];
	for (unsigned i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), STORE_DIR ".dead.%u", i);
		ck_remove_tree(state_fd, name);
	}
}
