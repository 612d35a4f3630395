/* Spawning a task: the runner forks a small shim that is the child
 * subreaper of the task's whole tree, and the shim forks the confined task.
 * Every orphan of the task is reparented to its shim, so the tree is known
 * even after setsid() or a double fork, without cgroups.
 *
 * Shim control: SIGTERM = terminate the tree (SIGTERM to all of it),
 * SIGUSR1 = kill the tree (SIGKILL), SIGUSR2 with a value = that signal to
 * the task's process group. When the task's main process exits the
 * shim kills what is left of the tree and exits with the same status (exit
 * code, or death by the same signal) — unless it was given a status pipe
 * (spawn_io.linger_fd): it then writes the main process's wait status into
 * the pipe (struct spawn_status) and closes it. With part of the tree left
 * (.ended 0) it goes on supervising the left-behind processes (signals as
 * above) until none is left, then exits like the task (docs/design.md
 * design/tasks.md#left-behind-processes-kept-supervised); with nothing left (.ended 1) it only
 * exits: the runner ends the task without waiting for that exit (a wake-up less on every round
 * trip). EOF without a status: the shim was stopped before its task ended. */
#pragma once
#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

#include "confine/confine.h"

#define SHIM_SIG_TERM SIGTERM
#define SHIM_SIG_KILL SIGUSR1
/* sigqueue()d by the runner with the signal number as value: the shim
 * sends it to the task's process group. */
#define SHIM_SIG_FORWARD SIGUSR2

/* What the shim writes into the status pipe (one write, under PIPE_BUF). */
struct spawn_status {
	int status; /* the main process's wait status */
	int ended;  /* 1: nothing of its tree is left, the shim exits now */
};

struct spawn_io {
	int in_fd, out_fd, err_fd; /* become the task's 0, 1, 2 */
	int extra[2];              /* become 3, 4 */
	int n_extra;
	int linger_fd; /* write end of the status pipe, or -1: kill the tree on exit */
};

/* The shim is a small static program embedded in the runner (runner/shim/,
 * task/shim_blob.c), exec'd from a sealed memfd by a CLONE_VM|CLONE_VFORK
 * child: the runner's address space is never copied. Where that cannot
 * work (memfds not executable), the shim is fork()ed as before. */
struct exec_child;

struct spawn_shim {
	int exe_fd;    /* sealed memfd holding the shim binary; -1: none */
	int policy_fd; /* sealed memfd with the policy (shim_policy.h) */
	bool disabled; /* exec failed once: fork from then on */
	/* Refusals explained (confine/seccomp_notify.h): every shim sends its task's report on
	 * report_wr (a datagram socket pair, close-on-exec, never the task's); the runner reads
	 * report_rd as it reaps. -1: none (then no refusal is counted). */
	int report_rd, report_wr;
	int disabled_errno;
	/* The exec child's record and stack, made at the first spawn and kept:
	 * a fresh 20 KiB one per task was an mmap, page faults on its zeroing
	 * and an munmap. One is enough: the runner waits while the child runs
	 * on it (CLONE_VFORK). */
	struct exec_child *child;
};

/* At start, after the policy is final. 0 or -errno (then: fork). */
int spawn_shim_init(struct spawn_shim *sh, const struct confine_policy *pol);
void spawn_shim_free(struct spawn_shim *sh);

/* Returns the shim's pid or -errno. The plan's nkeep_fds is set here.
 * sh may be NULL (fork). */
pid_t spawn_task(struct spawn_shim *sh, struct confine_plan *plan, const struct spawn_io *io);

/* The exec'd shim with io at 0..n-1, the keep fds (-1: none) inherited at
 * their numbers, nothing else: its pid or -errno (task/prefork.c). */
pid_t spawn_shim_exec(struct spawn_shim *sh, const struct spawn_io *io, char *const *argv,
		      char *const *envp, const int keep[5]);
/* The argv of an exec'd shim for this task (runner/shim/main.c); nums holds
 * its numbers, keep the fds it inherits. Freed by the caller; NULL: no memory. */
char **spawn_shim_argv(const struct spawn_shim *sh, const struct confine_plan *plan,
		       const struct spawn_io *io, char nums[11][24], int keep[5]);

/* The shim's own part, shared by the fork()ed and the exec'd shim. */
void spawn_shim_signals(sigset_t *set);
_Noreturn void spawn_shim_run(struct confine_plan *plan, int n, int linger_fd, const sigset_t *set);
