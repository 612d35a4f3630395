/* What the file-tree engine's two manifests (the reset snapshot's, snapshot.h, and
 * checkpoints', tree.h) share: the entry types, the string pool of names, link targets and
 * attributes, a directory's names in order, and the steps that make a node again.
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
	char **v;
	size_t n;
};
int tree_names_read(int fd, struct tree_names *out);
void tree_names_free(struct tree_names *names);

/* A symlink to target, or a FIFO or device node (rdev), as dfd/name (mode 0600 until its
 * attributes are set). */
int tree_make_node(int dfd, const char *name, enum tree_type type, const char *target,
		   uint64_t rdev);
/* A directory of the runner's own that a task made read-only: a runner that is not root gives
 * itself u+rwx back (its mode is put back afterwards). */
int tree_own_dir_writable(int fd);
