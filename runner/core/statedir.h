/* The runner's private state directory (task output spools). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

struct error;
struct runner_config;

/* Open the state directory, creating it 0700; it must be a directory of
 * ours (euid), reached without following a symlink; group/other bits are
 * tightened away. An explicit --state-dir is the only candidate. Without
 * one the default comes first; where it cannot be created (a non-root
 * runner, a read-only root filesystem) the fallbacks follow:
 * $XDG_RUNTIME_DIR/forceai-runner, then /tmp/forceai-runner-<euid>. A
 * candidate owned by someone else is never used. Returns the fd (path in
 * `path`, `fallback` set when it is not the first candidate), or -1 with
 * every candidate's reason in err. */
int statedir_open(const struct runner_config *cfg, char *path, size_t pathlen, bool *fallback,
		  struct error *err);

/* Non-root mode: tasks have the runner's uid, so the state dir is theirs
 * unless Landlock keeps them from writing it. 1 when `dir` is task-
 * reachable: Landlock not in force (ll_abi 0), or `dir` is one of the
 * colon-separated writable `roots` or below one (paths resolved, at start,
 * before any task runs); the reason goes into why. 0 when it lies outside
 * them all. */
int statedir_task_reachable(const char *dir, int ll_abi, const char *roots, char *why,
			    size_t whylen);

/* An unnamed file for state of the runner's (a spool, the reset store, a
 * conversation's history), open read-write, close-on-exec: O_TMPFILE in
 * the state dir (dirfd), else a memfd (memfd_name) where there is no state
 * dir (dirfd < 0) or the filesystem has no O_TMPFILE. Never a name a task
 * can open (docs/design/security.md#the-state-dir-is-out-of-the-tasks-reach-in-every-mode): a file
 * created and unlinked at once stands for a moment in the directory, so that is done only by a root
 * runner, whose 0700 state dir no task's uid can open; a non-root runner's
 * tasks have its uid and takes a memfd instead. The fd, or -errno. */
int statedir_tmpfile(int dirfd, const char *memfd_name);
