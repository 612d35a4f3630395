#include "task/proctree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

/* These run in the task shim too (a forked child of a single-threaded
 * process), so they avoid stdio. */

struct pp {
	pid_t pid, ppid;
};

static pid_t parse_pid(const char *s)
{
	pid_t v = 0;
	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s - '0');
	}
	return v;
}

static pid_t read_ppid(pid_t pid)
{
	char path[64], buf[512];
	char *p = path;
	const char *pre = "/proc/";
	while (*pre)
		*p++ = *pre++;
	char digits[16];
	int n = 0;
	pid_t v = pid;
	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = digits[--n];
	const char *post = "/stat";
	while (*post)
		*p++ = *post++;
	*p = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return -1;
	buf[len] = 0;
	/* comm may contain spaces and parentheses: parse after the last ')'. */
	char *rp = strrchr(buf, ')');
	if (!rp || rp[1] != ' ')
		return -1;
	char *s = rp + 2; /* state */
	while (*s && *s != ' ')
		s++;
	if (*s != ' ')
		return -1;
	s++;
	pid_t ppid = 0;
	while (*s >= '0' && *s <= '9')
		ppid = ppid * 10 + (*s++ - '0');
	return ppid;
}

/* Snapshot of (pid, ppid) for every process; returns count (<= max). */
static size_t snapshot(struct pp *out, size_t max)
{
	int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return 0;
	size_t n = 0;
	char dbuf[4096];
	for (;;) {
		long nread = syscall(SYS_getdents64, dfd, dbuf, sizeof(dbuf));
		if (nread <= 0)
			break;
		for (long off = 0; off < nread;) {
			struct dirent64 *d = (struct dirent64 *)(dbuf + off);
			off += d->d_reclen;
			pid_t pid = parse_pid(d->d_name);
			if (pid <= 0 || n >= max)
				continue;
			pid_t ppid = read_ppid(pid);
			if (ppid < 0)
				continue;
			out[n].pid = pid;
			out[n].ppid = ppid;
			n++;
		}
	}
	close(dfd);
	return n;
}

#define SNAP_MAX 32768

int proctree_kill_children(pid_t parent, int sig, pid_t except)
{
	struct pp *snap = malloc(sizeof(*snap) * SNAP_MAX);
	if (!snap)
		return 0;
	size_t n = snapshot(snap, SNAP_MAX);
	int killed = 0;
	for (size_t i = 0; i < n; i++) {
		if (snap[i].ppid == parent && snap[i].pid != except && kill(snap[i].pid, sig) == 0)
			killed++;
	}
	free(snap);
	return killed;
}

static int cmp_pid(const void *a, const void *b)
{
	pid_t x = ((const struct pp *)a)->pid, y = ((const struct pp *)b)->pid;
	return (x > y) - (x < y);
}

static long find(const struct pp *snap, size_t n, pid_t pid)
{
	struct pp key = {.pid = pid};
	const struct pp *f = bsearch(&key, snap, n, sizeof(*snap), cmp_pid);
	return f ? f - snap : -1;
}

/* 1 = descendant of root, 2 = not; memoised walk up the parent chain. */
static char classify(const struct pp *snap, size_t n, char *mark, size_t i, pid_t root)
{
	size_t chain[64];
	size_t depth = 0;
	char verdict = 2;
	size_t cur = i;
	for (;;) {
		if (mark[cur]) {
			verdict = mark[cur];
			break;
		}
		if (snap[cur].ppid == root) {
			verdict = 1;
			break;
		}
		long p = find(snap, n, snap[cur].ppid);
		if (p < 0 || snap[cur].ppid <= 1 || snap[p].pid == root || depth == 64) {
			verdict = 2;
			break;
		}
		chain[depth++] = cur;
		cur = (size_t)p;
	}
	mark[cur] = verdict;
	while (depth)
		mark[chain[--depth]] = verdict;
	return mark[i];
}

int proctree_kill_descendants(pid_t root, int sig)
{
	struct pp *snap = malloc(sizeof(*snap) * SNAP_MAX);
	if (!snap)
		return 0;
	size_t n = snapshot(snap, SNAP_MAX);
	qsort(snap, n, sizeof(*snap), cmp_pid);
	char *mark = calloc(n ? n : 1, 1);
	int killed = 0;
	if (mark) {
		for (size_t i = 0; i < n; i++)
			classify(snap, n, mark, i, root);
		/* Stop first so none can fork while we go, then the signal. */
		if (sig == SIGKILL)
			for (size_t i = 0; i < n; i++)
				if (mark[i] == 1)
					kill(snap[i].pid, SIGSTOP);
		for (size_t i = 0; i < n; i++)
			if (mark[i] == 1 && kill(snap[i].pid, sig) == 0)
				killed++;
		free(mark);
	}
	free(snap);
	return killed;
}
