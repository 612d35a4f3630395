/* The snapshot of the writable roots, taken at start: see snapshot.h
 * (its restoration is restore.c). */
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

/* ---- manifest ---- */

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
				 "--reset-snapshot-max (%llu) that --allow-reset may keep: raise "
				 "--reset-snapshot-max or shrink the roots (--landlock-roots, or "
				 "what the image puts in them)",
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
