/* Long files-API work (line scans, tree walks, replace) cut into slices:
 * the loop runs one slice of at most FILES_SLICE_MS per turn, jobs in turn,
 * so nothing else waits longer than one slice, however many jobs run. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/loop.h"

#define FILES_SLICE_MS 2

struct files_job;
/* One slice: work until deadline_ms (monotonic). 1 = more to do, 0 = done
 * (the job is then taken off the scheduler and done() is called). */
typedef int (*files_step_fn)(struct files_job *j, uint64_t deadline_ms);
typedef void (*files_done_fn)(struct files_job *j);

struct files_job {
	files_step_fn step;
	files_done_fn done;
	struct files_job *next, *prev;
	bool queued;
};

/* Lives in struct runner; all zero = idle. Its timer exists while jobs do. */
struct files_sched {
	struct loop *loop;
	struct loop_timer timer;
	bool timer_open;
	struct files_job *head, *tail;
	unsigned n;
};

/* Queue a job (its step and done set). 0 or -errno. */
int files_sched_add(struct files_sched *s, struct loop *loop, struct files_job *j);
/* Take a job off before it is done (its request went away). */
void files_sched_remove(struct files_sched *s, struct files_job *j);
