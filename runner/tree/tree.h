/* The file-tree engine, one for checkpoints (checkpoint/,
 * docs/design/checkpoints.md#checkpoints-undo-for-agents) and the reset (profile/reset.c): capture
 * (capture.c: the walk into a manifest), the content store (store.c), compare (compare.c: two
 * manifests, a manifest's file, the tree as it is now) and restore (restore.c), run in worker
 * processes. The entry types, the string pool and the remover: node.h; the filesystem steps:
 * fsops.h, xattr.h.
 *
 * A checkpoint is a manifest (every entry under its paths, in tree order:
 * type, mode, owner, times, size, symlink target, extended attributes and
 * ACLs, the inode and ctime it had, the SHA-256 of a regular file's
 * content) and, in the store, one object per distinct content, named by its
 * SHA-256 and shared by every checkpoint. A file whose (inode, ctime, size)
 * is the previous checkpoint's is not read again. The store is a directory
 * of the state dir (root's, 0700: no task reaches it).
 *
 * Every step is relative to a directory descriptor checked to be what was
 * examined (fsops.c): no symlink is followed, no other mount entered, the
 * state dir never read or written. Restore writes each file under a
 * temporary name in its own directory and renames it over the old one.
 *
 * The reset's snapshot is such a manifest, taken at start into a store of its own kind (one
 * unnamed file, `pack_fd`: no hashing, gone with the runner) and restored strictly: an
 * entry whose inode or ctime moved is replaced without comparing, and what is made again is
 * recorded in the manifest (kept in shared memory), so that the next reset finds it unchanged. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tree/node.h"

struct error;
struct files_ident;

#define TREE_NONE UINT32_MAX
#define TREE_MAX_ENTRIES 500000u
#define TREE_MAX_DEPTH 200
#define TREE_MAX_ROOTS 16
#define TREE_EFULL 4200 /* the store's bound would be passed */

enum {
	TREE_STORED = 1,     /* content in the store */
	TREE_UNREADABLE = 2, /* a regular file that could not be read: not in the store */
	/* What the task user could do when the entry was examined (the kernel's check as that
	 * user, the whole path: every directory above searchable and listable by it). */
	TREE_TASK_SEEN = 4, /* it could reach the entry */
	TREE_TASK_OK = 8,   /* and read it (a file), list and enter it (a directory) */
};

struct tree_ent {
	uint64_t ino, dev, size, rdev;
	int64_t ctime_sec, mtime_sec, atime_sec;
	uint32_t ctime_nsec, mtime_nsec, atime_nsec;
	uint32_t mode, uid, gid, nlink;
	uint32_t path_off, path_len, target_off, target_len, xattr_off, xattr_len;
	uint32_t parent;     /* TREE_NONE for a root */
	uint8_t type, flags; /* enum tree_type; TREE_STORED... */
	uint8_t pad[6];
	union {
		unsigned char sha[32]; /* an object store's: the content's SHA-256 */
		uint64_t pack_off;     /* a pack store's: where the content is in pack_fd */
	};
};

struct tree_manifest {
	struct tree_ent *ent;
	size_t n, cap;
	struct tree_pool pool;
	size_t map_len; /* ent is a shared mapping (tree_manifest_share) of this length */
	/* Loaded from a full manifest file: ent and pool are in this private mapping of it. */
	void *file_map;
	size_t file_len;
	/* The full manifest file this one was read from, or a delta's base ("" : none). */
	char base[48];
};

/* A path of a checkpoint, opened by the runner before the worker starts
 * (and checked to lie in the writable roots): its parent directory and its
 * name there; fd is the directory itself when it is one (else -1). */
struct tree_root {
	const char *path;
	const char *name;
	int pfd, fd;
	uint64_t dev, mnt_id;
	bool replaceable; /* its parent is writable too: a restore may replace or recreate it */
	bool task_reach;  /* the task user could resolve its parent and search it */
};

struct tree_store {
	int dir_fd, obj_fd; /* <state>/checkpoints, and its objects/ (-1: a pack store) */
	int pack_fd;        /* the reset's: one unnamed file of every content (-1: objects) */
	uint64_t pack_len;
	uint64_t used, max;   /* bytes of objects before this operation; the bound */
	uint64_t added;       /* bytes of objects this operation added */
	uint64_t new_objects; /* and how many */
	char (*new_hex)[65];  /* their names, to take them back when the operation fails */
	size_t n_new, cap_new;
	struct tree_inode excl[TREE_MAX_ROOTS + 1]; /* never entered: the state dir (the reset:
						     * every root too) */
	unsigned n_excl;
	unsigned max_entries; /* 0: TREE_MAX_ENTRIES */
	int max_depth;        /* 0: TREE_MAX_DEPTH */
	/* The reset's restore (see above): strict, and a tenant's trees removed however deep
	 * (moved up to the root, node.h) with the mount points in them left. */
	bool strict;
	char *buf; /* 1 MiB of copy buffer */
	/* The task user whose rights each entry records (TREE_TASK_*; NULL: none recorded); with
	 * as_task a restore works on the tree as that user (files_enter), only the store's
	 * objects being opened as the runner, and leaves what it could not read or enter. */
	const struct files_ident *task;
	bool as_task;
	/* The change tracker (tree/changes.h; NULL: none): with reuse (it vouches for the changes
	 * since prev) what did not change is prev's; with watch the directories walked get watches.
	 */
	struct tree_changes *changes;
	bool reuse, watch;
};

struct tree_capture_stats {
	uint64_t files, dirs, links, other, bytes; /* entries, and regular files' bytes */
	uint64_t read_files, read_bytes;           /* read (new or changed since the previous) */
	uint64_t cloned_files;                     /* of those, cloned (FICLONE) */
	uint64_t unreadable;
	uint64_t reused, listed_dirs; /* entries taken from prev unexamined; directories listed */
};

const char *tree_path(const struct tree_manifest *m, const struct tree_ent *e);
/* Paths in tree order: '/' before every other byte. */
int tree_pathcmp(const char *a, const char *b);
void tree_manifest_free(struct tree_manifest *m);
/* Index of path in m, or -1. */
long tree_find(const struct tree_manifest *m, const char *path);

/* Walk roots into out. With store: contents not in prev (or changed since)
 * are read and put in the store (their SHA-256 the name); with hash_only they
 * are hashed only (a diff against the tree as it is now). -1 with e set;
 * TREE_EFULL as e->errnum when the store's bound would be passed. */
int tree_capture(struct tree_store *store, bool hash_only, const struct tree_root *roots,
		 unsigned n_roots, const struct tree_manifest *prev, struct tree_manifest *out,
		 struct tree_capture_stats *ts, struct error *e);

/* The manifest file <name> in the store dir (manifest.c): written under a temporary name then
 * renamed; read back (a full file mapped, a delta applied to its base). With base (a full
 * manifest file of the store dir that is never changed while a file names it) the file is a
 * delta against it when that is much smaller than m: its entries kept, removed, replaced and
 * added, in tree order, and only the new entries' strings. *bytes: what was written; *delta:
 * as a delta. */
int tree_manifest_save(int dir_fd, const char *name, const struct tree_manifest *m,
		       const char *base, uint64_t *bytes, bool *delta, struct error *e);
int tree_manifest_load(int dir_fd, const char *name, struct tree_manifest *m, struct error *e);

/* Store objects. */
int tree_store_open(struct tree_store *s, int state_fd, struct error *e);
void tree_store_close(struct tree_store *s);
/* Take back the objects this operation added (it failed). */
void tree_store_rollback(struct tree_store *s);
/* Up to max bytes of an object into buf (malloc'd, *len set). 0 or -errno. */
int tree_object_read(const struct tree_store *s, const unsigned char sha[32], size_t max,
		     char **buf, size_t *len);
/* Remove every object no manifest in keep[] names; *bytes = what is left. */
int tree_store_gc(struct tree_store *s, const struct tree_manifest *keep, unsigned n_keep,
		  uint64_t *bytes, struct error *e);
void tree_hex(const unsigned char sha[32], char out[65]);

/* Changes between two manifests, in tree order: each calls fn with the
 * entry in a (NULL: added) and in b (NULL: deleted) and what differs. */
enum {
	TREE_D_CONTENT = 1,
	TREE_D_TYPE = 2,
	TREE_D_TARGET = 4,
	TREE_D_MODE = 8,
	TREE_D_OWNER = 16,
	TREE_D_XATTRS = 32,
	TREE_D_MTIME = 64,
};
typedef void (*tree_compare_fn)(void *arg, const struct tree_ent *a, const struct tree_ent *b,
				unsigned what);
void tree_compare(const struct tree_manifest *a, const struct tree_manifest *b, tree_compare_fn fn,
		  void *arg);

/* The current content of path (beneath one of roots: opened one component
 * at a time, no symlink followed), at most max bytes. 0 or -errno. */
int tree_read_current(const struct tree_root *roots, unsigned n_roots, const char *path, size_t max,
		      char **buf, size_t *len);

/* Make the roots exactly m again. note() is told each change made
 * ("removed", "created", "replaced", "attributes", "linked") and each failure
 * ("failed", with the reason); the restore goes on after a failure. Returns
 * the number of failures; st (may be NULL) gets the counts. With s->strict, m records the
 * inode and ctime of what was made again. */
struct tree_restore_stats {
	uint64_t removed_files, removed_dirs, removed_links, removed_other, removed_bytes;
	uint64_t restored_files, restored_dirs, restored_links, restored_other, restored_bytes;
	uint64_t attrs_fixed;    /* entries kept whose attributes were put back */
	uint64_t unchanged;      /* entries found as they were (strict) */
	uint64_t mounts_skipped; /* entries on another mount, left alone */
	uint64_t not_restorable; /* sockets that were changed or removed (strict) */
};
typedef void (*tree_note_fn)(void *arg, const char *action, const char *path, const char *detail);
unsigned tree_restore(struct tree_store *s, struct tree_manifest *m, const struct tree_root *roots,
		      unsigned n_roots, tree_note_fn note, void *arg,
		      struct tree_restore_stats *st);
/* The manifest's entries moved to a shared mapping: a restore in a child process records
 * there what it made again. 0 or -errno. */
int tree_manifest_share(struct tree_manifest *m);

/* The store dir moved aside (renamed "checkpoints.dead.N", at once), and
 * every such one removed (long: in a worker). 0 or -errno / -1 with errno. */
int tree_store_retire(int state_fd);
void tree_store_purge_dead(int state_fd);

/* Remove the directory name in dfd with everything in it (no symlink
 * followed, no other mount entered). 0 or -errno. */
int tree_remove_all(int dfd, const char *name);

/* ---- shared by the engine's own files (capture.c, compare.c, store.c, restore.c) ---- */

#define TREE_BUF_BYTES (1u << 20) /* a copy or hashing buffer */

/* The SHA-256 of what is left of src (*n: its bytes) read through buf (TREE_BUF_BYTES). */
int tree_hash_fd(char *buf, int src, unsigned char sha[32], uint64_t *n);
/* Up to max bytes of fd (closed here) into a new NUL-terminated buffer; a read error ends it
 * with what was read. */
int tree_slurp(int fd, size_t max, char **buf, size_t *len);
/* The directory holding path (opened one component at a time from its root,
 * O_NOFOLLOW|O_DIRECTORY, never leaving the root's mount) and its last component in *base.
 * An fd or -errno. */
int tree_open_parent_of(const struct tree_root *roots, unsigned n_roots, const char *path,
			const char **base, const struct tree_root **root);
/* The content of src into the store (*stored: its bytes; *cloned: by FICLONE), e's sha or
 * pack_off set. 0, -TREE_EFULL past the store's bound, or -errno. */
int tree_store_put(struct tree_store *s, int src, uint64_t size, struct tree_ent *e,
		   uint64_t *stored, bool *cloned);
/* The stored content of e, opened for reading from *off (len: e->size). An fd (the pack's is
 * not the caller's to close: *owned false) or -errno. */
int tree_store_open_content(const struct tree_store *s, const struct tree_ent *e, uint64_t *off,
			    bool *owned);
