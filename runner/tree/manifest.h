/* The reset snapshot's manifest as both of its sides read it: taking it
 * (snapshot.c) and restoring it (restore.c); see snapshot.h. Included by
 * those two files only. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "tree/fsx.h"
#include "tree/snapshot.h"

#define NONE UINT32_MAX

/* The shared steps (fsx.c) under these files' names. */
#define kdev fsx_dev
#define iter fsx_iter
#define iter_new fsx_iter_new
#define iter_rewind fsx_iter_rewind
#define iter_next fsx_iter_next
#define copy_fd fsx_copy

static inline enum snap_type type_of(uint32_t mode)
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

static inline const char *ent_name(const struct snapshot *s, const struct snap_entry *e)
{
	return s->pool + e->name_off;
}

static inline bool is_excluded(const struct snapshot *s, const struct kstatx *st)
{
	uint64_t dev = kdev(st);
	for (unsigned i = 0; i < s->n_excl; i++)
		if (s->excl[i].dev == dev && s->excl[i].ino == st->ino)
			return true;
	return false;
}

static inline bool other_mount(const struct snap_root *root, const struct kstatx *st)
{
	return kdev(st) != root->dev || (root->mnt_id && st->mnt_id != root->mnt_id);
}

static inline int open_dir_checked(int dfd, const char *name, const struct kstatx *want,
				   const struct snap_root *root)
{
	return fsx_open_dir_checked(dfd, name, want->ino, root->dev, root->mnt_id);
}
