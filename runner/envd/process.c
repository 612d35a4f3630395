/* process.Process (envd's process/process.proto) on the task engine: a process is a task of
 * its own kind (TASK_API_ENVD: confined as the task user, listed in /v1/tasks, audited at
 * the envd door), its pid the shim's, its output the task's spool
 * (docs/design/envd.md#processprocess-on-the-task-engine). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/runner.h"
#include "envd/internal.h"
#include "envd/procstream.h"
#include "task/pty.h"
#include "task/task.h"

/* What envd's List shows of a process that the task record does not keep: its tag and
 * ProcessConfig as asked. One per envd task, dropped with its record. */
struct envd_proc {
	char task_id[33];
	char *tag;
	json_t *config;
	struct envd_proc *next;
};

static struct envd_proc **procs_head(struct runner *r)
{
	return (struct envd_proc **)&envd_state(r)->procs;
}

/* The entries whose task record is gone are dropped on the way. */
static struct envd_proc *proc_of(struct runner *r, const struct task *t)
{
	struct envd_proc **pp = procs_head(r), *p;
	struct envd_proc *found = NULL;
	while ((p = *pp)) {
		struct task *u = task_find(r, p->task_id);
		if (!u) {
			*pp = p->next;
			free(p->tag);
			json_decref(p->config);
			free(p);
			continue;
		}
		if (u == t)
			found = p;
		pp = &p->next;
	}
	return found;
}

void envd_procs_free(struct runner *r)
{
	struct envd_proc *p = *procs_head(r), *n;
	for (; p; p = n) {
		n = p->next;
		free(p->tag);
		json_decref(p->config);
		free(p);
	}
	*procs_head(r) = NULL;
}

/* ProcessSelector: by pid (a running one first, else the latest) or by tag. */
static struct task *select_task(struct http_req *req, json_t *msg, char *why, size_t n)
{
	struct runner *r = req->r;
	json_t *sel = connect_field(msg, "process", NULL);
	uint32_t pid = 0;
	json_t *tag = connect_field(sel, "tag", NULL);
	int rc = connect_u32(sel, "pid", NULL, &pid);
	if (rc < 0 || (rc == 0 && !json_is_string(tag))) {
		snprintf(why, n, "a process selector needs a pid or a tag");
		return NULL;
	}
	struct task *best = NULL;
	proc_of(r, NULL); /* drop what is gone */
	if (rc > 0) {
		for (struct task *t = r->tasks->head; t; t = t->next)
			if (t->api == TASK_API_ENVD && t->shim_pid == (pid_t)pid &&
			    (!best || (!t->finished && best->finished) ||
			     t->started_mono > best->started_mono))
				best = t;
		if (!best)
			snprintf(why, n, "process with pid %u not found", (unsigned)pid);
		return best;
	}
	for (struct envd_proc *p = *procs_head(r); p; p = p->next) {
		struct task *t = task_find(r, p->task_id);
		if (t && p->tag && !strcmp(p->tag, json_string_value(tag)) &&
		    (!best || (!t->finished && best->finished)))
			best = t;
	}
	if (!best)
		snprintf(why, n, "process with tag %.128s not found", json_string_value(tag));
	return best;
}

static int check_strings(json_t *a)
{
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v)
		if (!json_is_string(v))
			return -1;
	return 0;
}

/* The environment: envd's /init variables, then the request's (the engine puts the runtime
 * init's sandbox-level ones under both). */
static json_t *start_env(struct runner *r, json_t *envs)
{
	json_t *env = json_object();
	struct envd_state *s = envd_state(r);
	if (env && s->env)
		json_object_update(env, s->env);
	const char *k;
	json_t *v;
	json_object_foreach(envs, k, v)
		if (json_is_string(v))
			json_object_set(env, k, v);
	return env;
}

struct start_args {
	json_t *config, *argv, *env, *tag;
	char cwd[PATH_MAX];
	bool pty, stdin_on;
	uint32_t cols, rows;
};

static int parse_start(struct http_req *req, json_t *msg, struct start_args *a, char *why, size_t n)
{
	a->config = connect_field(msg, "process", NULL);
	json_t *cmd = connect_field(a->config, "cmd", NULL);
	json_t *args = connect_field(a->config, "args", NULL);
	json_t *envs = connect_field(a->config, "envs", NULL);
	json_t *cwd = connect_field(a->config, "cwd", NULL);
	if (!json_is_string(cmd) || !json_string_length(cmd))
		return snprintf(why, n, "process.cmd must be a non-empty string"), -1;
	if ((args && (!json_is_array(args) || check_strings(args) < 0)) ||
	    (envs && !json_is_object(envs)) || (cwd && !json_is_string(cwd)))
		return snprintf(why, n,
				"process: args must be strings, envs an object, cwd a "
				"string"),
		       -1;
	if (envd_path(req->r, cwd ? json_string_value(cwd) : NULL, a->cwd, why, n) < 0)
		return -1;
	struct stat st;
	if (stat(a->cwd, &st) < 0 || !S_ISDIR(st.st_mode))
		return snprintf(why, n, "cwd '%.400s' does not exist", a->cwd), -1;
	a->argv = json_array();
	json_array_append(a->argv, cmd);
	if (args)
		json_array_extend(a->argv, args);
	a->env = start_env(req->r, envs);
	json_t *pty = connect_field(msg, "pty", NULL);
	a->pty = pty != NULL;
	json_t *size = connect_field(pty, "size", NULL);
	if (connect_u32(size, "cols", NULL, &a->cols) < 0 ||
	    connect_u32(size, "rows", NULL, &a->rows) < 0 || a->cols > 1000 || a->rows > 1000)
		return snprintf(why, n, "pty.size: cols and rows must be 0..1000"), -1;
	a->tag = connect_field(msg, "tag", NULL);
	if (a->tag && !json_is_string(a->tag))
		return snprintf(why, n, "tag must be a string"), -1;
	json_t *in = connect_field(msg, "stdin", NULL);
	a->stdin_on = !in || json_is_true(in); /* envd: absent means on */
	return 0;
}

static int remember(struct runner *r, struct task *t, const struct start_args *a)
{
	struct envd_proc *p = calloc(1, sizeof(*p));
	if (!p)
		return -1;
	snprintf(p->task_id, sizeof(p->task_id), "%s", t->id);
	p->tag = a->tag ? strdup(json_string_value(a->tag)) : NULL;
	p->config = json_deep_copy(a->config);
	p->next = *procs_head(r);
	*procs_head(r) = p;
	return 0;
}

enum MHD_Result envd_process_start(struct http_req *req)
{
	cleanup_json json_t *msg = envd_rpc_msg(req, true);
	if (!msg)
		return MHD_YES;
	enum connect_code code;
	char why[512];
	if (envd_user_check(req, NULL, &code, why, sizeof(why)) < 0)
		return envd_rpc_fail(req, true, code, "%s", why);
	struct start_args a = {0};
	int rc = parse_start(req, msg, &a, why, sizeof(why));
	cleanup_json json_t *argv = a.argv, *env = a.env;
	if (rc < 0)
		return envd_rpc_fail(req, true, CC_INVALID_ARGUMENT, "%s", why);
	struct task_spec spec = {.api = TASK_API_ENVD,
				 .argv = argv,
				 .cwd = a.cwd,
				 .env = env,
				 .timeout_ms = envd_timeout_ms(req),
				 .background = true,
				 .state_in_fd = -1,
				 .state_out_fd = -1,
				 .keep_stdin = a.stdin_on && !a.pty,
				 .tty = a.pty,
				 .cols = (unsigned short)a.cols,
				 .rows = (unsigned short)a.rows};
	spec.has_timeout = spec.timeout_ms != 0;
	struct error err;
	struct task *t = task_start(req->r, &spec, &err);
	if (!t)
		return envd_rpc_error(req, true, &err);
	if (remember(req->r, t, &a) < 0) {
		task_kill_now(t, TS_CANCELLED);
		return envd_rpc_fail(req, true, CC_INTERNAL, "out of memory");
	}
	http_audit_note(req, json_pack("{s:s,s:i}", "task", t->id, "pid", (int)t->shim_pid));
	return envd_pstream_start(req, t, false);
}

enum MHD_Result envd_process_connect(struct http_req *req)
{
	cleanup_json json_t *msg = envd_rpc_msg(req, true);
	if (!msg)
		return MHD_YES;
	char why[256];
	struct task *t = select_task(req, msg, why, sizeof(why));
	if (!t)
		return envd_rpc_fail(req, true, CC_NOT_FOUND, "%s", why);
	http_audit_note(req, json_pack("{s:s}", "task", t->id));
	/* A finished one: its start and end only (envd keeps an exit for late Connects). */
	return envd_pstream_start(req, t, true);
}

enum MHD_Result envd_process_list(struct http_req *req)
{
	cleanup_json json_t *msg = envd_rpc_msg(req, false);
	if (!msg)
		return MHD_YES;
	proc_of(req->r, NULL);
	json_t *arr = json_array();
	for (struct envd_proc *p = *procs_head(req->r); p; p = p->next) {
		struct task *t = task_find(req->r, p->task_id);
		if (!t || t->finished)
			continue;
		json_t *o = json_pack("{s:O,s:i}", "config", p->config ? p->config : json_null(),
				      "pid", (int)t->shim_pid);
		if (p->tag)
			json_object_set_new(o, "tag", json_string(p->tag));
		json_array_append_new(arr, o);
	}
	return envd_rpc_ok(req, json_pack("{s:o}", "processes", arr));
}

/* ProcessInput {stdin | pty} (base64) into the task's input. */
static int write_input(struct http_req *req, struct task *t, json_t *input, bool stream,
		       enum MHD_Result *res)
{
	json_t *in_stdin = connect_field(input, "stdin", NULL),
	       *in_pty = connect_field(input, "pty", NULL);
	json_t *v = in_stdin ? in_stdin : in_pty;
	bool tty = t->input && t->input->tty;
	if (!json_is_string(v))
		return *res = envd_rpc_fail(req, stream, CC_UNIMPLEMENTED,
					    "input needs stdin or pty"),
		       -1;
	if (in_stdin && tty)
		return *res = envd_rpc_fail(
			       req, stream, CC_INTERNAL,
			       "error writing to stdin: tty assigned to process — input "
			       "should be written to the pty, not the stdin"),
		       -1;
	if (in_pty && !tty)
		return *res = envd_rpc_fail(req, stream, CC_INTERNAL,
					    "error writing to tty: tty not assigned to process"),
		       -1;
	cleanup_free unsigned char *data = NULL;
	size_t len;
	if (connect_b64_decode(json_string_value(v), json_string_length(v), &data, &len) < 0)
		return *res = envd_rpc_fail(req, stream, CC_INVALID_ARGUMENT,
					    "input is not base64"),
		       -1;
	if (task_input_queued(t) > 16 * TASK_INPUT_HIGH)
		return *res = envd_rpc_fail(req, stream, CC_RESOURCE_EXHAUSTED,
					    "the process is not reading its input"),
		       -1;
	struct error err;
	if (task_input_write(t, data, len, &err) < 0)
		return *res = envd_rpc_fail(req, stream, CC_INTERNAL, "error writing to stdin: %s",
					    err.msg),
		       -1;
	return 0; /* written: the caller answers */
}

static enum MHD_Result op_send_input(struct http_req *req, struct task *t, json_t *msg)
{
	enum MHD_Result rc;
	if (write_input(req, t, connect_field(msg, "input", NULL), false, &rc) < 0)
		return rc;
	return envd_rpc_ok(req, NULL);
}

static enum MHD_Result op_close_stdin(struct http_req *req, struct task *t, json_t *msg)
{
	(void)msg;
	if (t->input && t->input->tty)
		return envd_rpc_fail(req, false, CC_UNKNOWN,
				     "error closing stdin: cannot close stdin for PTY process — "
				     "send Ctrl+D (0x04) instead");
	struct error err;
	if (task_input_open(t) && task_input_eof(t, &err) < 0)
		return envd_rpc_fail(req, false, CC_UNKNOWN, "error closing stdin: %s", err.msg);
	return envd_rpc_ok(req, NULL);
}

static enum MHD_Result op_send_signal(struct http_req *req, struct task *t, json_t *msg)
{
	json_t *s = connect_field(msg, "signal", NULL);
	const char *name = json_is_string(s) ? json_string_value(s) : "";
	long num = json_is_integer(s) ? (long)json_integer_value(s) : -1;
	if (!strcmp(name, "SIGNAL_SIGKILL") || num == SIGKILL) {
		/* The whole tree, now: what envd's SIGKILL of the process means for a shell. */
		task_kill_now(t, TS_CANCELLED);
		return envd_rpc_ok(req, NULL);
	}
	if (!(!strcmp(name, "SIGNAL_SIGTERM") || num == SIGTERM))
		return envd_rpc_fail(req, false, CC_UNIMPLEMENTED, "invalid signal: %.32s",
				     *name ? name : "SIGNAL_UNSPECIFIED");
	struct error err;
	if (task_signal(t, SIGTERM, false, &err) < 0)
		return envd_rpc_fail(req, false, CC_INTERNAL, "error sending signal: %s", err.msg);
	return envd_rpc_ok(req, NULL);
}

static enum MHD_Result op_update(struct http_req *req, struct task *t, json_t *msg)
{
	json_t *size = connect_field(connect_field(msg, "pty", NULL), "size", NULL);
	if (!size)
		return envd_rpc_ok(req, NULL);
	uint32_t cols = 0, rows = 0;
	if (connect_u32(size, "cols", NULL, &cols) < 0 ||
	    connect_u32(size, "rows", NULL, &rows) < 0)
		return envd_rpc_fail(req, false, CC_INVALID_ARGUMENT, "pty.size: bad cols or rows");
	struct error err;
	if (task_resize(t, cols, rows, &err) < 0)
		return envd_rpc_fail(req, false, CC_INTERNAL, "error resizing tty: %s", err.msg);
	return envd_rpc_ok(req, NULL);
}

/* The unary RPCs on one running process share one prologue (the message, its selector, a
 * process still running); each op is what follows it, chosen by the route's method name. */
static const struct {
	const char *method;
	enum MHD_Result (*fn)(struct http_req *req, struct task *t, json_t *msg);
} proc_ops[] = {
	{"SendInput", op_send_input},
	{"CloseStdin", op_close_stdin},
	{"SendSignal", op_send_signal},
	{"Update", op_update},
};

enum MHD_Result envd_process_unary(struct http_req *req)
{
	const char *m = strrchr(req->route->pattern, '/') + 1;
	size_t i = 0, n = sizeof(proc_ops) / sizeof(proc_ops[0]);
	while (i < n && strcmp(m, proc_ops[i].method))
		i++;
	if (i == n)
		return envd_rpc_fail(req, false, CC_UNIMPLEMENTED, "no method %.64s", m);
	cleanup_json json_t *msg = envd_rpc_msg(req, false);
	if (!msg)
		return MHD_YES;
	char why[256];
	struct task *t = select_task(req, msg, why, sizeof(why));
	if (!t || t->finished)
		return envd_rpc_fail(req, false, CC_NOT_FOUND, "%s",
				     t ? "the process has ended" : why);
	return proc_ops[i].fn(req, t, msg);
}

/* Client streaming: the body's envelopes in order (start, data..., keepalive); the input is
 * applied once the body is in (HTTP/1.1 gives no answer before the request ends). */
enum MHD_Result envd_process_stream_input(struct http_req *req)
{
	const char *ct = http_header(req, "Content-Type");
	if (!ct || strncasecmp(ct, "application/connect+json", 24))
		return envd_rpc_fail(req, true, CC_UNIMPLEMENTED,
				     "StreamInput takes application/connect+json");
	const char *p = req->body ? req->body : "";
	size_t left = req->body_len;
	struct task *t = NULL;
	while (left) {
		uint8_t flags;
		const char *m, *why = "an envelope whose length is more than the body holds";
		size_t mlen, used;
		int rc =
			connect_env_parse(p, left, CONNECT_MSG_MAX, &flags, &m, &mlen, &used, &why);
		if (rc <= 0)
			return envd_rpc_fail(req, true, CC_INVALID_ARGUMENT, "bad envelope: %s",
					     why);
		p += used;
		left -= used;
		if (flags & CONNECT_FLAG_END)
			break;
		cleanup_json json_t *ev = json_loadb(m, mlen, 0, NULL);
		json_t *start = connect_field(ev, "start", NULL),
		       *data = connect_field(ev, "data", NULL);
		char why2[256];
		if (start && !(t = select_task(req, start, why2, sizeof(why2))))
			return envd_rpc_fail(req, true, CC_NOT_FOUND, "%s", why2);
		if (data) {
			if (!t || t->finished)
				return envd_rpc_fail(
					req, true, CC_FAILED_PRECONDITION,
					"data before a start event, or the process ended");
			enum MHD_Result r;
			if (write_input(req, t, connect_field(data, "input", NULL), true, &r) < 0)
				return r;
		}
	}
	cleanup_buf struct buf b = {0};
	if (connect_env_append(&b, 0, "{}", 2) < 0 || connect_end_append(&b, CC_OK, NULL) < 0)
		return MHD_NO;
	return http_text(req, 200, "application/connect+json", b.data, b.len, NULL, NULL);
}
