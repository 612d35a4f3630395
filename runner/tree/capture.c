/* Capture: a manifest taken by walking its roots (contents put into the store, or only hashed
 * for a diff against the tree as it is), in tree order; the manifest's own helpers. See
 * tree.h. */
#include "tree/tree.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"
#include "files/ident.h"
#include "tree/changes.h"
#include "tree/fsops.h"
#include "tree/node.h"

const char *tree_path(const struct tree_manifest *m, const struct tree_ent *e)
{
	return m->pool.buf + e->path_off;
}

int tree_pathcmp(const char *a, const char *b)
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

void tree_manifest_free(struct tree_manifest *m)
{
	if (m->file_map) {
		munmap(m->file_map, m->file_len);
		memset(m, 0, sizeof(*m));
		return;
	}
	if (m->map_len)
		munmap(m->ent, m->map_len);
	else
		free(m->ent);
	tree_pool_free(&m->pool);
	memset(m, 0, sizeof(*m));
}

long tree_find(const struct tree_manifest *m, const char *path)
{
	if (!m)
		return -1;
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = tree_pathcmp(path, tree_path(m, &m->ent[mid]));
		if (c == 0)
			return (long)mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

/* ---- taking it ---- */

int tree_manifest_share(struct tree_manifest *m)
{
	size_t len = ((m->n ? m->n : 1) * sizeof(*m->ent) + 4095) & ~(size_t)4095;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	if (m->n)
		memcpy(p, m->ent, m->n * sizeof(*m->ent));
	free(m->ent);
	m->ent = p;
	m->cap = m->n;
	m->map_len = len;
	return 0;
}

static int ent_add(struct tree_manifest *m, unsigned max, uint32_t *idx)
{
	if (m->n >= max)
		return -EFBIG;
	if (tree_grow(&m->ent, &m->cap, m->n, sizeof(*m->ent)) < 0)
		return -ENOMEM;
	*idx = (uint32_t)m->n++;
	memset(&m->ent[*idx], 0, sizeof(m->ent[0]));
	m->ent[*idx].parent = TREE_NONE;
	return 0;
}

static void ent_fill(struct tree_ent *e, const struct kstatx *st)
{
	e->ino = st->ino;
	e->dev = fs_dev(st);
	e->size = st->size;
	e->rdev = fs_rdev(st);
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
	e->type = (uint8_t)tree_type_of(st->mode);
}

struct take {
	struct tree_store *s; /* the store; its excl is never entered */
	bool hash_only;       /* contents hashed, not stored */
	const struct tree_root *root;
	const struct tree_manifest *prev;
	struct tree_manifest *m;
	struct tree_capture_stats *ts;
	unsigned max_entries;
	int max_depth;
	char *hbuf;     /* hashing buffer without a store */
	size_t *ends;   /* with reuse: prev's subtree ends (changes.h) */
	int forced;     /* inside a directory walked whole: no reuse below */
	bool new_link;  /* a file with a link more than prev knew: reuse cannot vouch */
	long last_find; /* prev's entry found last (prev_find), or -1 */
	struct error *e;
	char path[PATH_MAX];
};

/* c->path's entry in prev, or -1. A file's path is looked up twice in a row (its rights, then
 * its content): the second is the entry found last, without a search. */
static long prev_find(struct take *c)
{
	const struct tree_manifest *p = c->prev;
	if (!p)
		return -1;
	if (c->last_find >= 0 && (size_t)c->last_find < p->n &&
	    !tree_pathcmp(c->path, tree_path(p, &p->ent[c->last_find])))
		return c->last_find;
	long i = tree_find(p, c->path);
	if (i >= 0)
		c->last_find = i;
	return i;
}

static bool foreign(const struct take *c, const struct kstatx *st)
{
	if (tree_other_mount(st, c->root->dev, c->root->mnt_id))
		return true;
	return tree_inode_in(c->s->excl, c->s->n_excl, st);
}

/* The entry's extended attributes and ACLs into the manifest. */
static int take_xattrs(struct take *c, int fd, uint32_t idx)
{
	uint32_t off, len = 0;
	int rc = tree_pool_xattrs(&c->m->pool, fd, &off, &len);
	if (rc == 0 && len) {
		c->m->ent[idx].xattr_off = off;
		c->m->ent[idx].xattr_len = len;
	}
	return rc < 0 ? error_set(c->e, -rc, NULL, "the attributes of %s", c->path) : 0;
}

/* Unchanged since the previous checkpoint (any write, chmod, chown, xattr change moves the
 * ctime): its content and attributes as they were, not read again. 1 when so. */
static int take_unchanged(struct take *c, uint32_t idx)
{
	struct tree_manifest *m = c->m;
	struct tree_ent *e = &m->ent[idx];
	long p = prev_find(c);
	const struct tree_ent *pe = p >= 0 ? &c->prev->ent[p] : NULL;
	if (!pe || pe->type != TREE_REG || !(pe->flags & TREE_STORED) || pe->ino != e->ino ||
	    pe->dev != e->dev || pe->size != e->size || pe->ctime_sec != e->ctime_sec ||
	    pe->ctime_nsec != e->ctime_nsec)
		return 0;
	memcpy(e->sha, pe->sha, 32);
	e->flags |= TREE_STORED;
	if (pe->xattr_len) {
		uint32_t off;
		if (tree_pool_add(&m->pool, c->prev->pool.buf + pe->xattr_off, pe->xattr_len,
				  &off) < 0)
			return error_set(c->e, ENOMEM, NULL, "capture");
		e = &m->ent[idx];
		e->xattr_off = off;
		e->xattr_len = pe->xattr_len;
	}
	return 1;
}

/* src's content into the store (or hashed only). */
static int take_bytes(struct take *c, int src, const struct kstatx *st, uint32_t idx)
{
	struct tree_ent *e = &c->m->ent[idx];
	uint64_t n = 0;
	bool cloned = false;
	int rc = c->hash_only ? tree_hash_fd(c->hbuf, src, e->sha, &n)
			      : tree_store_put(c->s, src, st->size, e, &n, &cloned);
	if (rc == -TREE_EFULL) {
		error_set(c->e, 0, NULL, "%s", c->path);
		c->e->errnum = TREE_EFULL; /* the caller words it: 507 */
		return -1;
	}
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot copy %s", c->path);
	e->size = n;
	e->flags |= TREE_STORED;
	c->ts->read_files++;
	c->ts->read_bytes += n;
	if (cloned)
		c->ts->cloned_files++;
	return 0;
}

/* Open now (maybe written through a shared mapping, which moves no ctime): read again. */
static bool take_open(const struct take *c, const char *name)
{
	if (!c->s || !c->s->changes)
		return false;
	char dir[PATH_MAX];
	size_t l = strlen(c->path) - strlen(name) - 1;
	memcpy(dir, c->path, l);
	dir[l] = 0;
	return tree_changes_open(c->s->changes, dir, name);
}

static int take_content(struct take *c, int dfd, const char *name, uint32_t idx)
{
	struct tree_manifest *m = c->m;
	int rc = take_open(c, name) ? 0 : take_unchanged(c, idx);
	if (rc != 0)
		return rc < 0 ? -1 : 0;
	int src = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	struct kstatx st;
	if (src >= 0 &&
	    (fs_statx(src, "", AT_EMPTY_PATH, &st) < 0 || (st.mode & S_IFMT) != S_IFREG)) {
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
		m->ent[idx].flags |= TREE_UNREADABLE;
		c->ts->unreadable++;
		return 0;
	}
	ent_fill(&m->ent[idx], &st); /* as it is when read */
	rc = take_xattrs(c, src, idx);
	if (rc == 0)
		rc = take_bytes(c, src, &st, idx);
	close(src);
	return rc;
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
 * read (docs/design/checkpoints.md#checkpoints-undo-for-agents, "For whom"). */
static void task_access(struct take *c, int dfd, const char *name, uint32_t idx)
{
	struct tree_ent *e = &c->m->ent[idx];
	const struct files_ident *t = c->s ? c->s->task : NULL;
	if (!t || e->type == TREE_KEEP)
		return;
	bool seen = e->parent == TREE_NONE ? c->root->task_reach
					   : (c->m->ent[e->parent].flags & TREE_TASK_OK) != 0;
	if (!seen)
		return;
	e->flags |= TREE_TASK_SEEN;
	if (e->type == TREE_REG) {
		/* A file's own rights move its ctime: unchanged since the previous checkpoint
		 * (which checked it, from a directory it could enter), the answer stands. */
		long p = prev_find(c);
		const struct tree_ent *pe = p >= 0 ? &c->prev->ent[p] : NULL;
		if (pe && pe->type == TREE_REG && (pe->flags & TREE_TASK_SEEN) &&
		    pe->ino == e->ino && pe->dev == e->dev && pe->ctime_sec == e->ctime_sec &&
		    pe->ctime_nsec == e->ctime_nsec) {
			e->flags |= pe->flags & TREE_TASK_OK;
			return;
		}
	}
	int mode = e->type == TREE_DIR ? R_OK | X_OK : e->type == TREE_REG ? R_OK : F_OK;
	if (task_may(t, dfd, name, mode))
		e->flags |= TREE_TASK_OK;
}

static int take_children(struct take *c, int fd, uint32_t di, int depth)
{
	if (depth >= c->max_depth)
		return error_set(c->e, 0, NULL, "%s is more than %d levels deep", c->path,
				 c->max_depth);
	struct tree_names names;
	int rc = tree_names_read(fd, &names);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot list %s", c->path);
	size_t plen = strlen(c->path);
	for (size_t i = 0; rc == 0 && i < names.n; i++) {
		size_t l = strlen(names.v[i]);
		if (plen + 1 + l >= sizeof(c->path)) {
			rc = error_set(c->e, ENAMETOOLONG, NULL, "under %s", c->path);
			break;
		}
		c->path[plen] = '/';
		memcpy(c->path + plen + 1, names.v[i], l + 1);
		rc = take_entry(c, fd, names.v[i], di, depth + 1);
		c->path[plen] = 0;
	}
	tree_names_free(&names);
	return rc < 0 ? -1 : 0;
}

/* A directory of a copied subtree, opened only when one of its entries must be examined. */
struct lazy_dir {
	struct lazy_dir *up; /* NULL: dfd is its parent's descriptor */
	int dfd, fd;
	const char *name;
	uint64_t ino;
};

static int take_reused(struct take *c, struct lazy_dir *dir, uint32_t idx, size_t p, int depth);

/* What the change tracker says of the directory idx (c->path): CHANGES_DIR_CLEAN with *p its
 * entry in prev when it is prev's to the ctime. */
static enum changes_dir_state take_dir_state(struct take *c, uint32_t idx, long *p)
{
	if (!c->s || !c->s->reuse || c->forced)
		return CHANGES_DIR_WALK;
	enum changes_dir_state ds = tree_changes_dir(c->s->changes, c->path);
	const struct tree_ent *e = &c->m->ent[idx], *pe;
	if (ds != CHANGES_DIR_CLEAN)
		return ds;
	*p = prev_find(c);
	pe = *p >= 0 ? &c->prev->ent[*p] : NULL;
	if (!pe || pe->type != TREE_DIR || pe->ino != e->ino || pe->dev != e->dev ||
	    pe->ctime_sec != e->ctime_sec || pe->ctime_nsec != e->ctime_nsec ||
	    pe->mode != e->mode || pe->uid != e->uid || pe->gid != e->gid ||
	    ((pe->flags ^ e->flags) & (TREE_TASK_SEEN | TREE_TASK_OK)))
		return CHANGES_DIR_LIST;
	return CHANGES_DIR_CLEAN;
}

/* A directory: its attributes, then its children. */
static int take_dir(struct take *c, int dfd, const char *name, uint32_t idx, int depth)
{
	c->ts->dirs++;
	long p = -1;
	enum changes_dir_state ds = take_dir_state(c, idx, &p);
	if (ds == CHANGES_DIR_CLEAN) {
		struct lazy_dir d = {.dfd = dfd, .fd = -1, .name = name, .ino = c->m->ent[idx].ino};
		int rc = take_reused(c, &d, idx, (size_t)p, depth);
		if (d.fd >= 0)
			close(d.fd);
		return rc;
	}
	int fd = fs_open_dir_checked(dfd, name, c->m->ent[idx].ino, c->root->dev, c->root->mnt_id);
	if (fd == -ENOENT || fd == -ESTALE || fd == -ENOTDIR || fd == -ELOOP) {
		c->m->n--; /* swapped meanwhile: as if it were not there */
		c->ts->dirs--;
		return 0;
	}
	if (fd < 0)
		return error_set(c->e, -fd, NULL, "cannot open %s", c->path);
	if (c->s && c->s->watch) /* before it is listed: what comes after is seen */
		(void)tree_changes_watch(c->s->changes, fd, c->path);
	c->ts->listed_dirs++;
	bool whole = ds == CHANGES_DIR_WALK && c->s && c->s->reuse;
	c->forced += whole;
	int rc = take_xattrs(c, fd, idx);
	if (rc == 0)
		rc = take_children(c, fd, idx, depth);
	c->forced -= whole;
	close(fd);
	return rc;
}

static int take_link(struct take *c, int dfd, const char *name, uint32_t idx)
{
	uint32_t off, len;
	int rc = tree_pool_link(&c->m->pool, dfd, name, &off, &len);
	if (rc == -EINVAL || rc == -ENOENT) { /* swapped or gone meanwhile */
		c->m->n--;
		return 0;
	}
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot read the symlink %s", c->path);
	c->m->ent[idx].target_off = off;
	c->m->ent[idx].target_len = len;
	c->ts->links++;
	return 0;
}

/* Entry j of prev, unexamined: its counts as take_entry's. */
static int take_copied(struct take *c, size_t j, uint32_t parent, uint32_t *k)
{
	int rc = tree_copy_ent(c->m, c->max_entries, c->prev, j, parent, k);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "checkpoint: under %s", c->path);
	const struct tree_ent *pe = &c->prev->ent[j];
	c->ts->reused++;
	c->ts->files += pe->type == TREE_REG;
	c->ts->bytes += pe->type == TREE_REG ? pe->size : 0;
	c->ts->dirs += pe->type == TREE_DIR;
	c->ts->links += pe->type == TREE_LNK;
	c->ts->other += pe->type != TREE_REG && pe->type != TREE_DIR && pe->type != TREE_LNK &&
			pe->type != TREE_KEEP;
	c->ts->unreadable += (pe->flags & TREE_UNREADABLE) != 0;
	return 0;
}

/* The directory idx (c->path, prev's entry p) where nothing happened since prev: its entries
 * are prev's, no system call. A subdirectory goes by its own state (examined when something
 * happened in it); a file with more than one link is examined (written through another name,
 * its directory here sees nothing). */
static int lazy_fd(const struct take *c, struct lazy_dir *d)
{
	if (d->fd >= 0)
		return d->fd;
	int pfd = d->up ? lazy_fd(c, d->up) : d->dfd;
	if (pfd < 0)
		return pfd;
	d->fd = fs_open_dir_checked(pfd, d->name, d->ino, c->root->dev, c->root->mnt_id);
	return d->fd;
}

static int take_reused(struct take *c, struct lazy_dir *dir, uint32_t idx, size_t p, int depth)
{
	const struct tree_manifest *pm = c->prev;
	const struct tree_ent *d = &pm->ent[p];
	uint32_t off;
	if (d->xattr_len) {
		if (tree_pool_add(&c->m->pool, pm->pool.buf + d->xattr_off, d->xattr_len, &off) < 0)
			return error_set(c->e, ENOMEM, NULL, "checkpoint");
		c->m->ent[idx].xattr_off = off;
		c->m->ent[idx].xattr_len = d->xattr_len;
	}
	if (depth >= c->max_depth)
		return error_set(c->e, 0, NULL, "checkpoint: %s is more than %d levels deep",
				 c->path, c->max_depth);
	int rc = 0;
	char saved[PATH_MAX];
	memcpy(saved, c->path, strlen(c->path) + 1);
	for (size_t j = p + 1; rc == 0 && j < c->ends[p]; j = c->ends[j]) {
		const struct tree_ent *pe = &pm->ent[j];
		const char *path = tree_path(pm, pe), *name = strrchr(path, '/') + 1;
		memcpy(c->path, path, pe->path_len + 1); /* shorter than PATH_MAX: it was taken */
		bool look = pe->type == TREE_DIR
				    ? tree_changes_dir(c->s->changes, path) != CHANGES_DIR_CLEAN
				    : pe->type == TREE_REG && pe->nlink > 1;
		uint32_t k;
		if (!look) {
			struct lazy_dir sub = {.up = dir, .fd = -1, .name = name, .ino = pe->ino};
			rc = take_copied(c, j, idx, &k);
			if (rc == 0 && pe->type == TREE_DIR)
				rc = take_reused(c, &sub, k, j, depth + 1);
			if (sub.fd >= 0)
				close(sub.fd);
		} else {
			int fd = lazy_fd(c, dir);
			rc = fd < 0 ? error_set(c->e, -fd, NULL, "checkpoint: cannot open %s",
						saved)
				    : take_entry(c, fd, name, idx, depth + 1);
		}
	}
	memcpy(c->path, saved, strlen(saved) + 1);
	return rc < 0 ? -1 : 0;
}

/* c->path is the entry's path. */
static int take_entry(struct take *c, int dfd, const char *name, uint32_t parent, int depth)
{
	struct kstatx st;
	int rc = fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
	if (rc == -ENOENT)
		return 0; /* gone meanwhile */
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot examine %s", c->path);
	struct tree_manifest *m = c->m;
	uint32_t idx, off;
	if ((rc = ent_add(m, c->max_entries, &idx)) < 0 ||
	    (rc = tree_pool_add(&m->pool, c->path, strlen(c->path), &off)) < 0) {
		if (rc == -EFBIG)
			return error_set(c->e, 0, NULL, "more than %u entries", c->max_entries);
		return error_set(c->e, ENOMEM, NULL, "capture");
	}
	struct tree_ent *e = &m->ent[idx];
	e->path_off = off;
	e->path_len = (uint32_t)strlen(c->path);
	e->parent = parent;
	ent_fill(e, &st);
	if (parent != TREE_NONE && foreign(c, &st)) {
		e->type = TREE_KEEP; /* a mount point or the state dir: never entered */
		return 0;
	}
	task_access(c, dfd, name, idx);
	switch (e->type) {
	case TREE_DIR:
		return take_dir(c, dfd, name, idx, depth);
	case TREE_REG:
		c->ts->files++;
		if (st.nlink > 1 && c->ends) { /* a link prev did not know of: see tree_capture */
			long p = prev_find(c);
			c->new_link |= p < 0 || c->prev->ent[p].nlink != st.nlink;
		}
		rc = take_content(c, dfd, name, idx);
		if (idx < m->n)
			c->ts->bytes += m->ent[idx].size;
		return rc;
	case TREE_LNK:
		return take_link(c, dfd, name, idx);
	default:
		c->ts->other++;
		return 0;
	}
}

int tree_capture(struct tree_store *store, bool hash_only, const struct tree_root *roots,
		 unsigned n_roots, const struct tree_manifest *prev, struct tree_manifest *out,
		 struct tree_capture_stats *ts, struct error *e)
{
	memset(out, 0, sizeof(*out));
	memset(ts, 0, sizeof(*ts));
	struct take c = {.s = store,
			 .hash_only = hash_only,
			 .prev = prev,
			 .m = out,
			 .ts = ts,
			 .max_entries = store->max_entries ? store->max_entries : TREE_MAX_ENTRIES,
			 .max_depth = store->max_depth ? store->max_depth : TREE_MAX_DEPTH,
			 .last_find = -1,
			 .e = e};
	if (hash_only && !(c.hbuf = malloc(TREE_BUF_BYTES)))
		return error_set(e, ENOMEM, NULL, "capture");
	if (store->reuse && prev && !(c.ends = tree_subtree_ends(prev)))
		store->reuse = false;
	if (c.ends && tree_reserve(out, prev) < 0) /* as large as prev: no copy on growing */
		store->reuse = false;
	int rc = 0;
	for (unsigned i = 0; i < n_roots && rc == 0; i++) {
		c.root = &roots[i];
		snprintf(c.path, sizeof(c.path), "%s", roots[i].path);
		rc = take_entry(&c, roots[i].pfd, roots[i].name, TREE_NONE, 0);
	}
	free(c.ends);
	free(c.hbuf);
	if (rc == 0 && c.new_link && ts->reused) {
		/* A file got another name: through it, a copy taken from prev may have changed
		 * unseen. Taken again without the tracker. */
		tree_manifest_free(out);
		store->reuse = false;
		return tree_capture(store, hash_only, roots, n_roots, prev, out, ts, e);
	}
	if (rc < 0)
		tree_manifest_free(out);
	return rc;
}
