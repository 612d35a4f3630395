/* The engine's nodes: see node.h. */
#include "tree/node.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tree/fsops.h"
#include "tree/xattr.h"

enum tree_type tree_type_of(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR:
		return TREE_DIR;
	case S_IFREG:
		return TREE_REG;
	case S_IFLNK:
		return TREE_LNK;
	case S_IFIFO:
		return TREE_FIFO;
	case S_IFCHR:
		return TREE_CHR;
	case S_IFBLK:
		return TREE_BLK;
	default:
		return TREE_SOCK;
	}
}

struct timespec tree_ts(int64_t sec, uint32_t nsec)
{
	return (struct timespec){.tv_sec = (time_t)sec, .tv_nsec = (long)nsec};
}

bool tree_other_mount(const struct kstatx *st, uint64_t dev, uint64_t mnt_id)
{
	return fs_dev(st) != dev || (mnt_id && st->mnt_id != mnt_id);
}

bool tree_inode_in(const struct tree_inode *v, unsigned n, const struct kstatx *st)
{
	for (unsigned i = 0; i < n; i++)
		if (v[i].dev == fs_dev(st) && v[i].ino == st->ino)
			return true;
	return false;
}

int tree_pool_add(struct tree_pool *p, const void *data, size_t len, uint32_t *off)
{
	if (p->len + len + 1 > p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 65536;
		while (cap < p->len + len + 1)
			cap *= 2;
		if (cap > UINT32_MAX)
			return -ENOMEM;
		char *b = realloc(p->buf, cap);
		if (!b)
			return -ENOMEM;
		p->buf = b;
		p->cap = cap;
	}
	if (len)
		memcpy(p->buf + p->len, data, len);
	p->buf[p->len + len] = 0;
	*off = (uint32_t)p->len;
	p->len += len + 1;
	return 0;
}

int tree_pool_xattrs(struct tree_pool *p, int fd, uint32_t *off, uint32_t *len)
{
	char *blob;
	size_t blen;
	int rc = xattrs_take(fd, &blob, &blen);
	if (rc == 0 && blen && (rc = tree_pool_add(p, blob, blen, off)) == 0)
		*len = (uint32_t)blen;
	free(blob);
	return rc;
}

int tree_pool_link(struct tree_pool *p, int dfd, const char *name, uint32_t *off, uint32_t *len)
{
	char target[PATH_MAX];
	ssize_t tl = readlinkat(dfd, name, target, sizeof(target));
	if (tl < 0)
		return -errno;
	if ((size_t)tl >= sizeof(target))
		return -ENAMETOOLONG;
	int rc = tree_pool_add(p, target, (size_t)tl, off);
	if (rc == 0)
		*len = (uint32_t)tl;
	return rc;
}

void tree_pool_free(struct tree_pool *p)
{
	free(p->buf);
	*p = (struct tree_pool){0};
}

int tree_grow(void *v, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	size_t c = *cap ? *cap * 2 : 64;
	void *nv = realloc(*(void **)v, c * size);
	if (!nv)
		return -ENOMEM;
	*(void **)v = nv;
	*cap = c;
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int tree_names_read(int fd, struct tree_names *out)
{
	/* The names in one buffer, not one allocation each: a walk of many small directories
	 * would leave the heap fragmented (the runner's resident size grows for good). */
	*out = (struct tree_names){.pool = {.buf = malloc(1024), .cap = 1024}};
	struct fs_iter *it = fs_iter_new(fd);
	uint32_t *off = NULL;
	size_t cap = 0;
	const char *name;
	int rc = !it || !out->pool.buf ? -ENOMEM : 0;
	while (rc == 0 && (rc = fs_iter_next(it, &name)) > 0) {
		uint32_t o;
		if ((rc = tree_grow(&off, &cap, out->n, sizeof(*off))) < 0 ||
		    (rc = tree_pool_add(&out->pool, name, strlen(name), &o)) < 0)
			break;
		off[out->n++] = o;
	}
	free(it);
	if (rc == 0 && !(out->v = malloc((out->n ? out->n : 1) * sizeof(char *))))
		rc = -ENOMEM;
	for (size_t i = 0; rc == 0 && i < out->n; i++)
		out->v[i] = out->pool.buf + off[i];
	free(off);
	if (rc < 0) {
		tree_names_free(out);
		return rc;
	}
	if (out->n)
		qsort(out->v, out->n, sizeof(char *), cmp_name);
	return 0;
}

void tree_names_free(struct tree_names *names)
{
	free(names->v);
	tree_pool_free(&names->pool);
	*names = (struct tree_names){0};
}

int tree_make_node(int dfd, const char *name, enum tree_type type, const char *target,
		   uint64_t rdev)
{
	if (type == TREE_LNK)
		return symlinkat(target, dfd, name) < 0 ? -errno : 0;
	mode_t t = type == TREE_FIFO ? S_IFIFO : type == TREE_CHR ? S_IFCHR : S_IFBLK;
	return mknodat(dfd, name, t | 0600, (dev_t)rdev) < 0 ? -errno : 0;
}

int tree_attrs_at(int dfd, const char *name, uint32_t uid, uint32_t gid, uint32_t mode,
		  const struct timespec ts[2], bool strict)
{
	if (fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 && (strict || errno != EPERM))
		return -errno;
	if (!S_ISLNK(mode) && fchmodat(dfd, name, mode & 07777, 0) < 0)
		return -errno;
	return utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

int tree_own_dir_writable(int fd)
{
	if (geteuid() == 0)
		return 0; /* CAP_DAC_OVERRIDE */
	struct kstatx st;
	int rc = fs_statx(fd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return rc;
	if (st.uid != geteuid() || (st.mode & 0700) == 0700)
		return 0;
	return fchmod(fd, (st.mode | 0700) & 07777) < 0 ? -errno : 0;
}

/* Everything in the directory fd, listed again while a pass removed something (a removal
 * while listing may hide an entry from the listing). */
static int remove_in(struct tree_rm *o, int fd, int depth)
{
	int rc = tree_own_dir_writable(fd);
	if (rc < 0)
		return rc;
	struct fs_iter *it = fs_iter_new(fd);
	if (!it)
		return -ENOMEM;
	for (int pass = 0; pass < 8; pass++) {
		bool again = false;
		const char *name;
		struct kstatx st;
		if ((rc = fs_iter_rewind(it)) < 0)
			break;
		while ((rc = fs_iter_next_stat(it, &name, &st)) > 0) {
			if (tree_other_mount(&st, o->dev, o->mnt_id)) {
				if (!o->keep_mounts) {
					rc = -EBUSY; /* a mount point: never removed */
					break;
				}
				o->mounts += pass == 0;
				continue;
			}
			if (tree_inode_in(o->skip, o->n_skip, &st))
				continue;
			if ((rc = tree_remove(o, fd, name, &st, depth)) < 0)
				break;
			again = true;
		}
		if (rc < 0 || !again)
			break;
	}
	free(it);
	return rc;
}

int tree_remove(struct tree_rm *o, int dfd, const char *name, const struct kstatx *st, int depth)
{
	if ((st->mode & S_IFMT) != S_IFDIR) {
		if (unlinkat(dfd, name, 0) < 0)
			return errno == ENOENT ? 0 : -errno;
		if (S_ISREG(st->mode))
			o->bytes += st->size;
		o->files += S_ISREG(st->mode);
		o->links += S_ISLNK(st->mode);
		o->other += !S_ISREG(st->mode) && !S_ISLNK(st->mode);
		return 0;
	}
	if (o->hoist_fd >= 0 && depth >= TREE_HOIST_DEPTH && dfd != o->hoist_fd) {
		char hn[48];
		snprintf(hn, sizeof(hn), ".forceai-reset-%llu", (unsigned long long)o->hoist_seq++);
		if (renameat(dfd, name, o->hoist_fd, hn) == 0) {
			o->hoisted++;
			return 0;
		}
	}
	if (depth >= o->max_depth)
		return -TREE_EDEEP;
	int fd = fs_open_dir_checked(dfd, name, st->ino, o->dev, o->mnt_id);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	int rc = remove_in(o, fd, depth + 1);
	close(fd);
	if (rc < 0)
		return rc;
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0) {
		/* Not empty: it holds a mount point, which stays. */
		if (errno == ENOENT ||
		    (o->keep_mounts && (errno == ENOTEMPTY || errno == EEXIST || errno == EBUSY)))
			return 0;
		return -errno;
	}
	o->dirs++;
	return 0;
}
