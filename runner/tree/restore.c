/* The writable roots made equal to the snapshot again (snapshot_restore):
 * see snapshot.h. */
#include "tree/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/statedir.h"
#include "tree/fsx.h"
#include "tree/manifest.h"
#include "tree/xattr.h"

#define HOIST_DEPTH 64     /* a deeper tree being removed is moved up to its root */
#define MAX_RM_DEPTH 4096  /* when it cannot be moved */
#define MAX_PASSES 1000000 /* re-reads of one directory (hoisted trees come back) */

/* The entry's extended attributes and ACLs, from the pool (see snapshot.c). */
static int restore_xattrs(int fd, const struct snapshot *s, const struct snap_entry *e,
			  bool tolerant)
{
	return fsx_xattrs_restore(fd, s->pool + e->xattr_off, e->xattr_len, tolerant);
}

/* ---- restore ---- */

struct rctx {
	struct snapshot *s;
	struct snap_root *root;
	struct restore_stats *st;
	struct error *e;
	uint64_t hoisted, hoist_seq;
	unsigned char *pending_link; /* bitmap over entries */
	bool any_pending;
	bool root_user; /* may set any owner */
};

static long find_child(const struct snapshot *s, const struct snap_entry *d, const char *name)
{
	uint32_t lo = d->first_child, hi = d->first_child + d->n_children;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, ent_name(s, &s->ent[mid]));
		if (c == 0)
			return mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

static int remove_contents(struct rctx *c, int fd, int depth);

/* Remove one entry (a directory with everything under it) that the
 * manifest does not have there. Never follows a symlink, never leaves the
 * root's mount. */
static int remove_entry(struct rctx *c, int dfd, const char *name, const struct kstatx *st,
			int depth)
{
	if (!S_ISDIR(st->mode)) {
		if (unlinkat(dfd, name, 0) < 0) {
			if (errno == ENOENT)
				return 0;
			return error_set(c->e, errno, NULL, "cannot remove '%s' under %s", name,
					 c->root->path);
		}
		if (S_ISREG(st->mode)) {
			c->st->removed_files++;
			c->st->removed_bytes += st->size;
		} else if (S_ISLNK(st->mode)) {
			c->st->removed_links++;
		} else {
			c->st->removed_other++;
		}
		return 0;
	}
	if (depth >= HOIST_DEPTH && dfd != c->root->fd) {
		/* Deep trees are moved up to the root and removed from there
		 * later, so the descriptors held stay bounded. */
		char hn[48];
		snprintf(hn, sizeof(hn), ".forceai-reset-%llu", (unsigned long long)c->hoist_seq++);
		if (renameat(dfd, name, c->root->fd, hn) == 0) {
			c->hoisted++;
			return 0;
		}
	}
	if (depth >= MAX_RM_DEPTH)
		return error_set(c->e, ELOOP, NULL, "a directory under '%s' is too deep to remove",
				 c->root->path);
	int cfd = open_dir_checked(dfd, name, st, c->root);
	if (cfd == -ENOENT)
		return 0;
	if (cfd < 0)
		return error_set(c->e, -cfd, NULL, "cannot open '%s' under %s", name,
				 c->root->path);
	int rc = remove_contents(c, cfd, depth + 1);
	close(cfd);
	if (rc < 0)
		return -1;
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0) {
		if (errno == ENOENT)
			return 0;
		/* Not empty: it holds a mount point, which stays. */
		if (errno == ENOTEMPTY || errno == EEXIST || errno == EBUSY)
			return 0;
		return error_set(c->e, errno, NULL, "cannot remove '%s' under %s", name,
				 c->root->path);
	}
	c->st->removed_dirs++;
	return 0;
}

/* A directory a tenant made read-only (chmod 555, or 000 once opened):
 * entries in it can be neither removed nor created. Root has
 * CAP_DAC_OVERRIDE; a non-root runner owns what its tasks made and gives
 * itself the rights back (the manifest's mode is set again afterwards, or
 * the directory goes). 0 or -1 with c->e set. */
static int dir_writable(struct rctx *c, int fd)
{
	if (c->root_user)
		return 0;
	struct kstatx st;
	int rc = fsx_statx(fd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot examine a directory under %s",
				 c->root->path);
	if (st.uid != geteuid() || (st.mode & 0700) == 0700)
		return 0;
	if (fchmod(fd, (st.mode | 0700) & 07777) < 0)
		return error_set(c->e, errno, NULL, "cannot make a directory under %s writable",
				 c->root->path);
	return 0;
}

static int remove_contents(struct rctx *c, int fd, int depth)
{
	if (dir_writable(c, fd) < 0)
		return -1;
	struct iter *it = iter_new(fd);
	if (!it)
		return error_set(c->e, ENOMEM, NULL, "reset");
	int rc = 0;
	for (int pass = 0; pass < 8; pass++) {
		bool again = false;
		const char *name;
		if ((rc = iter_rewind(it)) < 0)
			break;
		struct kstatx st;
		while ((rc = fsx_iter_next_stat(it, &name, &st)) > 0) {
			if (other_mount(c->root, &st)) {
				if (pass == 0)
					c->st->mounts_skipped++;
				continue;
			}
			if (is_excluded(c->s, &st))
				continue;
			if (remove_entry(c, fd, name, &st, depth) < 0) {
				free(it);
				return -1;
			}
			again = true;
		}
		if (rc < 0 || !again)
			break;
	}
	free(it);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot list a directory under '%s'",
				 c->root->path);
	return 0;
}

static struct timespec ts_of(int64_t sec, uint32_t nsec)
{
	return (struct timespec){.tv_sec = (time_t)sec, .tv_nsec = (long)nsec};
}

/* With its attributes set, the entry records the inode and ctime it has now (what same_inode
 * compares). at/flags: fsx_statx's; name: the entry's, for the message. */
static int record_inode(struct rctx *c, int dfd, const char *at, int flags, const char *name,
			struct snap_entry *e)
{
	struct kstatx st;
	int rc = fsx_statx(dfd, at, flags, &st);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
				 c->root->path);
	e->ino = st.ino;
	e->ctime_sec = st.ctime.tv_sec;
	e->ctime_nsec = st.ctime.tv_nsec;
	return 0;
}

/* Owner, then mode (a chown clears set-id bits), then mtime (last: the
 * others change the ctime only). The entry then records the new ctime. */
static int set_attrs_fd(struct rctx *c, int fd, struct snap_entry *e, const char *name)
{
	/* Only what differs: a runner that is not root may change neither the
	 * owner nor the mode of what it does not own (/tmp itself), and a task
	 * sharing its uid could not have changed them either. */
	struct kstatx st;
	int rc = fsx_statx(fd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
				 c->root->path);
	if ((st.uid != e->uid || st.gid != e->gid) && fchown(fd, e->uid, e->gid) < 0 &&
	    (c->root_user || errno != EPERM))
		return error_set(c->e, errno, NULL, "cannot chown '%s' under %s", name,
				 c->root->path);
	if ((rc = fsx_statx(fd, "", AT_EMPTY_PATH, &st)) < 0) /* a chown clears set-id bits */
		return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
				 c->root->path);
	if ((st.mode & 07777) != (e->mode & 07777) && fchmod(fd, e->mode & 07777) < 0)
		return error_set(c->e, errno, NULL, "cannot chmod '%s' under %s", name,
				 c->root->path);
	/* The mtime of a directory someone else owns (non-root mode): tasks
	 * only changed it by adding entries, which are gone again. */
	struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, ts_of(e->mtime_sec, e->mtime_nsec)};
	if (futimens(fd, ts) < 0 && (c->root_user || errno != EPERM || st.uid == geteuid()))
		return error_set(c->e, errno, NULL, "cannot set the time of '%s' under %s", name,
				 c->root->path);
	return record_inode(c, fd, "", AT_EMPTY_PATH, name, e);
}

/* Symlinks and special files: by name, without following. */
static int set_attrs_at(struct rctx *c, int dfd, const char *name, struct snap_entry *e)
{
	if (fchownat(dfd, name, e->uid, e->gid, AT_SYMLINK_NOFOLLOW) < 0 &&
	    (c->root_user || errno != EPERM))
		return error_set(c->e, errno, NULL, "cannot chown '%s' under %s", name,
				 c->root->path);
	if (e->type != SNAP_LNK) {
		/* Just made by mknodat in a directory no task can reach now. */
		if (fchmodat(dfd, name, e->mode & 07777, 0) < 0)
			return error_set(c->e, errno, NULL, "cannot chmod '%s' under %s", name,
					 c->root->path);
	}
	struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, ts_of(e->mtime_sec, e->mtime_nsec)};
	if (utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return error_set(c->e, errno, NULL, "cannot set the time of '%s' under %s", name,
				 c->root->path);
	return record_inode(c, dfd, name, AT_SYMLINK_NOFOLLOW, name, e);
}

static int copy_from_store(struct rctx *c, int dfd, const char *name, uint32_t idx)
{
	struct snap_entry *e = &c->s->ent[idx];
	int dst = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (dst < 0)
		return error_set(c->e, errno, NULL, "cannot create '%s' under %s", name,
				 c->root->path);
	uint64_t copied = 0;
	loff_t off = (loff_t)e->data_off;
	int rc = copy_fd(c->s->store_fd, &off, e->size, dst, &copied);
	if (rc < 0) {
		close(dst);
		return error_set(c->e, -rc, NULL, "cannot write '%s' under %s", name,
				 c->root->path);
	}
	int xr = e->xattr_len ? restore_xattrs(dst, c->s, e, false) : 0;
	if (xr < 0) {
		close(dst);
		return error_set(c->e, -xr, NULL, "cannot set the attributes of '%s' under %s",
				 name, c->root->path);
	}
	rc = set_attrs_fd(c, dst, e, name);
	if (close(dst) < 0 && rc == 0)
		return error_set(c->e, errno, NULL, "cannot write '%s' under %s", name,
				 c->root->path);
	if (rc < 0)
		return -1;
	c->st->restored_files++;
	c->st->restored_bytes += copied;
	return 0;
}

static int restore_dir(struct rctx *c, int dfd, uint32_t di, int depth);

/* A symlink or a node just made (made false: the call failed, errno says why): its owner, mode
 * and times, then counted in *count. */
static int node_made(struct rctx *c, int dfd, const char *name, struct snap_entry *e, bool made,
		     uint64_t *count)
{
	if (!made)
		return error_set(c->e, errno, NULL, "cannot create '%s' under %s", name,
				 c->root->path);
	if (set_attrs_at(c, dfd, name, e) < 0)
		return -1;
	(*count)++;
	return 0;
}

static int create_entry(struct rctx *c, int dfd, uint32_t idx, int depth)
{
	struct snapshot *s = c->s;
	struct snap_entry *e = &s->ent[idx];
	const char *name = ent_name(s, e);
	switch (e->type) {
	case SNAP_DIR: {
		if (mkdirat(dfd, name, 0700) < 0)
			return error_set(c->e, errno, NULL, "cannot create '%s' under %s", name,
					 c->root->path);
		struct kstatx st;
		int rc = fsx_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
		if (rc < 0)
			return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
					 c->root->path);
		int cfd = open_dir_checked(dfd, name, &st, c->root);
		if (cfd < 0)
			return error_set(c->e, -cfd, NULL, "cannot open '%s' under %s", name,
					 c->root->path);
		rc = restore_dir(c, cfd, idx, depth + 1);
		close(cfd);
		if (rc == 0)
			c->st->restored_dirs++;
		return rc;
	}
	case SNAP_REG:
		if (e->link_to != idx) { /* after the walk, when its first name exists */
			c->pending_link[idx / 8] |= (unsigned char)(1u << (idx % 8));
			c->any_pending = true;
			return 0;
		}
		return copy_from_store(c, dfd, name, idx);
	case SNAP_LNK: {
		char target[PATH_MAX];
		memcpy(target, s->pool + e->target_off, e->target_len);
		target[e->target_len] = 0;
		return node_made(c, dfd, name, e, symlinkat(target, dfd, name) == 0,
				 &c->st->restored_links);
	}
	case SNAP_FIFO:
	case SNAP_CHR:
	case SNAP_BLK: {
		mode_t t = e->type == SNAP_FIFO ? S_IFIFO : e->type == SNAP_CHR ? S_IFCHR : S_IFBLK;
		return node_made(c, dfd, name, e, mknodat(dfd, name, t | 0600, (dev_t)e->rdev) == 0,
				 &c->st->restored_other);
	}
	case SNAP_SOCK:
		c->st->not_restorable++;
		return 0;
	default:
		return 0; /* SNAP_KEEP: not ours to create */
	}
}

static bool same_inode(const struct snap_entry *e, const struct kstatx *st)
{
	return st->ino == e->ino && st->ctime.tv_sec == e->ctime_sec &&
	       st->ctime.tv_nsec == e->ctime_nsec;
}

/* Make the directory dfd (entry di) equal to the manifest. */
static int restore_dir(struct rctx *c, int dfd, uint32_t di, int depth)
{
	struct snapshot *s = c->s;
	uint32_t first = s->ent[di].first_child, n = s->ent[di].n_children;
	unsigned char *seen = calloc(n ? n : 1, 1);
	struct iter *it = iter_new(dfd);
	int rc = 0;
	bool failed = false;
	if (!seen || !it) {
		rc = -ENOMEM;
		goto out;
	}
	if (dir_writable(c, dfd) < 0)
		goto fail;
	for (long pass = 0; pass < MAX_PASSES; pass++) {
		bool again = false;
		uint64_t hoisted = c->hoisted;
		const char *name;
		if ((rc = iter_rewind(it)) < 0)
			break;
		struct kstatx st;
		while ((rc = fsx_iter_next_stat(it, &name, &st)) > 0) {
			long ci = find_child(s, &s->ent[di], name);
			if (ci >= 0 && seen[ci - first])
				continue; /* handled in an earlier pass */
			if (other_mount(c->root, &st)) {
				c->st->mounts_skipped++;
				if (ci >= 0)
					seen[ci - first] = 1;
				continue;
			}
			if (is_excluded(s, &st) || (ci >= 0 && s->ent[ci].type == SNAP_KEEP)) {
				if (ci >= 0)
					seen[ci - first] = 1;
				continue;
			}
			if (ci < 0) {
				if (remove_entry(c, dfd, name, &st, depth + 1) < 0)
					goto fail;
				again = true;
				continue;
			}
			struct snap_entry *e = &s->ent[ci];
			seen[ci - first] = 1;
			if (type_of(st.mode) == SNAP_DIR && e->type == SNAP_DIR) {
				int cfd = open_dir_checked(dfd, name, &st, c->root);
				if (cfd == -ENOENT) {
					seen[ci - first] = 0;
					continue;
				}
				if (cfd < 0) {
					error_set(c->e, -cfd, NULL, "cannot open '%s' under %s",
						  name, c->root->path);
					goto fail;
				}
				rc = restore_dir(c, cfd, (uint32_t)ci, depth + 1);
				close(cfd);
				if (rc < 0)
					goto fail;
				continue;
			}
			const struct snap_entry *ref = &s->ent[e->link_to];
			if (type_of(st.mode) == e->type && same_inode(ref, &st)) {
				c->st->unchanged++;
				continue;
			}
			/* Changed in any way: replaced by the original. */
			if (remove_entry(c, dfd, name, &st, depth + 1) < 0)
				goto fail;
			seen[ci - first] = 0;
		}
		if (rc < 0)
			break;
		if (!again && hoisted == c->hoisted)
			break;
	}
	if (rc < 0) {
		error_set(c->e, -rc, NULL, "cannot list a directory under '%s'", c->root->path);
		goto fail;
	}
	for (uint32_t i = 0; i < n; i++)
		if (!seen[i] && create_entry(c, dfd, first + i, depth) < 0)
			goto fail;
	/* The directory itself: its extended attributes and ACLs (a default
	 * ACL would decide the modes of what the next tenant creates), then
	 * owner, mode and (after all changes in it) mtime as they were. */
	struct kstatx st;
	if ((rc = fsx_statx(dfd, "", AT_EMPTY_PATH, &st)) < 0) {
		error_set(c->e, -rc, NULL, "cannot examine a directory under '%s'", c->root->path);
		goto fail;
	}
	struct snap_entry *d = &s->ent[di];
	int xr = restore_xattrs(dfd, s, d, !c->root_user && st.uid != geteuid());
	if (xr < 0) {
		error_set(c->e, -xr, NULL, "cannot restore the attributes of '%s' under %s",
			  ent_name(s, d), c->root->path);
		rc = 0;
		goto fail;
	}
	if (xr > 0) {
		c->st->attrs_fixed++;
		if ((rc = fsx_statx(dfd, "", AT_EMPTY_PATH, &st)) < 0) {
			error_set(c->e, -rc, NULL, "cannot examine a directory under '%s'",
				  c->root->path);
			goto fail;
		}
	}
	bool attrs = st.uid != d->uid || st.gid != d->gid || (st.mode & 07777) != (d->mode & 07777);
	if (attrs || st.mtime.tv_sec != d->mtime_sec || st.mtime.tv_nsec != d->mtime_nsec) {
		if (set_attrs_fd(c, dfd, d, ent_name(s, d)) < 0)
			goto fail;
		if (attrs)
			c->st->attrs_fixed++;
	}
	goto out;
fail:
	failed = true;
out:
	free(seen);
	free(it);
	if (rc == -ENOMEM && !failed)
		return error_set(c->e, ENOMEM, NULL, "reset");
	return failed ? -1 : 0;
}

/* The directory holding entry idx, opened from its root name by name
 * (O_NOFOLLOW|O_DIRECTORY, same mount at each step). */
static int open_parent(struct rctx *c, uint32_t idx)
{
	struct snapshot *s = c->s;
	uint32_t chain[SNAP_MAX_DEPTH + 1];
	int n = 0;
	for (uint32_t p = s->ent[idx].parent; p != NONE && s->ent[p].parent != NONE;
	     p = s->ent[p].parent) {
		if (n == SNAP_MAX_DEPTH)
			return -ELOOP;
		chain[n++] = p;
	}
	int fd = dup(c->root->fd);
	if (fd < 0)
		return -errno;
	while (n) {
		uint32_t p = chain[--n];
		struct kstatx st;
		int rc = fsx_statx(fd, ent_name(s, &s->ent[p]), AT_SYMLINK_NOFOLLOW, &st);
		int nfd = rc < 0 ? rc : open_dir_checked(fd, ent_name(s, &s->ent[p]), &st, c->root);
		close(fd);
		if (nfd < 0)
			return nfd;
		fd = nfd;
	}
	return fd;
}

/* Second names of hard-linked files, once every first name exists. */
static int restore_links(struct rctx *c)
{
	struct snapshot *s = c->s;
	for (uint32_t i = 0; i < s->n_ent; i++) {
		if (!(c->pending_link[i / 8] & (1u << (i % 8))))
			continue;
		struct snap_entry *e = &s->ent[i], *first = &s->ent[e->link_to];
		c->root = &s->roots[e->root];
		int to = open_parent(c, i);
		int from = to >= 0 ? open_parent(c, e->link_to) : -1;
		if (to < 0 || from < 0) {
			int err = to < 0 ? -to : -from;
			if (to >= 0)
				close(to);
			return error_set(c->e, err, NULL, "cannot reach '%s' to link it",
					 ent_name(s, e));
		}
		int rc = 0;
		if (linkat(from, ent_name(s, first), to, ent_name(s, e), 0) < 0)
			rc = error_set(c->e, errno, NULL, "cannot link '%s' under %s",
				       ent_name(s, e), c->root->path);
		struct kstatx st;
		if (rc == 0 && fsx_statx(to, ent_name(s, e), AT_SYMLINK_NOFOLLOW, &st) == 0) {
			first->ino = st.ino; /* a new link changed the shared ctime */
			first->ctime_sec = st.ctime.tv_sec;
			first->ctime_nsec = st.ctime.tv_nsec;
			c->st->restored_files++;
			/* linkat changed the directory's mtime back to now */
			struct snap_entry *d = &s->ent[e->parent];
			struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT},
						 ts_of(d->mtime_sec, d->mtime_nsec)};
			if (futimens(to, ts) < 0)
				rc = error_set(c->e, errno, NULL, "cannot set a directory's time");
		}
		close(to);
		close(from);
		if (rc < 0)
			return -1;
	}
	return 0;
}

int snapshot_restore(struct snapshot *s, struct restore_stats *st, struct error *e)
{
	memset(st, 0, sizeof(*st));
	struct rctx c = {.s = s, .st = st, .e = e, .root_user = geteuid() == 0};
	c.pending_link = calloc(s->n_ent / 8 + 1, 1);
	if (!c.pending_link)
		return error_set(e, ENOMEM, NULL, "reset");
	int rc = 0;
	for (unsigned i = 0; i < s->n_roots && rc == 0; i++) {
		c.root = &s->roots[i];
		/* The root's path must still name the directory held open since
		 * start (the walk itself only uses the descriptor). */
		struct kstatx now;
		int k = fsx_statx(AT_FDCWD, c.root->path, 0, &now);
		if (k < 0 || kdev(&now) != c.root->dev || now.ino != c.root->ino) {
			rc = error_set(e, k < 0 ? -k : 0, NULL,
				       "writable root '%s' is no longer the directory it was",
				       c.root->path);
			break;
		}
		rc = restore_dir(&c, c.root->fd, c.root->entry, 0);
	}
	if (rc == 0 && c.any_pending)
		rc = restore_links(&c);
	free(c.pending_link);
	return rc;
}
