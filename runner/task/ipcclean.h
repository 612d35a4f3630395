/* IPC objects a tenant can leave behind that outlive its processes: SysV
 * shared memory, semaphores and message queues, and POSIX message queues
 * (when the mqueue file system is mounted, as container runtimes do at
 * /dev/mqueue). POSIX shared memory and semaphores live in /dev/shm, which
 * the reset restores like a writable root. Only for a runner that owns its
 * IPC namespace (PID 1 of a container): elsewhere these are the host's. */
#pragma once
#include <stdbool.h>
#include <sys/types.h>

struct error;

struct ipc_stats {
	unsigned shm, sem, msg, mqueue; /* removed */
	bool mqueue_checked;
};

/* Remove every object whose owner or creator is one of uids (any uid but
 * root and ours when all_uids). 0, or -1 with e set. */
int ipc_clean(const uid_t *uids, unsigned n, bool all_uids, struct ipc_stats *st, struct error *e);
