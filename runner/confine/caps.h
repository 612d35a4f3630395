/* Capabilities and securebits of a task (docs/design.md §5.2 steps 4-5). The parent
 * inspects the runner once at start (libcap-ng); the task child then uses
 * only prctl and the raw capset system call, which are async-signal-safe
 * (libcap-ng's capng_apply reads /proc and may allocate, so it is not used
 * between fork and execve). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct caps_state {
	int last_cap;       /* highest capability the kernel knows (cap_last_cap) */
	uint64_t bounding;  /* the runner's bounding set at start (report) */
	bool privileged;    /* CAP_SETUID, CAP_SETGID and CAP_SETPCAP effective:
			     * the child can change identity, empty the bounding
			     * set and lock securebits */
	bool sys_resource;  /* CAP_SYS_RESOURCE: rlimits may exceed our hard limits */
	unsigned securebits; /* the runner's own securebits at start */
};

/* Parent, at start. Fails (err set) when the runner is root without the
 * capabilities confinement needs: better not start than run tasks with a
 * bounding set we could not empty. */
struct error;
int caps_init(struct caps_state *st, struct error *err);

/* Child side, async-signal-safe; each returns 0 or -errno. */
int caps_drop_bounding(const struct caps_state *st); /* needs CAP_SETPCAP */
int caps_lock_securebits(const struct caps_state *st); /* needs CAP_SETPCAP */
/* Empty the effective, permitted and inheritable sets (capset) and the
 * ambient set, then read them back to be sure. */
int caps_clear_all(void);

/* The securebits a task runs with: NOROOT, NO_SETUID_FIXUP and
 * NO_CAP_AMBIENT_RAISE set, KEEP_CAPS clear, all four locked. */
unsigned caps_task_securebits(void);
