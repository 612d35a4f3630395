/* Client paths of the files API: see path.h. */
#include "files/path.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_openat2
#define SYS_openat2 437 /* the same on every architecture */
#endif

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

/* ---- resolution without openat2 ----
 * Where openat2 is missing (Linux < 5.6, valgrind, a container runtime's
 * seccomp profile answering ENOSYS) the same rules, walked one component
 * at a time: each opened O_PATH|O_NOFOLLOW from the one before, links read
 * and followed by us, never by the kernel. */

#define MAX_LINKS 40

/* A /proc magic link (fd/N, cwd, exe, root, map_files/...) reads as an
 * absolute path or "type:[...]"; procfs's ordinary links (self,
 * thread-self, mounts, net) as a relative path without a colon. */
static bool magic_link(int fd, const char *target)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0)
		return true; /* fail closed */
	return sf.f_type == PROC_SUPER_MAGIC && (target[0] == '/' || strchr(target, ':'));
}

/* Nothing left to resolve (a path of "/" or "."): the directory held (cur, taken). */
static int open_held(int cur, int flags)
{
	if ((flags & O_PATH) && !(flags & ~(O_PATH | O_DIRECTORY | O_NOFOLLOW)))
		return cur;
	int fd = openat(cur, ".", flags | O_CLOEXEC);
	int e = errno;
	close(cur);
	return fd < 0 ? -e : fd;
}

/* The link nfd (closed here) read and spliced in front of what is left of rest (*p): 0, or
 * -errno. An absolute target restarts the walk at "/" (*cur replaced: -1 when that fails). */
static int splice_link(int nfd, uint64_t resolve, unsigned *links, char *rest, size_t size,
		       char **p, int *cur)
{
	char target[PATH_MAX];
	ssize_t tl = readlinkat(nfd, "", target, sizeof(target) - 1);
	int e = errno;
	if (tl >= 0)
		target[tl] = 0;
	int rc = tl < 0                                            ? -e
		 : resolve & RESOLVE_NO_SYMLINKS                   ? -ELOOP
		 : magic_link(nfd, target)                         ? -ELOOP
		 : ++*links > MAX_LINKS                            ? -ELOOP
		 : (resolve & RESOLVE_BENEATH) && target[0] == '/' ? -EXDEV
		 : strlen(target) + strlen(*p) + 2 > size          ? -ENAMETOOLONG
								   : 0;
	close(nfd);
	if (rc < 0)
		return rc;
	/* The length was checked above. */
	size_t tlen = strlen(target), plen = strlen(*p);
	memmove(rest + tlen + 1, *p, plen + 1);
	memcpy(rest, target, tlen);
	rest[tlen] = '/';
	*p = rest;
	if (target[0] == '/') {
		close(*cur);
		*cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (*cur < 0)
			return -errno;
	}
	return 0;
}

/* The last component (nfd, in cur; both taken), checked not to be a link to follow: opened
 * as asked (never through a link swapped in meanwhile). */
static int open_last(int cur, int nfd, const char *comp, int flags)
{
	int fd = nfd;
	if (!(flags & O_PATH) || (flags & O_DIRECTORY)) {
		fd = openat(cur, comp, flags | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		close(nfd);
		if (fd < 0) {
			close(cur);
			return -e;
		}
	}
	close(cur);
	return fd;
}

int files_open_compat(int dirfd, const char *path, int flags, uint64_t resolve)
{
	/* rest: what is left to resolve, links spliced in front. */
	char rest[2 * PATH_MAX];
	if (strlen(path) >= sizeof(rest))
		return -ENAMETOOLONG;
	snprintf(rest, sizeof(rest), "%s", path);
	int cur;
	if (path[0] == '/')
		cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	else if (dirfd == AT_FDCWD)
		cur = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	else
		cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	if (cur < 0)
		return -errno;
	unsigned links = 0;
	char *p = rest;
	for (;;) {
		while (*p == '/')
			p++;
		if (!*p)
			return open_held(cur, flags);
		size_t n = strcspn(p, "/");
		char comp[NAME_MAX + 1];
		if (n > NAME_MAX) {
			close(cur);
			return -ENAMETOOLONG;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		p += n;
		bool last = !p[strspn(p, "/")];
		if ((resolve & RESOLVE_BENEATH) && !strcmp(comp, "..")) {
			close(cur);
			return -EXDEV;
		}
		int nfd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (nfd < 0 || fstat(nfd, &st) < 0) {
			int e = errno;
			if (nfd >= 0)
				close(nfd);
			close(cur);
			return -e;
		}
		if (S_ISLNK(st.st_mode) && !(last && (flags & O_NOFOLLOW))) {
			int rc = splice_link(nfd, resolve, &links, rest, sizeof(rest), &p, &cur);
			if (rc < 0 && cur >= 0)
				close(cur);
			if (rc < 0)
				return rc;
			continue;
		}
		if (last)
			return open_last(cur, nfd, comp, flags);
		close(cur);
		cur = nfd;
	}
}

int files_open(int dirfd, const char *path, int flags, uint64_t resolve)
{
	struct open_how how = {
		.flags = (uint64_t)(unsigned)(flags | O_CLOEXEC),
		.resolve = resolve | RESOLVE_NO_MAGICLINKS,
	};
	/* EAGAIN: a concurrent rename raced a ".." under RESOLVE_BENEATH. */
	for (int tries = 0;; tries++) {
		long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		if (fd >= 0)
			return (int)fd;
		if (errno == ENOSYS)
			return files_open_compat(dirfd, path, flags, resolve);
		if ((errno != EAGAIN && errno != EINTR) || tries == 8)
			return -errno;
	}
}

int files_open_last(int dirfd, const char *name, int flags)
{
	if (!*name || strchr(name, '/'))
		return -EINVAL;
	return files_open(dirfd, name, flags | O_NOFOLLOW, RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH);
}

int files_open_parent(const char *path, const char **base)
{
	const char *slash = strrchr(path, '/');
	if (!slash || !slash[1])
		return -EINVAL; /* "/" */
	*base = slash + 1;
	if (slash == path)
		return files_open(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0);
	char dir[PATH_MAX];
	size_t n = (size_t)(slash - path);
	if (n >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, n);
	dir[n] = 0;
	return files_open(AT_FDCWD, dir, O_PATH | O_DIRECTORY, 0);
}

int files_on_procfs(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0)
		return -errno;
	return sf.f_type == PROC_SUPER_MAGIC;
}

struct node_id {
	dev_t dev;
	ino_t ino;
};

#define MAX_ROOTS 64

/* The directories writes may go beneath, as Landlock holds them (their
 * inodes, resolved when the rule was made: here, now). */
static size_t root_ids(const struct files_ident *id, struct node_id *out)
{
	size_t n = 0;
	struct stat st;
	/* Landlock grants /dev/shm to tasks too. */
	if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode))
		out[n++] = (struct node_id){st.st_dev, st.st_ino};
	for (const char *p = id->write_roots; *p && n < MAX_ROOTS;) {
		size_t len = strcspn(p, ":");
		if (len && len < PATH_MAX && p[0] == '/') {
			char root[PATH_MAX];
			memcpy(root, p, len);
			root[len] = 0;
			if (stat(root, &st) == 0 && S_ISDIR(st.st_mode))
				out[n++] = (struct node_id){st.st_dev, st.st_ino};
		}
		p += len;
		if (*p == ':')
			p++;
	}
	return n;
}

int files_check_writable(const struct files_ident *id, int dirfd)
{
	if (!id->write_roots)
		return 0;
	struct node_id roots[MAX_ROOTS + 1];
	size_t nr = root_ids(id, roots);
	struct stat st;
	if (fstat(dirfd, &st) < 0)
		return -FILES_EOUTSIDE;
	/* Up through ".." from the directory we hold until a root or "/"
	 * (as Landlock walks a path's ancestors, across mount points): what
	 * the task calls the directory does not matter, and no name is
	 * resolved that the task could swap. Fails closed. */
	int cur = -1, rc = -FILES_EOUTSIDE;
	for (int depth = 0; depth < PATH_MAX; depth++) {
		bool hit = false;
		for (size_t i = 0; i < nr && !hit; i++)
			hit = st.st_dev == roots[i].dev && st.st_ino == roots[i].ino;
		if (hit) {
			rc = 0;
			break;
		}
		int up = openat(cur >= 0 ? cur : dirfd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		struct stat ust;
		if (up < 0)
			break;
		if (fstat(up, &ust) < 0 || (ust.st_dev == st.st_dev && ust.st_ino == st.st_ino)) {
			close(up); /* "/" is its own parent */
			break;
		}
		if (cur >= 0)
			close(cur);
		cur = up;
		st = ust;
	}
	if (cur >= 0)
		close(cur);
	return rc;
}

int files_open_root(const char *path, struct stat *st, int *fd)
{
	const char *base = ".";
	int dirfd;
	*fd = -1;
	if (strcmp(path, "/"))
		dirfd = files_open_parent(path, &base);
	else
		dirfd = files_open(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0);
	if (dirfd < 0)
		return dirfd;
	int rc = 0;
	if (fstatat(dirfd, base, st, AT_SYMLINK_NOFOLLOW) < 0)
		rc = -errno;
	else if (S_ISDIR(st->st_mode))
		rc = (*fd = files_open_last(dirfd, base, O_RDONLY | O_DIRECTORY)) < 0 ? *fd : 0;
	if (rc < 0)
		*fd = -1;
	close(dirfd);
	return rc;
}
