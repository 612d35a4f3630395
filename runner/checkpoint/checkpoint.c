/* Workspace checkpoints on the loop (docs/design/checkpoints.md#checkpoints-undo-for-agents): the
 * list, the requests that wait, one operation at a time (its filesystem work done by a worker
 * process, worker.c, with the file-tree engine, tree/tree.h) so the loop never waits for the disk.
 */
#include "checkpoint/internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/randomid.h"
#include "files/userjob.h"
#include "task/task.h"

#define STOP_WAIT_MS 10000
#define MAX_CHECKPOINTS 1000

static struct checkpoints *checkpoint_of(struct runner *r)
{
	return r->checkpoints;
}

/* ---- answers ---- */

static void respond(struct checkpoints *c, unsigned status, json_t *body)
{
	checkpoint_done_fn done = c->done;
	c->done = NULL;
	if (!done) {
		json_decref(body);
		return;
	}
	done(c->done_arg, status, body);
}

static void respond_error(struct checkpoints *c, unsigned status, const char *code, const char *msg)
{
	(void)status;
	struct error e = {0};
	error_set(&e, 0, code, "%s", msg);
	json_t *b = json_pack("{s:s,s:s}", "code", error_code(&e), "message", e.msg);
	respond(c, error_http_status(&e), b);
}

static json_t *checkpoint_json(const struct checkpoints *c, const struct checkpoint *k)
{
	(void)c;
	json_t *o = json_pack("{s:s,s:s?,s:I,s:O}", "id", k->id, "label", k->label, "created_ms",
			      (json_int_t)k->created_ms, "paths", k->paths);
	if (o && k->info)
		json_object_update(o, k->info);
	return o;
}

static struct checkpoint *checkpoint_find(struct checkpoints *c, const char *id)
{
	for (struct checkpoint *k = c->head; k; k = k->next)
		if (id && !strcmp(k->id, id))
			return k;
	return NULL;
}

static void checkpoint_free(struct checkpoint *k)
{
	if (!k)
		return;
	free(k->label);
	json_decref(k->paths);
	json_decref(k->info);
	free(k);
}

static void end_op(struct checkpoints *c)
{
	if (c->worker_running) {
		if (kill(c->worker, SIGKILL) < 0 && errno != ESRCH)
			log_errno("checkpoints: SIGKILL to the worker failed", errno, NULL);
		reaper_forget(&c->r->reaper, c->worker);
		c->worker_running = false;
	}
	if (c->out_fd >= 0)
		close(c->out_fd);
	c->out_fd = -1;
	if (c->timer_open)
		loop_timer_stop(&c->r->loop, &c->stop_timer);
	checkpoint_close_roots(c);
	checkpoint_free(c->pending);
	c->pending = NULL;
	if (c->op == OP_DELETE)
		checkpoint_free(c->target);
	c->target = c->to = NULL;
	c->op = OP_NONE;
	c->actor = CHECKPOINT_FOR_GATEWAY;
	c->follow = false;
}

static void run_queue(struct checkpoints *c);

/* ---- the worker process, seen from the loop ---- */

static json_t *read_out(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size > (64 << 20))
		return NULL;
	char *buf = malloc((size_t)st.st_size + 1);
	size_t n = 0;
	while (buf && n < (size_t)st.st_size) {
		ssize_t k = pread(fd, buf + n, (size_t)st.st_size - n, (off_t)n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	json_t *j = buf ? json_loadb(buf, n, 0, NULL) : NULL;
	free(buf);
	return j;
}

static void on_worker_exit(void *arg, pid_t pid, int status)
{
	(void)pid;
	struct checkpoints *c = arg;
	c->worker_running = false;
	json_t *w = read_out(c->out_fd);
	json_t *res = json_object_get(w, "result");
	checkpoint_dirty_answer(c, w, res != NULL);
	uint64_t ms = monotonic_ms() - c->t0;
	if (!res) {
		const char *msg = json_string_value(json_object_get(w, "error"));
		const char *code = json_string_value(json_object_get(w, "code"));
		char why[160];
		if (WIFSIGNALED(status))
			snprintf(why, sizeof(why), "the checkpoint worker was killed by signal %d",
				 WTERMSIG(status));
		else
			snprintf(why, sizeof(why), "the checkpoint worker failed (exit %d)",
				 WEXITSTATUS(status));
		log_warn("checkpoint operation failed", "{s:s,s:s}", "error",
			 msg && *msg ? msg : why, "code", code ? code : "RUNTIME_ERROR");
		respond_error(c, 500, code ? code : "RUNTIME_ERROR", msg && *msg ? msg : why);
		json_decref(w);
		end_op(c);
		run_queue(c);
		return;
	}
	json_incref(res);
	json_object_set_new(res, "duration_ms", json_integer((json_int_t)ms));
	unsigned st = 200;
	switch (c->op) {
	case OP_CREATE: {
		struct checkpoint *k = c->pending;
		c->pending = NULL;
		c->store_bytes = (uint64_t)json_integer_value(json_object_get(res, "store_bytes"));
		k->info = json_deep_copy(res);
		json_object_del(k->info, "store_bytes");
		struct checkpoint **tail = &c->head;
		while (*tail)
			tail = &(*tail)->next;
		*tail = k;
		c->n++;
		json_t *o = checkpoint_json(c, k);
		json_object_set_new(o, "store_bytes", json_integer((json_int_t)c->store_bytes));
		json_decref(res);
		res = o;
		st = 201;
		log_info("checkpoint taken", "{s:s,s:O,s:I}", "id", k->id, "files",
			 json_object_get(k->info, "files"), "ms", (json_int_t)ms);
		break;
	}
	case OP_DELETE:
		c->store_bytes = (uint64_t)json_integer_value(json_object_get(res, "store_bytes"));
		break;
	case OP_RESTORE:
		if (!json_is_true(json_object_get(res, "complete"))) {
			/* What it did and what it left: the client decides. */
			json_object_set_new(res, "code", json_string("RESTORE_INCOMPLETE"));
			json_object_set_new(res, "message",
					    json_string(
						    "the restore could not put everything back: "
						    "see changes (action \"failed\")"));
			st = 500;
		}
		log_info("checkpoint restored", "{s:s,s:O,s:I}", "id", c->target->id, "counts",
			 json_object_get(res, "counts"), "ms", (json_int_t)ms);
		break;
	default:
		break;
	}
	json_decref(w);
	respond(c, st, res);
	end_op(c);
	run_queue(c);
}

static int spawn(struct checkpoints *c, struct error *e)
{
	c->out_fd = memfd_create("forceai-ckpt-answer", MFD_CLOEXEC);
	if (c->out_fd < 0)
		return error_set(e, errno, NULL, "checkpoints: memfd_create");
	c->t0 = monotonic_ms();
	checkpoint_dirty_before_fork(c);
	pid_t pid = fork();
	if (pid < 0)
		return error_set(e, errno, NULL, "checkpoints: fork");
	if (pid == 0)
		checkpoint_worker_main(c);
	checkpoint_dirty_forked(c);
	c->worker = pid;
	c->worker_running = true;
	if (reaper_watch(&c->r->reaper, pid, on_worker_exit, c) < 0) {
		end_op(c);
		return error_set(e, ENOMEM, NULL, "checkpoints: watching the worker");
	}
	return 0;
}

/* ---- requests ---- */

static void wait_on(struct checkpoints *c, checkpoint_done_fn done, void *arg)
{
	c->done = done;
	c->done_arg = arg;
}

void checkpoint_forget_waiter(struct runner *r, void *arg)
{
	struct checkpoints *c = checkpoint_of(r);
	if (c && c->done && c->done_arg == arg)
		c->done = NULL; /* it went away: the operation still ends */
	for (struct queued **pp = c ? &c->queue : NULL; pp && *pp;) {
		struct queued *q = *pp;
		if (q->arg == arg) {
			*pp = q->next;
			json_decref(q->args);
			free(q);
		} else {
			pp = &q->next;
		}
	}
}

static int ready(struct checkpoints *c, struct error *e)
{
	if (!c)
		return error_set(e, 0, "CAPABILITY_UNAVAILABLE", "checkpoints are not available");
	if (c->unavailable)
		return error_set(e, 0, "CAPABILITY_UNAVAILABLE",
				 "checkpoints are not available: %s", c->unavailable);
	if (c->op != OP_NONE)
		return error_set(e, 0, "CHECKPOINT_BUSY",
				 "another checkpoint operation is running: retry when it is done");
	return 0;
}

static json_t *running_tasks(struct runner *r)
{
	json_t *a = json_array();
	/* Tasks with a process: an agent's own (driven) task writes nothing
	 * itself, its commands are tasks of their own. */
	for (struct task *t = r->tasks->head; t; t = t->next)
		if (!t->finished && t->proc_running)
			json_array_append_new(a, json_string(t->id));
	return a;
}

/* 0 when every key of body is one of fields (NULL-terminated); else -1
 * with UNKNOWN_FIELD naming the first other one. */
static int only_fields(json_t *body, const char *const *fields, struct error *e)
{
	const char *key;
	json_t *v;
	json_object_foreach(body, key, v) {
		const char *const *f = fields;
		while (*f && strcmp(key, *f))
			f++;
		if (!*f)
			return error_set(e, 0, "UNKNOWN_FIELD", "unknown field '%.100s'", key);
	}
	return 0;
}

static int checkpoint_create(struct runner *r, json_t *body, checkpoint_done_fn done, void *arg,
			     struct error *e)
{
	struct checkpoints *c = checkpoint_of(r);
	if (ready(c, e) < 0)
		return -1;
	static const char *const fields[] = {"paths", "label", NULL};
	if (only_fields(body, fields, e) < 0)
		return -1;
	json_incref(body);
	json_t *paths = json_object_get(body, "paths");
	json_t *label = json_object_get(body, "label");
	if ((paths && !json_is_array(paths)) || (label && !json_is_string(label)) ||
	    (label && json_string_length(label) > 256)) {
		json_decref(body);
		return error_set(e, 0, "INVALID_REQUEST_BODY",
				 "paths must be an array of absolute paths, label a string of at "
				 "most 256 bytes");
	}
	if (c->n >= MAX_CHECKPOINTS) {
		json_decref(body);
		return error_set(e, 0, "INSUFFICIENT_STORAGE",
				 "%d checkpoints are kept already: delete some", MAX_CHECKPOINTS);
	}
	json_t *list = paths && json_array_size(paths) ? json_incref(paths)
						       : checkpoint_default_paths(r);
	int rc = checkpoint_open_roots(c, list, false, e);
	struct checkpoint *k = rc == 0 ? calloc(1, sizeof(*k)) : NULL;
	char rid[33];
	if (rc == 0 && (!k || random_id(rid) < 0))
		rc = error_set(e, ENOMEM, NULL, "checkpoints");
	if (rc < 0) {
		free(k);
		json_decref(list);
		json_decref(body);
		checkpoint_close_roots(c);
		return -1;
	}
	snprintf(k->id, sizeof(k->id), "ck_%.16s", rid);
	k->label = label ? strdup(json_string_value(label)) : NULL;
	k->created_ms = now_ms();
	k->paths = json_array();
	for (unsigned i = 0; i < c->n_roots; i++)
		json_array_append_new(k->paths, json_string(c->roots[i].path));
	json_decref(list);
	json_decref(body);
	c->pending = k;
	c->op = OP_CREATE;
	if (spawn(c, e) < 0) {
		end_op(c);
		return -1;
	}
	wait_on(c, done, arg);
	return 0;
}

json_t *checkpoint_list(struct runner *r, struct error *e)
{
	struct checkpoints *c = checkpoint_of(r);
	if (!c || c->unavailable) {
		ready(c, e);
		return NULL;
	}
	json_t *a = json_array();
	for (struct checkpoint *k = c->head; k; k = k->next)
		json_array_append_new(a, checkpoint_json(c, k));
	return json_pack("{s:o,s:I,s:I}", "checkpoints", a, "store_bytes",
			 (json_int_t)c->store_bytes, "max_bytes",
			 (json_int_t)r->cfg.checkpoint_max_bytes);
}

json_t *checkpoint_get(struct runner *r, const char *id, struct error *e)
{
	struct checkpoints *c = checkpoint_of(r);
	if (!c || c->unavailable) {
		ready(c, e);
		return NULL;
	}
	struct checkpoint *k = checkpoint_find(c, id);
	if (!k) {
		error_set(e, 0, "CHECKPOINT_NOT_FOUND", "no checkpoint '%.64s'", id ? id : "");
		return NULL;
	}
	return checkpoint_json(c, k);
}

static int start_on(struct runner *r, const char *id, enum op op, checkpoint_done_fn done,
		    void *arg, struct error *e)
{
	struct checkpoints *c = checkpoint_of(r);
	if (ready(c, e) < 0)
		return -1;
	struct checkpoint *k = checkpoint_find(c, id);
	if (!k) {
		c->to = NULL;
		return error_set(e, 0, "CHECKPOINT_NOT_FOUND", "no checkpoint '%.64s'",
				 id ? id : "");
	}
	c->target = k;
	c->op = op;
	if (op == OP_DELETE) {
		/* Off the list at once (its id answers 404 from now); its objects
		 * are collected by the worker. */
		struct checkpoint **pp = &c->head;
		while (*pp != k)
			pp = &(*pp)->next;
		*pp = k->next;
		c->n--;
	} else if (checkpoint_open_roots(c, k->paths, op == OP_RESTORE, e) < 0) {
		end_op(c);
		return -1;
	}
	if (spawn(c, e) < 0) {
		end_op(c);
		return -1;
	}
	wait_on(c, done, arg);
	return 0;
}

static int checkpoint_diff(struct runner *r, const char *id, json_t *args, checkpoint_done_fn done,
			   void *arg, struct error *e)
{
	struct checkpoints *c = checkpoint_of(r);
	if (ready(c, e) < 0)
		return -1;
	/* follow: a task's exit diff (checkpoint_task_watch; no door passes it on from a client).
	 */
	static const char *const fields[] = {"to", "patch", "follow", NULL};
	if (only_fields(args, fields, e) < 0)
		return -1;
	json_t *tj = json_object_get(args, "to"), *pj = json_object_get(args, "patch");
	json_t *fj = json_object_get(args, "follow");
	if ((tj && !json_is_string(tj) && !json_is_null(tj)) || (pj && !json_is_boolean(pj)) ||
	    (fj && !json_is_boolean(fj)))
		return error_set(e, 0, "INVALID_REQUEST_BODY",
				 "to must be a checkpoint id, patch a boolean");
	const char *to = json_string_value(tj);
	c->patch = json_is_true(pj);
	c->follow = json_is_true(fj) && c->actor == CHECKPOINT_FOR_TASK;
	struct checkpoint *keep_to = NULL;
	if (to && *to && !(keep_to = checkpoint_find(c, to)))
		return error_set(e, 0, "CHECKPOINT_NOT_FOUND", "no checkpoint '%.64s' (to)", to);
	c->to = keep_to; /* before the worker is forked */
	return start_on(r, id, OP_DIFF, done, arg, e);
}

static void stop_wait(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct checkpoints *c = t->arg;
	if (c->op != OP_RESTORE || c->worker_running)
		return;
	bool all = true;
	for (struct task *k = c->r->tasks->head; k; k = k->next)
		if (!k->finished && k->proc_running)
			all = false;
	if (!all && monotonic_ms() - c->stop_t0 < STOP_WAIT_MS)
		return;
	loop_timer_stop(&c->r->loop, &c->stop_timer);
	struct error e = {0};
	if (!all) {
		respond_error(c, 409, "TASKS_RUNNING",
			      "tasks did not end within 10 s of being stopped: nothing restored");
		end_op(c);
		return;
	}
	if (spawn(c, &e) < 0) {
		respond_error(c, 500, "RUNTIME_ERROR", e.msg);
		end_op(c);
	}
}

static int checkpoint_restore(struct runner *r, const char *id, json_t *body,
			      checkpoint_done_fn done, void *arg, struct error *e)
{
	struct checkpoints *c = checkpoint_of(r);
	if (ready(c, e) < 0)
		return -1;
	static const char *const fields[] = {"stop_tasks", NULL};
	if (only_fields(body, fields, e) < 0)
		return -1;
	json_incref(body);
	json_t *st = json_object_get(body, "stop_tasks");
	if (st && !json_is_boolean(st)) {
		json_decref(body);
		return error_set(e, 0, "INVALID_REQUEST_BODY", "stop_tasks must be a boolean");
	}
	bool stop = json_is_true(st);
	json_decref(body);
	struct checkpoint *k = checkpoint_find(c, id);
	if (!k)
		return error_set(e, 0, "CHECKPOINT_NOT_FOUND", "no checkpoint '%.64s'",
				 id ? id : "");
	json_t *running = running_tasks(r);
	size_t n = json_array_size(running);
	if (n && !stop) {
		char *ids = json_dumps(running, JSON_COMPACT);
		json_decref(running);
		error_set(
			e, 0, "TASKS_RUNNING",
			"%zu task(s) are running and could be writing there: %.600s; end them, or "
			"pass {\"stop_tasks\": true}",
			n, ids ? ids : "");
		free(ids);
		return -1;
	}
	json_decref(running);
	if (!n)
		return start_on(r, id, OP_RESTORE, done, arg, e);
	/* Stopped first; the worker starts once every one has ended. */
	c->target = k;
	c->op = OP_RESTORE;
	if (checkpoint_open_roots(c, k->paths, true, e) < 0) {
		end_op(c);
		return -1;
	}
	for (struct task *t = r->tasks->head; t; t = t->next)
		if (!t->finished && t->proc_running)
			task_kill(t, TS_CANCELLED);
	c->stop_t0 = monotonic_ms();
	if (loop_timer_start(&r->loop, &c->stop_timer, 20, 20) < 0) {
		end_op(c);
		return error_set(e, errno, NULL, "checkpoints: timer");
	}
	wait_on(c, done, arg);
	return 0;
}

int checkpoint_start(struct runner *r, enum checkpoint_op op, enum checkpoint_actor actor,
		     const char *id, json_t *args, checkpoint_done_fn done, void *arg,
		     struct error *e)
{
	struct checkpoints *c = checkpoint_of(r);
	if (ready(c, e) < 0)
		return -1;
	c->actor = actor; /* reset by end_op */
	c->follow = false;
	files_task_ident(r, &c->task_id);
	json_t *empty = args ? NULL : json_object();
	if (!args)
		args = empty;
	int rc;
	switch (op) {
	case CHECKPOINT_CREATE:
		rc = checkpoint_create(r, args, done, arg, e);
		break;
	case CHECKPOINT_DIFF:
		rc = checkpoint_diff(r, id, args, done, arg, e);
		break;
	case CHECKPOINT_RESTORE:
		rc = checkpoint_restore(r, id, args, done, arg, e);
		break;
	default:
		rc = start_on(r, id, OP_DELETE, done, arg, e);
		break;
	}
	json_decref(empty);
	return rc;
}

bool checkpoint_restoring(struct runner *r)
{
	struct checkpoints *c = checkpoint_of(r);
	return c && c->op == OP_RESTORE;
}

void checkpoint_drop_all(struct runner *r)
{
	struct checkpoints *c = checkpoint_of(r);
	if (!c)
		return;
	if (c->op != OP_NONE) {
		respond_error(c, 503, "RESETTING",
			      "a reset (POST /v1/reset) dropped every checkpoint");
		end_op(c);
	}
	unsigned n = c->n;
	while (c->head) {
		struct checkpoint *k = c->head;
		c->head = k->next;
		checkpoint_free(k);
	}
	c->n = 0;
	c->store_bytes = 0;
	checkpoint_dirty_drop(c);
	/* Out of the way at once (renamed); removed by the reset's worker or
	 * the next checkpoint's. */
	if (!c->unavailable && tree_store_retire(r->state_dir_fd) < 0)
		log_errno("checkpoints: cannot retire the store", errno, NULL);
	if (n)
		log_info("checkpoints dropped", "{s:i}", "checkpoints", (int)n);
	run_queue(c); /* they answer CHECKPOINT_NOT_FOUND or take a fresh store */
}

int checkpoint_init(struct runner *r, struct error *e)
{
	struct checkpoints *c = calloc(1, sizeof(*c));
	if (!c)
		return error_set(e, ENOMEM, NULL, "checkpoints");
	c->r = r;
	c->out_fd = -1;
	r->checkpoints = c;
	if (r->state_dir_fd < 0)
		c->unavailable =
			"the state dir is not usable (non-root mode with the default state "
			"dir inside a writable root): give the runner --state-dir outside "
			"the writable roots";
	else if (tree_store_retire(r->state_dir_fd) < 0) /* a previous run's */
		return error_set(e, errno, NULL, "checkpoints: cannot retire an old store");
	if (loop_timer_init(&r->loop, &c->stop_timer, stop_wait, c) < 0)
		return error_set(e, errno, NULL, "checkpoints: timerfd");
	c->timer_open = true;
	checkpoint_dirty_init(c);
	return 0;
}

void checkpoint_abort(struct runner *r)
{
	struct checkpoints *c = checkpoint_of(r);
	if (c && c->op != OP_NONE) {
		respond_error(c, 503, "UNAVAILABLE", "the runner is shutting down");
		end_op(c);
	}
	while (c && c->queue) {
		struct queued *q = c->queue;
		c->queue = q->next;
		q->done(q->arg, 503,
			json_pack("{s:s,s:s}", "code", "UNAVAILABLE", "message",
				  "the runner is shutting down"));
		json_decref(q->args);
		free(q);
	}
}

void checkpoint_free_all(struct runner *r)
{
	struct checkpoints *c = checkpoint_of(r);
	if (!c)
		return;
	end_op(c);
	while (c->head) {
		struct checkpoint *k = c->head;
		c->head = k->next;
		checkpoint_free(k);
	}
	if (c->timer_open)
		loop_timer_close(&r->loop, &c->stop_timer);
	checkpoint_dirty_free(c);
	while (c->queue) {
		struct queued *q = c->queue;
		c->queue = q->next;
		json_decref(q->args);
		free(q);
	}
	free(c);
	r->checkpoints = NULL;
}

/* ---- a task's changes (POST /v1/tasks "changes";
 * docs/design/checkpoints.md#checkpoints-undo-for-agents) ---- */

/* Start op, or queue it behind the one running; done as for checkpoint_start. */
int checkpoint_start_queued(struct runner *r, enum checkpoint_op op, const char *id, json_t *args,
			    checkpoint_done_fn done, void *arg, struct error *e)
{
	struct checkpoints *c = checkpoint_of(r);
	if (checkpoint_start(r, op, CHECKPOINT_FOR_TASK, id, args, done, arg, e) == 0)
		return 0;
	if (!c || strcmp(error_code(e), "CHECKPOINT_BUSY"))
		return -1;
	struct queued *q = calloc(1, sizeof(*q));
	if (!q)
		return error_set(e, ENOMEM, NULL, "checkpoints");
	q->op = op;
	q->args = json_incref(args);
	snprintf(q->id, sizeof(q->id), "%s", id ? id : "");
	q->done = done;
	q->arg = arg;
	struct queued **tail = &c->queue;
	while (*tail)
		tail = &(*tail)->next;
	*tail = q;
	return 0;
}

static void run_queue(struct checkpoints *c)
{
	while (c->queue && c->op == OP_NONE) {
		struct queued *q = c->queue;
		c->queue = q->next;
		struct error e = {0};
		int rc = checkpoint_start(c->r, q->op, CHECKPOINT_FOR_TASK, q->id[0] ? q->id : NULL,
					  q->args, q->done, q->arg, &e);
		json_decref(q->args);
		if (rc < 0)
			q->done(q->arg, error_http_status(&e),
				json_pack("{s:s,s:s}", "code", error_code(&e), "message", e.msg));
		free(q);
	}
}

/* Is path (absolute, clean as the API took it) one of the writable roots or beneath one? */
