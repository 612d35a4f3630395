/* The writable roots made equal to the snapshot again (snapshot_restore):
 * see snapshot.h. */
#include "tree/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "tree/fsops.h"
#include "tree/node.h"
#include "tree/xattr.h"

#define MAX_RM_DEPTH 4096  /* when it cannot be moved */
#define MAX_PASSES 1000000 /* re-reads of one directory (hoisted trees come back) */

/* The entry's extended attributes and ACLs, from the pool (see snapshot.c). */
static int restore_xattrs(int fd, const struct snapshot *s, const struct snap_entry *e,
			  bool tolerant)
{
	return xattrs_restore(fd, s->pool.buf + e->xattr_off, e->xattr_len, tolerant);
}

/* ---- restore ---- */

struct rctx {
	struct snapshot *s;
	struct snap_root *root;
	struct restore_stats *st;
	struct error *e;
	struct tree_rm rm;           /* hoisted: directories moved up to the root */
	unsigned char *pending_link; /* bitmap over entries */
	bool any_pending;
	bool root_user; /* may set any owner */
};

static long find_child(const struct snapshot *s, const struct snap_entry *d, const char *name)
{
	uint32_t lo = d->first_child, hi = d->first_child + d->n_children;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, snap_name(s, &s->ent[mid]));
		if (c == 0)
			return mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

/* Remove one entry (a directory with everything under it) that the manifest does not have
 * there (node.h: a mount point stays, deep trees are moved up to the root). 0 or -1. */
static int remove_entry(struct rctx *c, int dfd, const char *name, const struct kstatx *st,
			int depth)
{
	c->rm.dev = c->root->dev;
	c->rm.mnt_id = c->root->mnt_id;
	c->rm.hoist_fd = c->root->fd;
	int rc = tree_remove(&c->rm, dfd, name, st, depth);
	if (rc == -TREE_EDEEP)
		return error_set(c->e, ELOOP, NULL, "a directory under '%s' is too deep to remove",
				 c->root->path);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot remove '%s' under %s", name,
				 c->root->path);
	return 0;
}

/* A directory a tenant made read-only (chmod 555, or 000 once opened):
 * entries in it can be neither removed nor created. Root has
 * CAP_DAC_OVERRIDE; a non-root runner owns what its tasks made and gives
 * itself the rights back (the manifest's mode is set again afterwards, or
 * the directory goes). 0 or -1 with c->e set. */
static int dir_writable(struct rctx *c, int fd)
{
	int rc = tree_own_dir_writable(fd);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot make a directory under %s writable",
				 c->root->path);
	return 0;
}

/* With its attributes set, the entry records the inode and ctime it has now (what same_inode
 * compares). at/flags: fs_statx's; name: the entry's, for the message. */
static int record_inode(struct rctx *c, int dfd, const char *at, int flags, const char *name,
			struct snap_entry *e)
{
	struct kstatx st;
	int rc = fs_statx(dfd, at, flags, &st);
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
	int rc = fs_statx(fd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
				 c->root->path);
	if ((st.uid != e->uid || st.gid != e->gid) && fchown(fd, e->uid, e->gid) < 0 &&
	    (c->root_user || errno != EPERM))
		return error_set(c->e, errno, NULL, "cannot chown '%s' under %s", name,
				 c->root->path);
	if ((rc = fs_statx(fd, "", AT_EMPTY_PATH, &st)) < 0) /* a chown clears set-id bits */
		return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
				 c->root->path);
	if ((st.mode & 07777) != (e->mode & 07777) && fchmod(fd, e->mode & 07777) < 0)
		return error_set(c->e, errno, NULL, "cannot chmod '%s' under %s", name,
				 c->root->path);
	/* The mtime of a directory someone else owns (non-root mode): tasks
	 * only changed it by adding entries, which are gone again. */
	struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, tree_ts(e->mtime_sec, e->mtime_nsec)};
	if (futimens(fd, ts) < 0 && (c->root_user || errno != EPERM || st.uid == geteuid()))
		return error_set(c->e, errno, NULL, "cannot set the time of '%s' under %s", name,
				 c->root->path);
	return record_inode(c, fd, "", AT_EMPTY_PATH, name, e);
}

/* Symlinks and special files: by name, without following. */
static int set_attrs_at(struct rctx *c, int dfd, const char *name, struct snap_entry *e)
{
	/* Just made in a directory no task can reach now. */
	struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, tree_ts(e->mtime_sec, e->mtime_nsec)};
	int rc = tree_attrs_at(dfd, name, e->uid, e->gid, e->mode, ts, c->root_user);
	if (rc < 0)
		return error_set(c->e, -rc, NULL,
				 "cannot set the owner, mode or time of '%s' under %s", name,
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
	int rc = fs_copy(c->s->store_fd, &off, e->size, dst, &copied);
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

/* A symlink or a FIFO or device node: made, its owner, mode and times set, counted in
 * *count. */
static int make_node(struct rctx *c, int dfd, const char *name, struct snap_entry *e,
		     uint64_t *count)
{
	int rc = tree_make_node(dfd, name, e->type, c->s->pool.buf + e->target_off, e->rdev);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot create '%s' under %s", name,
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
	const char *name = snap_name(s, e);
	switch (e->type) {
	case TREE_DIR: {
		if (mkdirat(dfd, name, 0700) < 0)
			return error_set(c->e, errno, NULL, "cannot create '%s' under %s", name,
					 c->root->path);
		struct kstatx st;
		int rc = fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
		if (rc < 0)
			return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
					 c->root->path);
		int cfd = fs_open_dir_checked(dfd, name, st.ino, c->root->dev, c->root->mnt_id);
		if (cfd < 0)
			return error_set(c->e, -cfd, NULL, "cannot open '%s' under %s", name,
					 c->root->path);
		rc = restore_dir(c, cfd, idx, depth + 1);
		close(cfd);
		if (rc == 0)
			c->st->restored_dirs++;
		return rc;
	}
	case TREE_REG:
		if (e->link_to != idx) { /* after the walk, when its first name exists */
			c->pending_link[idx / 8] |= (unsigned char)(1u << (idx % 8));
			c->any_pending = true;
			return 0;
		}
		return copy_from_store(c, dfd, name, idx);
	case TREE_LNK:
		return make_node(c, dfd, name, e, &c->st->restored_links);
	case TREE_FIFO:
	case TREE_CHR:
	case TREE_BLK:
		return make_node(c, dfd, name, e, &c->st->restored_other);
	case TREE_SOCK:
		c->st->not_restorable++;
		return 0;
	default:
		return 0; /* TREE_KEEP: not ours to create */
	}
}

static bool same_inode(const struct snap_entry *e, const struct kstatx *st)
{
	return st->ino == e->ino && st->ctime.tv_sec == e->ctime_sec &&
	       st->ctime.tv_nsec == e->ctime_nsec;
}

/* A directory being restored: its entry, its children (seen: found as they are, or restored
 * in place), and whether a pass removed something. */
struct dir_pass {
	uint32_t di, first;
	unsigned char *seen;
	int depth;
	bool again;
};

/* One entry of the listing: what the manifest does not have there is removed, a child
 * directory restored in turn, a changed entry removed (to be recreated). 0 or -1. */
static int restore_child(struct rctx *c, int dfd, struct dir_pass *p, const char *name,
			 const struct kstatx *st)
{
	struct snapshot *s = c->s;
	long ci = find_child(s, &s->ent[p->di], name);
	unsigned char *seen = ci >= 0 ? &p->seen[ci - p->first] : NULL;
	if (seen && *seen)
		return 0; /* handled in an earlier pass */
	bool mount = tree_other_mount(st, c->root->dev, c->root->mnt_id);
	if (mount)
		c->st->mounts_skipped++;
	if (mount || tree_inode_in(s->excl, s->n_excl, st) ||
	    (seen && s->ent[ci].type == TREE_KEEP)) {
		if (seen)
			*seen = 1;
		return 0;
	}
	if (!seen) {
		p->again = true;
		return remove_entry(c, dfd, name, st, p->depth + 1);
	}
	struct snap_entry *e = &s->ent[ci];
	*seen = 1;
	if (tree_type_of(st->mode) == TREE_DIR && e->type == TREE_DIR) {
		int cfd = fs_open_dir_checked(dfd, name, st->ino, c->root->dev, c->root->mnt_id);
		if (cfd == -ENOENT) {
			*seen = 0;
			return 0;
		}
		if (cfd < 0)
			return error_set(c->e, -cfd, NULL, "cannot open '%s' under %s", name,
					 c->root->path);
		int rc = restore_dir(c, cfd, (uint32_t)ci, p->depth + 1);
		close(cfd);
		return rc;
	}
	if (tree_type_of(st->mode) == e->type && same_inode(&s->ent[e->link_to], st)) {
		c->st->unchanged++;
		return 0;
	}
	/* Changed in any way: replaced by the original. */
	*seen = 0;
	return remove_entry(c, dfd, name, st, p->depth + 1);
}

/* The listing read again until a pass removes nothing (hoisted trees come back). */
static int restore_listing(struct rctx *c, int dfd, struct dir_pass *p, struct fs_iter *it)
{
	int rc = 0;
	for (long pass = 0; pass < MAX_PASSES; pass++) {
		p->again = false;
		uint64_t hoisted = c->rm.hoisted;
		const char *name;
		struct kstatx st;
		if ((rc = fs_iter_rewind(it)) < 0)
			break;
		while ((rc = fs_iter_next_stat(it, &name, &st)) > 0)
			if (restore_child(c, dfd, p, name, &st) < 0)
				return -1;
		if (rc < 0 || (!p->again && hoisted == c->rm.hoisted))
			break;
	}
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot list a directory under '%s'",
				 c->root->path);
	return 0;
}

/* The directory itself, after all changes in it: its extended attributes and ACLs (a default
 * ACL would decide the modes of what the next tenant creates), then owner, mode and mtime as
 * they were. */
static int restore_dir_attrs(struct rctx *c, int dfd, uint32_t di)
{
	struct snapshot *s = c->s;
	struct snap_entry *d = &s->ent[di];
	struct kstatx st;
	int rc = fs_statx(dfd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot examine a directory under '%s'",
				 c->root->path);
	int xr = restore_xattrs(dfd, s, d, !c->root_user && st.uid != geteuid());
	if (xr < 0)
		return error_set(c->e, -xr, NULL, "cannot restore the attributes of '%s' under %s",
				 snap_name(s, d), c->root->path);
	if (xr > 0) {
		c->st->attrs_fixed++;
		if ((rc = fs_statx(dfd, "", AT_EMPTY_PATH, &st)) < 0)
			return error_set(c->e, -rc, NULL, "cannot examine a directory under '%s'",
					 c->root->path);
	}
	bool attrs = st.uid != d->uid || st.gid != d->gid || (st.mode & 07777) != (d->mode & 07777);
	if (attrs || st.mtime.tv_sec != d->mtime_sec || st.mtime.tv_nsec != d->mtime_nsec) {
		if (set_attrs_fd(c, dfd, d, snap_name(s, d)) < 0)
			return -1;
		if (attrs)
			c->st->attrs_fixed++;
	}
	return 0;
}

/* Make the directory dfd (entry di) equal to the manifest. 0 or -1 with c->e set. */
static int restore_dir(struct rctx *c, int dfd, uint32_t di, int depth)
{
	struct snapshot *s = c->s;
	uint32_t n = s->ent[di].n_children;
	struct dir_pass p = {.di = di, .first = s->ent[di].first_child, .depth = depth};
	p.seen = calloc(n ? n : 1, 1);
	struct fs_iter *it = fs_iter_new(dfd);
	int rc = !p.seen || !it ? error_set(c->e, ENOMEM, NULL, "reset") : dir_writable(c, dfd);
	if (rc == 0)
		rc = restore_listing(c, dfd, &p, it);
	free(it);
	for (uint32_t i = 0; rc == 0 && i < n; i++)
		if (!p.seen[i])
			rc = create_entry(c, dfd, p.first + i, depth);
	if (rc == 0)
		rc = restore_dir_attrs(c, dfd, di);
	free(p.seen);
	return rc < 0 ? -1 : 0;
}

/* The directory holding entry idx, opened from its root name by name
 * (O_NOFOLLOW|O_DIRECTORY, same mount at each step). */
static int open_parent(struct rctx *c, uint32_t idx)
{
	struct snapshot *s = c->s;
	uint32_t chain[SNAP_MAX_DEPTH + 1];
	int n = 0;
	for (uint32_t p = s->ent[idx].parent; p != SNAP_NONE && s->ent[p].parent != SNAP_NONE;
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
		int rc = fs_statx(fd, snap_name(s, &s->ent[p]), AT_SYMLINK_NOFOLLOW, &st);
		int nfd = rc < 0 ? rc
				 : fs_open_dir_checked(fd, snap_name(s, &s->ent[p]), st.ino,
							c->root->dev, c->root->mnt_id);
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
					 snap_name(s, e));
		}
		int rc = 0;
		if (linkat(from, snap_name(s, first), to, snap_name(s, e), 0) < 0)
			rc = error_set(c->e, errno, NULL, "cannot link '%s' under %s",
				       snap_name(s, e), c->root->path);
		struct kstatx st;
		if (rc == 0 && fs_statx(to, snap_name(s, e), AT_SYMLINK_NOFOLLOW, &st) == 0) {
			first->ino = st.ino; /* a new link changed the shared ctime */
			first->ctime_sec = st.ctime.tv_sec;
			first->ctime_nsec = st.ctime.tv_nsec;
			c->st->restored_files++;
			/* linkat changed the directory's mtime back to now */
			struct snap_entry *d = &s->ent[e->parent];
			struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT},
						 tree_ts(d->mtime_sec, d->mtime_nsec)};
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
	c.rm = (struct tree_rm){.max_depth = MAX_RM_DEPTH,
				.keep_mounts = true,
				.skip = s->excl,
				.n_skip = s->n_excl};
	c.pending_link = calloc(s->n_ent / 8 + 1, 1);
	if (!c.pending_link)
		return error_set(e, ENOMEM, NULL, "reset");
	int rc = 0;
	for (unsigned i = 0; i < s->n_roots && rc == 0; i++) {
		c.root = &s->roots[i];
		/* The root's path must still name the directory held open since
		 * start (the walk itself only uses the descriptor). */
		struct kstatx now;
		int k = fs_statx(AT_FDCWD, c.root->path, 0, &now);
		if (k < 0 || fs_dev(&now) != c.root->dev || now.ino != c.root->ino) {
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
	st->removed_files = c.rm.files;
	st->removed_dirs = c.rm.dirs;
	st->removed_links = c.rm.links;
	st->removed_other = c.rm.other;
	st->removed_bytes = c.rm.bytes;
	st->mounts_skipped += c.rm.mounts;
	return rc;
}
