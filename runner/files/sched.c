/* The files-API slice scheduler: see sched.h. */
#include "files/sched.h"

#include <errno.h>
#include <stddef.h>

#include "core/list.h"
#include "core/log.h"

static void unlink_job(struct files_sched *s, struct files_job *j)
{
	LIST_UNLINK_TAIL(s->head, s->tail, j);
	j->queued = false;
	s->n--;
}

static void append_job(struct files_sched *s, struct files_job *j)
{
	LIST_APPEND_TAIL(s->head, s->tail, j);
	j->queued = true;
	s->n++;
}

static void idle(struct files_sched *s)
{
	/* No job left: give the timer's descriptor back. The struct itself
	 * stays (it is part of struct runner), so a stale event of this batch
	 * finds the watch removed and is skipped. */
	if (!s->head && s->timer_open) {
		loop_timer_close(s->loop, &s->timer);
		s->timer_open = false;
	}
}

static void on_turn(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct files_sched *s = t->arg;
	struct files_job *j = s->head;
	if (!j) {
		idle(s);
		return;
	}
	/* The job runs its slice at the head; then it goes to the back. */
	int more = j->step(j, monotonic_ms() + FILES_SLICE_MS);
	if (j->queued) { /* step may not take itself off, but be safe */
		unlink_job(s, j);
		if (more > 0)
			append_job(s, j);
	}
	if (more <= 0)
		j->done(j);
	if (s->head) {
		if (loop_timer_start(s->loop, &s->timer, 0, 0) < 0)
			log_errno("files: cannot re-arm the slice timer", errno, NULL);
	} else {
		idle(s);
	}
}

int files_sched_add(struct files_sched *s, struct loop *loop, struct files_job *j)
{
	s->loop = loop;
	if (!s->timer_open) {
		int rc = loop_timer_init(loop, &s->timer, on_turn, s);
		if (rc < 0)
			return rc;
		s->timer_open = true;
	}
	int rc = loop_timer_start(loop, &s->timer, 0, 0);
	if (rc < 0) {
		idle(s);
		return rc;
	}
	append_job(s, j);
	return 0;
}

void files_sched_remove(struct files_sched *s, struct files_job *j)
{
	if (!j->queued)
		return;
	unlink_job(s, j);
	idle(s);
}
