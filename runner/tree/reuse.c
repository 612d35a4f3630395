/* A checkpoint's entries taken from the previous manifest where the change tracker
 * (changes.h) vouches that nothing changed: copied with their strings, no system call. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "tree/changes.h"
#include "tree/fsops.h"
#include "tree/tree.h"

size_t *tree_subtree_ends(const struct tree_manifest *m)
{
	size_t *end = malloc((m->n ? m->n : 1) * sizeof(*end));
	size_t *stack = malloc((TREE_MAX_DEPTH + 2) * sizeof(*stack));
	if (!end || !stack) {
		free(end);
		free(stack);
		return NULL;
	}
	size_t top = 0;
	for (size_t i = 0; i < m->n; i++) {
		end[i] = i + 1;
		/* Entries are in tree order: a subtree is contiguous, after its directory. */
		while (top && stack[top - 1] != m->ent[i].parent)
			end[stack[--top]] = i;
		if (m->ent[i].type == TREE_DIR && top < TREE_MAX_DEPTH + 2)
			stack[top++] = i;
	}
	while (top)
		end[stack[--top]] = m->n;
	free(stack);
	return end;
}

static int copy_str(struct tree_manifest *m, const struct tree_manifest *prev, uint32_t off,
		    uint32_t len, uint32_t *out)
{
	if (!len) {
		*out = 0;
		return 0;
	}
	return tree_pool_add(&m->pool, prev->pool.buf + off, len, out);
}

int tree_copy_ent(struct tree_manifest *m, unsigned max, const struct tree_manifest *prev, size_t j,
		  uint32_t parent, uint32_t *idx)
{
	if (m->n >= max)
		return -EFBIG;
	if (tree_grow(&m->ent, &m->cap, m->n, sizeof(*m->ent)) < 0)
		return -ENOMEM;
	struct tree_ent e = prev->ent[j];
	if (copy_str(m, prev, e.path_off, e.path_len, &e.path_off) < 0 ||
	    copy_str(m, prev, e.target_off, e.target_len, &e.target_off) < 0 ||
	    copy_str(m, prev, e.xattr_off, e.xattr_len, &e.xattr_off) < 0)
		return -ENOMEM;
	e.parent = parent;
	*idx = (uint32_t)m->n;
	m->ent[m->n++] = e;
	return 0;
}

bool tree_manifest_same(const struct tree_manifest *a, const struct tree_manifest *b)
{
	return a->n == b->n && a->pool.len == b->pool.len &&
	       !memcmp(a->ent, b->ent, a->n * sizeof(*a->ent)) &&
	       !memcmp(a->pool.buf, b->pool.buf, a->pool.len);
}

/* Root i of prev is roots[i] as it is now (its own attributes: a change of its entries moves
 * its ctime, and the tracker saw it). */
static bool root_same(const struct tree_root *r, const struct tree_ent *pe)
{
	struct kstatx st;
	return fs_statx(r->pfd, r->name, AT_SYMLINK_NOFOLLOW, &st) == 0 && pe->ino == st.ino &&
	       pe->dev == fs_dev(&st) && pe->ctime_sec == st.ctime.tv_sec &&
	       pe->ctime_nsec == st.ctime.tv_nsec && pe->mode == st.mode && pe->uid == st.uid &&
	       pe->gid == st.gid && pe->size == st.size && pe->nlink == st.nlink;
}

bool tree_unchanged(const struct tree_changes *t, const struct tree_root *roots, unsigned n_roots,
		    const struct tree_manifest *prev, struct tree_capture_stats *ts)
{
	memset(ts, 0, sizeof(*ts));
	unsigned nr = 0;
	for (size_t i = 0; i < prev->n; i++) {
		const struct tree_ent *e = &prev->ent[i];
		const char *path =
			prev->pool.buf + e->path_off; /* tree_path: no cycle with capture.c */
		if (e->parent == TREE_NONE &&
		    (nr >= n_roots || strcmp(path, roots[nr].path) || !root_same(&roots[nr++], e)))
			return false;
		/* Every directory watched and quiet; no file another name may change. */
		if ((e->type == TREE_DIR && tree_changes_dir(t, path) != CHANGES_DIR_CLEAN) ||
		    (e->type == TREE_REG && (e->nlink > 1 || (e->flags & TREE_UNREADABLE))))
			return false;
		ts->files += e->type == TREE_REG;
		ts->bytes += e->type == TREE_REG ? e->size : 0;
		ts->dirs += e->type == TREE_DIR;
		ts->links += e->type == TREE_LNK;
		ts->other += e->type != TREE_REG && e->type != TREE_DIR && e->type != TREE_LNK &&
			     e->type != TREE_KEEP;
	}
	ts->reused = prev->n;
	return nr == n_roots;
}

int tree_reserve(struct tree_manifest *m, const struct tree_manifest *prev)
{
	size_t n = prev->n + 1024, len = prev->pool.len + 65536;
	struct tree_ent *e = realloc(m->ent, n * sizeof(*e));
	if (!e)
		return -ENOMEM;
	m->ent = e;
	m->cap = n;
	char *b = len <= UINT32_MAX ? realloc(m->pool.buf, len) : NULL;
	if (!b)
		return -ENOMEM;
	m->pool.buf = b;
	m->pool.cap = len;
	return 0;
}
