/* The interactive side of tasks: stdin (streamed, with backpressure),
 * terminal size, signals, and lists of what runs: the native
 * GET /v1/tasks, and execd's GET /command inventory (wire compatible with
 * components/execd/pkg/web/controller/command_inventory_test.go). */
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
#include "profile/profile.h"
#include "core/runner.h"
#include "core/randomid.h"
#include "core/signame.h"
#include "task/pty.h"
#include "task/task.h"

#define INVENTORY_DEFAULT_LIMIT 50
#define INVENTORY_MAX_LIMIT 100
#define STR_(x) #x
#define STR(x) STR_(x)

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
			const char *hook = rtinit_hook_name(req->r, t);
			json_object_set_new(o, "kind", json_string("lifecycle_hook"));
			json_object_set_new(o, "hook", hook ? json_string(hook) : json_null());
		}
		json_array_append_new(arr, o);
	}
	return http_json(req, 200, json_pack("{s:o}", "tasks", arr));
}

/* ---- GET /command: execd's inventory ---- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Go's url.QueryUnescape: '+' is a space, %XX two hex digits. */
static int query_unescape(const char *s, size_t n, char *out, size_t outsz)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (ch == '%') {
			if (i + 2 >= n)
				return -1;
			int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			ch = (char)(hi * 16 + lo);
			i += 2;
		} else if (ch == '+') {
			ch = ' ';
		}
		if (o + 1 >= outsz)
			return -1;
		out[o++] = ch;
	}
	out[o] = 0;
	return (int)o;
}

static bool blank(const char *s)
{
	return s[strspn(s, " \t\r\n\v\f")] == 0;
}

int api_parse_command_list_query(const char *raw, int *running, unsigned *limit, char *cursor,
				 size_t cursor_size, const char **msg)
{
	*running = -1;
	*limit = INVENTORY_DEFAULT_LIMIT;
	cursor[0] = 0;
	*msg = NULL;
	if (!raw || !*raw)
		return 0;
	bool invalid = false, empty_cursor = false, seen[3] = {false, false, false};
	/* execd's message, and which parameter and what it takes (the first
	 * problem found). */
	static const char *const whys[] = {
		"invalid query parameter 'running': true or false",
		("invalid query parameter 'limit': a number from 1 to " STR(INVENTORY_MAX_LIMIT)),
		"invalid query parameter 'cursor'",
	};
	static const char *const twice[] = {
		"invalid query parameter 'running': given twice",
		"invalid query parameter 'limit': given twice",
		"invalid query parameter 'cursor': given twice",
	};
	const char *why = NULL;
	const char *p = raw;
	for (;;) {
		const char *amp = strchr(p, '&');
		size_t n = amp ? (size_t)(amp - p) : strlen(p);
		char comp[2048];
		if (n == 0 || n >= sizeof(comp)) {
			invalid = true;
			goto next;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		char *eq = strchr(comp, '=');
		bool has_value = eq != NULL;
		if (eq)
			*eq = 0;
		char key[2048], value[2048];
		if (query_unescape(comp, strlen(comp), key, sizeof(key)) < 0 ||
		    query_unescape(eq ? eq + 1 : "", eq ? strlen(eq + 1) : 0, value,
				   sizeof(value)) < 0) {
			invalid = true;
			goto next;
		}
		if (!strcmp(key, "cursor") && (!has_value || blank(value))) {
			empty_cursor = true;
			goto next;
		}
		int k = !strcmp(key, "running")  ? 0
			: !strcmp(key, "limit")  ? 1
			: !strcmp(key, "cursor") ? 2
						 : -1;
		if (k < 0 || !has_value || seen[k]) {
			if (!why)
				why = k < 0 ? "invalid query parameter: GET /command takes running, "
					      "limit and cursor"
				      : seen[k] ? twice[k]
						: whys[k];
			invalid = true;
			goto next;
		}
		seen[k] = true;
		if (blank(value)) {
			if (!why)
				why = whys[k];
			invalid = true;
			goto next;
		}
		if (k == 0) {
			if (!strcmp(value, "true"))
				*running = 1;
			else if (!strcmp(value, "false"))
				*running = 0;
			else {
				invalid = true;
				if (!why)
					why = whys[0];
			}
		} else if (k == 1) {
			size_t dl = strspn(value, "0123456789");
			if (!dl || value[dl] || dl > 3 || atoi(value) < 1 ||
			    atoi(value) > INVENTORY_MAX_LIMIT) {
				invalid = true;
				if (!why)
					why = whys[1];
			} else
				*limit = (unsigned)atoi(value);
		} else {
			snprintf(cursor, cursor_size, "%s", value);
			if (strlen(value) >= cursor_size)
				invalid = true;
		}
	next:
		if (!amp)
			break;
		p = amp + 1;
	}
	if (empty_cursor) {
		*msg = "invalid cursor";
		return -1;
	}
	if (invalid) {
		*msg = why ? why : "invalid query parameter";
		return -1;
	}
	return 0;
}

/* Cursor: the filter, the started time and id of the last entry given,
 * as "<r|t|a><16 hex><32 hex>"; opaque to clients. */
static void cursor_encode(char out[50], int running, uint64_t started, const char *id)
{
	snprintf(out, 50, "%c%016llx%s",
		 running < 0 ? 'a'
		 : running   ? 'r'
			     : 't',
		 (unsigned long long)started, id);
}

static int cursor_decode(const char *s, int running, uint64_t *started, char id[33])
{
	char want = running < 0 ? 'a' : running ? 'r' : 't';
	if (strlen(s) != 49 || s[0] != want)
		return -1;
	uint64_t v = 0;
	for (int i = 1; i <= 16; i++) {
		int h = hexval(s[i]);
		if (h < 0 || (s[i] >= 'A' && s[i] <= 'F'))
			return -1;
		v = v << 4 | (uint64_t)h;
	}
	if (!is_hex_id(s + 17))
		return -1;
	*started = v;
	memcpy(id, s + 17, 33);
	return 0;
}

/* Newest first; equal start times by id, descending. */
static int cmp_desc(const void *a, const void *b)
{
	const struct task *x = *(struct task *const *)a, *y = *(struct task *const *)b;
	if (x->started_ms != y->started_ms)
		return x->started_ms > y->started_ms ? -1 : 1;
	return -strcmp(x->id, y->id);
}

static enum MHD_Result inventory_error(struct http_req *req, unsigned status, const char *code,
				       const char *msg)
{
	cleanup_free char *s = NULL;
	json_t *j = json_pack("{s:s,s:s}", "code", code, "message", msg);
	if (j)
		s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		return MHD_NO;
	return http_text(req, status, "application/json", s, strlen(s), "Cache-Control",
			 "no-store");
}

enum MHD_Result api_command_list(struct http_req *req)
{
	int running;
	unsigned limit;
	char cursor[256];
	const char *msg;
	if (api_parse_command_list_query(req->raw_query, &running, &limit, cursor, sizeof(cursor),
					 &msg) < 0)
		return inventory_error(req, 400, "INVALID_QUERY", msg);
	uint64_t c_started = 0;
	char c_id[33] = "";
	bool has_cursor = cursor[0] != 0;
	if (has_cursor && cursor_decode(cursor, running, &c_started, c_id) < 0)
		return inventory_error(req, 400, "INVALID_QUERY", "invalid cursor");

	size_t n = 0, cap = 0;
	cleanup_free struct task **list = NULL;
	for (struct task *t = req->r->tasks->head; t; t = t->next) {
		if (t->api != TASK_API_EXECD && t->api != TASK_API_CODE)
			continue;
		if (running >= 0 && (running == 1) == t->finished)
			continue;
		if (has_cursor && (t->started_ms > c_started ||
				   (t->started_ms == c_started && strcmp(t->id, c_id) >= 0)))
			continue; /* at or before the cursor in this order */
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct task **nl = realloc(list, ncap * sizeof(*nl));
			if (!nl)
				return inventory_error(req, 500, "RUNTIME_ERROR", "out of memory");
			list = nl;
			cap = ncap;
		}
		list[n++] = t;
	}
	if (n)
		qsort(list, n, sizeof(*list), cmp_desc);
	json_t *arr = json_array();
	size_t shown = n < limit ? n : limit;
	for (size_t i = 0; i < shown; i++) {
		struct task *t = list[i];
		char started[40], finished[40];
		iso_time_ms(started, sizeof(started), t->started_ms);
		json_t *o =
			json_pack("{s:s,s:b,s:b,s:s}", "session", t->id, "running", !t->finished,
				  "background", t->background, "started_at", started);
		if (t->finished) {
			iso_time_ms(finished, sizeof(finished), t->finished_ms);
			json_object_set_new(o, "finished_at", json_string(finished));
			json_object_set_new(o, "exit_code", json_integer(t->exit_code));
			if (t->exit_code != 0) {
				char e[64];
				if (t->term_signal)
					snprintf(e, sizeof(e), "signal: %s",
						 signal_name(t->term_signal));
				else
					snprintf(e, sizeof(e), "exit status %d", t->exit_code);
				json_object_set_new(o, "error", json_string(e));
			}
		}
		json_t *left = task_left_behind_json(t);
		if (left)
			json_object_set_new(o, "left_behind", left);
		json_array_append_new(arr, o);
	}
	json_t *pag = json_pack("{s:I}", "limit", (json_int_t)limit);
	if (n > shown) {
		char next[50];
		cursor_encode(next, running, list[shown - 1]->started_ms, list[shown - 1]->id);
		json_object_set_new(pag, "nextCursor", json_string(next));
	}
	cleanup_free char *s = NULL;
	json_t *j = json_pack("{s:o,s:o}", "commands", arr, "pagination", pag);
	if (j)
		s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		return MHD_NO;
	return http_text(req, 200, "application/json", s, strlen(s), "Cache-Control", "no-store");
}
