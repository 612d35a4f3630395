/* Restore: the roots made exactly a manifest again (a checkpoint's, the reset's snapshot), each
 * file written under a temporary name in its own directory and renamed over the old one. See
 * tree.h. */
#include "tree/tree.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files/ident.h"
#include "tree/fsops.h"
#include "tree/node.h"
#include "tree/xattr.h"

#define MAX_PASSES 1000000 /* re-reads of the root's listing (hoisted trees come back to it) */
#define MAX_RM_DEPTH 4096  /* the reset's removal of a tree that cannot be moved up */

struct rst {
	uint32_t *lv,
		*lfirst; /* hard-linked files, grouped by the inode they shared: each one's
			  * group's first (taken before a strict restore records new inodes) */
	size_t ln;
	struct tree_store *s;
	struct tree_manifest *m;
	const struct tree_root *root;
	struct tree_restore_stats *st;
	struct tree_rm rm; /* how what the manifest does not have is removed, and its counts */
	uint32_t *kids, *kid_start; /* children of each entry, in order */
	tree_note_fn note;
	void *arg;
	unsigned failures;
	bool root_user;
	unsigned seq;
};

static void failed(struct rst *c, const char *path, const char *what, int err)
{
	char d[256];
	snprintf(d, sizeof(d), "%s%s%s", what, err ? ": " : "",
		 err == TREE_EDEEP ? "more than 200 levels deep"
		 : err             ? strerror(err)
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

/* Checkpoints: no mount point is removed (-EBUSY), no tree deeper than TREE_MAX_DEPTH
 * (-TREE_EDEEP). The reset: mount points stay, deep trees are moved up to the root (node.h). */
static int remove_any(struct rst *c, int dfd, const char *name, const struct kstatx *st, int depth)
{
	c->rm.dev = c->root->dev;
	c->rm.mnt_id = c->root->mnt_id;
	c->rm.hoist_fd = c->s->strict ? c->root->fd : -1;
	return tree_remove(&c->rm, dfd, name, st, depth);
}

/* The reset: what was at an entry's place, replaced, counts as removed. */
static void count_replaced(struct rst *c, const struct kstatx *st)
{
	enum tree_type t = tree_type_of(st->mode);
	c->rm.files += t == TREE_REG;
	c->rm.bytes += t == TREE_REG ? st->size : 0;
	c->rm.links += t == TREE_LNK;
	c->rm.other += t != TREE_REG && t != TREE_LNK && t != TREE_DIR;
}

/* The reset: e records the inode and ctime at dfd/name, what the next reset compares. */
static void record(struct rst *c, int dfd, const char *name, const struct tree_ent *ce)
{
	struct tree_ent *e = &c->m->ent[ce - c->m->ent];
	struct kstatx st;
	if (c->s->strict && fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st) == 0) {
		e->ino = st.ino;
		e->dev = fs_dev(&st);
		e->ctime_sec = st.ctime.tv_sec;
		e->ctime_nsec = st.ctime.tv_nsec;
	}
}

/* Owner, then xattrs, mode (a chown clears set-id bits, an ACL sets the group bits), then
 * times; each only where it differs: a runner that is not root may change neither the owner
 * nor the mode of what it does not own (/tmp itself), and no task of its uid could have. */
static int set_attrs_fd(struct rst *c, int fd, const struct tree_ent *e)
{
	struct kstatx st;
	int rc = fs_statx(fd, "", AT_EMPTY_PATH, &st);
	if (rc == 0 && (st.uid != e->uid || st.gid != e->gid) && fchown(fd, e->uid, e->gid) < 0 &&
	    (c->root_user || errno != EPERM))
		rc = -errno;
	bool mine = c->root_user || st.uid == geteuid();
	int xr = rc < 0 ? rc
			: xattrs_restore(fd, c->m->pool.buf + e->xattr_off, e->xattr_len, !mine);
	if (xr < 0)
		return xr;
	if ((rc = fs_statx(fd, "", AT_EMPTY_PATH, &st)) < 0)
		return rc;
	if ((st.mode & 07777) != (e->mode & 07777) && fchmod(fd, e->mode & 07777) < 0)
		return -errno;
	struct timespec ts[2] = {tree_ts(e->atime_sec, e->atime_nsec),
				 tree_ts(e->mtime_sec, e->mtime_nsec)};
	if (futimens(fd, ts) < 0 && (mine || errno != EPERM))
		return -errno;
	return 0;
}

static int set_attrs_at(struct rst *c, int dfd, const char *name, const struct tree_ent *e)
{
	struct timespec ts[2] = {tree_ts(e->atime_sec, e->atime_nsec),
				 tree_ts(e->mtime_sec, e->mtime_nsec)};
	return tree_attrs_at(dfd, name, e->uid, e->gid, e->mode, ts, c->root_user);
}

/* The very inode, untouched since (a write, chmod, chown, link or unlink moves the ctime, and
 * no task can set it). */
static bool same_inode(const struct tree_ent *e, const struct kstatx *st)
{
	return st->ino == e->ino && fs_dev(st) == e->dev && st->ctime.tv_sec == e->ctime_sec &&
	       st->ctime.tv_nsec == e->ctime_nsec;
}

/* A change made to entry e at dfd/name (rc: its result; was: what was there before, NULL:
 * nothing): noted, and for the reset counted and recorded. */
static void made(struct rst *c, int dfd, const char *name, const struct tree_ent *e, int rc,
		 const struct kstatx *was)
{
	outcome(c, tree_path(c->m, e), rc, e->type == TREE_REG ? "cannot write" : "cannot create",
		was ? "replaced" : "created");
	if (rc < 0)
		return;
	if (was && c->s->strict)
		count_replaced(c, was);
	c->st->restored_files += e->type == TREE_REG;
	c->st->restored_bytes += e->type == TREE_REG ? e->size : 0;
	c->st->restored_links += e->type == TREE_LNK;
	c->st->restored_other += e->type != TREE_REG && e->type != TREE_LNK;
	record(c, dfd, name, e);
}

static bool attrs_equal(const struct tree_ent *e, const struct kstatx *st)
{
	return st->uid == e->uid && st->gid == e->gid && (st->mode & 07777) == (e->mode & 07777) &&
	       st->mtime.tv_sec == e->mtime_sec && st->mtime.tv_nsec == e->mtime_nsec;
}

static bool xattrs_equal(struct rst *c, int fd, const struct tree_ent *e)
{
	char *blob;
	size_t len;
	if (xattrs_take(fd, &blob, &len) < 0)
		return false;
	bool eq = len == e->xattr_len &&
		  (!len || !memcmp(blob, c->m->pool.buf + e->xattr_off, len));
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
		int rc = fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
		if (rc == 0)
			rc = remove_any(c, dfd, name, &st, 0);
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

/* The content's source: opened as the runner (the store is its own, 0700) even for a
 * restore that otherwise acts as the task user. */
static int open_content(struct rst *c, const struct tree_ent *e, uint64_t *off, bool *owned)
{
	if (c->s->as_task)
		files_leave();
	int src = tree_store_open_content(c->s, e, off, owned);
	if (c->s->as_task && files_enter(c->s->task) < 0) {
		if (src >= 0 && *owned)
			close(src);
		return -EPERM; /* never goes on as the runner */
	}
	return src;
}

static int write_file(struct rst *c, int dfd, const char *name, const struct tree_ent *e)
{
	char tmp[64];
	uint64_t off;
	bool owned;
	int src = open_content(c, e, &off, &owned);
	if (src < 0)
		return src;
	int dst = -1;
	for (int i = 0; i < 100 && dst < 0; i++) {
		tmp_name(c, tmp);
		dst = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (dst < 0 && errno != EEXIST)
			break;
	}
	if (dst < 0) {
		int err = errno;
		if (owned)
			close(src);
		return -err;
	}
	int rc = 0;
	if (!owned || ioctl(dst, FICLONE, src) < 0) {
		uint64_t copied = 0;
		loff_t o = (loff_t)off;
		rc = fs_copy(src, &o, e->size, dst, &copied);
	}
	if (owned)
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

static int make_node(struct rst *c, int dfd, const char *name, const struct tree_ent *e)
{
	char tmp[64];
	int rc = -EEXIST;
	for (int i = 0; i < 100 && rc == -EEXIST; i++) {
		tmp_name(c, tmp);
		rc = tree_make_node(dfd, tmp, e->type, c->m->pool.buf + e->target_off, e->rdev);
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
		const char *p = tree_path(c->m, &c->m->ent[c->kids[mid]]) + plen + 1;
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

/* One pass over the listing of directory fd (entry di): what was added since, removed. */
static int remove_added(struct rst *c, struct fs_iter *it, int fd, uint32_t di, int depth,
			bool first)
{
	const struct tree_ent *d = &c->m->ent[di];
	const char *name;
	char path[PATH_MAX];
	struct kstatx st;
	int rc;
	while ((rc = fs_iter_next(it, &name)) > 0) {
		if (is_kid(c, di, name, d->path_len))
			continue;
		snprintf(path, sizeof(path), "%s/%s", tree_path(c->m, d), name);
		if ((rc = fs_statx(fd, name, AT_SYMLINK_NOFOLLOW, &st)) == -ENOENT)
			continue;
		if (rc == 0 && tree_other_mount(&st, c->root->dev, c->root->mnt_id)) {
			c->st->mounts_skipped += first;
			continue; /* a mount point: not ours */
		}
		if (rc == 0 && tree_inode_in(c->s->excl, c->s->n_excl, &st))
			continue; /* the state dir, another root */
		if (rc == 0)
			rc = remove_any(c, fd, name, &st, depth + 1);
		outcome(c, path, rc, "cannot remove what was added", "removed");
		/* The listing goes on: getdents copes with removals. */
	}
	return rc;
}

/* What was added since removed, then each entry of the manifest restored in turn; the root's
 * listing is read again while trees were moved up to it (the reset's deep trees). */
static void restore_children(struct rst *c, int fd, uint32_t di, int depth)
{
	const char *dpath = tree_path(c->m, &c->m->ent[di]);
	if (!c->root_user)
		tree_own_dir_writable(fd); /* a directory of ours made read-only */
	struct fs_iter *it = fs_iter_new(fd);
	if (!it) {
		failed(c, dpath, "out of memory", 0);
		return;
	}
	bool kids_done = false;
	for (long pass = 0; pass < MAX_PASSES; pass++) {
		uint64_t hoisted = c->rm.hoisted;
		int rc = fs_iter_rewind(it);
		if (rc == 0)
			rc = remove_added(c, it, fd, di, depth, pass == 0);
		if (rc < 0) {
			failed(c, dpath, "cannot list", -rc);
			break;
		}
		for (uint32_t k = c->kid_start[di]; !kids_done && k < c->kid_start[di + 1]; k++) {
			uint32_t ci = c->kids[k];
			restore_entry(c, fd,
				      tree_path(c->m, &c->m->ent[ci]) + c->m->ent[di].path_len + 1,
				      ci, depth + 1);
		}
		kids_done = true;
		if (hoisted == c->rm.hoisted || c->m->ent[di].parent != TREE_NONE)
			break;
	}
	free(it);
}

/* A restore for the task user: false when e is left as it is. What it could not list and
 * enter, or read, when the checkpoint was taken is not written back for it (its content, its
 * entries' names would be disclosed), nor touched when it is still there. */
static bool task_left(struct rst *c, const struct tree_ent *e, bool exists, enum tree_type cur,
		      const struct kstatx *st)
{
	if ((e->flags & TREE_TASK_OK) || e->type == TREE_SOCK ||
	    (e->type != TREE_DIR && e->type != TREE_REG && (e->flags & TREE_TASK_SEEN)))
		return true;
	const char *path = tree_path(c->m, e);
	if (e->type == TREE_DIR && exists && cur == TREE_DIR && st->ino == e->ino &&
	    fs_dev(st) == e->dev)
		return false; /* the same directory: nothing of it is the task's to restore */
	if (e->type == TREE_REG && exists && cur == TREE_REG && st->ino == e->ino &&
	    fs_dev(st) == e->dev && st->ctime.tv_sec == e->ctime_sec &&
	    st->ctime.tv_nsec == e->ctime_nsec && st->size == e->size)
		return false; /* untouched since */
	failed(c, path,
	       e->type == TREE_DIR
		       ? "the task user could not list and enter it when the checkpoint "
			 "was taken: left as it is"
		       : "the task user could not read it when the checkpoint was taken: "
			 "left as it is",
	       0);
	return false;
}

/* What is at an entry's place now. */
struct found {
	struct kstatx st;
	bool exists;
	enum tree_type cur;
	bool is_root; /* a checkpoint's own path that may be neither replaced nor recreated */
};

/* The directory e is at its place: what replaced it removed, or made (*action says which).
 * False when it is not (a failure noted). */
static bool dir_in_place(struct rst *c, int dfd, const char *name, const struct tree_ent *e,
			 int depth, struct found *f, const char **action)
{
	const char *path = tree_path(c->m, e);
	if (f->exists && f->cur != TREE_DIR) {
		if (f->is_root) {
			failed(c, path,
			       "is no longer a directory (a checkpoint's own path is never replaced)",
			       0);
			return false;
		}
		int rc = remove_any(c, dfd, name, &f->st, depth);
		if (rc < 0) {
			failed(c, path, "cannot remove what replaced the directory", -rc);
			return false;
		}
		f->exists = false;
		*action = "replaced";
	}
	if (f->exists)
		return true;
	if (f->is_root) {
		failed(c, path, "is gone (a checkpoint's own path is never recreated)", 0);
		return false;
	}
	if (mkdirat(dfd, name, 0700) < 0) {
		failed(c, path, "cannot create", errno);
		return false;
	}
	int rc = fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &f->st);
	if (rc < 0) {
		failed(c, path, "cannot examine", -rc);
		return false;
	}
	if (!*action)
		*action = "created";
	c->st->restored_dirs++;
	return true;
}

static void restore_dir(struct rst *c, int dfd, const char *name, uint32_t idx, int depth,
			struct found *f)
{
	const struct tree_ent *e = &c->m->ent[idx];
	const char *path = tree_path(c->m, e);
	const char *action = NULL;
	if (!dir_in_place(c, dfd, name, e, depth, f, &action))
		return;
	int fd = fs_open_dir_checked(dfd, name, f->st.ino, c->root->dev, c->root->mnt_id);
	if (fd < 0) {
		failed(c, path, "cannot open", -fd);
		return;
	}
	/* Whether it differed before: the restore's own renames in it move
	 * its mtime, which is put back without being a change to report. */
	struct kstatx now;
	bool xattrs_were = xattrs_equal(c, fd, e);
	bool was_same = fs_statx(fd, "", AT_EMPTY_PATH, &now) == 0 && attrs_equal(e, &now) &&
			xattrs_were;
	/* Counted: an owner, mode or attribute put back (a moved mtime is its entries'). */
	bool owned_as_was = now.uid == e->uid && now.gid == e->gid &&
			    (now.mode & 07777) == (e->mode & 07777) && xattrs_were;
	restore_children(c, fd, idx, depth);
	/* The directory's own attributes, after all changes in it. */
	bool same = fs_statx(fd, "", AT_EMPTY_PATH, &now) == 0 && attrs_equal(e, &now) &&
		    xattrs_equal(c, fd, e);
	if (!same) {
		int rc = set_attrs_fd(c, fd, e);
		if (rc < 0)
			failed(c, path, "cannot set its owner, mode, times or attributes", -rc);
		else if (!action && !was_same)
			action = "attributes";
	}
	c->st->attrs_fixed += !owned_as_was;
	close(fd);
	if (action)
		c->note(c->arg, action, path, NULL);
}

/* A file of the same size: when its content is the checkpoint's, only its attributes are put
 * back (true); else false, to be written. */
static bool only_attrs(struct rst *c, int dfd, const char *name, const struct tree_ent *e,
		       const struct kstatx *st)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	unsigned char sha[32];
	uint64_t n;
	struct kstatx fst;
	if (fd >= 0 && fs_statx(fd, "", AT_EMPTY_PATH, &fst) == 0 && fst.ino == st->ino &&
	    (fst.nlink == 1 || e->nlink > 1) && tree_hash_fd(c->s->buf, fd, sha, &n) == 0 &&
	    n == e->size && !memcmp(sha, e->sha, 32)) {
		bool same = attrs_equal(e, &fst) && xattrs_equal(c, fd, e);
		int rc = same ? 0 : set_attrs_fd(c, fd, e);
		close(fd);
		outcome(c, tree_path(c->m, e), rc,
			"cannot set its owner, mode, times or attributes",
			same ? NULL : "attributes");
		return true;
	}
	if (fd >= 0)
		close(fd);
	return false;
}

static void restore_file(struct rst *c, int dfd, const char *name, const struct tree_ent *e,
			 const struct found *f)
{
	const char *path = tree_path(c->m, e);
	if (!(e->flags & TREE_STORED)) {
		failed(c, path, "was not readable when the checkpoint was taken: left as it is", 0);
		return;
	}
	bool file = f->exists && f->cur == TREE_REG;
	if (file && same_inode(e, &f->st) && f->st.size == e->size) {
		c->st->unchanged++;
		return; /* untouched since */
	}
	/* The reset replaces what moved without comparing (strict). */
	if (file && f->st.size == e->size && !f->is_root && !c->s->strict &&
	    only_attrs(c, dfd, name, e, &f->st))
		return;
	made(c, dfd, name, e, write_file(c, dfd, name, e), f->exists ? &f->st : NULL);
}

/* A symlink with the same target, a node with the same device number. */
static bool node_same(struct rst *c, int dfd, const char *name, const struct tree_ent *e,
		      const struct kstatx *st)
{
	if (e->type != TREE_LNK)
		return fs_rdev(st) == e->rdev;
	char target[PATH_MAX];
	ssize_t tl = readlinkat(dfd, name, target, sizeof(target));
	return tl == (ssize_t)e->target_len &&
	       !memcmp(target, c->m->pool.buf + e->target_off, e->target_len);
}

/* Symlinks, FIFOs, devices. */
static void restore_node(struct rst *c, int dfd, const char *name, const struct tree_ent *e,
			 const struct found *f)
{
	const char *path = tree_path(c->m, e);
	const struct kstatx *st = &f->st;
	if (f->exists && f->cur == e->type && node_same(c, dfd, name, e, st)) {
		if (same_inode(e, st) || attrs_equal(e, st) ||
		    (f->cur == TREE_LNK && st->uid == e->uid && st->gid == e->gid &&
		     st->mtime.tv_sec == e->mtime_sec && st->mtime.tv_nsec == e->mtime_nsec)) {
			c->st->unchanged++;
			return;
		}
		int rc = set_attrs_at(c, dfd, name, e);
		outcome(c, path, rc, "cannot set its owner, mode or times", "attributes");
		if (rc == 0)
			record(c, dfd, name, e);
		c->st->attrs_fixed += rc == 0;
		return;
	}
	if (f->is_root && f->exists && f->cur == TREE_DIR) {
		failed(c, path, "is a directory now (a checkpoint's own path is never replaced)",
		       0);
		return;
	}
	made(c, dfd, name, e, make_node(c, dfd, name, e), f->exists ? st : NULL);
}

/* Sockets cannot be made again: one changed or gone is named (checkpoints) or counted (the
 * reset, which removes what took its place). */
static void restore_socket(struct rst *c, int dfd, const char *name, const struct tree_ent *e,
			   const struct found *f)
{
	if (f->exists && f->cur == TREE_SOCK && (!c->s->strict || same_inode(e, &f->st))) {
		c->st->unchanged++;
		return;
	}
	if (!c->s->strict) {
		if (!f->exists || f->cur != TREE_SOCK)
			failed(c, tree_path(c->m, e), "a socket cannot be recreated", 0);
		return;
	}
	int rc = f->exists ? remove_any(c, dfd, name, &f->st, 0) : 0;
	outcome(c, tree_path(c->m, e), rc, "cannot remove what took its place", NULL);
	c->st->not_restorable++;
}

static void restore_entry(struct rst *c, int dfd, const char *name, uint32_t idx, int depth)
{
	const struct tree_ent *e = &c->m->ent[idx];
	const char *path = tree_path(c->m, e);
	struct found f = {0};
	if (e->type == TREE_KEEP) { /* a mount point, the state dir, another root */
		if (c->s->strict && fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &f.st) == 0 &&
		    tree_other_mount(&f.st, c->root->dev, c->root->mnt_id))
			c->st->mounts_skipped++;
		return;
	}
	if (depth > (c->s->max_depth ? c->s->max_depth : TREE_MAX_DEPTH)) {
		failed(c, path, "too deep", 0);
		return;
	}
	int rc = fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &f.st);
	f.exists = rc == 0;
	if (rc < 0 && rc != -ENOENT) {
		failed(c, path, "cannot examine", -rc);
		return;
	}
	if (f.exists && tree_other_mount(&f.st, c->root->dev, c->root->mnt_id)) {
		if (c->s->strict)
			c->st->mounts_skipped++;
		else
			failed(c, path, "a mount point is there now: left as it is", 0);
		return;
	}
	f.cur = f.exists ? tree_type_of(f.st.mode) : (enum tree_type)0;
	if (c->s->as_task && !task_left(c, e, f.exists, f.cur, &f.st))
		return;
	/* A checkpoint's own path is replaced or recreated only where its
	 * parent may be written too. */
	f.is_root = e->parent == TREE_NONE && !c->root->replaceable;
	switch (e->type) {
	case TREE_DIR:
		restore_dir(c, dfd, name, idx, depth, &f);
		return;
	case TREE_REG:
		restore_file(c, dfd, name, e, &f);
		return;
	case TREE_SOCK:
		restore_socket(c, dfd, name, e, &f);
		return;
	default:
		restore_node(c, dfd, name, e, &f);
		return;
	}
}

/* Name e linked to first's file again (under a temporary name, renamed over e's). 0 when done
 * or not needed (1: linked), or -errno. */
static int link_one(struct rst *c, const struct tree_root *roots, unsigned n_roots,
		    const struct tree_ent *first, const struct tree_ent *e)
{
	const char *fb, *eb;
	const struct tree_root *fr, *er;
	int ffd = tree_open_parent_of(roots, n_roots, tree_path(c->m, first), &fb, &fr);
	int efd = ffd < 0 ? ffd : tree_open_parent_of(roots, n_roots, tree_path(c->m, e), &eb, &er);
	struct kstatx a, b;
	int rc = efd < 0 ? efd : fs_statx(ffd, fb, AT_SYMLINK_NOFOLLOW, &a);
	if (rc == 0)
		rc = fs_statx(efd, eb, AT_SYMLINK_NOFOLLOW, &b);
	if (rc == 0 && (a.mode & S_IFMT) == S_IFREG &&
	    (fs_dev(&a) != fs_dev(&b) || a.ino != b.ino)) {
		char tmp[64];
		rc = -EEXIST;
		for (int i = 0; i < 100 && rc == -EEXIST; i++) {
			tmp_name(c, tmp);
			rc = linkat(ffd, fb, efd, tmp, 0) < 0 ? -errno : 0;
		}
		c->root = er;
		if (rc == 0)
			rc = put_in_place(c, efd, tmp, eb);
		if (rc == 0 && e->parent != TREE_NONE) {
			/* The link and rename moved the directory's times. */
			const struct tree_ent *d = &c->m->ent[e->parent];
			struct timespec ts[2] = {tree_ts(d->atime_sec, d->atime_nsec),
						 tree_ts(d->mtime_sec, d->mtime_nsec)};
			if (futimens(efd, ts) < 0)
				rc = -errno;
		}
		if (rc == 0)
			record(c, efd, eb, e);
		rc = rc == 0 ? 1 : rc;
	}
	if (ffd >= 0)
		close(ffd);
	if (efd >= 0)
		close(efd);
	return rc;
}

static const struct tree_manifest *sort_m;

static int cmp_link(const void *a, const void *b)
{
	const struct tree_ent *x = &sort_m->ent[*(const uint32_t *)a],
			      *y = &sort_m->ent[*(const uint32_t *)b];
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* The hard-linked files, grouped by the inode they shared. 0 or -ENOMEM. */
static int group_links(struct rst *c)
{
	const struct tree_manifest *m = c->m;
	c->lv = malloc((m->n ? m->n : 1) * sizeof(uint32_t));
	c->lfirst = malloc((m->n ? m->n : 1) * sizeof(uint32_t));
	if (!c->lv || !c->lfirst)
		return -ENOMEM;
	for (size_t i = 0; i < m->n; i++)
		if (m->ent[i].type == TREE_REG && m->ent[i].nlink > 1 &&
		    (m->ent[i].flags & TREE_STORED) &&
		    (!c->s->as_task || (m->ent[i].flags & TREE_TASK_OK)))
			c->lv[c->ln++] = (uint32_t)i;
	sort_m = m;
	qsort(c->lv, c->ln, sizeof(uint32_t), cmp_link);
	for (size_t k = 0, f = 0; k < c->ln; k++) {
		const struct tree_ent *a = &m->ent[c->lv[f]], *b = &m->ent[c->lv[k]];
		if (a->dev != b->dev || a->ino != b->ino)
			f = k;
		c->lfirst[k] = (uint32_t)f;
	}
	return 0;
}

/* Hard links: names that shared an inode in the manifest share one again (each was restored
 * as a file of its own first): the later names are linked to the group's first. The reset
 * records the inode's new ctime in every name of the group. */
static void restore_links(struct rst *c, const struct tree_root *roots, unsigned n_roots)
{
	struct tree_manifest *m = c->m;
	for (size_t k = 0; k < c->ln; k++) {
		size_t f = c->lfirst[k];
		if (f == k)
			continue;
		struct tree_ent *e = &m->ent[c->lv[k]];
		int rc = link_one(c, roots, n_roots, &m->ent[c->lv[f]], e);
		if (rc < 0)
			failed(c, tree_path(m, e), "cannot link it to its first name again", -rc);
		else if (rc > 0)
			c->note(c->arg, "linked", tree_path(m, e), NULL);
		for (size_t j = f; rc > 0 && c->s->strict && j < k; j++) {
			struct tree_ent *g = &m->ent[c->lv[j]]; /* the shared inode's ctime moved */
			g->ctime_sec = e->ctime_sec;
			g->ctime_nsec = e->ctime_nsec;
			g->ino = e->ino;
		}
	}
}

/* Children of each entry, in manifest (name) order: a counting sort. 0 or -ENOMEM. */
static int index_kids(struct rst *c)
{
	const struct tree_manifest *m = c->m;
	c->kid_start = calloc(m->n + 2, sizeof(uint32_t));
	c->kids = malloc((m->n ? m->n : 1) * sizeof(uint32_t));
	uint32_t *fill = malloc((m->n + 1) * sizeof(uint32_t));
	if (!c->kid_start || !c->kids || !fill) {
		free(fill);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->n; i++)
		if (m->ent[i].parent != TREE_NONE)
			c->kid_start[m->ent[i].parent + 1]++;
	for (size_t i = 0; i < m->n + 1; i++)
		c->kid_start[i + 1] += c->kid_start[i];
	memcpy(fill, c->kid_start, (m->n + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < m->n; i++)
		if (m->ent[i].parent != TREE_NONE)
			c->kids[fill[m->ent[i].parent]++] = (uint32_t)i;
	free(fill);
	return 0;
}

unsigned tree_restore(struct tree_store *s, struct tree_manifest *m, const struct tree_root *roots,
		      unsigned n_roots, tree_note_fn note, void *arg, struct tree_restore_stats *st)
{
	struct tree_restore_stats own;
	/* For the task user, what it may not do (chown, trusted.*) is a failure, as for root. */
	struct rst c = {.s = s,
			.m = m,
			.st = st ? st : &own,
			.note = note,
			.arg = arg,
			.root_user = geteuid() == 0 || s->as_task};
	memset(c.st, 0, sizeof(*c.st));
	c.rm = (struct tree_rm){.max_depth = s->strict ? MAX_RM_DEPTH : TREE_MAX_DEPTH,
				.keep_mounts = s->strict,
				.skip = s->strict ? s->excl : NULL,
				.n_skip = s->strict ? s->n_excl : 0};
	bool ready = index_kids(&c) == 0 && group_links(&c) == 0;
	if (!ready) {
		note(arg, "failed", "", "out of memory");
		c.failures++;
	}
	for (size_t i = 0; ready && i < m->n; i++) {
		if (m->ent[i].parent != TREE_NONE)
			continue;
		for (unsigned r = 0; r < n_roots; r++)
			if (!strcmp(roots[r].path, tree_path(m, &m->ent[i]))) {
				c.root = &roots[r];
				restore_entry(&c, roots[r].pfd, roots[r].name, (uint32_t)i, 0);
			}
	}
	if (ready)
		restore_links(&c, roots, n_roots);
	free(c.kid_start);
	free(c.kids);
	free(c.lv);
	free(c.lfirst);
	c.st->removed_files += c.rm.files;
	c.st->removed_dirs += c.rm.dirs;
	c.st->removed_links += c.rm.links;
	c.st->removed_other += c.rm.other;
	c.st->removed_bytes += c.rm.bytes;
	c.st->mounts_skipped += c.rm.mounts;
	return c.failures;
}
