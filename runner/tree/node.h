/* The file-tree engine's nodes (tree.h): the entry types, the string pool of paths, link
 * targets and attributes, a directory's names in order, the steps that make a node again,
 * and the one remover.
 * Functions return 0 or -errno unless said otherwise. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct kstatx;

enum tree_type {
	TREE_DIR = 1,
	TREE_REG,
	TREE_LNK,
	TREE_FIFO,
	TREE_CHR,
	TREE_BLK,
	TREE_SOCK, /* not recreatable: removed if changed, never created */
	TREE_KEEP, /* never touched: a mount point, the state dir, another root */
};

enum tree_type tree_type_of(uint32_t mode);
struct timespec tree_ts(int64_t sec, uint32_t nsec);
/* On another mount than the root's (dev, mnt_id; mnt_id 0: st_dev alone). */
bool tree_other_mount(const struct kstatx *st, uint64_t dev, uint64_t mnt_id);
/* Inodes a walk never enters nor removes: the state dir, another root. */
struct tree_inode {
	uint64_t dev, ino;
};
bool tree_inode_in(const struct tree_inode *v, unsigned n, const struct kstatx *st);

/* Strings and blobs of a manifest, each NUL-terminated, found by offset (< 4 GiB). */
struct tree_pool {
	char *buf;
	size_t len, cap;
};
int tree_pool_add(struct tree_pool *p, const void *data, size_t len, uint32_t *off);
/* fd's extended attributes and ACLs (xattr.h) into the pool; *len 0 when none. */
int tree_pool_xattrs(struct tree_pool *p, int fd, uint32_t *off, uint32_t *len);
/* The target of the symlink dfd/name into the pool. */
int tree_pool_link(struct tree_pool *p, int dfd, const char *name, uint32_t *off, uint32_t *len);
void tree_pool_free(struct tree_pool *p);

/* Room in the array *v (elements of size bytes, *cap of them) for n + 1. */
int tree_grow(void *v, size_t *cap, size_t n, size_t size);

/* The names in directory fd (without . and ..), in strcmp order. */
struct tree_names {
	char **v; /* into pool */
	size_t n;
	struct tree_pool pool;
};
int tree_names_read(int fd, struct tree_names *out);
void tree_names_free(struct tree_names *names);

/* A symlink to target, or a FIFO or device node (rdev), as dfd/name (mode 0600 until its
 * attributes are set). */
int tree_make_node(int dfd, const char *name, enum tree_type type, const char *target,
		   uint64_t rdev);
/* Owner, mode (not a symlink's) and times (ts as utimensat's) of dfd/name, not following it;
 * an owner the runner may not set (EPERM) is no error unless strict. */
int tree_attrs_at(int dfd, const char *name, uint32_t uid, uint32_t gid, uint32_t mode,
		  const struct timespec ts[2], bool strict);
/* A directory of the runner's own that a task made read-only: a runner that is not root gives
 * itself u+rwx back (its mode is put back afterwards). */
int tree_own_dir_writable(int fd);

/* Removal of an entry a manifest does not have there: a file, or a directory with everything
 * under it. No symlink is followed; nothing on another mount than (dev, mnt_id) is entered or
 * removed. */
struct tree_rm {
	uint64_t dev, mnt_id;
	int max_depth; /* deeper: -TREE_EDEEP */
	/* The reset's: a mount point stays, and so do the directories holding it (else -EBUSY);
	 * deeper than TREE_HOIST_DEPTH a directory is moved up to hoist_fd (>= 0) under a
	 * new name, to be removed from there, so the descriptors held stay bounded. */
	bool keep_mounts;
	int hoist_fd;
	uint64_t hoisted, hoist_seq;
	const struct tree_inode *skip; /* never removed */
	unsigned n_skip;
	uint64_t files, dirs, links, other, bytes, mounts; /* removed; mount points left */
};
#define TREE_HOIST_DEPTH 64
#define TREE_EDEEP 4201 /* an errno of ours: a tree deeper than a walk goes */
int tree_remove(struct tree_rm *o, int dfd, const char *name, const struct kstatx *st, int depth);
