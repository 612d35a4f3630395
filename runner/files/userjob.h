/* File work done as the task user, in slices: the one job of the files API (api/files*.c)
 * and of the file tools (tools/). Each slice switches to the task user (files/ident.h), runs
 * the job's step until its deadline and switches back; a job with more to do goes on in the
 * loop's turns (files/sched.h), so a large tree or file never stalls the runner. What a job
 * holds is released as the task user too: descriptors it opened, temporaries it made. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "files/ident.h"
#include "files/sched.h"

struct runner;
struct files_userjob;
/* One slice, as the task user: 1 = more to do, 0 = done, -1 = failed (j->err set). */
typedef int (*files_userjob_step_fn)(struct files_userjob *j, uint64_t deadline_ms);
typedef void (*files_userjob_fn)(struct files_userjob *j);

struct files_userjob {
	struct files_job sj; /* first: the scheduler's view */
	struct runner *r;
	struct files_ident id;
	files_userjob_step_fn step;
	files_userjob_fn done;    /* it ended in the loop's turns (j may be freed by it) */
	files_userjob_fn release; /* frees what it holds; called as the task user */
	struct error err;         /* why it failed (files/fserror.h for a -errno) */
	bool failed;
};

/* The task user as the files layer acts for it: its uid and gid, and the Landlock roots
 * tasks may write beneath when Landlock runs (neither may file work on their behalf). */
void files_task_ident(const struct runner *r, struct files_ident *id);

/* A job of r's task user (its identity taken now); done and release may be NULL. */
void files_userjob_init(struct files_userjob *j, struct runner *r, files_userjob_step_fn step,
			files_userjob_fn done, files_userjob_fn release);
/* One slice as the task user: 1 = more to do, 0 = over (j->failed with j->err if it
 * failed, acting as the user included). */
int files_userjob_slice(struct files_userjob *j, uint64_t deadline_ms);
/* Go on in the loop's turns: a slice each, then done(). 0 or -errno. */
int files_userjob_schedule(struct files_userjob *j);
/* Off the loop's turns, and release() run as the task user (as the runner if the user
 * cannot be acted as: what the job holds must be freed anyway). */
void files_userjob_release(struct files_userjob *j);

/* The directory path names for the task user: resolved as it would be (its search rights on
 * every directory, ordinary links followed, magic ones not), its real path into out (what was
 * resolved, to be recorded). 0 or -errno. */
int files_user_realpath(const struct files_ident *id, const char *path, char *out, size_t outsz);
/* True when the task user can resolve the parent directory of the clean path and it is
 * the directory pfd (the runner's own resolution): every directory above is searchable. */
bool files_user_reaches_parent(const struct files_ident *id, const char *path, int pfd);
