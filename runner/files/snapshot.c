/* Snapshot and restore of the writable roots: see snapshot.h. */
#include "files/snapshot.h"

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
#include "files/fsx.h"

#define NONE UINT32_MAX
#define HOIST_DEPTH 64     /* a deeper tree being removed is moved up to its root */
#define MAX_RM_DEPTH 4096  /* when it cannot be moved */
#define MAX_PASSES 1000000 /* re-reads of one directory (hoisted trees come back) */

/* The shared steps (fsx.c) under this file's names. */
#define kdev fsx_dev
#define iter fsx_iter
#define iter_new fsx_iter_new
#define iter_rewind fsx_iter_rewind
#define iter_next fsx_iter_next
#define copy_fd fsx_copy

/* ---- manifest ---- */

static enum snap_type type_of(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR:
		return SNAP_DIR;
	case S_IFREG:
		return SNAP_REG;
	case S_IFLNK:
		return SNAP_LNK;
	case S_IFIFO:
		return SNAP_FIFO;
	case S_IFCHR:
		return SNAP_CHR;
	case S_IFBLK:
		return SNAP_BLK;
	default:
		return SNAP_SOCK;
	}
}

static const char *ent_name(const struct snapshot *s, const struct snap_entry *e)
{
	return s->pool + e->name_off;
}

static int pool_add(struct snapshot *s, const char *str, size_t len, uint32_t *off)
{
	if (s->pool_len + len + 1 > s->pool_cap) {
		size_t cap = s->pool_cap ? s->pool_cap * 2 : 65536;
		while (cap < s->pool_len + len + 1)
			cap *= 2;
		if (cap > UINT32_MAX)
			return -ENOMEM;
		char *p = realloc(s->pool, cap);
		if (!p)
			return -ENOMEM;
		s->pool = p;
		s->pool_cap = cap;
	}
	memcpy(s->pool + s->pool_len, str, len);
	s->pool[s->pool_len + len] = 0;
	*off = (uint32_t)s->pool_len;
	s->pool_len += len + 1;
	return 0;
}

static int ent_add(struct snapshot *s, uint32_t *idx)
{
	if (s->n_ent >= SNAP_MAX_ENTRIES)
		return -EFBIG;
	if (s->n_ent == s->cap_ent) {
		size_t cap = s->cap_ent ? s->cap_ent * 2 : 1024;
		struct snap_entry *n = realloc(s->ent, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->ent = n;
		s->cap_ent = cap;
	}
	*idx = (uint32_t)s->n_ent++;
	memset(&s->ent[*idx], 0, sizeof(s->ent[0]));
	s->ent[*idx].parent = NONE;
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

static bool is_excluded(const struct snapshot *s, const struct kstatx *st)
{
	uint64_t dev = kdev(st);
	for (unsigned i = 0; i < s->n_excl; i++)
		if (s->excl[i].dev == dev && s->excl[i].ino == st->ino)
			return true;
	return false;
}

static bool other_mount(const struct snap_root *root, const struct kstatx *st)
{
	return kdev(st) != root->dev || (root->mnt_id && st->mnt_id != root->mnt_id);
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
	while (m->idx[i] != NONE && m->ino[i] != ino)
		i = (i + 1) & (m->cap - 1);
	*found = m->idx[i] != NONE;
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
			if (m->idx[i] != NONE)
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

/* ---- extended attributes and ACLs (fsx.c): one blob per entry, in the
 * pool. Only the namespaces a tenant could set or that carry meaning for
 * the next one: user.*, trusted.* (visible to a root runner only with
 * CAP_SYS_ADMIN, and settable by nobody less), POSIX ACLs. */

static int take_xattrs(struct snapshot *s, int fd, uint32_t idx)
{
	char *blob;
	size_t len;
	int rc = fsx_xattrs_take(fd, &blob, &len);
	if (rc == 0 && len) {
		uint32_t off;
		rc = pool_add(s, blob, len, &off);
		if (rc == 0) {
			s->ent[idx].xattr_off = off;
			s->ent[idx].xattr_len = (uint32_t)len;
		}
	}
	free(blob);
	return rc;
}

static int restore_xattrs(int fd, const struct snapshot *s, const struct snap_entry *e,
			  bool tolerant)
{
	return fsx_xattrs_restore(fd, s->pool + e->xattr_off, e->xattr_len, tolerant);
}

static int open_dir_checked(int dfd, const char *name, const struct kstatx *want,
			    const struct snap_root *root)
{
	return fsx_open_dir_checked(dfd, name, want->ino, root->dev, root->mnt_id);
}

struct take_ctx {
	struct snapshot *s;
	struct snap_root *root;
	uint64_t max_bytes;
	uint64_t total_bytes; /* content seen, also past the limit (for the message) */
	size_t total_entries;
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
	int rc = copy_fd(src, NULL, UINT64_MAX, s->store_fd, &copied);
	close(src);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot copy '%s' under %s into the snapshot",
				 name, c->root->path);
	s->ent[idx].size = copied;
	s->bytes += copied;
	return 0;
}

struct name_ref {
	const char *name;
	uint32_t off;
	uint16_t len;
};

static int cmp_name_ref(const void *a, const void *b)
{
	return strcmp(((const struct name_ref *)a)->name, ((const struct name_ref *)b)->name);
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
	struct iter *it = iter_new(dfd);
	if (!it)
		return error_set(c->e, ENOMEM, NULL, "reset snapshot");
	struct name_ref *refs = NULL;
	size_t n = 0, cap = 0;
	const char *name;
	int rc;
	while ((rc = iter_next(it, &name)) > 0) {
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			struct name_ref *nr = realloc(refs, cap * sizeof(*nr));
			if (!nr) {
				rc = -ENOMEM;
				break;
			}
			refs = nr;
		}
		size_t len = strlen(name);
		if ((rc = pool_add(s, name, len, &refs[n].off)) < 0)
			break;
		refs[n].len = (uint16_t)len;
		n++;
	}
	free(it);
	if (rc < 0) {
		free(refs);
		return error_set(c->e, -rc, NULL, "cannot list a directory under '%s'",
				 c->root->path);
	}
	for (size_t i = 0; i < n; i++)
		refs[i].name = s->pool + refs[i].off;
	if (n)
		qsort(refs, n, sizeof(*refs), cmp_name_ref);
	uint32_t first = (uint32_t)s->n_ent;
	for (size_t i = 0; i < n; i++) {
		uint32_t idx;
		if ((rc = ent_add(s, &idx)) < 0) {
			free(refs);
			if (rc == -EFBIG)
				return error_set(c->e, 0, NULL,
						 "the writable roots hold more than %u "
						 "entries, the most --allow-reset keeps",
						 SNAP_MAX_ENTRIES);
			return error_set(c->e, -rc, NULL, "reset snapshot");
		}
		struct snap_entry *e = &s->ent[idx];
		e->parent = di;
		e->name_off = refs[i].off;
		e->name_len = refs[i].len;
		e->root = (uint8_t)(c->root - s->roots);
	}
	free(refs);
	s->ent[di].first_child = first;
	s->ent[di].n_children = (uint32_t)n;

	for (uint32_t idx = first; idx < first + n; idx++) {
		struct snap_entry *e = &s->ent[idx];
		name = ent_name(s, e);
		struct kstatx st;
		if ((rc = fsx_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st)) < 0)
			return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
					 c->root->path);
		ent_fill(e, &st);
		if (other_mount(c->root, &st) || is_excluded(s, &st)) {
			e->type = SNAP_KEEP;
			continue;
		}
		e->type = (uint8_t)type_of(st.mode);
		if (e->type == SNAP_LNK) {
			char target[PATH_MAX];
			ssize_t tl = readlinkat(dfd, name, target, sizeof(target));
			if (tl < 0 || (size_t)tl >= sizeof(target))
				return error_set(c->e, tl < 0 ? errno : ENAMETOOLONG, NULL,
						 "cannot read the symlink '%s' under %s", name,
						 c->root->path);
			uint32_t off;
			if ((rc = pool_add(s, target, (size_t)tl, &off)) < 0)
				return error_set(c->e, -rc, NULL, "reset snapshot");
			e = &s->ent[idx];
			e->target_off = off;
			e->target_len = (uint16_t)tl;
		} else if (e->type == SNAP_REG) {
			if (st.nlink > 1) {
				uint32_t first_idx;
				rc = linkmap_get_or_put(&c->links, st.ino, idx, &first_idx);
				if (rc < 0)
					return error_set(c->e, -rc, NULL, "reset snapshot");
				e->link_to = first_idx;
				if (first_idx != idx)
					continue; /* the content is the first one's */
			}
			c->total_bytes += st.size;
			if (c->total_bytes > c->max_bytes)
				c->over = true;
			if (!c->over && take_file(c, dfd, name, idx, &st) < 0)
				return -1;
		}
	}
	for (uint32_t idx = first; idx < first + n; idx++) {
		if (s->ent[idx].type != SNAP_DIR)
			continue;
		struct kstatx st = {.ino = s->ent[idx].ino};
		st.dev_major = major(c->root->dev);
		st.dev_minor = minor(c->root->dev);
		int cfd = open_dir_checked(dfd, ent_name(s, &s->ent[idx]), &st, c->root);
		if (cfd < 0)
			return error_set(c->e, -cfd, NULL, "cannot open '%s' under %s",
					 ent_name(s, &s->ent[idx]), c->root->path);
		if ((rc = take_xattrs(s, cfd, idx)) < 0) {
			close(cfd);
			return error_set(c->e, -rc, NULL,
					 "cannot read the attributes of '%s' under %s",
					 ent_name(s, &s->ent[idx]), c->root->path);
		}
		rc = take_dir(c, cfd, idx, depth + 1);
		close(cfd);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* The store: one unnamed file in the state dir (gone with the runner). */
static int store_open(struct snapshot *s, struct error *e)
{
	/* No state dir (non-root mode, core/statedir.h): memory only. Never a
	 * file a task could open by name. */
	int fd = statedir_tmpfile(s->state_fd, "forceai-reset-store");
	if (fd < 0)
		return error_set(e, -fd, NULL, "cannot create the reset snapshot store");
	s->store_fd = fd;
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
	int rc = state_dir_fd >= 0 ? fsx_statx(state_dir_fd, "", AT_EMPTY_PATH, &st) : 0;
	if (rc < 0)
		return error_set(e, -rc, NULL, "cannot examine the state dir");
	if (state_dir_fd >= 0) {
		s->excl[s->n_excl].dev = kdev(&st);
		s->excl[s->n_excl++].ino = st.ino;
	}

	size_t skipped_len = 0;
	for (unsigned i = 0; i < n_roots; i++) {
		if (s->n_roots == SNAP_MAX_ROOTS)
			return error_set(e, 0, NULL, "more than %d writable roots", SNAP_MAX_ROOTS);
		if (roots[i][0] != '/')
			return error_set(e, 0, NULL, "writable root '%s' is not an absolute path",
					 roots[i]);
		int fd = open(roots[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) {
			size_t l = strlen(roots[i]);
			char *ns = realloc(*skipped, skipped_len + l + 2);
			if (!ns)
				return error_set(e, ENOMEM, NULL, "reset snapshot");
			if (skipped_len)
				ns[skipped_len++] = ':';
			memcpy(ns + skipped_len, roots[i], l + 1);
			skipped_len += l;
			*skipped = ns;
			continue;
		}
		if (fd < 0)
			return error_set(e, errno, NULL, "cannot open writable root '%s'",
					 roots[i]);
		struct snap_root *root = &s->roots[s->n_roots];
		root->fd = fd;
		if ((rc = fsx_statx(fd, "", AT_EMPTY_PATH, &st)) < 0)
			return error_set(e, -rc, NULL, "cannot examine '%s'", roots[i]);
		bool dup = false;
		for (unsigned j = 0; j < s->n_roots; j++)
			if (s->roots[j].dev == kdev(&st) && s->roots[j].ino == st.ino)
				dup = true;
		if (dup) { /* the same directory named twice */
			close(fd);
			root->fd = -1;
			continue;
		}
		if (!(root->path = strdup(roots[i])))
			return error_set(e, ENOMEM, NULL, "reset snapshot");
		root->dev = kdev(&st);
		root->ino = st.ino;
		root->mnt_id = st.mnt_id;
		s->excl[s->n_excl].dev = root->dev;
		s->excl[s->n_excl++].ino = root->ino;
		s->n_roots++;
	}
	if (store_open(s, e) < 0)
		return -1;

	struct take_ctx c = {.s = s, .max_bytes = max_bytes, .e = e};
	for (unsigned i = 0; i < s->n_roots; i++) {
		struct snap_root *root = &s->roots[i];
		c.root = root;
		uint32_t idx;
		if ((rc = ent_add(s, &idx)) < 0)
			return error_set(e, -rc, NULL, "reset snapshot");
		if ((rc = fsx_statx(root->fd, "", AT_EMPTY_PATH, &st)) < 0)
			return error_set(e, -rc, NULL, "cannot examine '%s'", root->path);
		ent_fill(&s->ent[idx], &st);
		s->ent[idx].type = SNAP_DIR;
		s->ent[idx].root = (uint8_t)i;
		root->entry = idx;
		if ((rc = take_xattrs(s, root->fd, idx)) < 0)
			return error_set(e, -rc, NULL, "cannot read the attributes of '%s'",
					 root->path);
		/* A root inside another one is excluded from that one's walk
		 * (excl holds every root) and walked as itself. */
		rc = take_dir(&c, root->fd, idx, 0);
		free(c.links.ino);
		free(c.links.idx);
		c.links = (struct linkmap){0};
		if (rc < 0)
			return -1;
	}
	if (c.over)
		return error_set(e, 0, NULL,
				 "the writable roots hold %llu bytes of files, more than "
				 "--reset-snapshot-max (%llu) that --allow-reset may keep",
				 (unsigned long long)c.total_bytes, (unsigned long long)max_bytes);
	/* The manifest moves to a shared mapping: a restore in a child process
	 * writes the inodes it recreated there. */
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
	free(s->pool);
	s->pool = NULL;
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
		while ((rc = iter_next(it, &name)) > 0) {
			struct kstatx st;
			rc = fsx_statx(fd, name, AT_SYMLINK_NOFOLLOW, &st);
			if (rc == -ENOENT)
				continue;
			if (rc < 0)
				break;
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
	rc = fsx_statx(fd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
				 c->root->path);
	e->ino = st.ino;
	e->ctime_sec = st.ctime.tv_sec;
	e->ctime_nsec = st.ctime.tv_nsec;
	return 0;
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
	struct kstatx st;
	int rc = fsx_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
	if (rc < 0)
		return error_set(c->e, -rc, NULL, "cannot examine '%s' under %s", name,
				 c->root->path);
	e->ino = st.ino;
	e->ctime_sec = st.ctime.tv_sec;
	e->ctime_nsec = st.ctime.tv_nsec;
	return 0;
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
		if (symlinkat(target, dfd, name) < 0)
			return error_set(c->e, errno, NULL, "cannot create '%s' under %s", name,
					 c->root->path);
		if (set_attrs_at(c, dfd, name, e) < 0)
			return -1;
		c->st->restored_links++;
		return 0;
	}
	case SNAP_FIFO:
	case SNAP_CHR:
	case SNAP_BLK: {
		mode_t t = e->type == SNAP_FIFO ? S_IFIFO : e->type == SNAP_CHR ? S_IFCHR : S_IFBLK;
		if (mknodat(dfd, name, t | 0600, (dev_t)e->rdev) < 0)
			return error_set(c->e, errno, NULL, "cannot create '%s' under %s", name,
					 c->root->path);
		if (set_attrs_at(c, dfd, name, e) < 0)
			return -1;
		c->st->restored_other++;
		return 0;
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
		while ((rc = iter_next(it, &name)) > 0) {
			struct kstatx st;
			rc = fsx_statx(dfd, name, AT_SYMLINK_NOFOLLOW, &st);
			if (rc == -ENOENT)
				continue;
			if (rc < 0)
				break;
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
