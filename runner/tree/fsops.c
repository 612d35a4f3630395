/* Shared filesystem steps: see fsops.h. */
#include "tree/fsops.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "core/fileio.h"

#define ITER_BUF 8192

#define KSTATX_BASIC 0x7ffu
#define KSTATX_MNT_ID 0x1000u

int fs_statx(int dfd, const char *name, int flags, struct kstatx *st)
{
	memset(st, 0, sizeof(*st));
	if (syscall(SYS_statx, dfd, name, flags, KSTATX_BASIC | KSTATX_MNT_ID, st) < 0)
		return -errno;
	if (!(st->mask & KSTATX_MNT_ID))
		st->mnt_id = 0; /* before Linux 5.8: st_dev alone decides */
	return 0;
}

uint64_t fs_dev(const struct kstatx *st)
{
	return makedev(st->dev_major, st->dev_minor);
}

uint64_t fs_rdev(const struct kstatx *st)
{
	return makedev(st->rdev_major, st->rdev_minor);
}

/* ---- directory reading (getdents64, heap buffer: deep recursion) ---- */

struct fs_iter {
	int fd;
	long n, off;
	char buf[ITER_BUF];
};

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

struct fs_iter *fs_iter_new(int fd)
{
	struct fs_iter *it = malloc(sizeof(*it));
	if (it) {
		it->fd = fd;
		it->n = it->off = 0;
	}
	return it;
}

int fs_iter_rewind(struct fs_iter *it)
{
	it->n = it->off = 0;
	return lseek(it->fd, 0, SEEK_SET) < 0 ? -errno : 0;
}

/* 1 with *name set, 0 at the end, -errno. Skips "." and "..". */
int fs_iter_next(struct fs_iter *it, const char **name)
{
	for (;;) {
		if (it->off >= it->n) {
			long n = syscall(SYS_getdents64, it->fd, it->buf, sizeof(it->buf));
			if (n < 0)
				return -errno;
			if (n == 0)
				return 0;
			it->n = n;
			it->off = 0;
		}
		struct linux_dirent64 *d = (struct linux_dirent64 *)(it->buf + it->off);
		it->off += d->d_reclen;
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		*name = d->d_name;
		return 1;
	}
}

int fs_iter_next_stat(struct fs_iter *it, const char **name, struct kstatx *st)
{
	int rc;
	while ((rc = fs_iter_next(it, name)) > 0) {
		rc = fs_statx(it->fd, *name, AT_SYMLINK_NOFOLLOW, st);
		if (rc != -ENOENT)
			return rc < 0 ? rc : 1;
	}
	return rc;
}

/* Copy src into dst: from src's position to its end (len UINT64_MAX), or
 * len bytes from *src_off; dst at its position. copy_file_range, else
 * read/write. */
int fs_copy(int src, loff_t *src_off, uint64_t len, int dst, uint64_t *copied)
{
	bool plain = false;
	char *buf = NULL;
	while (len) {
		ssize_t n;
		size_t chunk = len < (1u << 20) ? (size_t)len : (1u << 20);
		if (!plain) {
			n = copy_file_range(src, src_off, dst, NULL, chunk, 0);
			if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
				      errno == EOPNOTSUPP)) {
				plain = true;
				continue;
			}
		} else {
			if (!buf && !(buf = malloc(65536)))
				return -ENOMEM;
			size_t want = chunk < 65536 ? chunk : 65536;
			n = src_off ? pread(src, buf, want, *src_off) : read(src, buf, want);
			if (n > 0 && src_off)
				*src_off += n;
			int wr;
			if (n > 0 && (wr = write_all(dst, buf, (size_t)n)) < 0) {
				free(buf);
				return wr;
			}
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			free(buf);
			return -err;
		}
		if (n == 0)
			break;
		*copied += (uint64_t)n;
		if (len != UINT64_MAX)
			len -= (uint64_t)n;
	}
	free(buf);
	return len && len != UINT64_MAX ? -EIO : 0;
}

/* A directory a tenant took its own rights away from (chmod 0): a root
 * runner opens it anyway (CAP_DAC_OVERRIDE), a non-root runner or a restore
 * acting as the task user is its owner (tasks share its uid) and gives the
 * rights back first, on the very inode examined (O_PATH, no symlink
 * followed). -errno on failure. */
static int open_own_dir(int dfd, const char *name, uint64_t want_ino)
{
	int pfd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0)
		return -errno;
	struct kstatx st;
	int rc = fs_statx(pfd, "", AT_EMPTY_PATH, &st);
	/* Its owner is whom the runner acts as: itself, or the task user (files_enter). */
	if (rc == 0 && (st.ino != want_ino || st.uid != (uid_t)setfsuid((uid_t)-1)))
		rc = -EACCES;
	char path[40];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", pfd);
	if (rc == 0 && chmod(path, (mode_t)((st.mode | 0700) & 07777)) < 0)
		rc = -errno;
	int fd = rc < 0 ? rc : openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && rc == 0)
		fd = -errno;
	close(pfd);
	return fd;
}

/* openat(O_NOFOLLOW|O_DIRECTORY), then make sure it is the directory that
 * was examined, on the root's mount. */
int fs_open_dir_checked(int dfd, const char *name, uint64_t want_ino, uint64_t dev, uint64_t mnt_id)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == EACCES)
		fd = open_own_dir(dfd, name, want_ino);
	else if (fd < 0)
		fd = -errno;
	if (fd < 0)
		return fd;
	struct kstatx st;
	int rc = fs_statx(fd, "", AT_EMPTY_PATH, &st);
	if (rc == 0 &&
	    (st.ino != want_ino || fs_dev(&st) != dev || (mnt_id && st.mnt_id != mnt_id)))
		rc = -ESTALE;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}
