/* The reset's /proc sweep: every descendant of the runner outside the main process's tree,
 * and (as PID 1) every process of a task uid, stopped then killed (see reset.c). */
#include "profile/reset_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "core/procfs.h"
#include "core/runner.h"
#include "profile/profile.h"

struct pinfo {
	pid_t pid, ppid;
	char state;
	uid_t uid[3]; /* real, effective, saved */
	char mark;    /* 0 unknown, else classify()'s verdict */
	bool target;
};

int reset_read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return 0;
}

static int read_pinfo(pid_t pid, bool uids, struct pinfo *pi)
{
	struct procfs_stat st;
	if (procfs_read_stat(pid, &st) < 0)
		return -1;
	pi->pid = pid;
	pi->ppid = st.ppid;
	pi->state = st.state;
	pi->mark = 0;
	pi->target = false;
	pi->uid[0] = pi->uid[1] = pi->uid[2] = (uid_t)-1;
	if (uids && procfs_read_uids(pid, pi->uid) < 0)
		return -1;
	return 0;
}

static int cmp_pinfo(const void *a, const void *b)
{
	pid_t x = ((const struct pinfo *)a)->pid, y = ((const struct pinfo *)b)->pid;
	return (x > y) - (x < y);
}

static struct pinfo *find_pi(struct pinfo *v, size_t n, pid_t pid)
{
	struct pinfo key = {.pid = pid};
	return bsearch(&key, v, n, sizeof(*v), cmp_pinfo);
}

static bool task_uid(struct runner *r, const struct pinfo *pi)
{
	struct profile *p = r->profile;
	for (int k = 0; k < 3; k++) {
		uid_t u = pi->uid[k];
		if (u == (uid_t)-1 || u == 0 || u == geteuid())
			continue;
		if (p->uids_overflow || u == r->cfg.task_uid)
			return true;
		for (unsigned i = 0; i < p->n_uids; i++)
			if (p->uids[i] == u)
				return true;
	}
	return false;
}

/* Where pi stands: 1 a descendant of the runner (outside the main
 * process's tree and the worker), 2 not a descendant, 3 the runner, the
 * main process's tree or the worker. Memoised down the parent chain. */
static char classify(struct reset *rs, struct pinfo *v, size_t n, struct pinfo *pi)
{
	struct runner *r = rs->r;
	struct pinfo *chain[1024];
	size_t depth = 0;
	char verdict;
	for (struct pinfo *cur = pi;;) {
		if (cur->mark) {
			verdict = cur->mark;
			break;
		}
		if (cur->pid == r->self_pid || (r->main_running && cur->pid == r->main_pid) ||
		    (rs->worker_running && cur->pid == rs->worker)) {
			verdict = 3;
			chain[depth++] = cur;
			break;
		}
		chain[depth++] = cur;
		if (cur->ppid == r->self_pid) {
			verdict = 1;
			break;
		}
		struct pinfo *parent = cur->ppid > 0 ? find_pi(v, n, cur->ppid) : NULL;
		/* Deeper chains: the rest is found in a later sweep, once the
		 * killed processes above have let their children go up. */
		if (!parent || depth == 1024) {
			verdict = 2;
			break;
		}
		cur = parent;
	}
	for (size_t i = 0; i < depth; i++)
		chain[i]->mark = verdict;
	return verdict;
}

/* Must pi end? Descendants of the runner but the main process's tree; as
 * PID 1 (everything in the namespace is the box's) also any other process
 * of a task uid, e.g. one entered with `podman exec --user`. */
static bool is_target(struct reset *rs, struct pinfo *v, size_t n, struct pinfo *pi)
{
	if (pi->state == 'Z' || pi->state == 'X')
		return false;
	char c = classify(rs, v, n, pi);
	return c == 1 || (c == 2 && rs->r->init_mode == INIT_PID1 && task_uid(rs->r, pi));
}

int reset_cmp_pid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
	return (x > y) - (x < y);
}

static void note_killed(struct reset *rs, pid_t pid)
{
	if (rs->n_shims && bsearch(&pid, rs->shims, rs->n_shims, sizeof(pid_t), reset_cmp_pid))
		return;
	if (rs->n_killed == rs->cap_killed) {
		size_t cap = rs->cap_killed ? rs->cap_killed * 2 : 256;
		pid_t *k = realloc(rs->killed, cap * sizeof(*k));
		if (!k)
			return;
		rs->killed = k;
		rs->cap_killed = cap;
	}
	rs->killed[rs->n_killed++] = pid;
}

struct sweep_take {
	bool uids, nomem;
	struct pinfo *v;
	size_t n, cap;
};

static int take(pid_t pid, int procfd, void *arg)
{
	(void)procfd;
	struct sweep_take *tk = arg;
	if (tk->n == tk->cap) {
		size_t cap = tk->cap ? tk->cap * 2 : 512;
		struct pinfo *nv = realloc(tk->v, cap * sizeof(*nv));
		if (!nv) {
			tk->nomem = true;
			return 1;
		}
		tk->v = nv;
		tk->cap = cap;
	}
	if (read_pinfo(pid, tk->uids, &tk->v[tk->n]) == 0)
		tk->n++;
	return 0;
}

/* One sweep: returns the number of live processes found to end (and
 * signalled), or -errno. */
int reset_sweep(struct reset *rs)
{
	struct runner *r = rs->r;
	struct sweep_take tk = {.uids = r->init_mode == INIT_PID1};
	int rc = procfs_scan(take, &tk);
	if (rc == 0 && tk.nomem)
		rc = -ENOMEM;
	if (rc < 0) {
		free(tk.v);
		return rc;
	}
	struct pinfo *v = tk.v;
	size_t n = tk.n;
	if (n)
		qsort(v, n, sizeof(*v), cmp_pinfo);
	size_t targets = 0;
	for (size_t i = 0; i < n; i++)
		if ((v[i].target = is_target(rs, v, n, &v[i])))
			targets++;
	/* Stopped first, so none forks while the others are killed. */
	for (size_t i = 0; i < n; i++)
		if (v[i].target)
			kill(v[i].pid, SIGSTOP);
	for (size_t i = 0; i < n; i++) {
		if (!v[i].target)
			continue;
		if (kill(v[i].pid, SIGKILL) == 0)
			note_killed(rs, v[i].pid);
		else if (errno != ESRCH)
			log_errno("reset: SIGKILL failed", errno, NULL);
	}
	free(v);
	return (int)targets;
}

unsigned reset_distinct_killed(struct reset *rs)
{
	if (!rs->n_killed)
		return 0;
	qsort(rs->killed, rs->n_killed, sizeof(pid_t), reset_cmp_pid);
	unsigned d = 1;
	for (size_t i = 1; i < rs->n_killed; i++)
		if (rs->killed[i] != rs->killed[i - 1])
			d++;
	return d;
}
