/* The writable roots as they were at start, and their restoration (POST
 * /v1/reset, the `pooled` profile).
 *
 * At start (--allow-reset) every root is walked once: a manifest of every
 * entry (type, mode, owner, mtime, size, symlink target, hard links, and the
 * inode and ctime it had) is kept in memory, and the content of every
 * regular file is appended to a private store, an unnamed file in the
 * state dir (0700, the runner's own, never reachable by tasks; gone with
 * the runner). Restoring walks each root again
 * and makes it equal to the manifest: an entry whose inode and ctime are
 * unchanged is left as it is (a write, chmod, chown, link or unlink changes
 * a file's ctime, and no task can set ctime); anything else is removed and,
 * when the manifest has it, recreated from the store.
 *
 * Safety: every step is a *at() call relative to a directory fd opened with
 * O_NOFOLLOW|O_DIRECTORY and checked (fstat/statx) to be the entry just
 * examined; entries are examined with statx(AT_SYMLINK_NOFOLLOW); a symlink
 * is removed, never followed; an entry on another mount (its mount id or
 * st_dev differs from the root's) is never entered, removed or changed; the
 * state dir and the other roots are left alone wherever they appear. Roots
 * are held open from the start, so renaming a path cannot redirect a walk.
 *
 * Extended attributes (user.*, trusted.* where visible) and POSIX ACLs
 * (system.posix_acl_access/default) of directories and regular files are
 * in the manifest too: a directory gets exactly them back (a tenant's added
 * ones removed), a file replaced by its copy gets them. Not restored:
 * security.* (not a tenant's to set) and sockets.
 * Bounds: SNAP_MAX_ENTRIES entries and max_bytes of file content; beyond
 * them snapshot_take fails (the runner refuses to start). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tree/node.h"

struct error;

#define SNAP_MAX_ROOTS 16
#define SNAP_MAX_ENTRIES 200000u
#define SNAP_MAX_DEPTH 256 /* of the tree at start; a tenant's deeper trees are still removed */

struct snap_entry {
	uint64_t ino;
	int64_t ctime_sec, mtime_sec;
	uint32_t ctime_nsec, mtime_nsec;
	uint64_t size;
	uint64_t data_off; /* regular files: where the content is in the store */
	uint64_t rdev;
	uint32_t parent;                  /* index; SNAP_NONE for a root */
	uint32_t first_child, n_children; /* directories: contiguous, sorted by name */
	uint32_t name_off, target_off;    /* into the pool; target: symlinks */
	uint16_t name_len, target_len;
	uint32_t link_to; /* hard link: the entry with the lowest index sharing the inode */
	uint32_t xattr_off, xattr_len; /* into the pool: the entry's extended attributes
					* and ACLs (see snapshot.c); 0 length = none */
	uint32_t mode, uid, gid;
	uint8_t type; /* enum tree_type */
	uint8_t root;
};

struct snap_root {
	char *path;
	int fd; /* held open from the start */
	uint64_t dev, ino, mnt_id;
	uint32_t entry;
};

struct snapshot {
	struct snap_root roots[SNAP_MAX_ROOTS];
	unsigned n_roots;
	/* In a shared mapping once taken: a restore run in a child process
	 * records there the inode and ctime of what it recreated. */
	struct snap_entry *ent;
	size_t n_ent, cap_ent, map_len;
	struct tree_pool pool;
	int state_fd;   /* the state dir (not owned) */
	int store_fd;   /* one unnamed file in the state dir: every file's content */
	uint64_t bytes; /* file content kept in the store */
	struct tree_inode excl[SNAP_MAX_ROOTS + 1]; /* the state dir and every root */
	unsigned n_excl;
};

struct restore_stats {
	uint64_t removed_files, removed_dirs, removed_links, removed_other, removed_bytes;
	uint64_t restored_files, restored_dirs, restored_links, restored_other, restored_bytes;
	uint64_t attrs_fixed;    /* entries kept whose mode, owner or mtime were put back */
	uint64_t unchanged;      /* entries found as they were */
	uint64_t mounts_skipped; /* entries on another mount, left alone */
	uint64_t not_restorable; /* sockets that were changed or removed */
};

#define SNAP_NONE UINT32_MAX /* no entry: a root's parent */

static inline const char *snap_name(const struct snapshot *s, const struct snap_entry *e)
{
	return s->pool.buf + e->name_off;
}

/* Walk the roots (missing ones are skipped and named in *skipped, a
 * malloc'd colon-separated list or NULL) and fill the store. The state dir
 * may lie inside a root: it is left out. 0, or -1 with e set. */
int snapshot_take(struct snapshot *s, const char *const *roots, unsigned n_roots, int state_dir_fd,
		  uint64_t max_bytes, char **skipped, struct error *e);
/* Make every root equal to the manifest. Runs in a child process of the
 * runner (it may take long); updates the manifest's inodes and ctimes of
 * what it recreated. 0, or -1 with e set (stats hold what was done). */
int snapshot_restore(struct snapshot *s, struct restore_stats *st, struct error *e);
/* Close the roots and the store, free everything. */
void snapshot_free(struct snapshot *s);
/* The descriptors a restore needs (roots, store), for a child that closes
 * every other one: up to max written to fds, the count returned. */
unsigned snapshot_fds(const struct snapshot *s, int *fds, unsigned max);
