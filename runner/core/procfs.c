#include "core/procfs.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* No sscanf/snprintf: this runs in the task shim and after fork. */

static const char *parse_num(const char *s, long *out)
{
	bool neg = *s == '-';
	if (neg)
		s++;
	if (*s < '0' || *s > '9')
		return NULL;
	long v = 0;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (v > 0x3fffffffL)
			return NULL;
		v = v * 10 + (*s - '0');
	}
	*out = neg ? -v : v;
	return s;
}

int procfs_parse_stat(const char *line, struct procfs_stat *st)
{
	const char *rp = strrchr(line, ')');
	if (!rp || rp[1] != ' ' || !rp[2] || rp[3] != ' ')
		return -EINVAL;
	st->state = rp[2];
	const char *s = rp + 4;
	long v[3];
	for (int i = 0; i < 3; i++) {
		if (i && *s++ != ' ')
			return -EINVAL;
		if (!(s = parse_num(s, &v[i])))
			return -EINVAL;
	}
	st->ppid = (pid_t)v[0];
	st->pgrp = (pid_t)v[1];
	st->session = (pid_t)v[2];
	return 0;
}

pid_t procfs_parse_pid(const char *name)
{
	long v = 0;
	if (!*name)
		return 0;
	for (; *name; name++) {
		if (*name < '0' || *name > '9' || v > 0x3fffffffL / 10)
			return 0;
		v = v * 10 + (*name - '0');
	}
	return v > 0x3fffffffL ? 0 : (pid_t)v;
}

/* "/proc/PID/<leaf>" into path (room for 64 bytes). */
static void proc_path(char *path, pid_t pid, const char *leaf)
{
	char *p = path;
	for (const char *s = "/proc/"; *s;)
		*p++ = *s++;
	char digits[16];
	int n = 0;
	unsigned long v = (unsigned long)pid;
	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v && n < 15);
	while (n)
		*p++ = digits[--n];
	*p++ = '/';
	while (*leaf && p < path + 63)
		*p++ = *leaf++;
	*p = 0;
}

/* The start of /proc/PID/<leaf>, NUL-terminated: bytes read or -errno. */
static ssize_t read_small(pid_t pid, const char *leaf, char *buf, size_t len)
{
	char path[64];
	proc_path(path, pid, leaf);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, len - 1);
	int err = errno;
	close(fd);
	if (n < 0)
		return -err;
	buf[n] = 0;
	return n;
}

int procfs_read_stat(pid_t pid, struct procfs_stat *st)
{
	/* The fields wanted come early: comm is at most 64 bytes. */
	char buf[512];
	ssize_t n = read_small(pid, "stat", buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	if (n == 0)
		return -EINVAL;
	return procfs_parse_stat(buf, st);
}

int procfs_read_uids(pid_t pid, uid_t uid[3])
{
	char buf[2048];
	ssize_t n = read_small(pid, "status", buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	uid[0] = uid[1] = uid[2] = (uid_t)-1;
	const char *u = strstr(buf, "\nUid:");
	if (!u)
		return 0;
	u += 5;
	long v[3];
	for (int i = 0; i < 3; i++) {
		while (*u == ' ' || *u == '\t')
			u++;
		if (*u == '-' || !(u = parse_num(u, &v[i])))
			return 0;
	}
	for (int i = 0; i < 3; i++)
		uid[i] = (uid_t)v[i];
	return 0;
}

void procfs_read_comm(pid_t pid, char *out, size_t outlen)
{
	if (read_small(pid, "comm", out, outlen) < 0)
		out[0] = 0;
	out[strcspn(out, "\n")] = 0;
}

int procfs_scan(int (*fn)(pid_t pid, int procfd, void *arg), void *arg)
{
	int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	char dbuf[4096] __attribute__((aligned(8)));
	int rc = 0;
	for (;;) {
		long nread = syscall(SYS_getdents64, dfd, dbuf, sizeof(dbuf));
		if (nread < 0)
			rc = -errno;
		if (nread <= 0)
			break;
		for (long off = 0; off < nread;) {
			struct dirent64 *d = (struct dirent64 *)(dbuf + off);
			off += d->d_reclen;
			pid_t pid = procfs_parse_pid(d->d_name);
			if (pid > 0 && fn(pid, dfd, arg))
				goto out;
		}
	}
out:
	close(dfd);
	return rc;
}
