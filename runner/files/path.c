/* Client paths of the files API: see path.h. */
#include "files/path.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int files_clean_path(const char *in, size_t len, char *out, size_t outsz)
{
	if (!in || len == 0 || in[0] != '/' || memchr(in, 0, len))
		return -EINVAL;
	if (len >= PATH_MAX || outsz < 2)
		return -ENAMETOOLONG;
	size_t o = 0;
	out[o++] = '/';
	size_t i = 0;
	while (i < len) {
		while (i < len && in[i] == '/')
			i++;
		size_t s = i;
		while (i < len && in[i] != '/')
			i++;
		size_t n = i - s;
		if (n == 0 || (n == 1 && in[s] == '.'))
			continue;
		if (n == 2 && in[s] == '.' && in[s + 1] == '.') {
			/* Up one: back to the previous '/', never above the root. */
			while (o > 1 && out[o - 1] != '/')
				o--;
			if (o > 1)
				o--;
			continue;
		}
		if (o > 1)
			out[o++] = '/';
		if (o + n + 1 > outsz)
			return -ENAMETOOLONG;
		memcpy(out + o, in + s, n);
		o += n;
	}
	out[o] = 0;
	return 0;
}

int files_open_parent(const char *path, const char **base)
{
	const char *slash = strrchr(path, '/');
	if (!slash || !slash[1])
		return -EINVAL; /* "/" */
	*base = slash + 1;
	int fd;
	if (slash == path) {
		fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	} else {
		char dir[PATH_MAX];
		size_t n = (size_t)(slash - path);
		if (n >= sizeof(dir))
			return -ENAMETOOLONG;
		memcpy(dir, path, n);
		dir[n] = 0;
		fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	return fd < 0 ? -errno : fd;
}

static int fd_path(int fd, char *out, size_t outsz)
{
	char link[32];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, out, outsz - 1);
	if (n < 0)
		return -errno;
	if ((size_t)n >= outsz - 1)
		return -ENAMETOOLONG;
	out[n] = 0;
	return 0;
}

static bool beneath(const char *path, const char *root, size_t rl)
{
	while (rl > 1 && root[rl - 1] == '/')
		rl--;
	if (rl == 1 && root[0] == '/')
		return true;
	return !strncmp(path, root, rl) && (path[rl] == 0 || path[rl] == '/');
}

int files_check_writable(const struct files_ident *id, int dirfd)
{
	if (!id->write_roots)
		return 0;
	char real[PATH_MAX];
	/* The kernel's own name for the directory we hold: no lexical tricks. */
	if (fd_path(dirfd, real, sizeof(real)) < 0)
		return -FILES_EOUTSIDE; /* fail closed (no /proc) */
	if (beneath(real, "/dev/shm", 8))
		return 0; /* Landlock grants it to tasks too */
	for (const char *p = id->write_roots; *p;) {
		size_t n = strcspn(p, ":");
		if (n && n < PATH_MAX && p[0] == '/') {
			/* Landlock holds the root's inode: compare real paths. */
			char root[PATH_MAX], rroot[PATH_MAX];
			memcpy(root, p, n);
			root[n] = 0;
			const char *cmp = realpath(root, rroot) ? rroot : root;
			if (beneath(real, cmp, strlen(cmp)))
				return 0;
		}
		p += n;
		if (*p == ':')
			p++;
	}
	return -FILES_EOUTSIDE;
}
