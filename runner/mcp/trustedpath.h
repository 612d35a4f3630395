/* Paths no task can change (docs/design/files.md#content-search-get-filesgrep): an MCP server the
 * runner starts runs a program, and looks its helpers up in directories, that are root's and out of
 * the tasks' reach, so that a task that kills the server (it can: same uid) gets it back exactly as
 * it was. */
#pragma once
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core/error.h"

/* What a path check found. */
struct pcheck {
	gid_t task_gid; /* the task user's group: its bits open a root's file */
	/* With --allow-root-tasks, root's files beneath the Landlock writable
	 * roots are a root task's to change: those roots (colon-separated),
	 * or NULL. */
	const char *roots;
	bool missing;     /* a name on the way does not exist */
	bool unreachable; /* the task user cannot search a directory or run the file */
	char why[300];
};

/* p as written and as resolved (a link's target lies elsewhere): "/",
 * every directory on the way and p itself root's, not writable by a task
 * (its group or others), reachable by the task user, and not beneath the
 * writable roots when root tasks are allowed. false with c's why set. */
bool path_trusted(const char *p, struct pcheck *c);
/* The runner's PATH without the directories a task could put a program in
 * (relative ones, the tasks' own) or cannot use (said in the log for
 * server): the server looks its own helpers up there (npx runs node, a
 * Python server runs git). A new string, or NULL when out of memory. */
char *trusted_path(const char *server, const struct pcheck *tmpl);
/* The program as bash would find it in path, but decided here: an absolute
 * path (a relative one is taken from the server's cwd, "/"), refused
 * unless path_trusted. A new string, or NULL with err set. */
char *resolve_program(const char *prog, const char *path, const struct pcheck *tmpl,
		      struct error *err);
