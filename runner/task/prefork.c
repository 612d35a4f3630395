/* The spare shim: see task/prefork.h. */
#include "task/prefork.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/log.h"
#include "core/reaper.h"
#include "core/runner.h"
#include "task/shim_policy.h"
#include "task/task.h"

static void drop(struct prefork *pf)
{
	pf->pid = -1;
	if (pf->sock >= 0)
		close(pf->sock);
	pf->sock = -1;
}

/* The spare died before any task was handed to it (killed, or it failed):
 * the next task gets a fresh shim. */
static void on_spare_exit(void *arg, pid_t pid, int status)
{
	struct prefork *pf = &((struct runner *)arg)->tasks->prefork;
	if (pf->pid != pid)
		return;
	drop(pf);
	log_warn("spare task shim ended before a task", "{s:i,s:i}", "pid", (int)pid, "status",
		 status);
}

/* Exec a spare (no task: /dev/null at 0..2, its socket at 64 or above). */
static void make_spare(struct runner *r, struct prefork *pf)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		log_errno("no spare task shim", errno, NULL);
		return;
	}
	cleanup_close int child = fcntl(sv[1], F_DUPFD_CLOEXEC, 64);
	cleanup_close int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	close(sv[1]);
	char num[16];
	snprintf(num, sizeof(num), "%d", child);
	char *argv[] = {"forceai-shim", SHIM_SPARE_MAGIC, num, NULL}, *envp[] = {NULL};
	struct spawn_io io = {devnull, devnull, devnull, {-1, -1}, 0, -1};
	int keep[5] = {child, -1, -1, -1, -1};
	pid_t pid = child < 0 || devnull < 0
			    ? -errno
			    : spawn_shim_exec(&r->tasks->shim, &io, argv, envp, keep);
	if (pid > 0 && reaper_watch(&r->reaper, pid, on_spare_exit, r) < 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
			;
		pid = -ENOMEM;
	}
	if (pid < 0) {
		close(sv[0]);
		pf->broken = true;
		log_errno("no spare task shim: every task's shim is exec'd on its request", -pid,
			  NULL);
		return;
	}
	pf->pid = pid;
	pf->sock = sv[0];
}

/* After every dispatch batch, behind the HTTP pump: a new spare once a task
 * has taken the last one, so that making it is never on a request's path. */
static void spare_hook(struct loop *loop, void *arg)
{
	(void)loop;
	struct runner *r = arg;
	struct prefork *pf = &r->tasks->prefork;
	if (!pf->want || pf->pid > 0 || pf->broken || r->tasks->shim.exe_fd < 0 ||
	    r->tasks->shim.disabled)
		return;
	pf->want = false; /* one spare per task start at most: a failing one cannot loop */
	make_spare(r, pf);
}

/* The message (shim_policy.h) and its fds. */
static int send_task(struct prefork *pf, char **argv, char *const *envp, const struct spawn_io *io,
		     const int keep[5])
{
	struct shim_handoff h = {.n_task = 3 + (uint32_t)io->n_extra, .linger = io->linger_fd >= 0};
	memcpy(h.magic, SHIM_SPARE_MAGIC, sizeof(h.magic));
	int fds[16] = {io->in_fd, io->out_fd, io->err_fd, io->extra[0], io->extra[1]}, k = 3;
	k += io->n_extra;
	if (io->linger_fd >= 0)
		fds[k++] = io->linger_fd;
	for (int i = 0; i < 5; i++)
		if (keep[i] >= 0) {
			h.keep_at[h.n_keep++] = keep[i];
			fds[k++] = keep[i];
		}
	size_t len = sizeof(h);
	for (char **a = argv; *a; a++, h.argc++)
		len += strlen(*a) + 1;
	for (char *const *e = envp; *e; e++, h.envc++)
		len += strlen(*e) + 1;
	if (len >= SHIM_HANDOFF_MAX)
		return -E2BIG; /* the fresh shim takes it: exec's own limits apply */
	cleanup_free char *buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, &h, sizeof(h));
	char *p = buf + sizeof(h);
	for (char **a = argv; *a; a++)
		p = stpcpy(p, *a) + 1;
	for (char *const *e = envp; *e; e++)
		p = stpcpy(p, *e) + 1;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(16 * sizeof(int))];
	} cm = {0};
	struct iovec iov = {buf, len};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = &cm,
			    .msg_controllen = CMSG_SPACE((size_t)k * sizeof(int))};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN((size_t)k * sizeof(int));
	memcpy(CMSG_DATA(c), fds, (size_t)k * sizeof(int));
	return sendmsg(pf->sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
}

/* The same argv and fds a fresh shim gets (spawn.c, spawn_exec), to the spare. */
static pid_t hand_over(struct runner *r, struct prefork *pf, struct confine_plan *plan,
		       const struct spawn_io *io)
{
	struct spawn_shim *sh = &r->tasks->shim;
	char nums[11][24];
	int keep[5];
	char **argv = spawn_shim_argv(sh, plan, io, nums, keep);
	if (!argv)
		return -ENOMEM;
	int rc = send_task(pf, argv, plan->envp, io, keep);
	free(argv);
	if (rc < 0)
		return rc;
	pid_t pid = pf->pid;
	reaper_forget(&r->reaper, pid); /* the task's from now on (task_watch) */
	drop(pf);
	return pid;
}

pid_t prefork_spawn(struct runner *r, struct confine_plan *plan, const struct spawn_io *io)
{
	struct prefork *pf = &r->tasks->prefork;
	/* A one-shot box has no next task to hand a spare. */
	if (!r->cfg.no_prefork_shim && !r->cfg.one_shot && !pf->broken) {
		pf->want = true;
		if (!pf->hooked) {
			/* Added now, after the HTTP daemons' pumps: it runs behind them. */
			loop_hook_add(&r->loop, &pf->hook, spare_hook, r);
			pf->hooked = true;
		}
	}
	plan->supervisor_fd = r->tasks->shim.report_wr;
	plan->listener_out = NULL;
	if (pf->pid > 0) {
		pid_t pid = hand_over(r, pf, plan, io);
		if (pid > 0)
			return pid;
		log_errno("spare task shim not usable: a fresh one", -pid, NULL);
		prefork_kill(r);
		pf->want = !r->cfg.no_prefork_shim && !r->cfg.one_shot && !pf->broken;
	}
	return spawn_task(&r->tasks->shim, plan, io);
}

void prefork_kill(struct runner *r)
{
	struct prefork *pf = r->tasks ? &r->tasks->prefork : NULL;
	if (!pf)
		return;
	pf->want = false;
	if (pf->pid <= 0)
		return;
	pid_t pid = pf->pid;
	reaper_forget(&r->reaper, pid);
	kill(pid, SIGKILL);
	drop(pf);
	while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
		;
}

void prefork_free(struct runner *r)
{
	prefork_kill(r);
	if (r->tasks->prefork.hooked)
		loop_hook_del(&r->loop, &r->tasks->prefork.hook);
	r->tasks->prefork.hooked = false;
}
