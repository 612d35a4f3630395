/* What both manifests share: see node.h. */
#include "tree/node.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tree/fsx.h"
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
	return fsx_dev(st) != dev || (mnt_id && st->mnt_id != mnt_id);
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
	int rc = fsx_xattrs_take(fd, &blob, &blen);
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
	*out = (struct tree_names){0};
	struct fsx_iter *it = fsx_iter_new(fd);
	if (!it)
		return -ENOMEM;
	size_t cap = 0;
	const char *name;
	int rc;
	while ((rc = fsx_iter_next(it, &name)) > 0) {
		if ((rc = tree_grow(&out->v, &cap, out->n, sizeof(char *))) < 0)
			break;
		if (!(out->v[out->n] = strdup(name))) {
			rc = -ENOMEM;
			break;
		}
		out->n++;
	}
	free(it);
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
	for (size_t i = 0; i < names->n; i++)
		free(names->v[i]);
	free(names->v);
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

int tree_own_dir_writable(int fd)
{
	if (geteuid() == 0)
		return 0; /* CAP_DAC_OVERRIDE */
	struct kstatx st;
	int rc = fsx_statx(fd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return rc;
	if (st.uid != geteuid() || (st.mode & 0700) == 0700)
		return 0;
	return fchmod(fd, (st.mode | 0700) & 07777) < 0 ? -errno : 0;
}
