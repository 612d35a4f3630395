/* What changed under the checkpointed trees since the last checkpoint (issue 48; design text in
 * docs/design/checkpoints.md, "Change tracking"): an inotify watch on every directory a checkpoint
 * walked, read by the runner's loop, so the next checkpoint lists again only the directories
 * something happened in and takes the rest from the previous manifest.
 *
 * Kept in the runner (the parent): the watches (wd -> directory path) and per directory what
 * happened since the base (the last checkpoint taken): an entry changed (DIRTY: listed again,
 * its entries examined), the directory itself changed (FULL: its whole subtree walked), names
 * open (IN_OPEN without its close: a write through a shared mapping makes no event until the
 * last reference goes, so such a file is read again at every checkpoint until it is closed).
 * A worker forked from the runner reads the same state (its copy) while it walks, and watches
 * the directories it walks that have no watch yet; it reports them back (adopt).
 *
 * Never a missed change: whatever the tracker cannot vouch for is walked. An overflow of the
 * queue, a hard link made (a name created with more than one link), a watch refused (limit),
 * a file system whose changes may bypass the inode's watches (network, FUSE): the base is
 * dropped (valid false) or the directory has no watch, and the walk falls back to a scan. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tree_changes;

/* A tracker with an inotify instance, at most max_watches watches (0: the kernel's limit
 * only). NULL with errno set. */
struct tree_changes *tree_changes_new(unsigned max_watches);
void tree_changes_free(struct tree_changes *t);
int tree_changes_fd(const struct tree_changes *t);

/* Read every queued event (non-blocking): the loop's callback, and before a worker forks. */
void tree_changes_read(struct tree_changes *t);

/* After a checkpoint's worker forked (it has the state as it was): from now on, what happens
 * is relative to that checkpoint (id), once tree_changes_taken(t, id, true) says it was taken.
 * Names still open stay dirty. */
void tree_changes_mark(struct tree_changes *t, const char *id);
/* The checkpoint id ended: taken (it is the base), or not (no base: the next one walks all). */
void tree_changes_taken(struct tree_changes *t, const char *id, bool ok);
/* Forget the base (reset, the store dropped). */
void tree_changes_invalidate(struct tree_changes *t);
/* A watch a worker added (wd on path): kept, and what it saw since applied. */
void tree_changes_adopt(struct tree_changes *t, int wd, const char *path);

/* ---- in the worker (on its copy) ---- */

/* May the walk trust the tracker against the manifest of checkpoint prev_id? */
bool tree_changes_valid_for(const struct tree_changes *t, const char *prev_id);
enum changes_dir_state {
	CHANGES_DIR_WALK = 0, /* unknown, or the directory itself changed: walk its whole subtree */
	CHANGES_DIR_LIST,     /* something in it changed: list it, examine each entry */
	CHANGES_DIR_CLEAN,    /* nothing in it changed: its entries are the previous manifest's */
};
enum changes_dir_state tree_changes_dir(const struct tree_changes *t, const char *path);
/* name in the directory dir_path is open (read it again whatever its ctime says). */
bool tree_changes_open(const struct tree_changes *t, const char *dir_path, const char *name);
/* Watch the directory fd (path) if it has no watch yet: 0, or -errno (-ENOSPC: the limit). */
int tree_changes_watch(struct tree_changes *t, int fd, const char *path);
/* The watches this worker added: wd and path of the i-th, false past the last. */
bool tree_changes_added(const struct tree_changes *t, size_t i, int *wd, const char **path);

/* ---- a manifest's entries taken from the previous one (reuse.c) ---- */
struct tree_manifest;
/* end[i]: the index past entry i's subtree in m (i + 1 for all but a directory). NULL: no
 * memory. Freed by the caller. */
size_t *tree_subtree_ends(const struct tree_manifest *m);
/* Entry j of prev appended to m (at most max entries) with its strings, under parent; *idx its
 * index. 0 or -errno (-EFBIG: max). */
int tree_copy_ent(struct tree_manifest *m, unsigned max, const struct tree_manifest *prev, size_t j,
		  uint32_t parent, uint32_t *idx);
/* a and b hold the same entries, byte for byte (an unchanged tree: its manifest file is the
 * previous one's, linked, not written again). */
bool tree_manifest_same(const struct tree_manifest *a, const struct tree_manifest *b);
struct tree_root;
struct tree_capture_stats;
/* Nothing under roots changed since prev (every directory of prev watched and quiet, no file
 * with another name, the roots' own attributes as they were): ts as a take would count. */
bool tree_unchanged(const struct tree_changes *t, const struct tree_root *roots, unsigned n_roots,
		    const struct tree_manifest *prev, struct tree_capture_stats *ts);
/* Room in m for as many entries and strings as prev has (and some). 0 or -ENOMEM. */
int tree_reserve(struct tree_manifest *m, const struct tree_manifest *prev);
