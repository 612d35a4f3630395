/* forceai-shim: the per-task shim as its own small static program (see
 * task/spawn.h), exec'd by the runner from a sealed memfd with the task's
 * fds already at 0..n-1 and:
 *
 *   argv: forceai-shim FRSHIMW1 POLICY_FD LL_FD LL_ROOT_FD PROCS_FD NFDS[|LINGER] UID GID
 *         DENY_INET PDEATH_SIGNAL RUNNER_PID CTTY CWD PATH TASK_ARGV...
 *   envp: the task's environment
 *
 * It is the task's child subreaper, runs it confined (confine_exec) and
 * exits like it, exactly as the fork()ed shim does (spawn_shim_run). Not
 * part of the runner's own sources (the Makefile builds it apart and
 * task/shim_blob.c embeds it). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "task/shim_policy.h"
#include "task/spawn.h"

static _Noreturn void fail(const char *what)
{
	static const char pre[] = "forceai-runner: shim: ";
	ssize_t n = write(2, pre, sizeof(pre) - 1);
	n = write(2, what, strlen(what));
	n = write(2, "\n", 1);
	(void)n;
	_exit(126);
}

static long num(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || !*s || *end)
		fail("bad argument");
	return v;
}

/* Our argv (the task's command among it) is copied, then blanked where
 * /proc/PID/cmdline reads it: `ps` and pgrep show "forceai-shim", as
 * they showed the runner's command line for the fork()ed shim. */
static char **hide_argv(int argc, char **argv)
{
	char **copy = calloc((size_t)argc + 1, sizeof(*copy));
	if (!copy)
		fail("out of memory");
	for (int i = 0; i < argc; i++)
		if (!(copy[i] = strdup(argv[i])))
			fail("out of memory");
	char *start = argv[0], *end = argv[argc - 1] + strlen(argv[argc - 1]);
	memset(start, 0, (size_t)(end - start));
	memcpy(start, "forceai-shim", (size_t)(end - start) > 12 ? 12 : (size_t)(end - start));
	return copy;
}

/* ---- the spare (shim_policy.h): wait for a task, then be its fresh shim ---- */

static char spare_buf[SHIM_HANDOFF_MAX];

/* Each fd to its place: all lifted above every target first, so that no
 * placement closes a received fd that is still to be placed. */
static void place_received(const int *fd, const int *at, int k)
{
	int top = 0, lift[16];
	for (int i = 0; i < k; i++)
		top = at[i] > top ? at[i] : top;
	for (int i = 0; i < k; i++) {
		if ((lift[i] = fcntl(fd[i], F_DUPFD_CLOEXEC, top + 1)) < 0)
			fail("cannot place the task's fds");
		close(fd[i]);
	}
	for (int i = 0; i < k; i++) {
		if (dup2(lift[i], at[i]) < 0)
			fail("cannot place the task's fds");
		close(lift[i]);
	}
}

/* Block until the runner hands us a task; fills *argcp, *argvp, *envpp.
 * EOF (the runner is gone or let us go): exit quietly. */
static void spare_wait(int sock, int *argcp, char ***argvp, char ***envpp)
{
	/* Unreachable while we wait (root, or the tasks' uid in non-root mode):
	 * no ptrace, no /proc/PID/{mem,environ,fd} for anybody but root. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(16 * sizeof(int))];
	} cm;
	struct iovec iov = {spare_buf, sizeof(spare_buf) - 1};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = &cm,
			    .msg_controllen = sizeof(cm)};
	ssize_t got;
	while ((got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (got <= 0)
		_exit(0);
	struct shim_handoff h;
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	if ((size_t)got < sizeof(h) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || !c ||
	    c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
		fail("bad hand-off");
	memcpy(&h, spare_buf, sizeof(h));
	int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int)), fd[16], at[16];
	memcpy(fd, CMSG_DATA(c), (size_t)k * sizeof(int));
	if (memcmp(h.magic, SHIM_SPARE_MAGIC, 8) || h.n_task > 5 || h.linger > 1 || h.n_keep > 5 ||
	    k != (int)(h.n_task + h.linger + h.n_keep) || h.argc > SHIM_HANDOFF_MAX / 2 ||
	    h.envc > SHIM_HANDOFF_MAX / 2)
		fail("bad hand-off");
	for (int i = 0; i < k; i++)
		at[i] = i < (int)(h.n_task + h.linger) ? i : h.keep_at[i - h.n_task - h.linger];
	/* Closed first: a target may be the socket's number (the runner's fd of
	 * that number is another by now). */
	close(sock);
	place_received(fd, at, k);
	/* The strings: argc then envc of them, NUL-terminated, in the buffer. */
	char **v = calloc((size_t)h.argc + h.envc + 2, sizeof(*v));
	if (!v)
		fail("out of memory");
	spare_buf[got] = 0;
	char *p = spare_buf + sizeof(h), *end = spare_buf + got;
	for (uint32_t i = 0; i < h.argc + h.envc; i++) {
		if (p >= end)
			fail("bad hand-off");
		v[i < h.argc ? i : i + 1] = p;
		p += strlen(p) + 1;
	}
	*argcp = (int)h.argc;
	*argvp = v;
	*envpp = v + h.argc + 1;
	/* From here on exactly a fresh shim. */
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	prctl(PR_SET_NAME, "forceai-shim", 0, 0, 0);
}

int main(int argc, char **argv, char **envp)
{
	prctl(PR_SET_NAME, "forceai-shim", 0, 0, 0);
	/* Everything blocked: the shim only ever waits for its own set. */
	sigset_t all, set;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	if (argc > 0)
		argv = hide_argv(argc, argv);
	if (argc == 3 && !strcmp(argv[1], SHIM_SPARE_MAGIC)) {
		/* Named apart while it waits (ps, tests); it dies with the runner
		 * (its socket's EOF tells it too). */
		prctl(PR_SET_NAME, "forceai-spare", 0, 0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		spare_wait((int)num(argv[2]), &argc, &argv, &envp);
		prctl(PR_SET_NAME, "forceai-shim", 0, 0, 0); /* a task's shim from now on */
	}
	if (argc < SHIM_ARGV_LEN + 1 || strcmp(argv[1], SHIM_MAGIC))
		fail("not started by the runner");
	int policy_fd = (int)num(argv[2]), ll = (int)num(argv[3]), llr = (int)num(argv[4]);
	int procs = (int)num(argv[5]), n = (int)num(argv[6]);
	/* With the flag, fd n is the status pipe of a task whose left-behind
	 * processes keep running (task/spawn.h). */
	int linger_fd = n & SHIM_ARGV_LINGER ? n & ~SHIM_ARGV_LINGER : -1;
	n &= ~SHIM_ARGV_LINGER;
	pid_t runner = (pid_t)num(argv[11]);
	/* If the runner dies, take the tree down with us; if it is gone
	 * already, there is nobody to report to. */
	prctl(PR_SET_PDEATHSIG, SHIM_SIG_KILL, 0, 0, 0);
	if (getppid() != runner)
		_exit(126);
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	setpgid(0, 0);

	static struct confine_policy pol;
	int report_fd;
	if (shim_policy_read(policy_fd, &pol, ll, llr, &report_fd) < 0)
		fail("cannot read the policy");
	close(policy_fd);
	struct confine_plan plan = {
		.policy = &pol,
		.path = argv[14],
		.argv = argv + SHIM_ARGV_LEN,
		.envp = envp,
		.cwd = argv[13],
		.uid = (uid_t)num(argv[7]),
		.gid = (gid_t)num(argv[8]),
		.cgroup_procs_fd = procs,
		.deny_inet = num(argv[9]) != 0,
		.pdeath_signal = (int)num(argv[10]),
		.ctty = num(argv[12]) != 0,
		.supervisor_fd = report_fd,
	};
	spawn_shim_signals(&set);
	spawn_shim_run(&plan, n, linger_fd, &set);
}
