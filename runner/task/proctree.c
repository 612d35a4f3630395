#include "task/proctree.h"

#include "core/procfs.h"

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

struct snap {
	struct pp *out;
	size_t n, max;
};

static int take(pid_t pid, int procfd, void *arg)
{
	(void)procfd;
	struct snap *sn = arg;
	struct procfs_stat st;
	if (sn->n < sn->max && procfs_read_stat(pid, &st) == 0) {
		sn->out[sn->n].pid = pid;
		sn->out[sn->n].ppid = st.ppid;
		sn->n++;
	}
	return 0;
}

/* Snapshot of (pid, ppid) for every process; returns count (<= max). */
static size_t snapshot(struct pp *out, size_t max)
{
	struct snap sn = {out, 0, max};
	(void)procfs_scan(take, &sn); /* what was read before a failure is used */
	return sn.n;
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

size_t proctree_descendants(pid_t root, pid_t *pids, size_t max, size_t *total)
{
	*total = 0;
	struct pp *snap = malloc(sizeof(*snap) * SNAP_MAX);
	if (!snap)
		return 0;
	size_t n = snapshot(snap, SNAP_MAX), got = 0;
	qsort(snap, n, sizeof(*snap), cmp_pid);
	char *mark = calloc(n ? n : 1, 1);
	if (mark) {
		for (size_t i = 0; i < n; i++) {
			if (classify(snap, n, mark, i, root) != 1)
				continue;
			(*total)++;
			if (got < max)
				pids[got++] = snap[i].pid;
		}
		free(mark);
	}
	free(snap);
	return got;
}
