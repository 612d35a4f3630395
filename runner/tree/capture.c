/* A checkpoint's manifest: taken by walking its paths (contents put into the store, or only
 * hashed for a diff against the tree as it is), in tree order, saved and loaded, compared with
 * another; and the current content of a path. See tree.h. */
#include "tree/tree.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fileio.h"
#include "files/ident.h"
#include "tree/fsops.h"
#include "tree/node.h"

#define MAGIC "FCKPT001"

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

static int ent_add(struct tree_manifest *m, uint32_t *idx)
{
	if (m->n >= TREE_MAX_ENTRIES)
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
	bool hash_only;     /* contents hashed, not stored */
	const struct tree_root *root;
	const struct tree_manifest *prev;
	struct tree_manifest *m;
	struct tree_capture_stats *ts;
	char *hbuf; /* hashing buffer without a store */
	struct error *e;
	char path[PATH_MAX];
};

static bool foreign(const struct take *c, const struct kstatx *st)
{
	if (tree_other_mount(st, c->root->dev, c->root->mnt_id))
		return true;
	return tree_inode_in(&c->s->excl, 1, st);
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
	return rc < 0 ? error_set(c->e, -rc, NULL, "checkpoint: the attributes of %s", c->path) : 0;
}

/* Unchanged since the previous checkpoint (any write, chmod, chown, xattr change moves the
 * ctime): its content and attributes as they were, not read again. 1 when so. */
static int take_unchanged(struct take *c, uint32_t idx)
{
	struct tree_manifest *m = c->m;
	struct tree_ent *e = &m->ent[idx];
	long p = tree_find(c->prev, c->path);
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
			return error_set(c->e, ENOMEM, NULL, "checkpoint");
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
			      : tree_store_put(c->s, src, st->size, e->sha, &n, &cloned);
	if (rc == -TREE_EFULL) {
		error_set(c->e, 0, NULL, "%s", c->path);
		c->e->errnum = TREE_EFULL; /* the caller words it: 507 */
		return -1;
	}
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "checkpoint: cannot copy %s", c->path);
	e->size = n;
	e->flags |= TREE_STORED;
	c->ts->read_files++;
	c->ts->read_bytes += n;
	if (cloned)
		c->ts->cloned_files++;
	return 0;
}

static int take_content(struct take *c, int dfd, const char *name, uint32_t idx)
{
	struct tree_manifest *m = c->m;
	int rc = take_unchanged(c, idx);
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
 * read (docs/design.md §10.2, "For whom"). */
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
		long p = tree_find(c->prev, c->path);
		const struct tree_ent *pe = p >= 0 ? &c->prev->ent[p] : NULL;
		if (pe && pe->type == TREE_REG && (pe->flags & TREE_TASK_SEEN) && pe->ino == e->ino &&
		    pe->dev == e->dev && pe->ctime_sec == e->ctime_sec &&
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
	if (depth >= TREE_MAX_DEPTH)
		return error_set(c->e, 0, NULL, "checkpoint: %s is more than %d levels deep",
				 c->path, TREE_MAX_DEPTH);
	struct tree_names names;
	int rc = tree_names_read(fd, &names);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "checkpoint: cannot list %s", c->path);
	size_t plen = strlen(c->path);
	for (size_t i = 0; rc == 0 && i < names.n; i++) {
		size_t l = strlen(names.v[i]);
		if (plen + 1 + l >= sizeof(c->path)) {
			rc = error_set(c->e, ENAMETOOLONG, NULL, "checkpoint: under %s", c->path);
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

/* A directory: its attributes, then its children. */
static int take_dir(struct take *c, int dfd, const char *name, uint32_t idx, int depth)
{
	c->ts->dirs++;
	int fd = fs_open_dir_checked(dfd, name, c->m->ent[idx].ino, c->root->dev, c->root->mnt_id);
	if (fd == -ENOENT || fd == -ESTALE || fd == -ENOTDIR || fd == -ELOOP) {
		c->m->n--; /* swapped meanwhile: as if it were not there */
		c->ts->dirs--;
		return 0;
	}
	if (fd < 0)
		return error_set(c->e, -fd, NULL, "checkpoint: cannot open %s", c->path);
	int rc = take_xattrs(c, fd, idx);
	if (rc == 0)
		rc = take_children(c, fd, idx, depth);
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
		return error_set(c->e, -rc, NULL, "checkpoint: cannot read the symlink %s",
				 c->path);
	c->m->ent[idx].target_off = off;
	c->m->ent[idx].target_len = len;
	c->ts->links++;
	return 0;
}

/* c->path is the entry's path. */
static int take_entry(struct take *c, int dfd, const char *name, uint32_t parent, int depth)
{
	struct kstatx st;
	int rc = fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
	if (rc == -ENOENT)
		return 0; /* gone meanwhile */
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "checkpoint: cannot examine %s", c->path);
	struct tree_manifest *m = c->m;
	uint32_t idx, off;
	if ((rc = ent_add(m, &idx)) < 0 ||
	    (rc = tree_pool_add(&m->pool, c->path, strlen(c->path), &off)) < 0) {
		if (rc == -EFBIG)
			return error_set(c->e, 0, NULL, "checkpoint: more than %u entries",
					 TREE_MAX_ENTRIES);
		return error_set(c->e, ENOMEM, NULL, "checkpoint");
	}
	struct tree_ent *e = &m->ent[idx];
	e->path_off = off;
	e->path_len = (uint32_t)strlen(c->path);
	e->parent = parent;
	ent_fill(e, &st);
	if (foreign(c, &st)) {
		e->type = TREE_KEEP; /* a mount point or the state dir: never entered */
		return 0;
	}
	task_access(c, dfd, name, idx);
	switch (e->type) {
	case TREE_DIR:
		return take_dir(c, dfd, name, idx, depth);
	case TREE_REG:
		c->ts->files++;
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

int tree_capture(struct tree_store *store, bool hash_only, const struct tree_root *roots, unsigned n_roots,
	    const struct tree_manifest *prev, struct tree_manifest *out, struct tree_capture_stats *ts,
	    struct error *e)
{
	memset(out, 0, sizeof(*out));
	memset(ts, 0, sizeof(*ts));
	struct take c =
		{.s = store, .hash_only = hash_only, .prev = prev, .m = out, .ts = ts, .e = e};
	if (hash_only && !(c.hbuf = malloc(TREE_BUF_BYTES)))
		return error_set(e, ENOMEM, NULL, "checkpoint");
	int rc = 0;
	for (unsigned i = 0; i < n_roots && rc == 0; i++) {
		c.root = &roots[i];
		snprintf(c.path, sizeof(c.path), "%s", roots[i].path);
		rc = take_entry(&c, roots[i].pfd, roots[i].name, TREE_NONE, 0);
	}
	free(c.hbuf);
	if (rc < 0)
		tree_manifest_free(out);
	return rc;
}

/* ---- its file ---- */

int tree_manifest_save(int dir_fd, const char *name, const struct tree_manifest *m, struct error *e)
{
	char tmp[96];
	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	int fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return error_set(e, errno, NULL, "checkpoint: cannot write its manifest");
	uint64_t hdr[3] = {0, m->n, m->pool.len};
	memcpy(&hdr[0], MAGIC, 8);
	int rc = write_all(fd, (const char *)hdr, sizeof(hdr));
	if (rc == 0 && m->n)
		rc = write_all(fd, (const char *)m->ent, m->n * sizeof(*m->ent));
	if (rc == 0 && m->pool.len)
		rc = write_all(fd, m->pool.buf, m->pool.len);
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

int tree_manifest_load(int dir_fd, const char *name, struct tree_manifest *m, struct error *e)
{
	memset(m, 0, sizeof(*m));
	int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return error_set(e, errno, NULL, "checkpoint: cannot read its manifest");
	uint64_t hdr[3];
	int rc = read_full(fd, hdr, sizeof(hdr));
	if (rc == 0 && (memcmp(hdr, MAGIC, 8) || hdr[1] > TREE_MAX_ENTRIES || hdr[2] > UINT32_MAX))
		rc = -EINVAL;
	if (rc == 0) {
		m->n = m->cap = hdr[1];
		m->pool.len = m->pool.cap = hdr[2];
		m->ent = malloc((m->n ? m->n : 1) * sizeof(*m->ent));
		m->pool.buf = malloc(m->pool.len + 1);
		if (!m->ent || !m->pool.buf)
			rc = -ENOMEM;
	}
	if (rc == 0)
		rc = read_full(fd, m->ent, m->n * sizeof(*m->ent));
	if (rc == 0)
		rc = read_full(fd, m->pool.buf, m->pool.len);
	close(fd);
	if (rc < 0) {
		tree_manifest_free(m);
		return error_set(e, -rc, NULL, "checkpoint: cannot read its manifest");
	}
	m->pool.buf[m->pool.len] = 0;
	return 0;
}

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

void tree_compare(const struct tree_manifest *a, const struct tree_manifest *b, tree_compare_fn fn, void *arg)
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
