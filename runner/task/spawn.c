#include "task/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "confine/seccomp_notify.h"
#include "task/proctree.h"
#include "task/shim_policy.h"
#include "core/closefds.h"
#include "core/signals.h"

/* Move the task's fds to 0..n-1 without clobbering each other. */
static int place_fds(const struct spawn_io *io)
{
	int src[6] = {io->in_fd, io->out_fd, io->err_fd, io->extra[0], io->extra[1], -1};
	int n = 3 + io->n_extra;
	/* The shim's own status pipe goes right after the task's fds: the
	 * task's fd sweep (confine_exec) closes it there. */
	if (io->linger_fd >= 0)
		src[n++] = io->linger_fd;
	int tmp[6];
	/* First lift every source above the target range. */
	for (int i = 0; i < n; i++) {
		tmp[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 16);
		if (tmp[i] < 0)
			return -errno;
	}
	for (int i = 0; i < n; i++)
		if (dup2(tmp[i], i) < 0)
			return -errno;
	return io->linger_fd >= 0 ? n - 1 : n;
}

/* Any child left (a zombie is reaped on the way). */
static bool has_children(void)
{
	return !(waitpid(-1, NULL, WNOHANG | __WALL) < 0 && errno == ECHILD);
}

/* The main process is gone: tell the runner its status now (it writes the
 * exit event); ended: nothing of its tree is left either (spawn.h). */
static void report_status(int fd, int status, bool ended)
{
	struct spawn_status m = {.status = status, .ended = ended};
	ssize_t n;
	while ((n = write(fd, &m, sizeof(m))) < 0 && errno == EINTR)
		;
	close(fd);
}

static void reap_all(pid_t task_pid, bool *task_done, int *task_status)
{
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG | __WALL);
		if (p <= 0)
			return;
		if (WIFSTOPPED(st)) {
			/* Only a ptrace stop reaches us (no WUNTRACED): a child
			 * made the shim its tracer with PTRACE_TRACEME
			 * (design/confinement.md#debugging-inside-the-tasks-own-tree-ptrace). Let
			 * it go, with the signal it stopped for. */
			int sig = WSTOPSIG(st);
			ptrace(PTRACE_DETACH, p, NULL, (void *)(long)(sig == SIGTRAP ? 0 : sig));
			continue;
		}
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

struct task_child {
	const struct confine_plan *plan;
	/* 16-byte aligned top of stack for the clone child. */
	_Alignas(16) char stack[32 * 1024];
};

static int task_child_main(void *arg)
{
	struct task_child *tc = arg;
	signals_reset_child();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	confine_exec(tc->plan);
}

/* Only the task needs its stdio; holding pipe ends here would keep the
 * runner from seeing EOF. The status pipe sits at n or above: untouched. */
static void drop_stdio(int n)
{
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
}

/* The task shares our memory until its execve (CLONE_VM|CLONE_VFORK, we are suspended
 * meanwhile): no copy of the address space, no copy-on-write faults after. Its stack is
 * tc's array; confine_exec uses only system calls and its own frame, and no signal handler
 * can run in it (there are none: dispositions are default or ignored).
 * Refusals explained (docs/design/confinement.md#every-refusal-recorded): the child installs the
 * notifying filter and leaves its listener in our shared fd table (CLONE_FILES until its execve,
 * which unshares the table and closes the close-on-exec listener on the task's side only). */
static pid_t start_task(struct confine_plan *plan, struct task_child *tc, int *listener)
{
	const struct seccomp_policy *sp = &plan->policy->seccomp;
	bool notify = plan->policy->enabled && sp->notify_prog.filter && plan->supervisor_fd >= 0 &&
		      fcntl(plan->supervisor_fd, F_SETFD, FD_CLOEXEC) == 0;
	*listener = -1;
	plan->listener_out = notify ? listener : NULL;
	return clone(task_child_main, tc->stack + sizeof(tc->stack),
		     CLONE_VM | CLONE_VFORK | (notify ? CLONE_FILES : 0) | SIGCHLD, tc);
}

/* The main process is gone: nothing of its tree may outlive it. */
static void end_tree(void)
{
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
}

/* The shim's life once its fds are in place (0..n-1 the task's, the
 * Landlock rulesets and cgroup procs file kept): start the task, wait,
 * take the rest of the tree down, exit like the task. `set` is blocked. */
_Noreturn void spawn_shim_run(struct confine_plan *plan, int n, int linger_fd, const sigset_t *set)
{
	plan->nkeep_fds = n;
	if (linger_fd >= 0 && fcntl(linger_fd, F_SETFD, FD_CLOEXEC) < 0)
		_exit(126);
	plan->supervisor_fd2 = linger_fd; /* the task's fd sweep must not close it in our table */

	struct task_child tc = {.plan = plan};
	static struct seccomp_denied den;
	int listener;
	pid_t task = start_task(plan, &tc, &listener);
	seccomp_denied_init(&den, listener, plan->supervisor_fd);
	drop_stdio(n);

	bool done = false, terminating = false, lingering = false;
	int status = 0;
	for (;;) {
		siginfo_t si;
		int sig = seccomp_denied_wait(&den, set, &si);
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
		/* Left-behind processes (a server started with `&`) keep running
		 * under this subreaper unless the request asked for the whole
		 * tree to end with the main process
		 * (docs/design/tasks.md#left-behind-processes-kept-supervised). */
		if (done && !terminating && !lingering && linger_fd >= 0 && has_children()) {
			/* The report first: the runner reads it with the status. */
			seccomp_denied_send(&den);
			report_status(linger_fd, status, false);
			linger_fd = -1;
			lingering = true;
		}
		if (done && !terminating && !lingering)
			break;
		/* Being terminated, the rest of the tree keeps its grace period
		 * after the main process is gone: wait for it, or for KILL. */
		if (done && waitpid(-1, NULL, WNOHANG | __WALL) < 0 && errno == ECHILD)
			break;
	}
	/* Nothing left of the tree: the status now, so that the runner need not wait for our
	 * exit (the report first: the runner reads it with the status). Else the report
	 * before we exit: the runner reads it as it reaps us (sent already if we lingered). */
	bool reported = lingering;
	if (!reported && linger_fd >= 0 && !has_children()) {
		seccomp_denied_send(&den);
		report_status(linger_fd, status, true);
		reported = true;
	} else if (linger_fd >= 0) {
		close(linger_fd); /* EOF: the runner waits for our exit */
	}
	end_tree();
	if (!reported)
		seccomp_denied_send(&den);
	exit_like(status);
}

void spawn_shim_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGCHLD);
	sigaddset(set, SHIM_SIG_TERM);
	sigaddset(set, SHIM_SIG_KILL);
	sigaddset(set, SHIM_SIG_FORWARD);
	sigaddset(set, SIGINT);
}

/* The fork()ed shim: a copy of the runner (the fallback when the shim
 * binary cannot be exec'd). */
static _Noreturn void shim_main(struct confine_plan *plan, const struct spawn_io *io)
{
	sigset_t set;
	spawn_shim_signals(&set);
	sigprocmask(SIG_BLOCK, &set, NULL);

	/* If the runner dies, take the tree down with us. */
	prctl(PR_SET_PDEATHSIG, SHIM_SIG_KILL);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	setpgid(0, 0);

	int n = place_fds(io);
	if (n < 0)
		_exit(126);
	int linger_fd = io->linger_fd >= 0 ? n : -1;
	int keep = linger_fd >= 0 ? n + 1 : n;
	/* The Landlock ruleset and the cgroup leaf's procs file stay open:
	 * the task uses both (a closed procs file would fail every task with
	 * EBADF where cgroup v2 is delegated). */
	if (confine_close_fds(plan->policy, keep, plan->cgroup_procs_fd, plan->supervisor_fd) < 0)
		closefds_by_hand((unsigned)keep, ~0U);
	spawn_shim_run(plan, n, linger_fd, &set);
}

/* ---- the exec'd shim ---------------------------------------------------- */

extern const char spawn_shim_elf[], spawn_shim_elf_end[];

/* The report socket, out of the way of the stdio dup2s in the spawn child (0..4). */
static void report_socket(struct spawn_shim *sh)
{
	int sv[2];
	sh->report_rd = sh->report_wr = -1;
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
		return;
	sh->report_rd = sv[0];
	sh->report_wr = fcntl(sv[1], F_DUPFD_CLOEXEC, 64);
	close(sv[1]);
	/* Only shims write: the runner's end never sends. */
	if (sh->report_wr < 0 || shutdown(sh->report_rd, SHUT_WR) < 0) {
		if (sh->report_wr >= 0)
			close(sh->report_wr);
		close(sh->report_rd);
		sh->report_rd = sh->report_wr = -1;
	}
}

int spawn_shim_init(struct spawn_shim *sh, const struct confine_policy *pol)
{
	sh->exe_fd = sh->policy_fd = -1;
	sh->disabled = false;
	sh->child = NULL;
	report_socket(sh);
	size_t len = (size_t)(spawn_shim_elf_end - spawn_shim_elf);
	if (len < 64 || memcmp(spawn_shim_elf, "\177ELF", 4))
		return -ENOEXEC;
	int fd = memfd_create("forceai-shim", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	int rc = 0;
	size_t off = 0;
	while (rc == 0 && off < len) {
		ssize_t n = write(fd, spawn_shim_elf + off, len - off);
		if (n < 0 && errno != EINTR)
			rc = -errno;
		else if (n > 0)
			off += (size_t)n;
	}
	/* Sealed: nothing can change what every task's shim runs. */
	if (rc == 0 &&
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
		rc = -errno;
	if (rc == 0 && fchmod(fd, 0500) < 0)
		rc = -errno;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	int pfd = shim_policy_write(pol, sh->report_wr);
	if (pfd < 0) {
		close(fd);
		return pfd;
	}
	/* Out of the way of the stdio dup2s in the spawn child (0..4). */
	int hi[2] = {fcntl(fd, F_DUPFD_CLOEXEC, 64), fcntl(pfd, F_DUPFD_CLOEXEC, 64)};
	rc = hi[0] < 0 || hi[1] < 0 ? -errno : 0;
	close(fd);
	close(pfd);
	if (rc < 0) {
		if (hi[0] >= 0)
			close(hi[0]);
		if (hi[1] >= 0)
			close(hi[1]);
		return rc;
	}
	sh->exe_fd = hi[0];
	sh->policy_fd = hi[1];
	return 0;
}

void spawn_shim_free(struct spawn_shim *sh)
{
	if (sh->exe_fd >= 0)
		close(sh->exe_fd);
	if (sh->policy_fd >= 0)
		close(sh->policy_fd);
	sh->exe_fd = sh->policy_fd = -1;
	if (sh->report_rd >= 0)
		close(sh->report_rd);
	if (sh->report_wr >= 0)
		close(sh->report_wr);
	sh->report_rd = sh->report_wr = -1;
	free(sh->child);
	sh->child = NULL;
}

struct exec_child {
	const struct spawn_shim *shim;
	const struct spawn_io *io;
	char *const *argv, *const *envp;
	int keep[5];
	int err_fd; /* write end of a close-on-exec pipe: errno when exec fails */
	int err;    /* set by the child when it could not exec (shared memory) */
	_Alignas(16) char stack[16 * 1024];
};

/* Runs in the runner's memory (CLONE_VM|CLONE_VFORK; the runner waits):
 * only system calls on our own stack and fd table, then the shim. */
static _Noreturn void exec_child_fail(struct exec_child *c, int e)
{
	c->err = e;
	/* Shared memory is not always shared: valgrind turns CLONE_VM|CLONE_VFORK
	 * into a fork. The pipe tells the parent either way. */
	if (c->err_fd >= 0 && write(c->err_fd, &e, sizeof(e)) < 0)
		_exit(127);
	_exit(127);
}

static int exec_child_main(void *arg)
{
	struct exec_child *c = arg;
	int n = place_fds(c->io);
	if (n < 0)
		exec_child_fail(c, -n);
	if (c->io->linger_fd >= 0)
		n++; /* the status pipe, right after the task's fds */
	for (int i = 0; i < 5; i++)
		if (c->keep[i] >= 0 && fcntl(c->keep[i], F_SETFD, 0) < 0)
			exec_child_fail(c, errno);
	if (c->err_fd >= 0 && c->err_fd < n)
		c->err_fd = -1; /* placed over by the task's stdio: the memory tells */
	int keep[7] = {c->keep[0], c->keep[1],      c->keep[2], c->keep[3],
		       c->keep[4], c->shim->exe_fd, c->err_fd};
	if (closefds_except(n, keep, 7) < 0)
		closefds_by_hand((unsigned)n,
				 ~0U); /* cannot spare the exe fd here: exec then fails */
	syscall(SYS_execveat, c->shim->exe_fd, "", c->argv, c->envp, AT_EMPTY_PATH);
	exec_child_fail(c, errno);
}

/* The shim's argv (shim/main.c): the wire's numbers (into nums), the cwd,
 * the path, then the task's own argv; keep gets the fds it inherits at their
 * numbers. Freed by the caller; NULL: no memory. */
char **spawn_shim_argv(const struct spawn_shim *sh, const struct confine_plan *plan,
		       const struct spawn_io *io, char nums[11][24], int keep[5])
{
	const struct confine_policy *pol = plan->policy;
	int ll = pol->enabled ? pol->landlock_ruleset_fd : -1;
	int llr = pol->enabled ? pol->landlock.root_ruleset_fd : -1;
	int k[5] = {sh->policy_fd, ll, llr, plan->cgroup_procs_fd, sh->report_wr};
	memcpy(keep, k, sizeof(k));
	/* NFDS, and the status pipe right after them when it is passed. */
	long nfds = (3 + io->n_extra) | (io->linger_fd >= 0 ? SHIM_ARGV_LINGER : 0);
	long v[11] = {sh->policy_fd,
		      ll,
		      llr,
		      plan->cgroup_procs_fd,
		      nfds,
		      (long)plan->uid,
		      (long)plan->gid,
		      plan->deny_inet,
		      plan->pdeath_signal,
		      (long)getpid(),
		      plan->ctty};
	size_t nargs = 0;
	while (plan->argv[nargs])
		nargs++;
	char **argv = calloc(SHIM_ARGV_LEN + nargs + 1, sizeof(*argv));
	if (!argv)
		return NULL;
	argv[0] = "forceai-shim";
	argv[1] = SHIM_MAGIC;
	for (int i = 0; i < 11; i++) {
		snprintf(nums[i], 24, "%ld", v[i]);
		argv[2 + i] = nums[i];
	}
	argv[13] = (char *)plan->cwd;
	argv[14] = (char *)plan->path;
	for (size_t i = 0; i < nargs; i++)
		argv[SHIM_ARGV_LEN + i] = plan->argv[i];
	return argv;
}

/* Clone the exec child (CLONE_VM|CLONE_VFORK: we resume once it has exec'd
 * or failed). Its pid, or -errno when it could not exec (reaped here). */
static pid_t clone_exec_child(struct exec_child *c)
{
	int errpipe[2];
	if (pipe2(errpipe, O_CLOEXEC) < 0)
		return -errno;
	c->err_fd = errpipe[1];
	/* No handler may run in the child on our memory: everything blocked
	 * until it has exec'd (the shim sets its own mask). */
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid_t pid = clone(exec_child_main, c->stack + sizeof(c->stack),
			  CLONE_VM | CLONE_VFORK | SIGCHLD, c);
	int e = pid < 0 ? errno : c->err;
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(errpipe[1]);
	if (pid > 0 && !e) {
		/* EOF: the exec closed the pipe; an int: the child's errno. */
		int ce = 0;
		ssize_t got;
		while ((got = read(errpipe[0], &ce, sizeof(ce))) < 0 && errno == EINTR)
			;
		if (got == (ssize_t)sizeof(ce) && ce)
			e = ce;
	}
	close(errpipe[0]);
	if (pid > 0 && e) {
		/* It could not exec: reap it here, the caller forks instead. */
		while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
			;
	}
	return e ? -e : pid;
}

/* The shim exec'd from the sealed memfd: no copy of the runner's address
 * space at all (no fork, no copy-on-write faults in the runner while the
 * task runs), and the shim is a small static program whose own clone of
 * the task is cheap. -errno when it could not be exec'd (the caller
 * falls back to fork). */
static pid_t spawn_exec(struct spawn_shim *sh, struct confine_plan *plan, const struct spawn_io *io)
{
	char nums[11][24];
	int keep[5];
	char **argv = spawn_shim_argv(sh, plan, io, nums, keep);
	if (!argv)
		return -ENOMEM;
	pid_t pid = spawn_shim_exec(sh, io, argv, plan->envp, keep);
	free(argv);
	return pid;
}

pid_t spawn_shim_exec(struct spawn_shim *sh, const struct spawn_io *io, char *const *argv,
		      char *const *envp, const int keep[5])
{
	if (!sh->child && !(sh->child = malloc(sizeof(*sh->child))))
		return -ENOMEM;
	/* Field by field: the stack is not cleared. */
	struct exec_child *c = sh->child;
	c->shim = sh;
	c->io = io;
	c->argv = argv;
	c->envp = envp;
	memcpy(c->keep, keep, sizeof(c->keep));
	c->err_fd = -1;
	c->err = 0;
	return clone_exec_child(c);
}

pid_t spawn_task(struct spawn_shim *sh, struct confine_plan *plan, const struct spawn_io *io)
{
	plan->supervisor_fd = sh ? sh->report_wr : -1;
	plan->listener_out = NULL;
	if (sh && sh->exe_fd >= 0 && !sh->disabled) {
		pid_t pid = spawn_exec(sh, plan, io);
		if (pid > 0)
			return pid;
		if (pid == -ENOMEM)
			return pid;
		/* E.g. memfds not executable here (vm.memfd_noexec): the fork
		 * path from now on. */
		sh->disabled = true;
		sh->disabled_errno = -pid;
	}
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0)
		shim_main(plan, io);
	return pid;
}
