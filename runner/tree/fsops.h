/* The file-tree engine's filesystem steps (tree.h): statx with its ABI layout, getdents64
 * iteration, content copies, and opening a directory checked to be the one
 * examined (the extended attributes they keep: xattr.h).
 * Every call is relative to a directory descriptor and never follows a
 * symlink. Functions return 0 (or a count, or an fd) or -errno. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h> /* loff_t (musl) */
#include <sys/types.h>

/* statx(2) with its ABI layout: musl 1.2.3 has no wrapper, and the kernel's
 * <linux/stat.h> clashes with libc's <sys/stat.h>. */
struct kstatx_ts {
	int64_t tv_sec;
	uint32_t tv_nsec;
	int32_t reserved;
};
struct kstatx {
	uint32_t mask, blksize;
	uint64_t attributes;
	uint32_t nlink, uid, gid;
	uint16_t mode, spare0;
	uint64_t ino, size, blocks, attributes_mask;
	struct kstatx_ts atime, btime, ctime, mtime;
	uint32_t rdev_major, rdev_minor, dev_major, dev_minor;
	uint64_t mnt_id;
	uint32_t dio_mem_align, dio_offset_align;
	uint64_t spare3[12];
};

int fs_statx(int dfd, const char *name, int flags, struct kstatx *st);
uint64_t fs_dev(const struct kstatx *st);
uint64_t fs_rdev(const struct kstatx *st);

/* Directory reading (getdents64, heap buffer: walks recurse deep). */
struct fs_iter;
struct fs_iter *fs_iter_new(int fd); /* NULL: out of memory */
int fs_iter_rewind(struct fs_iter *it);
/* 1 with *name set, 0 at the end, -errno. Skips "." and "..". */
int fs_iter_next(struct fs_iter *it, const char **name);
/* The same with the entry's statx (not following a symlink); an entry gone
 * between the listing and the statx is passed over. */
int fs_iter_next_stat(struct fs_iter *it, const char **name, struct kstatx *st);

/* Copy src into dst: from src's position to its end (len UINT64_MAX), or
 * len bytes from *src_off; dst at its position. copy_file_range, else
 * read/write. */
int fs_copy(int src, loff_t *src_off, uint64_t len, int dst, uint64_t *copied);

/* openat(O_NOFOLLOW|O_DIRECTORY), then make sure it is the directory
 * examined (inode want_ino) on the mount (dev, mnt_id; mnt_id 0: st_dev
 * alone). A non-root runner gives a directory of its own it cannot open
 * (chmod 0) u+rwx first. */
int fs_open_dir_checked(int dfd, const char *name, uint64_t want_ino, uint64_t dev,
			uint64_t mnt_id);
