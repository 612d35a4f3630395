/* A checkpoint's entries taken from the previous manifest where the change tracker
 * (changes.h) vouches that nothing changed: copied with their strings, no system call. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tree/changes.h"
#include "tree/tree.h"

size_t *ck_subtree_ends(const struct ck_manifest *m)
{
	size_t *end = malloc((m->n ? m->n : 1) * sizeof(*end));
	size_t *stack = malloc((CK_MAX_DEPTH + 2) * sizeof(*stack));
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
		if (m->ent[i].type == TREE_DIR && top < CK_MAX_DEPTH + 2)
			stack[top++] = i;
	}
	while (top)
		end[stack[--top]] = m->n;
	free(stack);
	return end;
}

static int copy_str(struct ck_manifest *m, const struct ck_manifest *prev, uint32_t off,
		    uint32_t len, uint32_t *out)
{
	if (!len) {
		*out = 0;
		return 0;
	}
	return tree_pool_add(&m->pool, prev->pool.buf + off, len, out);
}

int ck_copy_ent(struct ck_manifest *m, const struct ck_manifest *prev, size_t j, uint32_t parent,
		uint32_t *idx)
{
	if (m->n >= CK_MAX_ENTRIES)
		return -EFBIG;
	if (tree_grow(&m->ent, &m->cap, m->n, sizeof(*m->ent)) < 0)
		return -ENOMEM;
	struct ck_ent e = prev->ent[j];
	if (copy_str(m, prev, e.path_off, e.path_len, &e.path_off) < 0 ||
	    copy_str(m, prev, e.target_off, e.target_len, &e.target_off) < 0 ||
	    copy_str(m, prev, e.xattr_off, e.xattr_len, &e.xattr_off) < 0)
		return -ENOMEM;
	e.parent = parent;
	*idx = (uint32_t)m->n;
	m->ent[m->n++] = e;
	return 0;
}
