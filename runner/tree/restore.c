/* A checkpoint restored: the roots made exactly its manifest again, each file written under
 * a temporary name in its own directory and renamed over the old one. See tree.h. */
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

struct rst {
	struct tree_store *s;
	const struct tree_manifest *m;
	const struct tree_root *root;
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

/* No mount point is removed (-EBUSY), no tree deeper than TREE_MAX_DEPTH (-TREE_EDEEP). */
static int remove_any(int dfd, const char *name, const struct kstatx *st, uint64_t dev,
		      uint64_t mnt, int depth)
{
	struct tree_rm o = {.dev = dev, .mnt_id = mnt, .max_depth = TREE_MAX_DEPTH, .hoist_fd = -1};
	return tree_remove(&o, dfd, name, st, depth);
}

/* Owner, then xattrs, mode (a chown clears set-id bits, an ACL sets the
 * group bits), then times. */
static int set_attrs_fd(struct rst *c, int fd, const struct tree_ent *e)
{
	if (fchown(fd, e->uid, e->gid) < 0 && (c->root_user || errno != EPERM))
		return -errno;
	int xr = xattrs_restore(fd, c->m->pool.buf + e->xattr_off, e->xattr_len, !c->root_user);
	if (xr < 0)
		return xr;
	if (fchmod(fd, e->mode & 07777) < 0)
		return -errno;
	struct timespec ts[2] = {tree_ts(e->atime_sec, e->atime_nsec),
				 tree_ts(e->mtime_sec, e->mtime_nsec)};
	if (futimens(fd, ts) < 0)
		return -errno;
	return 0;
}

static int set_attrs_at(struct rst *c, int dfd, const char *name, const struct tree_ent *e)
{
	struct timespec ts[2] = {tree_ts(e->atime_sec, e->atime_nsec),
				 tree_ts(e->mtime_sec, e->mtime_nsec)};
	return tree_attrs_at(dfd, name, e->uid, e->gid, e->mode, ts, c->root_user);
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

static int write_file(struct rst *c, int dfd, const char *name, const struct tree_ent *e)
{
	char hex[65], tmp[64];
	tree_hex(e->sha, hex);
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
		rc = fs_copy(src, &off, e->size, dst, &copied);
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

static void restore_children(struct rst *c, int fd, uint32_t di, int depth)
{
	const struct tree_ent *d = &c->m->ent[di];
	const char *dpath = tree_path(c->m, d);
	size_t plen = d->path_len;
	if (!c->root_user)
		tree_own_dir_writable(fd); /* a directory of ours made read-only */
	/* What was added since: removed. */
	struct fs_iter *it = fs_iter_new(fd);
	if (!it) {
		failed(c, dpath, "out of memory", 0);
		return;
	}
	const char *name;
	int rc;
	char path[PATH_MAX];
	while ((rc = fs_iter_next(it, &name)) > 0) {
		if (is_kid(c, di, name, plen) || !strncmp(name, ".forceai-restore-", 17))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dpath, name);
		struct kstatx st;
		if ((rc = fs_statx(fd, name, AT_SYMLINK_NOFOLLOW, &st)) == -ENOENT)
			continue;
		if (rc == 0 && (fs_dev(&st) != c->root->dev ||
				(c->root->mnt_id && st.mnt_id != c->root->mnt_id) ||
				tree_inode_in(&c->s->excl, 1, &st)))
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
		restore_entry(c, fd, tree_path(c->m, &c->m->ent[ci]) + plen + 1, ci, depth + 1);
	}
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
		int rc = remove_any(dfd, name, &f->st, c->root->dev, c->root->mnt_id, depth);
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
	bool was_same = fs_statx(fd, "", AT_EMPTY_PATH, &now) == 0 && attrs_equal(e, &now) &&
			xattrs_equal(c, fd, e);
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
		outcome(c, tree_path(c->m, e), rc, "cannot set its owner, mode, times or attributes",
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
	if (file && f->st.ino == e->ino && fs_dev(&f->st) == e->dev &&
	    f->st.ctime.tv_sec == e->ctime_sec && f->st.ctime.tv_nsec == e->ctime_nsec &&
	    f->st.size == e->size)
		return; /* untouched since */
	if (file && f->st.size == e->size && !f->is_root && only_attrs(c, dfd, name, e, &f->st))
		return;
	int rc = write_file(c, dfd, name, e);
	outcome(c, path, rc, "cannot write", f->exists ? "replaced" : "created");
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
		if (attrs_equal(e, st) ||
		    (f->cur == TREE_LNK && st->uid == e->uid && st->gid == e->gid &&
		     st->mtime.tv_sec == e->mtime_sec && st->mtime.tv_nsec == e->mtime_nsec))
			return;
		int rc = set_attrs_at(c, dfd, name, e);
		outcome(c, path, rc, "cannot set its owner, mode or times", "attributes");
		return;
	}
	if (f->is_root && f->exists && f->cur == TREE_DIR) {
		failed(c, path, "is a directory now (a checkpoint's own path is never replaced)",
		       0);
		return;
	}
	int rc = make_node(c, dfd, name, e);
	outcome(c, path, rc, "cannot create", f->exists ? "replaced" : "created");
}

static void restore_entry(struct rst *c, int dfd, const char *name, uint32_t idx, int depth)
{
	const struct tree_ent *e = &c->m->ent[idx];
	const char *path = tree_path(c->m, e);
	if (e->type == TREE_KEEP)
		return;
	if (depth >= TREE_MAX_DEPTH) {
		failed(c, path, "too deep", 0);
		return;
	}
	struct found f = {0};
	int rc = fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &f.st);
	f.exists = rc == 0;
	if (rc < 0 && rc != -ENOENT) {
		failed(c, path, "cannot examine", -rc);
		return;
	}
	if (f.exists && tree_other_mount(&f.st, c->root->dev, c->root->mnt_id)) {
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
		if (!f.exists || f.cur != TREE_SOCK)
			failed(c, path, "a socket cannot be recreated", 0);
		return;
	default:
		restore_node(c, dfd, name, e, &f);
		return;
	}
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

/* Hard links: names that shared an inode in the checkpoint share one again
 * (each was restored as a file of its own first): the later names are
 * linked to the first under a temporary name, renamed over theirs. */
static void restore_links(struct rst *c, const struct tree_root *roots, unsigned n_roots)
{
	const struct tree_manifest *m = c->m;
	uint32_t *v = malloc((m->n ? m->n : 1) * sizeof(uint32_t));
	size_t n = 0;
	for (size_t i = 0; v && i < m->n; i++)
		if (m->ent[i].type == TREE_REG && m->ent[i].nlink > 1 &&
		    (m->ent[i].flags & TREE_STORED) &&
		    (!c->s->as_task || (m->ent[i].flags & TREE_TASK_OK)))
			v[n++] = (uint32_t)i;
	if (!v)
		return;
	sort_m = m;
	qsort(v, n, sizeof(uint32_t), cmp_link);
	for (size_t k = 1; k < n; k++) {
		const struct tree_ent *first = &m->ent[v[k - 1]], *e = &m->ent[v[k]];
		if (first->dev != e->dev || first->ino != e->ino)
			continue;
		size_t f = k - 1; /* the group's first */
		while (f > 0 && m->ent[v[f - 1]].dev == e->dev && m->ent[v[f - 1]].ino == e->ino)
			f--;
		first = &m->ent[v[f]];
		const char *fb, *eb, *path = tree_path(m, e);
		const struct tree_root *fr, *er;
		int ffd = tree_open_parent_of(roots, n_roots, tree_path(m, first), &fb, &fr);
		int efd = ffd < 0 ? ffd : tree_open_parent_of(roots, n_roots, path, &eb, &er);
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
				const struct tree_ent *d = &m->ent[e->parent];
				struct timespec ts[2] = {tree_ts(d->atime_sec, d->atime_nsec),
							 tree_ts(d->mtime_sec, d->mtime_nsec)};
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

unsigned tree_restore(struct tree_store *s, const struct tree_manifest *m, const struct tree_root *roots,
		    unsigned n_roots, tree_note_fn note, void *arg)
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
		if (m->ent[i].parent != TREE_NONE)
			c.kid_start[m->ent[i].parent + 1]++;
	for (size_t i = 0; i < m->n + 1; i++)
		c.kid_start[i + 1] += c.kid_start[i];
	uint32_t *fill = malloc((m->n + 1) * sizeof(uint32_t));
	if (fill) {
		memcpy(fill, c.kid_start, (m->n + 1) * sizeof(uint32_t));
		for (size_t i = 0; i < m->n; i++)
			if (m->ent[i].parent != TREE_NONE)
				c.kids[fill[m->ent[i].parent]++] = (uint32_t)i;
		free(fill);
		for (size_t i = 0; i < m->n; i++) {
			if (m->ent[i].parent != TREE_NONE)
				continue;
			const char *p = tree_path(m, &m->ent[i]);
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
