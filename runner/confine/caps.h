/* Capabilities and securebits of a task (docs/design/confinement.md#in-the-task-in-this-order steps
 * 4-5). The parent inspects the runner once at start (libcap-ng); the task child then uses only
 * prctl and the raw capset system call, which are async-signal-safe (libcap-ng's capng_apply reads
 * /proc and may allocate, so it is not used between fork and execve). */
#pragma once
#include <linux/capability.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a root runner needs for full confinement, and why (docs/design.md
 * design/privilege.md#what-a-root-runner-needs): --cap-drop ALL --cap-add
 * SETUID,SETGID,SETPCAP,CHOWN,KILL SETUID   setresuid to the task user; setfsuid for the files API
 *   SETGID   setgroups/setresgid; setfsgid for the files API
 *   SETPCAP  empty the task's bounding set, lock its securebits
 *   CHOWN    hand the task its stdio pipes (fchown), so /dev/stdout works
 *   KILL     signal task trees, which run as another uid */
#define CAPS_REQUIRED                                                                              \
	((1ULL << CAP_SETUID) | (1ULL << CAP_SETGID) | (1ULL << CAP_SETPCAP) |                     \
	 (1ULL << CAP_CHOWN) | (1ULL << CAP_KILL))
/* With --allow-reset a root runner also restores the writable roots, whose
 * entries belong to the task user or to anyone (docs/design/privilege.md#what-a-root-runner-needs):
 *   DAC_OVERRIDE  read, write and search directories and files of others
 *   FOWNER        chmod, utimes and sticky-directory removal of others' entries
 *   FSETID        keep a setgid bit that chmod would clear for another group */
#define CAPS_RESET ((1ULL << CAP_DAC_OVERRIDE) | (1ULL << CAP_FOWNER) | (1ULL << CAP_FSETID))

struct caps_state {
	int last_cap;        /* highest capability the kernel knows (cap_last_cap) */
	uint64_t bounding;   /* the runner's bounding set at start (report) */
	uint64_t effective;  /* the runner's effective set at start (report) */
	bool privileged;     /* every CAPS_REQUIRED capability effective: the child
			      * can change identity, empty the bounding set and
			      * lock securebits, the runner can signal task trees */
	bool root;           /* euid 0 */
	uint64_t required;   /* what a root runner needs with this configuration */
	bool sys_resource;   /* CAP_SYS_RESOURCE: rlimits may exceed our hard limits */
	unsigned securebits; /* the runner's own securebits at start */
};

/* Parent, at start. Fails (err set, naming every missing capability and
 * the fix) when the runner is root without all of CAPS_REQUIRED (and
 * CAPS_RESET when `reset`, i.e. --allow-reset): a root
 * runner that reported ready and then failed every task (or could not kill
 * one) would be worse than one that does not start. A runner that is not
 * root runs in non-root mode instead. */
struct error;
int caps_init(struct caps_state *st, bool reset, struct error *err);

/* "CAP_CHOWN, CAP_KILL" (the CAP_ names of the bits in mask) into buf;
 * with `bare`, podman's spelling "CHOWN,KILL". Returns buf. */
char *caps_names(uint64_t mask, bool bare, char *buf, size_t len);

/* Child side, async-signal-safe; each returns 0 or -errno. */
int caps_drop_bounding(const struct caps_state *st);   /* needs CAP_SETPCAP */
int caps_lock_securebits(const struct caps_state *st); /* needs CAP_SETPCAP */
/* Empty the effective, permitted and inheritable sets (capset) and the
 * ambient set, then read them back to be sure. */
int caps_clear_all(void);

/* The securebits a task runs with: NOROOT, NO_SETUID_FIXUP and
 * NO_CAP_AMBIENT_RAISE set, KEEP_CAPS clear, all four locked. */
unsigned caps_task_securebits(void);
