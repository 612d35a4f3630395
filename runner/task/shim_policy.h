/* What the runner hands the exec'd task shim (runner/shim/main.c): the
 * confinement policy, in a fixed little format both sides read the same
 * whatever libc built them, written once at start into a sealed memfd that
 * every shim inherits; the per-task part travels in the shim's argv (its
 * layout below; spawn.c writes it). */
#pragma once
#include <linux/filter.h>
#include <stdint.h>

#include "confine/confine.h"

#define SHIM_MAGIC "FRSHIMW1"
#define SHIM_ARGV_LEN 15 /* shim argv before the task's own argv */
/* Or'ed into NFDS: fd NFDS is the status pipe (task/spawn.h, linger_fd). */
#define SHIM_ARGV_LINGER 0x100

struct shim_policy_rlimit {
	int32_t resource;
	uint32_t pad;
	uint64_t cur, max;
};

struct shim_policy_image {
	char magic[8];
	uint32_t size; /* this header and the seccomp program */
	uint32_t enabled, allow_root_tasks, privileged;
	int32_t last_cap;
	uint32_t securebits;
	uint32_t n_rlimits;
	struct shim_policy_rlimit rlimits[8];
	uint32_t seccomp_flags, seccomp_len;
	/* Refusals explained (docs/design/confinement.md#every-refusal-recorded): the notifying
	 * program's length (0: none), its instructions after the plain program's; the runner's
	 * report socket (-1: none). */
	uint32_t notify_len;
	int32_t report_fd;
	struct sock_filter netdeny[NETDENY_LEN];
	struct sock_filter seccomp[]; /* seccomp_len + notify_len instructions */
};

/* Runner side: the policy as a sealed memfd (close-on-exec; the spawn
 * child keeps it open for the shim). The fd or -errno. */
int shim_policy_write(const struct confine_policy *pol, int report_fd);
/* Shim side: map fd and fill pol (landlock fds as given) and *report_fd. 0 or -errno. */
int shim_policy_read(int fd, struct confine_policy *pol, int ll_fd, int ll_root_fd, int *report_fd);

/* The spare shim (task/prefork.c): exec'd ahead of any task as
 *   argv: forceai-shim FRSHIMS1 SOCK_FD
 * it waits on SOCK_FD (a SOCK_SEQPACKET pair with the runner) for one
 * message: this header, then argc + envc NUL-terminated strings (the argv
 * a fresh shim would have been exec'd with, then its environment), and
 * SCM_RIGHTS fds: the task's n_task fds (placed at 0..n_task-1), the status
 * pipe if linger (at n_task), then n_keep fds placed at keep_at[] (the
 * numbers the argv and the policy name). Then it is that fresh shim. */
#define SHIM_SPARE_MAGIC "FRSHIMS1"
#define SHIM_HANDOFF_MAX (128 * 1024)
struct shim_handoff {
	char magic[8];
	uint32_t n_task, linger, n_keep;
	int32_t keep_at[5];
	uint32_t argc, envc;
};
