/* The interactive side of native tasks: stdin (streamed, with backpressure), terminal size,
 * signals, and the list of what runs (GET /v1/tasks). execd's GET /command: commands.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "task/request.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "init/runtime.h"
#include "core/runner.h"
#include "core/randomid.h"
#include "core/signame.h"
#include "task/pty.h"
#include "task/task.h"

static struct task *find_native(struct http_req *req, struct error *err)
{
	struct task *t = is_hex_id(req->param) ? task_find(req->r, req->param) : NULL;
	if (t && t->api == TASK_API_NATIVE)
		return t;
	error_set(err, 0, "NOT_FOUND", "task not found: %.64s", req->param);
	return NULL;
}

/* ---- POST /v1/tasks/{id}/stdin (streamed), DELETE .../stdin ---- */

struct stdin_upload {
	struct task_reader pin; /* keeps the record while the body streams */
	struct task_input_waiter w;
	struct http_req *req;
	struct error err;
	bool failed;
	uint64_t written;
};

static void upload_ready(struct task_input_waiter *w)
{
	struct stdin_upload *u =
		(struct stdin_upload *)((char *)w - offsetof(struct stdin_upload, w));
	http_req_resume(u->req);
}

static void upload_free(struct http_req *req)
{
	struct stdin_upload *u = req->ctx;
	if (!u)
		return;
	if (u->pin.task) {
		task_input_unwait(u->pin.task, &u->w);
		task_reader_detach(&u->pin);
	}
	free(u);
	req->ctx = NULL;
}

static struct stdin_upload *upload_begin(struct http_req *req)
{
	struct stdin_upload *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->req = req;
	u->w.ready = upload_ready;
	req->ctx = u;
	req->ctx_free = upload_free;
	struct task *t = find_native(req, &u->err);
	if (!t) {
		u->failed = true;
		return u;
	}
	if (!task_input_open(t)) {
		/* Say why now; the body is then read and dropped. */
		task_input_write(t, "", 0, &u->err);
		if (!u->err.code)
			error_set(&u->err, 0, "STDIN_CLOSED", "the input of task %s is closed",
				  t->id);
		u->failed = true;
		return u;
	}
	task_reader_attach(t, &u->pin, false);
	return u;
}

enum MHD_Result api_task_stdin_body(struct http_req *req, const char *data, size_t len)
{
	struct stdin_upload *u = req->ctx ? req->ctx : upload_begin(req);
	if (!u)
		return MHD_NO;
	if (u->failed)
		return MHD_YES; /* dropped; the answer comes at the end */
	struct task *t = u->pin.task;
	if (http_stopping(req->r)) {
		error_set(&u->err, 0, "UNAVAILABLE", "the runner is shutting down");
		u->failed = true;
		return MHD_YES;
	}
	if (task_input_busy(t)) {
		/* The task is not reading: keep the bytes in libmicrohttpd's
		 * buffer and stop reading the client until it is. */
		req->body_left = len;
		http_req_suspend(req);
		task_input_wait(t, &u->w);
		return MHD_YES;
	}
	if (task_input_write(t, data, len, &u->err) < 0) {
		u->failed = true;
		return MHD_YES;
	}
	u->written += len;
	return MHD_YES;
}

enum MHD_Result api_task_stdin(struct http_req *req)
{
	struct stdin_upload *u = req->ctx ? req->ctx : upload_begin(req);
	if (!u)
		return MHD_NO;
	if (u->failed)
		return http_fail(req, &u->err);
	return http_json(req, 200,
			 json_pack("{s:s,s:I}", "id", u->pin.task->id, "written",
				   (json_int_t)u->written));
}

enum MHD_Result api_task_stdin_close(struct http_req *req)
{
	struct error err;
	struct task *t = find_native(req, &err);
	if (!t || task_input_eof(t, &err) < 0)
		return http_fail(req, &err);
	return http_json(req, 200, json_pack("{s:s,s:s}", "id", t->id, "stdin", "closed"));
}

/* ---- POST /v1/tasks/{id}/resize, /signal ---- */

/* Their common start: the task, then the JSON body (*body, the caller frees it) checked against
 * schema. NULL when the request is answered already (*res). */
static struct task *task_and_body(struct http_req *req, const struct body_schema *schema,
				  json_t **body, enum MHD_Result *res)
{
	struct error err;
	struct task *t = find_native(req, &err);
	if (!t) {
		*res = http_fail(req, &err);
		return NULL;
	}
	if (!(*body = http_body_json(req, false))) {
		*res = req->responded ? MHD_YES : MHD_NO;
		return NULL;
	}
	if (schema_check(schema, *body, &err) < 0) {
		*res = http_fail(req, &err);
		return NULL;
	}
	return t;
}

enum MHD_Result api_task_resize(struct http_req *req)
{
	cleanup_json json_t *body = NULL;
	enum MHD_Result res;
	struct task *t = task_and_body(req, &schema_task_resize, &body, &res);
	if (!t)
		return res;
	struct error err;
	json_t *jc = json_object_get(body, "cols"), *jr = json_object_get(body, "rows");
	if (!json_is_integer(jc) || !json_is_integer(jr) || json_integer_value(jc) < 1 ||
	    json_integer_value(jr) < 1 || json_integer_value(jc) > 65535 ||
	    json_integer_value(jr) > 65535) {
		error_set(&err, 0, "INVALID_REQUEST_BODY",
			  "cols and rows must be integers from 1 to 65535");
		return http_fail(req, &err);
	}
	if (task_resize(t, (unsigned)json_integer_value(jc), (unsigned)json_integer_value(jr),
			&err) < 0)
		return http_fail(req, &err);
	return http_json(req, 200,
			 json_pack("{s:s,s:I,s:I}", "id", t->id, "cols", json_integer_value(jc),
				   "rows", json_integer_value(jr)));
}

enum MHD_Result api_task_signal(struct http_req *req)
{
	cleanup_json json_t *body = NULL;
	enum MHD_Result res;
	struct task *t = task_and_body(req, &schema_task_signal, &body, &res);
	if (!t)
		return res;
	struct error err;
	json_t *js = json_object_get(body, "signal");
	const char *name = json_string_value(js);
	int sig = task_signal_parse(name);
	if (!sig || strlen(name) != json_string_length(js)) {
		error_set(&err, 0, "INVALID_SIGNAL",
			  "signal must be one of SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, "
			  "SIGUSR2, SIGKILL, SIGSTOP, SIGCONT, SIGWINCH");
		return http_fail(req, &err);
	}
	if (t->driver) {
		error_set(&err, 0, "INVALID_SIGNAL", "task %s has no process to signal", t->id);
		return http_fail(req, &err);
	}
	if (task_signal(t, sig, false, &err) < 0)
		return http_fail(req, &err);
	log_info("task signalled", "{s:s,s:s}", "task", t->id, "signal", signal_name(sig));
	return http_json(req, 200, json_pack("{s:s,s:s}", "id", t->id, "signal", signal_name(sig)));
}

/* ---- GET /v1/tasks ---- */

struct query_check {
	const char *const *allowed;
	bool bad;
};

static enum MHD_Result check_arg(void *cls, enum MHD_ValueKind kind, const char *key,
				 const char *value)
{
	(void)kind;
	(void)value;
	struct query_check *q = cls;
	bool ok = false;
	for (const char *const *a = q->allowed; *a; a++)
		ok |= !strcmp(key, *a);
	if (!ok)
		q->bad = true;
	return MHD_YES;
}

static json_t *exit_obj(struct task *t)
{
	if (!t->finished)
		return json_null();
	json_t *o = json_pack("{s:i,s:s}", "exit_code", t->exit_code, "status", task_status_str(t));
	if (t->term_signal)
		json_object_set_new(o, "signal", json_string(signal_name(t->term_signal)));
	return o;
}

enum MHD_Result api_task_list(struct http_req *req)
{
	static const char *const allowed[] = {"state", NULL};
	struct query_check q = {allowed, false};
	MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, check_arg, &q);
	const char *state = http_query(req, "state");
	struct error err;
	if (q.bad || (state && strcmp(state, "running") && strcmp(state, "finished"))) {
		error_set(&err, 0, "INVALID_QUERY",
			  "the only query parameter is state=running or state=finished");
		return http_fail(req, &err);
	}
	json_t *arr = json_array();
	for (struct task *t = req->r->tasks->head; t; t = t->next) {
		/* Lifecycle hooks and code contexts are listed too, named. */
		bool tool = t->api == TASK_API_TOOL && task_left_running(t);
		if (t->api != TASK_API_NATIVE && t->api != TASK_API_HOOK &&
		    t->api != TASK_API_CODE && t->api != TASK_API_ENVD && !tool)
			continue;
		if (state && (!strcmp(state, "running") == t->finished))
			continue;
		const char *cap = t->cap ? t->cap->name : "exec";
		json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:I}", "id", t->id, "capability", cap,
				      "state", t->finished ? "finished" : "running", "status",
				      task_status_str(t), "started_at", (json_int_t)t->started_ms);
		json_object_set_new(o, t->cap && t->cap->goal ? "goal" : "command",
				    json_string(t->command));
		bool has_pid = !t->driver && t->shim_pid;
		json_object_set_new(o, "pid", has_pid ? json_integer(t->shim_pid) : json_null());
		json_object_set_new(o, "finished_at",
				    t->finished ? json_integer((json_int_t)t->finished_ms)
						: json_null());
		json_object_set_new(o, "exit", exit_obj(t));
		json_object_set_new(o, "stdin", json_boolean(task_input_open(t)));
		json_object_set_new(o, "tty", json_boolean(t->input && t->input->tty));
		json_t *left = task_left_behind_json(t);
		if (left)
			json_object_set_new(o, "left_behind", left);
		if (tool) /* an MCP or agent run_command that left processes behind */
			json_object_set_new(o, "kind", json_string("tool_command"));
		if (t->api == TASK_API_ENVD)
			json_object_set_new(o, "kind", json_string("envd_process"));
		if (t->api == TASK_API_HOOK) {
			const char *hook = runtime_init_hook_name(req->r, t);
			json_object_set_new(o, "kind", json_string("lifecycle_hook"));
			json_object_set_new(o, "hook", hook ? json_string(hook) : json_null());
		}
		json_array_append_new(arr, o);
	}
	return http_json(req, 200, json_pack("{s:o}", "tasks", arr));
}
