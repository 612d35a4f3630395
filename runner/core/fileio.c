/* Files a task may have swapped, read safely; writes that finish (fileio.h). */
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_openat2
#define SYS_openat2 437 /* the same on every architecture */
#endif

int open_regular(int dirfd, const char *path, int rf_flags, size_t max, struct stat *st)
{
	/* O_NONBLOCK: a FIFO opens at once instead of waiting for a writer;
	 * O_NOCTTY: a terminal is never made PID 1's controlling tty. */
	int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
	if (rf_flags & (RF_NOFOLLOW | RF_NO_SYMLINKS))
		flags |= O_NOFOLLOW;
	int fd = -1;
	if (rf_flags & RF_NO_SYMLINKS) {
		struct open_how how = {.flags = (uint64_t)flags,
				       .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		/* No openat2 (Linux < 5.6, valgrind, a runtime's seccomp
		 * profile): below, the last component is still not followed. */
		if (fd < 0 && errno != ENOSYS)
			return -errno;
	}
	if (fd < 0)
		fd = openat(dirfd, path, flags);
	if (fd < 0)
		return -errno;
	struct stat own;
	if (!st)
		st = &own;
	int rc = 0, fl;
	if (fstat(fd, st) < 0)
		rc = -errno;
	else if (!S_ISREG(st->st_mode))
		rc = -EFTYPE_NOT_REGULAR;
	else if ((uint64_t)st->st_size > max)
		rc = -EFBIG;
	else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		rc = -errno;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

int read_regular(int dirfd, const char *path, int rf_flags, size_t max, char **data, size_t *len,
		 struct stat *st)
{
	*data = NULL;
	*len = 0;
	struct stat own;
	if (!st)
		st = &own;
	int fd = open_regular(dirfd, path, rf_flags, max, st);
	if (fd < 0)
		return fd;
	/* Read to the end, one byte past max at most: the size fstat gave may
	 * have grown since (a task appending). */
	size_t cap = (size_t)st->st_size + 1, n = 0;
	char *b = malloc(cap + 1);
	int rc = b ? 0 : -ENOMEM;
	while (rc == 0) {
		if (n == cap) {
			if (n > max) {
				rc = -EFBIG;
				break;
			}
			size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
			char *nb = realloc(b, ncap + 1);
			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			b = nb;
			cap = ncap;
		}
		ssize_t got = read(fd, b + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			rc = -errno;
		else if (got == 0)
			break;
		else
			n += (size_t)got;
	}
	if (rc == 0 && n > max)
		rc = -EFBIG;
	close(fd);
	if (rc < 0) {
		free(b);
		return rc;
	}
	b[n] = 0;
	*data = b;
	*len = n;
	return 0;
}

const char *open_regular_strerror(int rc, const struct stat *st)
{
	switch (-rc) {
	case ELOOP:
		return "a symbolic link, not followed";
	case EFBIG:
		return "larger than the limit";
	case EFTYPE_NOT_REGULAR:
		if (!st)
			return "not a regular file";
		switch (st->st_mode & S_IFMT) {
		case S_IFIFO:
			return "a FIFO, not a regular file";
		case S_IFCHR:
			return "a character device, not a regular file";
		case S_IFBLK:
			return "a block device, not a regular file";
		case S_IFSOCK:
			return "a socket, not a regular file";
		case S_IFDIR:
			return "a directory, not a regular file";
		default:
			return "not a regular file";
		}
	default:
		return strerror(-rc);
	}
}

/* off < 0: write at the file position; else pwrite at off. */
static int write_loop(int fd, const char *c, size_t n, off_t off)
{
	while (n) {
		ssize_t k = off < 0 ? write(fd, c, n) : pwrite(fd, c, n, off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		c += k;
		n -= (size_t)k;
		if (off >= 0)
			off += k;
	}
	return 0;
}

int write_all(int fd, const void *p, size_t n)
{
	return write_loop(fd, p, n, -1);
}

int pwrite_all(int fd, const void *p, size_t n, off_t off)
{
	return off < 0 ? -EINVAL : write_loop(fd, p, n, off);
}
