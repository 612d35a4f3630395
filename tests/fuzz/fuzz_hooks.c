/* Linked into the fuzz targets that take the runner's objects without
 * main.c (libFuzzer brings main()): a spawn_task that must never be reached
 * (-Wl,--wrap=spawn_task) unless the target says so (fuzz_http's fake
 * tasks, made before fuzzing starts). */
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "task/spawn.h"

/* Set by a target that installs its own fake spawner. */
pid_t (*fuzz_spawn_hook)(struct confine_plan *plan, const struct spawn_io *io);
/* Where findings are written: a target that closes stderr (-close_fd_mask=2)
 * points this at a copy of it. */
int fuzz_diag_fd = STDERR_FILENO;

pid_t __wrap_spawn_task(struct spawn_shim *sh, struct confine_plan *plan,
			const struct spawn_io *io);
pid_t __wrap_spawn_task(struct spawn_shim *sh, struct confine_plan *plan, const struct spawn_io *io)
{
	(void)sh;
	if (fuzz_spawn_hook)
		return fuzz_spawn_hook(plan, io);
	static const char msg[] = "fuzz: a request reached spawn_task: no process may be spawned\n";
	(void)!write(fuzz_diag_fd, msg, sizeof(msg) - 1);
	abort();
}
