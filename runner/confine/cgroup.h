/* Per-task cgroup v2 leaves (docs/design/confinement.md#in-the-task-in-this-order step 2):
 * memory.max, pids.max and cpu.max per task, and cgroup.kill to end a whole task tree, used where
 * the box's cgroup v2 hierarchy is delegated to the runner. Elsewhere (e.g.
 * hybrid v1/v2 hosts like the development machine) the mode is CGROUP_NONE
 * and the runner falls back to rlimits and its process-tree kill; the
 * reason is part of the hardening report.
 *
 * State is process-wide (there is one cgroup hierarchy); the functions are
 * parent-side only. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

enum cgroup_mode { CGROUP_NONE = 0, CGROUP_V2 = 1 };

/* Detect and prepare at start, on /sys/fs/cgroup. In v2 mode, when the
 * runner's own cgroup still holds processes, they are moved to a "runner"
 * leaf so controllers can be enabled for the task leaves ("no internal
 * processes" rule). Never fails: a problem means CGROUP_NONE + reason. */
enum cgroup_mode cgroup_init(void);
/* Why the mode is what it is (for the hardening report). */
const char *cgroup_mode_reason(void);
/* Is the pids controller enabled for the task leaves (pids.max per task)? */
bool cgroup_has_pids(void);

/* Create the task's leaf with its limits (0 / NULL = no limit) and open its
 * cgroup.procs for the child to join (confine_plan.cgroup_procs_fd; close it
 * in the parent after fork). task_id: [A-Za-z0-9_-], at most 64 chars.
 * Returns 0 or -errno (-EOPNOTSUPP in CGROUP_NONE mode). */
int cgroup_task_create(const char *task_id, uint64_t mem_max, uint64_t pids_max,
		       const char *cpu_max, int *procs_fd);
/* SIGKILL every process of the task's leaf, including those that called
 * setsid() or double-forked (cgroup.kill; a kill loop on kernels < 5.14).
 * Returns 0 or -errno. */
int cgroup_task_kill(const char *task_id);
/* Remove the (empty) leaf once the tree is reaped; errors are ignored. */
void cgroup_task_remove(const char *task_id);
