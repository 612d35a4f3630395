/* The snapshot of the writable roots, taken at start: see snapshot.h
 * (its restoration is snapshot_restore.c). */
#include "tree/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "core/error.h"
#include "core/statedir.h"
#include "tree/fsops.h"
#include "tree/node.h"

/* ---- manifest ---- */

static int ent_add(struct snapshot *s, uint32_t *idx)
{
	if (s->n_ent >= SNAP_MAX_ENTRIES)
		return -EFBIG;
	if (tree_grow(&s->ent, &s->cap_ent, s->n_ent, sizeof(*s->ent)) < 0)
		return -ENOMEM;
	*idx = (uint32_t)s->n_ent++;
	memset(&s->ent[*idx], 0, sizeof(s->ent[0]));
	s->ent[*idx].parent = SNAP_NONE;
	s->ent[*idx].link_to = *idx;
	return 0;
}

static void ent_fill(struct snap_entry *e, const struct kstatx *st)
{
	e->ino = st->ino;
	e->ctime_sec = st->ctime.tv_sec;
	e->ctime_nsec = st->ctime.tv_nsec;
	e->mtime_sec = st->mtime.tv_sec;
	e->mtime_nsec = st->mtime.tv_nsec;
	e->size = st->size;
	e->rdev = makedev(st->rdev_major, st->rdev_minor);
	e->mode = st->mode;
	e->uid = st->uid;
	e->gid = st->gid;
}

/* Hard links seen at start: inode -> first entry (open addressing). */
struct linkmap {
	uint64_t *ino;
	uint32_t *idx;
	size_t cap, n;
};

static uint32_t *linkmap_slot(struct linkmap *m, uint64_t ino, bool *found)
{
	size_t i = (size_t)(ino * 0x9E3779B97F4A7C15ull) & (m->cap - 1);
	while (m->idx[i] != SNAP_NONE && m->ino[i] != ino)
		i = (i + 1) & (m->cap - 1);
	*found = m->idx[i] != SNAP_NONE;
	m->ino[i] = ino;
	return &m->idx[i];
}

static int linkmap_get_or_put(struct linkmap *m, uint64_t ino, uint32_t idx, uint32_t *first)
{
	if ((m->n + 1) * 2 > m->cap) {
		struct linkmap g = {.cap = m->cap ? m->cap * 2 : 256};
		g.ino = malloc(g.cap * sizeof(*g.ino));
		g.idx = malloc(g.cap * sizeof(*g.idx));
		if (!g.ino || !g.idx) {
			free(g.ino);
			free(g.idx);
			return -ENOMEM;
		}
		memset(g.idx, 0xff, g.cap * sizeof(*g.idx));
		for (size_t i = 0; i < m->cap; i++) {
			bool f;
			if (m->idx[i] != SNAP_NONE)
				*linkmap_slot(&g, m->ino[i], &f) = m->idx[i];
		}
		g.n = m->n;
		free(m->ino);
		free(m->idx);
		*m = g;
	}
	bool found;
	uint32_t *slot = linkmap_slot(m, ino, &found);
	if (!found) {
		*slot = idx;
		m->n++;
	}
	*first = *slot;
	return 0;
}

/* Extended attributes and ACLs of directories and files (xattr.h), in the pool. */
static int take_xattrs(struct snapshot *s, int fd, uint32_t idx)
{
	uint32_t off, len = 0;
	int rc = tree_pool_xattrs(&s->pool, fd, &off, &len);
	if (rc == 0 && len) {
		s->ent[idx].xattr_off = off;
		s->ent[idx].xattr_len = len;
	}
	return rc;
}

struct take_ctx {
	struct snapshot *s;
	struct snap_root *root;
	uint64_t max_bytes;
	uint64_t total_bytes; /* content seen, also past the limit (for the message) */
	bool over;
	struct linkmap links;
	struct error *e;
};

static int take_file(struct take_ctx *c, int dfd, const char *name, uint32_t idx,
		     const struct kstatx *st)
{
	struct snapshot *s = c->s;
	int src = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (src < 0)
		return error_set(c->e, errno, NULL, "cannot read '%s' under %s", name,
				 c->root->path);
	struct stat fst;
	if (fstat(src, &fst) < 0 || fst.st_ino != st->ino || !S_ISREG(fst.st_mode)) {
		close(src);
		return error_set(c->e, 0, NULL, "'%s' under %s changed while it was copied", name,
				 c->root->path);
	}
	int xr = take_xattrs(s, src, idx);
	if (xr < 0) {
		close(src);
		return error_set(c->e, -xr, NULL, "cannot read the attributes of '%s' under %s",
				 name, c->root->path);
	}
	/* Appended to the one store file; the entry keeps where and how long
	 * (a file that grew meanwhile is cut at its size, as examined). */
	uint64_t copied = 0;
	s->ent[idx].data_off = s->bytes;
	int rc = fs_copy(src, NULL, UINT64_MAX, s->store_fd, &copied);
	close(src);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot copy '%s' under %s into the snapshot",
				 name, c->root->path);
	s->ent[idx].size = copied;
	s->bytes += copied;
	return 0;
}

/* The children of directory di become contiguous entries, sorted by name. */
static int add_children(struct take_ctx *c, int dfd, uint32_t di)
{
	struct snapshot *s = c->s;
	struct tree_names names;
	int rc = tree_names_read(dfd, &names);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot list a directory under '%s'",
				 c->root->path);
	uint32_t first = (uint32_t)s->n_ent;
	for (size_t i = 0; i < names.n && rc == 0; i++) {
		uint32_t idx, off;
		size_t len = strlen(names.v[i]);
		if ((rc = ent_add(s, &idx)) < 0 ||
		    (rc = tree_pool_add(&s->pool, names.v[i], len, &off)) < 0)
			break;
		struct snap_entry *e = &s->ent[idx];
		e->parent = di;
		e->name_off = off;
		e->name_len = (uint16_t)len;
		e->root = (uint8_t)(c->root - s->roots);
	}
	tree_names_free(&names);
	if (rc == -EFBIG)
		return error_set(c->e, 0, NULL,
				 "the writable roots hold more than %u entries, the most "
				 "--allow-reset keeps",
				 SNAP_MAX_ENTRIES);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "reset snapshot");
	s->ent[di].first_child = first;
	s->ent[di].n_children = (uint32_t)(s->n_ent - first);
	return 0;
}

/* One child: its attributes, a symlink's target, a file's content (the first of its
 * hard links). */
static int take_child(struct take_ctx *c, int dfd, uint32_t idx)
{
	struct snapshot *s = c->s;
	char name[NAME_MAX + 1]; /* the pool moves as it grows */
	snprintf(name, sizeof(name), "%s", snap_name(s, &s->ent[idx]));
	struct kstatx st;
	int rc = fs_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
				 c->root->path);
	struct snap_entry *e = &s->ent[idx];
	ent_fill(e, &st);
	if (tree_other_mount(&st, c->root->dev, c->root->mnt_id) ||
	    tree_inode_in(s->excl, s->n_excl, &st)) {
		e->type = TREE_KEEP;
		return 0;
	}
	e->type = (uint8_t)tree_type_of(st.mode);
	if (e->type == TREE_LNK) {
		uint32_t off, len;
		if ((rc = tree_pool_link(&s->pool, dfd, name, &off, &len)) < 0)
			return error_set(c->e, -rc, NULL, "cannot read the symlink '%s' under %s",
					 name, c->root->path);
		s->ent[idx].target_off = off;
		s->ent[idx].target_len = (uint16_t)len;
		return 0;
	}
	if (e->type != TREE_REG)
		return 0;
	if (st.nlink > 1) {
		uint32_t first_idx;
		if ((rc = linkmap_get_or_put(&c->links, st.ino, idx, &first_idx)) < 0)
			return error_set(c->e, -rc, NULL, "reset snapshot");
		e->link_to = first_idx;
		if (first_idx != idx)
			return 0; /* the content is the first one's */
	}
	c->total_bytes += st.size;
	if (c->total_bytes > c->max_bytes)
		c->over = true;
	return c->over ? 0 : take_file(c, dfd, name, idx, &st);
}

static int take_dir(struct take_ctx *c, int dfd, uint32_t di, int depth);

/* The child directory idx: its attributes, then its own children. */
static int take_subdir(struct take_ctx *c, int dfd, uint32_t idx, int depth)
{
	struct snapshot *s = c->s;
	char name[NAME_MAX + 1];
	snprintf(name, sizeof(name), "%s", snap_name(s, &s->ent[idx]));
	int cfd = fs_open_dir_checked(dfd, name, s->ent[idx].ino, c->root->dev, c->root->mnt_id);
	if (cfd < 0)
		return error_set(c->e, -cfd, NULL, "cannot open '%s' under %s", name,
				 c->root->path);
	int rc = take_xattrs(s, cfd, idx);
	if (rc < 0) {
		close(cfd);
		return error_set(c->e, -rc, NULL, "cannot read the attributes of '%s' under %s",
				 name, c->root->path);
	}
	rc = take_dir(c, cfd, idx, depth + 1);
	close(cfd);
	return rc;
}

/* One directory: its children become contiguous entries, sorted by name;
 * then each child directory in turn. */
static int take_dir(struct take_ctx *c, int dfd, uint32_t di, int depth)
{
	struct snapshot *s = c->s;
	if (depth >= SNAP_MAX_DEPTH)
		return error_set(c->e, 0, NULL,
				 "'%s' is more than %d levels deep: too deep for the snapshot",
				 c->root->path, SNAP_MAX_DEPTH);
	if (add_children(c, dfd, di) < 0)
		return -1;
	uint32_t first = s->ent[di].first_child, n = s->ent[di].n_children;
	for (uint32_t idx = first; idx < first + n; idx++)
		if (take_child(c, dfd, idx) < 0)
			return -1;
	for (uint32_t idx = first; idx < first + n; idx++)
		if (s->ent[idx].type == TREE_DIR && take_subdir(c, dfd, idx, depth) < 0)
			return -1;
	return 0;
}

/* ---- roots ---- */

/* A missing root is named in *skipped (colon-separated). */
static int skip_root(char **skipped, size_t *len, const char *path)
{
	size_t l = strlen(path);
	char *ns = realloc(*skipped, *len + l + 2);
	if (!ns)
		return -ENOMEM;
	if (*len)
		ns[(*len)++] = ':';
	memcpy(ns + *len, path, l + 1);
	*len += l;
	*skipped = ns;
	return 0;
}

/* The root path, held open from now on (the same directory named twice: once). */
static int open_root(struct snapshot *s, const char *path, char **skipped, size_t *skipped_len,
		     struct error *e)
{
	if (s->n_roots == SNAP_MAX_ROOTS)
		return error_set(e, 0, NULL, "more than %d writable roots", SNAP_MAX_ROOTS);
	if (path[0] != '/')
		return error_set(e, 0, NULL, "writable root '%s' is not an absolute path", path);
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
		return skip_root(skipped, skipped_len, path) < 0
			       ? error_set(e, ENOMEM, NULL, "reset snapshot")
			       : 0;
	if (fd < 0)
		return error_set(e, errno, NULL, "cannot open writable root '%s'", path);
	struct snap_root *root = &s->roots[s->n_roots];
	root->fd = fd;
	struct kstatx st;
	int rc = fs_statx(fd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return error_set(e, -rc, NULL, "cannot examine '%s'", path);
	for (unsigned j = 0; j < s->n_roots; j++)
		if (s->roots[j].dev == fs_dev(&st) && s->roots[j].ino == st.ino) {
			close(fd);
			root->fd = -1;
			return 0;
		}
	if (!(root->path = strdup(path)))
		return error_set(e, ENOMEM, NULL, "reset snapshot");
	root->dev = fs_dev(&st);
	root->ino = st.ino;
	root->mnt_id = st.mnt_id;
	s->excl[s->n_excl].dev = root->dev;
	s->excl[s->n_excl++].ino = root->ino;
	s->n_roots++;
	return 0;
}

/* The root i: its own entry, then everything under it. */
static int take_root(struct take_ctx *c, unsigned i)
{
	struct snapshot *s = c->s;
	struct snap_root *root = &s->roots[i];
	c->root = root;
	uint32_t idx;
	struct kstatx st;
	int rc = ent_add(s, &idx);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "reset snapshot");
	if ((rc = fs_statx(root->fd, "", AT_EMPTY_PATH, &st)) < 0)
		return error_set(c->e, -rc, NULL, "cannot examine '%s'", root->path);
	ent_fill(&s->ent[idx], &st);
	s->ent[idx].type = TREE_DIR;
	s->ent[idx].root = (uint8_t)i;
	root->entry = idx;
	if ((rc = take_xattrs(s, root->fd, idx)) < 0)
		return error_set(c->e, -rc, NULL, "cannot read the attributes of '%s'", root->path);
	/* A root inside another one is excluded from that one's walk
	 * (excl holds every root) and walked as itself. */
	rc = take_dir(c, root->fd, idx, 0);
	free(c->links.ino);
	free(c->links.idx);
	c->links = (struct linkmap){0};
	return rc;
}

/* The manifest moves to a shared mapping: a restore in a child process
 * writes the inodes it recreated there. */
static int share_manifest(struct snapshot *s, struct error *e)
{
	size_t len = (s->n_ent ? s->n_ent : 1) * sizeof(struct snap_entry);
	len = (len + 4095) & ~(size_t)4095;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return error_set(e, errno, NULL, "reset snapshot: mmap");
	if (s->n_ent)
		memcpy(m, s->ent, s->n_ent * sizeof(struct snap_entry));
	free(s->ent);
	s->ent = m;
	s->map_len = len;
	s->cap_ent = s->n_ent;
	return 0;
}

int snapshot_take(struct snapshot *s, const char *const *roots, unsigned n_roots, int state_dir_fd,
		  uint64_t max_bytes, char **skipped, struct error *e)
{
	memset(s, 0, sizeof(*s));
	s->store_fd = -1;
	s->state_fd = state_dir_fd;
	*skipped = NULL;
	for (unsigned i = 0; i < SNAP_MAX_ROOTS; i++)
		s->roots[i].fd = -1;
	struct kstatx st;
	int rc = state_dir_fd >= 0 ? fs_statx(state_dir_fd, "", AT_EMPTY_PATH, &st) : 0;
	if (rc < 0)
		return error_set(e, -rc, NULL, "cannot examine the state dir");
	if (state_dir_fd >= 0) {
		s->excl[s->n_excl].dev = fs_dev(&st);
		s->excl[s->n_excl++].ino = st.ino;
	}
	size_t skipped_len = 0;
	for (unsigned i = 0; i < n_roots; i++)
		if (open_root(s, roots[i], skipped, &skipped_len, e) < 0)
			return -1;
	/* The store: one unnamed file in the state dir (gone with the runner); no state dir
	 * (non-root mode, core/statedir.h): memory only. Never a file a task could open by
	 * name. */
	if ((s->store_fd = statedir_tmpfile(s->state_fd, "forceai-reset-store")) < 0) {
		rc = s->store_fd;
		s->store_fd = -1;
		return error_set(e, -rc, NULL, "cannot create the reset snapshot store");
	}
	struct take_ctx c = {.s = s, .max_bytes = max_bytes, .e = e};
	for (unsigned i = 0; i < s->n_roots; i++)
		if (take_root(&c, i) < 0)
			return -1;
	if (c.over)
		return error_set(e, 0, NULL,
				 "the writable roots hold %llu bytes of files, more than "
				 "--reset-snapshot-max (%llu) that --allow-reset may keep: raise "
				 "--reset-snapshot-max or shrink the roots (--landlock-roots, or "
				 "what the image puts in them)",
				 (unsigned long long)c.total_bytes, (unsigned long long)max_bytes);
	return share_manifest(s, e);
}

unsigned snapshot_fds(const struct snapshot *s, int *fds, unsigned max)
{
	unsigned n = 0;
	if (s->store_fd >= 0 && n < max)
		fds[n++] = s->store_fd;
	for (unsigned i = 0; i < s->n_roots && n < max; i++)
		fds[n++] = s->roots[i].fd;
	return n;
}

void snapshot_free(struct snapshot *s)
{
	for (unsigned i = 0; i < SNAP_MAX_ROOTS; i++) {
		if (s->roots[i].fd >= 0)
			close(s->roots[i].fd);
		s->roots[i].fd = -1;
		free(s->roots[i].path);
		s->roots[i].path = NULL;
	}
	if (s->store_fd >= 0) {
		close(s->store_fd);
		s->store_fd = -1;
	}
	if (s->map_len)
		munmap(s->ent, s->map_len);
	else
		free(s->ent);
	s->ent = NULL;
	s->n_ent = s->cap_ent = s->map_len = 0;
	tree_pool_free(&s->pool);
}
