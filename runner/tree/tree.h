/* The file-tree engine's checkpoints (POST /v1/checkpoints, docs/design.md §10.2): the
 * manifest, taken and compared (manifest.c), the content store (store.c) and the restore
 * (checkpoint_restore.c), run in a worker process (checkpoint/worker.c). The entry types, the
 * string pool and the remover are the reset snapshot's too (node.h).
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
 * examined (fsx.c): no symlink is followed, no other mount entered, the
 * state dir never read or written. Restore writes each file under a
 * temporary name in its own directory and renames it over the old one. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tree/node.h"

struct error;
struct files_ident;

#define CK_NONE UINT32_MAX
#define CK_MAX_ENTRIES 500000u
#define CK_MAX_DEPTH 200
#define CK_MAX_ROOTS 16
#define CK_EFULL 4200       /* the store's bound would be passed */
#define CK_EDEEP TREE_EDEEP /* a tree deeper than CK_MAX_DEPTH */

enum {
	CK_HAS_SHA = 1,    /* content in the store */
	CK_UNREADABLE = 2, /* a regular file that could not be read: not in the store */
	/* What the task user could do when the entry was examined (the kernel's check as that
	 * user, the whole path: every directory above searchable and listable by it). */
	CK_TASK_SEEN = 4, /* it could reach the entry */
	CK_TASK_OK = 8,   /* and read it (a file), list and enter it (a directory) */
};

struct ck_ent {
	uint64_t ino, dev, size, rdev;
	int64_t ctime_sec, mtime_sec, atime_sec;
	uint32_t ctime_nsec, mtime_nsec, atime_nsec;
	uint32_t mode, uid, gid, nlink;
	uint32_t path_off, path_len, target_off, target_len, xattr_off, xattr_len;
	uint32_t parent;     /* CK_NONE for a root */
	uint8_t type, flags; /* enum tree_type; CK_HAS_SHA... */
	uint8_t pad[6];
	unsigned char sha[32];
};

struct ck_manifest {
	struct ck_ent *ent;
	size_t n, cap;
	struct tree_pool pool;
};

/* A path of a checkpoint, opened by the runner before the worker starts
 * (and checked to lie in the writable roots): its parent directory and its
 * name there; fd is the directory itself when it is one (else -1). */
struct ck_root {
	const char *path;
	const char *name;
	int pfd, fd;
	uint64_t dev, mnt_id;
	bool replaceable; /* its parent is writable too: a restore may replace or recreate it */
	bool task_reach;  /* the task user could resolve its parent and search it */
};

struct ck_store {
	int dir_fd, obj_fd;   /* <state>/checkpoints, and its objects/ */
	uint64_t used, max;   /* bytes of objects before this operation; the bound */
	uint64_t added;       /* bytes of objects this operation added */
	uint64_t new_objects; /* and how many */
	char (*new_hex)[65];  /* their names, to take them back when the operation fails */
	size_t n_new, cap_new;
	struct tree_inode excl; /* the state dir: never entered */
	char *buf;              /* 1 MiB of copy buffer */
	/* The task user whose rights each entry records (CK_TASK_*; NULL: none recorded); with
	 * as_task a restore works on the tree as that user (files_enter), only the store's
	 * objects being opened as the runner, and leaves what it could not read or enter. */
	const struct files_ident *task;
	bool as_task;
	/* The change tracker (tree/changes.h; NULL: none): with reuse (it vouches for the changes
	 * since prev) what did not change is prev's; with watch the directories walked get watches.
	 */
	struct ck_changes *changes;
	bool reuse, watch;
};

struct ck_take_stats {
	uint64_t files, dirs, links, other, bytes; /* entries, and regular files' bytes */
	uint64_t read_files, read_bytes;           /* read (new or changed since the previous) */
	uint64_t cloned_files;                     /* of those, cloned (FICLONE) */
	uint64_t unreadable;
	uint64_t reused, listed_dirs; /* entries taken from prev unexamined; directories listed */
};

const char *ck_path(const struct ck_manifest *m, const struct ck_ent *e);
/* Paths in tree order: '/' before every other byte. */
int ck_pathcmp(const char *a, const char *b);
void ck_manifest_free(struct ck_manifest *m);
/* Index of path in m, or -1. */
long ck_find(const struct ck_manifest *m, const char *path);

/* Walk roots into out. With store: contents not in prev (or changed since)
 * are read and put in the store (their SHA-256 the name); with hash_only they
 * are hashed only (a diff against the tree as it is now). -1 with e set;
 * CK_EFULL as e->errnum when the store's bound would be passed. */
int ck_take(struct ck_store *store, bool hash_only, const struct ck_root *roots, unsigned n_roots,
	    const struct ck_manifest *prev, struct ck_manifest *out, struct ck_take_stats *ts,
	    struct error *e);

/* The manifest file <name> in the store dir: written under a temporary
 * name then renamed; read back. */
int ck_save(int dir_fd, const char *name, const struct ck_manifest *m, struct error *e);
int ck_load(int dir_fd, const char *name, struct ck_manifest *m, struct error *e);

/* Store objects. */
int ck_store_open(struct ck_store *s, int state_fd, struct error *e);
void ck_store_close(struct ck_store *s);
/* Take back the objects this operation added (it failed). */
void ck_store_rollback(struct ck_store *s);
/* Up to max bytes of an object into buf (malloc'd, *len set). 0 or -errno. */
int ck_object_read(const struct ck_store *s, const unsigned char sha[32], size_t max, char **buf,
		   size_t *len);
/* Remove every object no manifest in keep[] names; *bytes = what is left. */
int ck_store_gc(struct ck_store *s, const struct ck_manifest *keep, unsigned n_keep,
		uint64_t *bytes, struct error *e);
void ck_hex(const unsigned char sha[32], char out[65]);

/* Changes between two manifests, in tree order: each calls fn with the
 * entry in a (NULL: added) and in b (NULL: deleted) and what differs. */
enum {
	CK_D_CONTENT = 1,
	CK_D_TYPE = 2,
	CK_D_TARGET = 4,
	CK_D_MODE = 8,
	CK_D_OWNER = 16,
	CK_D_XATTRS = 32,
	CK_D_MTIME = 64,
};
typedef void (*ck_diff_fn)(void *arg, const struct ck_ent *a, const struct ck_ent *b,
			   unsigned what);
void ck_diff(const struct ck_manifest *a, const struct ck_manifest *b, ck_diff_fn fn, void *arg);

/* The current content of path (beneath one of roots: opened one component
 * at a time, no symlink followed), at most max bytes. 0 or -errno. */
int ck_read_current(const struct ck_root *roots, unsigned n_roots, const char *path, size_t max,
		    char **buf, size_t *len);

/* Make the roots exactly m again. note() is told each change made
 * ("removed", "created", "replaced", "attributes") and each failure
 * ("failed", with the reason); the restore goes on after a failure. Returns
 * the number of failures. */
typedef void (*ck_note_fn)(void *arg, const char *action, const char *path, const char *detail);
unsigned ck_restore(struct ck_store *s, const struct ck_manifest *m, const struct ck_root *roots,
		    unsigned n_roots, ck_note_fn note, void *arg);

/* The store dir moved aside (renamed "checkpoints.dead.N", at once), and
 * every such one removed (long: in a worker). 0 or -errno / -1 with errno. */
int ck_store_retire(int state_fd);
void ck_purge_dead(int state_fd);

/* Remove the directory name in dfd with everything in it (no symlink
 * followed, no other mount entered). 0 or -errno. */
int ck_remove_tree(int dfd, const char *name);

/* ---- shared by the engine's own files (manifest.c, store.c, checkpoint_restore.c) ---- */

#define CK_BUF_BYTES (1u << 20) /* a copy or hashing buffer */

/* The SHA-256 of what is left of src (*n: its bytes) read through buf (CK_BUF_BYTES). */
int ck_hash_fd(char *buf, int src, unsigned char sha[32], uint64_t *n);
/* Up to max bytes of fd (closed here) into a new NUL-terminated buffer; a read error ends it
 * with what was read. */
int ck_slurp(int fd, size_t max, char **buf, size_t *len);
/* The directory holding path (opened one component at a time from its root,
 * O_NOFOLLOW|O_DIRECTORY, never leaving the root's mount) and its last component in *base.
 * An fd or -errno. */
int ck_open_parent_of(const struct ck_root *roots, unsigned n_roots, const char *path,
		      const char **base, const struct ck_root **root);
/* The content of src into the store (*stored: its bytes; *cloned: by FICLONE), its SHA-256 in
 * sha. 0, -CK_EFULL past the store's bound, or -errno. */
int ck_store_put(struct ck_store *s, int src, uint64_t size, unsigned char sha[32],
		 uint64_t *stored, bool *cloned);
