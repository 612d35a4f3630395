/* What a task changed (POST /v1/tasks "changes", run_command;
 * docs/design/checkpoints.md#checkpoints-undo-for-agents): the checkpoint before it, and the diff
 * put into its exit event. */
#include "checkpoint/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "core/runner.h"
#include "files/userjob.h"
#include "task/task.h"

#define TASK_CHANGES_WAIT_MS 60000 /* a task's exit event waits this long for its diff */

int checkpoint_task_before(struct runner *r, const char *cwd, checkpoint_done_fn done, void *arg,
			   struct error *e)
{
	/* The task's working directory when it lies in a writable root (an agent works in its
	 * workspace): cheaper than every root, and what a client shows and rolls back; else
	 * every root (docs/design/checkpoints.md#checkpoints-undo-for-agents). */
	struct stat st;
	if (!cwd && stat("/workspace", &st) == 0 && S_ISDIR(st.st_mode))
		cwd = "/workspace"; /* the task's own default (task/task.c) */
	/* Resolved once, as the task will (its chdir follows links, with its rights): a cwd the
	 * task made a link to another directory is checkpointed where it leads, and that path
	 * is what the checkpoint records (its paths), not the link. */
	char real[4096];
	struct files_ident id;
	files_task_ident(r, &id);
	const char *at = cwd && cwd[0] == '/' &&
					 files_user_realpath(&id, cwd, real, sizeof(real)) == 0
				 ? real
				 : NULL;
	json_t *a = at && checkpoint_in_a_root(r, at)
			    ? json_pack("{s:s,s:[s]}", "label", "task", "paths", at)
			    : json_pack("{s:s}", "label", "task");
	int rc = checkpoint_start_queued(r, CHECKPOINT_CREATE, NULL, a, done, arg, e);
	json_decref(a);
	return rc;
}

struct checkpoint_watch {
	struct runner *r;
	struct task *t;               /* once its exit event is held */
	char ck[20];                  /* the checkpoint before it ("": none) */
	char why[ERROR_MSG_MAX + 64]; /* none: why */
	uint64_t from_ms;             /* the window: the checkpoint asked for ... */
	struct loop_timer timer;
	bool timer_open, waiting;
};

static void watch_free(struct checkpoint_watch *w)
{
	if (w->waiting)
		checkpoint_forget_waiter(w->r, w);
	if (w->timer_open)
		loop_timer_close(&w->r->loop, &w->timer);
	free(w);
}

/* The exit event goes out with changes (or why not) and the watch ends. */
static void watch_end(struct checkpoint_watch *w, json_t *changes)
{
	struct task *t = w->t;
	if (t->held_ev) {
		if (w->ck[0])
			json_object_set_new(t->held_ev, "checkpoint", json_string(w->ck));
		json_object_set_new(t->held_ev, "changes", changes);
	} else {
		json_decref(changes);
	}
	t->exit_hold = NULL;
	watch_free(w);
	task_exit_release(t);
}

/* Other tasks that ran in [from, to] (the diff says the tree changed, not who changed it). An
 * agent's commands are tasks of their own (TASK_API_TOOL): counted for an exec task, not for an
 * agent, whose own they are likeliest to be. */
static json_t *others_in(struct runner *r, const struct task *t, uint64_t from, uint64_t to)
{
	bool agent = t->cap && t->cap->goal;
	json_t *a = json_array();
	for (struct task *u = r->tasks->head; u; u = u->next) {
		if (u == t || (agent && u->api == TASK_API_TOOL) || u->started_ms > to ||
		    (u->finished && u->finished_ms < from))
			continue;
		json_array_append_new(a, json_string(u->id));
	}
	return a;
}

void checkpoint_change_lists(json_t *diff, json_t *lists[3])
{
	static const char *const kinds[3] = {"added", "modified", "deleted"};
	for (int j = 0; j < 3; j++)
		lists[j] = json_array();
	size_t i;
	json_t *ch;
	json_array_foreach(json_object_get(diff, "changes"), i, ch) {
		const char *k = json_string_value(json_object_get(ch, "change"));
		for (int j = 0; j < 3; j++)
			if (k && !strcmp(k, kinds[j]) &&
			    json_array_size(lists[j]) < CHECKPOINT_CHANGES_LISTED)
				json_array_append(lists[j], json_object_get(ch, "path"));
	}
}

static void on_task_diff(void *arg, unsigned status, json_t *body)
{
	struct checkpoint_watch *w = arg;
	w->waiting = false;
	if (status != 200) {
		json_t *ch = json_pack("{s:s,s:s?}", "error", "the diff failed", "message",
				       json_string_value(json_object_get(body, "message")));
		json_decref(body);
		watch_end(w, ch);
		return;
	}
	static const char *const kinds[3] = {"added", "modified", "deleted"};
	json_t *lists[3];
	checkpoint_change_lists(body, lists);
	json_t *counts = json_object_get(body, "counts");
	bool truncated = json_is_true(json_object_get(body, "truncated"));
	for (int j = 0; j < 3; j++)
		if (json_integer_value(json_object_get(counts, kinds[j])) >
		    (json_int_t)json_array_size(lists[j]))
			truncated = true;
	json_t *others = others_in(w->r, w->t, w->from_ms, now_ms());
	json_t *o = json_pack("{s:o,s:o,s:o,s:O,s:b,s:b,s:O}", "added", lists[0], "modified",
			      lists[1], "deleted", lists[2], "counts", counts, "truncated",
			      truncated, "exclusive", json_array_size(others) == 0, "duration_ms",
			      json_object_get(body, "duration_ms"));
	if (json_array_size(others))
		json_object_set_new(o, "others_running", others);
	else
		json_decref(others);
	/* What was checkpointed (the cwd resolved), and where it leads now if the task moved
	 * it: the lists are of what it holds there. */
	json_object_set(o, "paths", json_object_get(body, "paths"));
	if (json_object_get(body, "resolved"))
		json_object_set(o, "resolved", json_object_get(body, "resolved"));
	json_decref(body);
	watch_end(w, o);
}

static void on_watch_timer(struct loop *loop, struct loop_timer *timer)
{
	(void)loop;
	struct checkpoint_watch *w = timer->arg;
	watch_end(w, json_pack("{s:s,s:s}", "error", "the diff took too long", "message",
			       "the exit event waited 60 s for the diff: ask "
			       "POST /v1/checkpoints/{checkpoint}/diff"));
}

/* The task's terminal event is due (gone: the record goes away first). */
static void on_task_exit_hold(struct task *t, void *arg, bool gone)
{
	struct checkpoint_watch *w = arg;
	if (gone) {
		watch_free(w);
		return;
	}
	w->t = t;
	if (!w->ck[0]) {
		watch_end(w, json_pack("{s:s}", "error", w->why));
		return;
	}
	struct error e = {0};
	int rc = loop_timer_init(&w->r->loop, &w->timer, on_watch_timer, w);
	if (rc < 0) {
		watch_end(w, json_pack("{s:s,s:s}", "error", "the diff could not start", "message",
				       strerror(-rc)));
		return;
	}
	w->timer_open = true;
	/* Its paths as the task resolves them now: it may have replaced its cwd by a link. */
	json_t *follow = json_pack("{s:b}", "follow", 1);
	if (loop_timer_start(&w->r->loop, &w->timer, TASK_CHANGES_WAIT_MS, 0) < 0 ||
	    checkpoint_start_queued(w->r, CHECKPOINT_DIFF, w->ck, follow, on_task_diff, w, &e) <
		    0) {
		json_decref(follow);
		watch_end(w, json_pack("{s:s,s:s}", "error", "the diff could not start", "message",
				       e.msg[0] ? e.msg : "timerfd"));
		return;
	}
	json_decref(follow);
	w->waiting = true;
}

int checkpoint_task_watch(struct runner *r, struct task_spec *spec, const char *checkpoint_id,
			  const char *why, uint64_t from_ms)
{
	struct checkpoint_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->r = r;
	w->timer.w.fd = -1;
	w->from_ms = from_ms;
	snprintf(w->ck, sizeof(w->ck), "%s", checkpoint_id ? checkpoint_id : "");
	snprintf(w->why, sizeof(w->why), "no checkpoint before the task: %s",
		 why ? why : "unknown");
	spec->exit_hold = on_task_exit_hold;
	spec->exit_hold_arg = w;
	return 0;
}

void checkpoint_task_unwatch(struct task_spec *spec)
{
	if (spec->exit_hold == on_task_exit_hold)
		watch_free(spec->exit_hold_arg);
	spec->exit_hold = NULL;
	spec->exit_hold_arg = NULL;
}
