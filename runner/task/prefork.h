/* The spare shim: one task shim exec'd ahead of the request (after a task's
 * start, from a loop hook that runs after the HTTP pump), blocked until the
 * next task's start hands it the argv, environment and fds a fresh shim
 * would have been exec'd with (shim_policy.h, struct shim_handoff). It then
 * runs exactly as a fresh shim: every confinement step happens after the
 * hand-off, in the task's child. No spare, a dead one or a failed hand-off:
 * the fresh shim (spawn_task). docs/design/tasks.md#the-spare-shim. */
#pragma once
#include <stdbool.h>
#include <sys/types.h>

#include "core/loop.h"
#include "task/spawn.h"

struct runner;

struct prefork {
	pid_t pid;   /* the spare, or -1 */
	int sock;    /* the runner's end of its SOCK_SEQPACKET pair, or -1 */
	bool want;   /* a task started since the last spare was made */
	bool broken; /* a spare could not be made: never again */
	bool hooked;
	struct loop_hook hook;
};

/* Instead of spawn_task: hands the task to the spare if there is one. */
pid_t prefork_spawn(struct runner *r, struct confine_plan *plan, const struct spawn_io *io);
/* The spare SIGKILLed and reaped now (reset, shutdown); the next task start
 * asks for a new one. */
void prefork_kill(struct runner *r);
void prefork_free(struct runner *r);
