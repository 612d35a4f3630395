/* Confinement of one task process (docs/design/confinement.md). The parent prepares a
 * confine_policy once at start and a confine_plan per task; the child calls
 * confine_exec() between fork and execve and uses only async-signal-safe
 * calls there. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <jansson.h>

#include "confine/caps.h"
#include "confine/cgroup.h"
#include "confine/landlock.h"
#include "confine/netdeny.h"
#include "confine/seccomp_policy.h"

struct confine_rlimit {
	int resource;        /* RLIMIT_* */
	struct rlimit value; /* applied with setrlimit in the child */
};

/* enum cgroup_mode: see cgroup.h. */

/* Prepared once at runner start; read-only afterwards. */
struct confine_policy {
	bool enabled;                  /* false only with the test-only --insecure-no-confine */
	struct seccomp_policy seccomp; /* compiled BPF program */
	struct netdeny netdeny;        /* network policy "none", stacked when asked */
	int landlock_ruleset_fd;       /* -1 when the kernel has no Landlock */
	int landlock_abi;              /* 0 when absent */
	struct confine_rlimit rlimits[8];
	size_t n_rlimits;
	enum cgroup_mode cgroup_mode;
	uint64_t pids_per_task; /* pids.max of each task's cgroup; 0 = no per-task bound */
	bool allow_root_tasks;
	/* Filled by confine_policy_init, for the child and the report. */
	struct caps_state caps;        /* cap_last_cap, whether we can change identity */
	struct landlock_info landlock; /* ABI, writable roots, reason when absent */
	uid_t task_uid;                /* the default task identity (config) */
	gid_t task_gid;
};

/* Per task, built in the parent before fork. */
struct confine_plan {
	const struct confine_policy *policy;
	const char *path; /* absolute path of the program to execve */
	char *const *argv;
	char *const *envp; /* already clean: built by env.c */
	const char *cwd;
	uid_t uid;
	gid_t gid;
	int cgroup_procs_fd; /* open cgroup.procs of the task's leaf, or -1 */
	int nkeep_fds;       /* fds 0..nkeep_fds-1 survive; the rest are closed */
	bool deny_inet;      /* network policy "none": no AF_INET/AF_INET6 sockets */
	bool ctty;           /* fd 0 is a terminal: make it the controlling one */
	int pdeath_signal;   /* 0, or re-armed after the identity change (which
			      * clears PR_SET_PDEATHSIG); the child exits if its
			      * parent is already gone by then */
	/* Refusals explained (docs/design/confinement.md#every-refusal-recorded): NULL, or where
	 * the child stores the seccomp listener fd (-1: none) for its supervisor, which shares the
	 * child's memory and fd table until execve (the shim's clone). */
	int *listener_out;
	int supervisor_fd; /* the supervisor's own fd the child's fd sweep spares (close-on-exec) */
	int supervisor_fd2; /* another (the shim's status pipe, task/spawn.h), or -1 */
};

/* Child side: every step of docs/design/confinement.md#in-the-task-in-this-order in order, then
 * execve. Never returns. Also resets signal dispositions and unblocks every signal (the runner
 * blocks the ones it reads through a signalfd). The cwd is entered after
 * the identity change, with the task's own rights. Keeps the Landlock
 * ruleset fd it needs and plan->cgroup_procs_fd open across the fd sweep
 * until used. Stdio pipes (anonymous, among the kept fds) are handed to the
 * task uid so /dev/stdout and /proc/self/fd/N can be reopened. On failure writes one line naming
 * the step and errno to fd 2 ("forceai-runner: confine: <step>: <ERRNO> (errno N)") and exits 126
 * (confinement failed); execve failing exits 127 for ENOENT/ENOTDIR (not found) and 126 otherwise
 * (found but not runnable). */
_Noreturn void confine_exec(const struct confine_plan *plan);

/* Async-signal-safe: close every fd >= lowfd except the policy's Landlock
 * ruleset fds (the task child still needs one), `keep` and `keep2` (-1: none). For an
 * intermediate process between the runner and confine_exec (spawn's shim).
 * Returns 0 or -errno. */
int confine_close_fds(const struct confine_policy *pol, int lowfd, int keep, int keep2);

/* Parent side, at start: detect Landlock, build the ruleset, compile the
 * seccomp policy from `seccomp_path` (or take its verified cache: beside the
 * policy, or in cache_dirfd, the state dir; -1 = none), default rlimits.
 * Returns 0, or -1 with err set. Fail closed: the caller exits when this
 * fails. */
struct runner_config;
struct error;
int confine_policy_init(struct confine_policy *pol, const struct runner_config *cfg,
			int cache_dirfd, struct error *err);
void confine_policy_free(struct confine_policy *pol);

/* What is in force, for GET /v1/hardening and the start log line:
 * {"enabled", "seccomp": {"policy", "allowed_syscalls", "default_action",
 * "architecture"}, "capabilities", "securebits", "no_new_privs",
 * "landlock": {"abi" (null when absent), "writable_roots", "skipped_roots",
 * "scoped", "reason"}, "cgroup": {"mode", "reason"}, "rlimits": {...},
 * "task_uid", "task_gid", "root_tasks_allowed"}. New reference. */
json_t *confine_report(const struct confine_policy *pol);
