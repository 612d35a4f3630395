/* The runner's file I/O that a task cannot trip up: writes that finish,
 * and reads, as root, of files a task may have swapped. */
#pragma once
#include <stddef.h>
#include <sys/types.h>

/* Writes all n bytes (short writes continued, EINTR retried): 0, or
 * -errno. Async-signal-safe: a forked worker may use it. pwrite_all the
 * same at offset off. */
int write_all(int fd, const void *p, size_t n);
int pwrite_all(int fd, const void *p, size_t n, off_t off);

/* ---- files a task may have swapped ----
 * The runner reads some files as root from places a task can write (an npm
 * prefix on PATH, a home directory, an operator's path under a writable
 * root). Opened by name, such a path may have become a FIFO (open() waits
 * for a writer: PID 1 stuck for good), a terminal (PID 1 would take it as
 * its controlling tty), a device, a symlink or a huge file between any
 * check and the open. These open it O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC
 * (a FIFO then opens at once, with no writer), check the descriptor with
 * fstat and keep only a regular file of at most max bytes (O_NONBLOCK is
 * then cleared: it means nothing for one). See
 * docs/design/security.md#opening-paths-a-task-can-reach. */
struct stat;
enum {
	/* Refuse a symlink in the last component (-ELOOP). */
	RF_NOFOLLOW = 1,
	/* Refuse a symlink in any component (openat2 RESOLVE_NO_SYMLINKS; where
	 * openat2 is missing, the last component only, as RF_NOFOLLOW). For a
	 * path already resolved with realpath(): a link there is a swap. */
	RF_NO_SYMLINKS = 2,
};
/* The descriptor (st filled when not NULL), or -errno: -ELOOP a symlink,
 * -EFTYPE_NOT_REGULAR not a regular file (st then says what it is), -EFBIG
 * over max, or the open's own error. */
#define EFTYPE_NOT_REGULAR 4200
int open_regular(int dirfd, const char *path, int rf_flags, size_t max, struct stat *st);
/* The whole file, NUL-terminated (malloc'd), by open_regular's rules (st
 * as there); a file that grows past max while read is -EFBIG too. 0 or
 * -errno. */
int read_regular(int dirfd, const char *path, int rf_flags, size_t max, char **data, size_t *len,
		 struct stat *st);
/* Text for open_regular's and read_regular's errors ("a FIFO, not a
 * regular file"); st (may be NULL) names the type. */
const char *open_regular_strerror(int rc, const struct stat *st);
