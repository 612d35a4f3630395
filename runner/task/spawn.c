#include "task/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "task/proctree.h"
#include "core/signals.h"

/* Move the task's fds to 0..n-1 without clobbering each other. */
static int place_fds(const struct spawn_io *io)
{
	int src[5] = {io->in_fd, io->out_fd, io->err_fd, io->extra[0], io->extra[1]};
	int n = 3 + io->n_extra;
	int tmp[5];
	/* First lift every source above the target range. */
	for (int i = 0; i < n; i++) {
		tmp[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 16);
		if (tmp[i] < 0)
			return -errno;
	}
	for (int i = 0; i < n; i++)
		if (dup2(tmp[i], i) < 0)
			return -errno;
	return n;
}

static void close_from(int lowfd)
{
	if (syscall(SYS_close_range, (unsigned)lowfd, ~0u, 0) == 0)
		return;
	for (int fd = lowfd; fd < 65536; fd++)
		close(fd);
}

static void reap_all(pid_t task_pid, bool *task_done, int *task_status)
{
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG | __WALL);
		if (p <= 0)
			return;
		if (p == task_pid) {
			*task_done = true;
			*task_status = st;
		}
	}
}

/* Mirror the task's status as our own, so the runner sees it unchanged. */
static _Noreturn void exit_like(int st)
{
	if (WIFSIGNALED(st)) {
		int sig = WTERMSIG(st);
		struct rlimit nocore = {0, 0};
		setrlimit(RLIMIT_CORE, &nocore);
		/* Only `sig` is unblocked: a control signal still pending (the
		 * runner's SIGTERM or a second SIGUSR1) must not kill us first
		 * and be reported as the task's signal. */
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		sigaction(sig, &dfl, NULL);
		sigset_t only;
		sigfillset(&only);
		sigdelset(&only, sig);
		sigprocmask(SIG_SETMASK, &only, NULL);
		raise(sig);
		/* A signal whose default is to ignore cannot have killed it. */
	}
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 255);
}

static _Noreturn void shim_main(struct confine_plan *plan, const struct spawn_io *io)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SHIM_SIG_TERM);
	sigaddset(&set, SHIM_SIG_KILL);
	sigaddset(&set, SHIM_SIG_FORWARD);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);

	/* If the runner dies, take the tree down with us. */
	prctl(PR_SET_PDEATHSIG, SHIM_SIG_KILL);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	setpgid(0, 0);

	int n = place_fds(io);
	if (n < 0)
		_exit(126);
	/* The Landlock ruleset and the cgroup leaf's procs file stay open:
	 * the task uses both (a closed procs file would fail every task with
	 * EBADF where cgroup v2 is delegated). */
	if (confine_close_fds(plan->policy, n, plan->cgroup_procs_fd) < 0)
		close_from(n);
	plan->nkeep_fds = n;

	pid_t task = fork();
	if (task < 0)
		_exit(126);
	if (task == 0) {
		signals_reset_child();
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		confine_exec(plan);
	}
	/* Only the task needs its stdio; holding pipe ends here would keep
	 * the runner from seeing EOF. */
	for (int fd = 0; fd < n; fd++)
		close(fd);
	int devnull = open("/dev/null", O_RDWR);
	if (devnull >= 0) {
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(devnull, 2);
		if (devnull > 2)
			close(devnull);
	}

	bool done = false, terminating = false;
	int status = 0;
	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&set, &si);
		if (sig < 0)
			continue;
		if (sig == SIGCHLD) {
			reap_all(task, &done, &status);
		} else if (sig == SHIM_SIG_FORWARD) {
			/* Only from the runner (our parent), only a real signal. */
			int fwd = si.si_value.sival_int;
			if (si.si_code == SI_QUEUE && si.si_pid == getppid() && fwd > 0 && fwd < 65)
				kill(-task, fwd);
		} else if (sig == SHIM_SIG_TERM || sig == SIGINT) {
			terminating = true;
			kill(-task, SIGTERM);
			proctree_kill_descendants(getpid(), SIGTERM);
		} else if (sig == SHIM_SIG_KILL) {
			kill(-task, SIGKILL);
			proctree_kill_descendants(getpid(), SIGKILL);
			terminating = false; /* no more patience */
			if (done)
				break;
		}
		if (done && !terminating)
			break;
		/* Being terminated, the rest of the tree keeps its grace period
		 * after the main process is gone: wait for it, or for KILL. */
		if (done && waitpid(-1, NULL, WNOHANG | __WALL) < 0 && errno == ECHILD)
			break;
	}
	/* The main process is gone: nothing of its tree may outlive it. */
	for (;;) {
		bool dummy = false;
		int st;
		reap_all(-1, &dummy, &st);
		/* As subreaper, no child means no descendant at all: the common
		 * case ends here without walking /proc. */
		pid_t p = waitpid(-1, &st, WNOHANG | __WALL);
		if (p < 0 && errno == ECHILD)
			break;
		proctree_kill_descendants(getpid(), SIGKILL);
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	exit_like(status);
}

pid_t spawn_task(struct confine_plan *plan, const struct spawn_io *io)
{
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0)
		shim_main(plan, io);
	return pid;
}
