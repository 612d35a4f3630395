/* Spawning a task: the runner forks a small shim that is the child
 * subreaper of the task's whole tree, and the shim forks the confined task.
 * Every orphan of the task is reparented to its shim, so the tree is known
 * even after setsid() or a double fork, without cgroups.
 *
 * Shim control: SIGTERM = terminate the tree (SIGTERM to all of it),
 * SIGUSR1 = kill the tree (SIGKILL), SIGUSR2 with a value = that signal to
 * the task's process group. When the task's main process exits the
 * shim kills what is left of the tree and exits with the same status (exit
 * code, or death by the same signal). */
#pragma once
#include <sys/types.h>

#include "confine/confine.h"

#define SHIM_SIG_TERM SIGTERM
#define SHIM_SIG_KILL SIGUSR1
/* sigqueue()d by the runner with the signal number as value: the shim
 * sends it to the task's process group. */
#define SHIM_SIG_FORWARD SIGUSR2

struct spawn_io {
	int in_fd, out_fd, err_fd; /* become the task's 0, 1, 2 */
	int extra[2];              /* become 3, 4 */
	int n_extra;
};

/* Returns the shim's pid or -errno. The plan's nkeep_fds is set here. */
pid_t spawn_task(struct confine_plan *plan, const struct spawn_io *io);
