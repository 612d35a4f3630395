/* The task table (task/task.h): the list of records, their keys, retention, and the one
 * teardown of a record. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "confine/cgroup.h"
#include "core/ids.h"
#include "core/list.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/randomid.h"
#include "task/internal.h"
#include "task/pty.h"
#include "task/task.h"

/* A mapped spool puts up to task-log-max of page cache, which exists
 * either way, in the runner's RSS: a few bulk writers at a time get it. */
#define TASK_SPOOL_MAPS 4

int tasks_init(struct runner *r)
{
	r->tasks = calloc(1, sizeof(*r->tasks));
	if (!r->tasks)
		return -1;
	r->tasks->spool_maps.max = TASK_SPOOL_MAPS;
	r->tasks->pipes_done = task_maybe_finalize;
	if (random_id(r->tasks->key_instance) < 0)
		return -1;
	int drc = task_drain_open(r->tasks->drain);
	if (drc < 0)
		log_warn("no drain pipe: bulk output is read straight from the task's pipe",
			 "{s:s}", "error", strerror(-drc));
	int trc = loop_timer_init(&r->loop, &r->tasks->rest_timer, task_on_rest_over, r->tasks);
	if (trc < 0)
		log_warn(
			"no timer for output coalescing: pipes are read as soon as they are readable",
			"{s:s}", "error", strerror(-trc));
	r->tasks->prefork.pid = r->tasks->prefork.sock = -1;
	int rc = spawn_shim_init(&r->tasks->shim, r->policy);
	if (rc < 0)
		log_warn("task shim not available: shims are forked", "{s:s}", "error",
			 strerror(-rc));
	return 0;
}

void tasks_set_hooks(struct runner *r, const struct task_hooks *hooks)
{
	r->tasks->hooks = hooks;
}

unsigned tasks_running(struct runner *r)
{
	return r->tasks ? r->tasks->running : 0;
}

struct task *task_find(struct runner *r, const char *id)
{
	for (struct task *t = r->tasks->head; t; t = t->next)
		if (!strcmp(t->id, id))
			return t;
	return NULL;
}

struct task *task_find_key(struct runner *r, enum task_api api, const char *key)
{
	for (struct task *t = r->tasks->head; t; t = t->next)
		if (t->op_key && t->api == api && !strcmp(t->op_key, key))
			return t;
	return NULL;
}

int task_set_key(struct task *t, const char *key, const unsigned char hash[32])
{
	char *k = strdup(key);
	if (!k)
		return -ENOMEM;
	free(t->op_key);
	t->op_key = k;
	memcpy(t->op_hash, hash, 32);
	return 0;
}

unsigned tasks_pinned(struct runner *r)
{
	uint64_t now = monotonic_ms();
	unsigned n = 0;
	for (struct task *t = r->tasks->head; t; t = t->next)
		n += t->op_key && t->key_until_mono > now;
	return n;
}

void task_link(struct task *t)
{
	struct runner *r = t->r;
	LIST_PUSH(r->tasks->head, t);
	t->linked = true;
	if (r->tasks->hooks && r->tasks->hooks->started)
		r->tasks->hooks->started(t);
}

static void task_unlink(struct task *t)
{
	struct runner *r = t->r;
	if (!t->linked)
		return;
	LIST_UNLINK(r->tasks->head, t);
	t->linked = false;
	if (t->finished)
		r->tasks->finished--;
}

/* The one teardown, whatever state the record is in: never started (a
 * failed start), running (runner exit) or finished. */
void task_free(struct task *t)
{
	if (!t)
		return;
	struct runner *r = t->r;
	task_unlink(t);
	task_rest_forget(t);
	if (r->tasks && r->tasks->rbuf_owner == t)
		r->tasks->rbuf_owner = NULL;
	if (t->driver && t->driver->release)
		t->driver->release(t);
	t->driver = NULL;
	if (t->exit_hold) /* the owner forgets it (held, or never finished) */
		t->exit_hold(t, t->exit_hold_arg, true);
	t->exit_hold = NULL;
	if (t->held_ev) /* its end is still a fact the trail keeps */
		task_audit_ended(t, t->held_ev);
	json_decref(t->held_ev);
	t->held_ev = NULL;
	if (t->on_finish) {
		/* Never finished (runner exit): let the owner drop its state. */
		json_t *ev = json_object();
		t->on_finish(t, ev);
		json_decref(ev);
		t->on_finish = NULL;
	}
	loop_timer_close(&r->loop, &t->timer);
	task_io_free(t);
	for (int i = 0; i < 2; i++)
		task_close_pipe(t, i);
	task_linger_close(t);
	if (t->proc_running)
		reaper_forget(&r->reaper, t->shim_pid);
	if (t->cgroup)
		cgroup_task_remove(t->id);
	spool_close(&t->spool);
	free(t->command);
	free(t->cwd);
	free(t->op_key);
	json_decref(t->denied);
	free(t);
}

static void task_free_deferred(struct loop *loop, void *arg)
{
	(void)loop;
	task_free(arg);
}

/* Finished records are kept for a bounded time and count; ones a client
 * still reads from stay until it lets go. */
static void expire_records(struct runner *r)
{
	uint64_t now = monotonic_ms();
	unsigned finished = r->tasks->finished;
	/* Oldest are at the tail: new tasks go to the head. */
	struct task *t = r->tasks->head;
	while (t && t->next)
		t = t->next;
	for (struct task *prev; t; t = prev) {
		prev = t->prev;
		/* A record whose left-behind processes run is kept: it is how they are
		 * listed and stopped. */
		if (!t->finished || t->held_ev || t->n_readers || t->proc_running ||
		    (t->op_key && t->key_until_mono > now))
			continue;
		bool too_many = finished > r->cfg.retain_count;
		bool too_old = now - t->finished_mono > r->cfg.retain_ms;
		if (!too_many && !too_old)
			continue;
		finished--;
		/* Unlink now so it is not found again, free after the batch. */
		task_unlink(t);
		loop_defer(&r->loop, task_free_deferred, t);
	}
}

void tasks_tick(struct runner *r)
{
	uint64_t now = monotonic_ms();
	for (struct task *t = r->tasks->head; t; t = t->next) {
		/* A process that escaped its shim could hold a pipe open:
		 * after the shim is gone, two seconds is all it gets. */
		uint64_t last_read_ms = t->last_read_us / 1000;
		uint64_t quiet_since = last_read_ms > t->finished_mono ? last_read_ms
								       : t->finished_mono;
		if (!t->driver && !t->finished && !t->proc_running && !t->paused &&
		    now - quiet_since > 2000) {
			task_close_pipe(t, 0);
			task_close_pipe(t, 1);
			task_maybe_finalize(t);
		}
		/* A paused writer is held back by its reader, not quiet. */
		bool stalled = t->paused && now - t->paused_mono > TASK_PAUSED_UNMAP_MS;
		bool quiet = !t->paused && now - last_read_ms > TASK_QUIET_UNMAP_MS;
		if (t->spool.mapped && (stalled || quiet)) {
			spool_unmap(&t->spool);
			task_log_mapping(t, stalled ? "reader stalled" : "quiet");
		}
	}
	expire_records(r);
}

void tasks_drop_finished(struct runner *r, unsigned *records, uint64_t *log_bytes)
{
	/* The keys are forgotten: ids of the previous instance are refused as such, never
	 * taken for new ones. */
	char fresh[33];
	if (random_id(fresh) == 0)
		memcpy(r->tasks->key_instance, fresh, sizeof(fresh));
	else
		log_error("cannot renew the operation instance id", NULL);
	for (struct task *t = r->tasks->head, *next; t; t = next) {
		next = t->next;
		free(t->op_key);
		t->op_key = NULL;
		t->key_until_mono = 0;
		if (!t->finished || t->held_ev || t->n_readers || t->proc_running)
			continue;
		(*records)++;
		for (int i = 0; i < t->spool.nseg; i++)
			*log_bytes += t->spool.seg[i].size;
		task_unlink(t);
		loop_defer(&r->loop, task_free_deferred, t);
	}
}

void tasks_free_all(struct runner *r)
{
	if (!r->tasks)
		return;
	while (r->tasks->head) {
		struct task *t = r->tasks->head;
		while (t->readers)
			task_reader_detach(t->readers);
		task_free(t);
	}
	prefork_free(r);
	spawn_shim_free(&r->tasks->shim);
	loop_timer_close(&r->loop, &r->tasks->rest_timer);
	task_drain_close(r->tasks->drain);
	free(r->tasks);
	r->tasks = NULL;
}
