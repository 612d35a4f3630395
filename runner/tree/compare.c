/* Compare: two manifests (in tree order) and the tree as it is now (a path's current content, a
 * path's directory opened from its root). See tree.h. */
#include "tree/tree.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fileio.h"
#include "tree/fsops.h"

static unsigned differs(const struct tree_manifest *ma, const struct tree_ent *a,
			const struct tree_manifest *mb, const struct tree_ent *b)
{
	unsigned w = 0;
	if (a->type != b->type)
		return TREE_D_TYPE;
	if (a->type == TREE_REG) {
		if (a->size != b->size ||
		    ((a->flags & b->flags & TREE_STORED) && memcmp(a->sha, b->sha, 32)) ||
		    ((a->flags ^ b->flags) & TREE_STORED))
			w |= TREE_D_CONTENT;
		if (a->mtime_sec != b->mtime_sec || a->mtime_nsec != b->mtime_nsec)
			w |= TREE_D_MTIME;
	}
	if (a->type == TREE_LNK &&
	    (a->target_len != b->target_len ||
	     memcmp(ma->pool.buf + a->target_off, mb->pool.buf + b->target_off, a->target_len)))
		w |= TREE_D_TARGET;
	if ((a->type == TREE_CHR || a->type == TREE_BLK) && a->rdev != b->rdev)
		w |= TREE_D_CONTENT;
	if (a->type != TREE_LNK && (a->mode & 07777) != (b->mode & 07777))
		w |= TREE_D_MODE;
	if (a->uid != b->uid || a->gid != b->gid)
		w |= TREE_D_OWNER;
	if (a->xattr_len != b->xattr_len ||
	    memcmp(ma->pool.buf + a->xattr_off, mb->pool.buf + b->xattr_off, a->xattr_len))
		w |= TREE_D_XATTRS;
	return w;
}

void tree_compare(const struct tree_manifest *a, const struct tree_manifest *b, tree_compare_fn fn,
		  void *arg)
{
	size_t i = 0, j = 0;
	while (i < a->n || j < b->n) {
		int c;
		if (i == a->n)
			c = 1;
		else if (j == b->n)
			c = -1;
		else
			c = tree_pathcmp(tree_path(a, &a->ent[i]), tree_path(b, &b->ent[j]));
		if (c < 0) {
			if (a->ent[i].type != TREE_KEEP)
				fn(arg, &a->ent[i], NULL, 0);
			i++;
		} else if (c > 0) {
			if (b->ent[j].type != TREE_KEEP)
				fn(arg, NULL, &b->ent[j], 0);
			j++;
		} else {
			const struct tree_ent *ea = &a->ent[i], *eb = &b->ent[j];
			if (ea->type != TREE_KEEP && eb->type != TREE_KEEP) {
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
static const struct tree_root *root_of(const struct tree_root *roots, unsigned n, const char *path,
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

int tree_open_parent_of(const struct tree_root *roots, unsigned n_roots, const char *path,
			const char **base, const struct tree_root **root)
{
	const char *rest;
	const struct tree_root *r = root_of(roots, n_roots, path, &rest);
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
		int rc = fs_statx(fd, comp, AT_SYMLINK_NOFOLLOW, &st);
		int nfd = rc < 0 ? rc : fs_open_dir_checked(fd, comp, st.ino, r->dev, r->mnt_id);
		close(fd);
		if (nfd < 0)
			return nfd;
		fd = nfd;
	}
}

int tree_read_current(const struct tree_root *roots, unsigned n_roots, const char *path, size_t max,
		      char **buf, size_t *len)
{
	const char *base;
	const struct tree_root *r;
	int dfd = tree_open_parent_of(roots, n_roots, path, &base, &r);
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
	return tree_slurp(fd, max, buf, len);
}
