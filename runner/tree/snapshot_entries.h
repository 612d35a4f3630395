/* The reset snapshot's manifest as both of its sides read it: taking it
 * (snapshot.c) and restoring it (restore.c); see snapshot.h. Included by
 * those two files only. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "tree/fsx.h"
#include "tree/node.h"
#include "tree/snapshot.h"

#define NONE UINT32_MAX

static inline const char *ent_name(const struct snapshot *s, const struct snap_entry *e)
{
	return s->pool.buf + e->name_off;
}

static inline bool is_excluded(const struct snapshot *s, const struct kstatx *st)
{
	uint64_t dev = fsx_dev(st);
	for (unsigned i = 0; i < s->n_excl; i++)
		if (s->excl[i].dev == dev && s->excl[i].ino == st->ino)
			return true;
	return false;
}

static inline bool other_mount(const struct snap_root *root, const struct kstatx *st)
{
	return tree_other_mount(st, root->dev, root->mnt_id);
}

static inline int open_dir_checked(int dfd, const char *name, const struct kstatx *want,
				   const struct snap_root *root)
{
	return fsx_open_dir_checked(dfd, name, want->ino, root->dev, root->mnt_id);
}
