/* Process trees seen through /proc: used where cgroups are not delegated to
 * find processes that left their process group or session. */
#pragma once
#include <stddef.h>
#include <sys/types.h>

/* Signal every direct child of `parent` except `except` (0 = none).
 * Returns the number signalled. */
int proctree_kill_children(pid_t parent, int sig, pid_t except);
/* Signal every descendant of `root` (not root itself), deepest tree walk
 * from one /proc snapshot. Returns the number signalled. */
int proctree_kill_descendants(pid_t root, int sig);
/* Up to max descendants of `root` (not root) into pids, from one /proc
 * snapshot; *total: how many there are. Returns how many were stored. */
size_t proctree_descendants(pid_t root, pid_t *pids, size_t max, size_t *total);
