/* The built-in agent loop: see agent.h. */
#include "model/agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/chatstream.h"
#include "task/env.h"
#include "model/gateway.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/util.h"
#include "tools/tools.h"

struct agent {
	struct runner *r;
	struct task *t;
	char *model;
	json_t *env; /* the request's env for tool commands (or NULL) */
	uint64_t max_steps, max_tokens;
	enum task_network network; /* of its tool calls */
	unsigned step;
	json_t *messages;
	struct cs_usage total;
	bool has_usage;

	/* The model call in flight. */
	struct gw_call *call;
	struct chatstream cs;
	bool cs_live;
	unsigned attempt;
	char retry_after[32];
	struct loop_timer retry_timer;

	/* Tool calls of the last turn, run one after the other. */
	json_t *calls; /* array of {id, name, arguments} */
	size_t next_call;
	char call_id[80];
	uint64_t call_started_ms;
	bool call_is_bash;
	struct tool_call *tool; /* the tool layer's call in flight (tools/tools.h) */
};

#define BASH_TOOL                                                                                   \
	"{\"type\":\"function\",\"function\":{\"name\":\"bash\",\"description\":\"Run a shell "     \
	"command (bash -c) in the sandbox, in the task's working directory. Returns the exit code " \
	"and the output (stdout and stderr interleaved; long output is cut in the middle).\","      \
	"\"parameters\":{\"type\":\"object\",\"properties\":{\"command\":{\"type\":\"string\","     \
	"\"description\":\"the command line to run\"}},\"required\":[\"command\"]}}}"

/* The file tools the model gets beside bash, from the tool layer (one description of each
 * for every door: tools/registry.c). bash is the tool layer's run_command under the name
 * models are trained on. */
static const char *const FILE_TOOLS[] = {"read_file", "write_file", "edit_file"};

static json_t *tool_defs(void)
{
	json_t *a = json_array();
	json_array_append_new(a, json_loads(BASH_TOOL, 0, NULL));
	for (size_t i = 0; i < sizeof(FILE_TOOLS) / sizeof(FILE_TOOLS[0]); i++) {
		json_t *d = tools_describe(FILE_TOOLS[i]);
		if (!d)
			continue;
		json_array_append_new(a,
				      json_pack("{s:s,s:{s:O,s:O,s:O}}", "type", "function",
						"function", "name", json_object_get(d, "name"),
						"description", json_object_get(d, "description"),
						"parameters", json_object_get(d, "inputSchema")));
		json_decref(d);
	}
	return a;
}

static bool agent_tool(const char *name)
{
	for (size_t i = 0; i < sizeof(FILE_TOOLS) / sizeof(FILE_TOOLS[0]); i++)
		if (!strcmp(name, FILE_TOOLS[i]))
			return true;
	return !strcmp(name, "bash");
}

static void agent_free(struct agent *a);
static void ask(struct agent *a);
static void next_tool(struct agent *a);

static json_t *usage_json(const struct cs_usage *u)
{
	return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)u->prompt_tokens,
			 "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
			 (json_int_t)u->total_tokens);
}

static json_t *summary(struct agent *a)
{
	json_t *o = json_pack("{s:i,s:s}", "steps", (int)a->step, "model", a->model);
	json_object_set_new(o, "usage", usage_json(&a->total));
	return o;
}

static void stop_work(struct agent *a, enum task_status why)
{
	if (a->call) {
		gw_call_cancel(a->call);
		a->call = NULL;
	}
	(void)why;
	loop_timer_stop(&a->r->loop, &a->retry_timer);
	if (a->tool) {
		tool_call_cancel(a->tool); /* kills a command's tree */
		a->tool = NULL;
	}
}

/* Terminal exit (the agent is freed: return right after). */
static void finish(struct agent *a, enum task_status st, int exit_code, const char *answer)
{
	stop_work(a, TS_CANCELLED);
	json_t *extra = summary(a);
	if (answer)
		json_object_set_new(extra, "answer", json_string(answer));
	task_driven_finish(a->t, st, exit_code, extra);
	json_decref(extra);
	agent_free(a);
}

/* Terminal error (the agent is freed: return right after). */
static void fail(struct agent *a, const char *code, const char *msg, long http_status)
{
	stop_work(a, TS_CANCELLED);
	json_t *extra = summary(a);
	if (http_status)
		json_object_set_new(extra, "http_status", json_integer(http_status));
	log_warn("agent failed", "{s:s,s:s,s:s}", "task", a->t->id, "code", code, "message", msg);
	task_driven_fail(a->t, code, msg, extra);
	json_decref(extra);
	agent_free(a);
}

static void on_cancel(struct task *t, enum task_status why)
{
	struct agent *a = t->driver_arg;
	stop_work(a, why);
	finish(a, why, why == TS_TIMEOUT ? 124 : 143, NULL);
}

static void on_release(struct task *t)
{
	struct agent *a = t->driver_arg;
	stop_work(a, TS_KILLED);
	agent_free(a);
}

static const struct task_driver_ops agent_ops = {on_cancel, on_release};

static void agent_free(struct agent *a)
{
	if (a->cs_live)
		chatstream_free(&a->cs);
	loop_timer_close(&a->r->loop, &a->retry_timer);
	json_decref(a->messages);
	json_decref(a->calls);
	json_decref(a->env);
	free(a->model);
	if (a->t && a->t->driver_arg == a) {
		a->t->driver = NULL;
		a->t->driver_arg = NULL;
	}
	free(a);
}

/* ---- the model turn ---- */

static void on_text(void *arg, const char *text, size_t len)
{
	struct agent *a = arg;
	json_t *ev = json_pack("{s:i,s:s%}", "step", (int)a->step, "text", text, len);
	if (ev)
		task_emit(a->t, "message.delta", ev);
	json_decref(ev);
}

static void on_head(struct gw_call *c, void *arg, long status, const char *ctype,
		    const char *retry_after)
{
	(void)c;
	(void)ctype;
	struct agent *a = arg;
	chatstream_status(&a->cs, status);
	snprintf(a->retry_after, sizeof(a->retry_after), "%s", retry_after);
}

static int on_data(struct gw_call *c, void *arg, const char *p, size_t n)
{
	(void)c;
	struct agent *a = arg;
	enum cs_result r = chatstream_feed(&a->cs, p, n);
	/* A decided error needs no more bytes. */
	return (r != CS_RUNNING && r != CS_OK) ? -1 : 0;
}

static void turn_complete(struct agent *a);

static void on_retry_timer(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	ask(t->arg);
}

static void on_done(struct gw_call *c, void *arg, enum gw_err err, const char *msg)
{
	(void)c;
	struct agent *a = arg;
	a->call = NULL;
	enum cs_result r = a->cs.result;
	if (err != GW_OK && !(err == GW_ABORTED && r != CS_RUNNING)) {
		/* Transport failure; a malformed/truncated stream that the
		 * connection cut is still a stream problem when data came. */
		char m[600];
		snprintf(m, sizeof(m), "%s (gateway %s)", msg && *msg ? msg : gw_err_code(err),
			 a->r->cfg.gateway_url);
		fail(a, gw_err_code(err), m, a->cs.http_status != 200 ? a->cs.http_status : 0);
		return;
	}
	if (r == CS_RUNNING)
		r = chatstream_eof(&a->cs);
	if (r == CS_OK) {
		turn_complete(a);
		return;
	}
	int64_t delay =
		chatstream_retry_ms(r, a->attempt + 1, a->retry_after[0] ? a->retry_after : NULL);
	if (delay >= 0) {
		a->attempt++;
		log_info("gateway call will be retried", "{s:s,s:s,s:i,s:I,s:i}", "task", a->t->id,
			 "code", cs_result_code(r), "http_status", (int)a->cs.http_status,
			 "delay_ms", (json_int_t)delay, "attempt", (int)a->attempt);
		a->step--; /* the same step again */
		chatstream_free(&a->cs);
		a->cs_live = false;
		loop_timer_start(&a->r->loop, &a->retry_timer, (uint64_t)delay, 0);
		return;
	}
	char m[sizeof(a->cs.message)];
	snprintf(m, sizeof(m), "%s", a->cs.message);
	fail(a, cs_result_code(r), m, a->cs.http_status != 200 ? a->cs.http_status : 0);
}

static const struct gw_call_ops call_ops = {on_head, on_data, on_done, NULL};

static void ask(struct agent *a)
{
	a->step++;
	if (a->cs_live)
		chatstream_free(&a->cs);
	chatstream_init(&a->cs, on_text, a);
	a->cs_live = true;
	a->retry_after[0] = 0;
	json_t *req = json_pack("{s:s,s:O,s:o,s:s,s:b,s:{s:b}}", "model", a->model, "messages",
				a->messages, "tools", tool_defs(), "tool_choice", "auto", "stream",
				1, "stream_options", "include_usage", 1);
	char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (!body) {
		fail(a, "internal_error", "out of memory building the model request", 0);
		return;
	}
	struct gw_request rq = {.method = "POST",
				.path = "/chat/completions",
				.body = body,
				.body_len = strlen(body),
				.accept = "text/event-stream"};
	a->call = gw_call_start(a->r, &rq, &call_ops, a);
	free(body);
	if (!a->call)
		fail(a, "internal_error", "cannot start a gateway call (see the runner log)", 0);
}

static void turn_complete(struct agent *a)
{
	struct chatstream *cs = &a->cs;
	a->attempt = 0;
	if (cs->has_usage) {
		a->total.prompt_tokens += cs->usage.prompt_tokens;
		a->total.completion_tokens += cs->usage.completion_tokens;
		a->total.total_tokens += cs->usage.total_tokens;
		json_t *ev = usage_json(&cs->usage);
		json_object_set_new(ev, "step", json_integer(a->step));
		json_object_set_new(ev, "total", usage_json(&a->total));
		task_emit(a->t, "usage", ev);
		json_decref(ev);
	}
	/* The assistant message as the model sent it, for the next turn. */
	json_t *msg = json_pack("{s:s}", "role", "assistant");
	json_object_set_new(msg, "content",
			    cs->text.len ? json_stringn(cs->text.data, cs->text.len) : json_null());
	json_decref(a->calls);
	a->calls = json_array();
	a->next_call = 0;
	if (cs->n_tools) {
		json_t *tcs = json_array();
		for (unsigned i = 0; i < cs->n_tools; i++) {
			struct cs_tool_call *tc = &cs->tools[i];
			char gen[32];
			snprintf(gen, sizeof(gen), "call_%u_%u", a->step, i);
			const char *id = tc->id.len ? tc->id.data : gen;
			json_t *args =
				json_stringn(tc->args.data ? tc->args.data : "", tc->args.len);
			json_t *name = json_stringn(tc->name.data, tc->name.len);
			json_array_append_new(tcs, json_pack("{s:s,s:s,s:{s:O,s:O}}", "id", id,
							     "type", "function", "function", "name",
							     name, "arguments", args));
			json_array_append_new(a->calls, json_pack("{s:s,s:o,s:o}", "id", id, "name",
								  name, "arguments", args));
		}
		json_object_set_new(msg, "tool_calls", tcs);
	}
	json_array_append_new(a->messages, msg);
	if (!cs->n_tools) {
		char *answer = strndup(cs->text.data ? cs->text.data : "", cs->text.len);
		finish(a, TS_SUCCEEDED, 0, answer ? answer : "");
		free(answer);
		return;
	}
	if (a->max_tokens && (uint64_t)a->total.total_tokens >= a->max_tokens) {
		finish(a, TS_MAX_TOKENS, 1, NULL);
		return;
	}
	if (a->step >= a->max_steps) {
		finish(a, TS_MAX_STEPS, 1, NULL);
		return;
	}
	next_tool(a);
}

/* ---- running a tool call (the tool layer, tools/tools.h) ---- */

static void tool_finished(struct agent *a, struct tool_result *res, const char *error)
{
	json_t *ev = json_pack("{s:s,s:b,s:I}", "id", a->call_id, "done", 1, "duration_ms",
			       (json_int_t)(now_ms() - a->call_started_ms));
	json_t *content;
	if (error || (res && res->is_error && !(a->call_is_bash && res->ran))) {
		struct buf m = {0};
		buf_append_str(&m, "error: ");
		if (error)
			buf_append_str(&m, error);
		else
			buf_append(&m, res->text.data ? res->text.data : "", res->text.len);
		json_object_set_new(ev, "error", tool_json_text(m.data + 7, m.len - 7));
		content = tool_json_text(m.data, m.len);
		buf_free(&m);
	} else if (a->call_is_bash) {
		json_object_set_new(ev, "output_bytes",
				    json_integer((json_int_t)res->output_bytes));
		json_object_set_new(ev, "exit_code", json_integer(res->exit_code));
		json_object_set_new(ev, "status", json_string(res->status));
		json_object_set_new(ev, "truncated", json_boolean(res->truncated));
		content = tool_json_text(res->text.data, res->text.len);
	} else {
		content = tool_json_text(res->text.data, res->text.len);
	}
	if (res)
		tool_result_free(res);
	task_emit(a->t, "tool.result", ev);
	json_decref(ev);
	json_array_append_new(a->messages,
			      json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id", a->call_id,
					"content", content));
	a->next_call++;
	next_tool(a);
}

static void on_tool_output(void *arg, int stream, const char *p, size_t n)
{
	struct agent *a = arg;
	json_t *ev = json_pack("{s:s,s:s}", "id", a->call_id, "stream",
			       stream == 1 ? "stdout" : "stderr");
	if (utf8_valid((const unsigned char *)p, n)) {
		json_object_set_new(ev, "text", json_stringn(p, n));
	} else {
		struct buf b = {0};
		buf_append_base64(&b, (const unsigned char *)p, n);
		json_object_set_new(ev, "data_b64", json_stringn(b.data ? b.data : "", b.len));
		buf_free(&b);
	}
	task_emit(a->t, "tool.result", ev);
	json_decref(ev);
}

static void on_tool_done(void *arg, struct tool_result *res)
{
	struct agent *a = arg;
	a->tool = NULL;
	tool_finished(a, res, NULL);
}

static const struct tool_call_ops agent_tool_ops = {on_tool_output, on_tool_done};

static void next_tool(struct agent *a)
{
	if (a->next_call >= json_array_size(a->calls)) {
		ask(a);
		return;
	}
	json_t *call = json_array_get(a->calls, a->next_call);
	const char *id = json_string_value(json_object_get(call, "id"));
	const char *name = json_string_value(json_object_get(call, "name"));
	json_t *jargs = json_object_get(call, "arguments");
	snprintf(a->call_id, sizeof(a->call_id), "%s", id);
	a->call_started_ms = now_ms();
	json_t *args = json_loadb(json_string_value(jargs), json_string_length(jargs), 0, NULL);
	json_t *ev = json_pack("{s:s,s:s,s:i}", "id", id, "name", name, "step", (int)a->step);
	json_object_set(ev, "arguments", args && json_is_object(args) ? args : jargs);
	task_emit(a->t, "tool.call", ev);
	json_decref(ev);
	a->call_is_bash = !strcmp(name, "bash");
	char msg[200];
	if (!agent_tool(name)) {
		snprintf(msg, sizeof(msg),
			 "unknown tool '%.100s' (the tools are bash, read_file, write_file, "
			 "edit_file)",
			 name);
		json_decref(args);
		tool_finished(a, NULL, msg);
		return;
	}
	if (!args || !json_is_object(args)) {
		json_decref(args);
		tool_finished(a, NULL, "the arguments must be a JSON object");
		return;
	}
	const char *command = json_string_value(json_object_get(args, "command"));
	if (a->call_is_bash && (!command || !*command)) {
		json_decref(args);
		tool_finished(a, NULL,
			      "the arguments must be a JSON object {\"command\": \"...\"}");
		return;
	}
	json_t *targs = a->call_is_bash ? json_pack("{s:s}", "command", command)
					: json_incref(args);
	json_decref(args);
	struct tool_ctx ctx = {.cwd = a->t->cwd, .env = a->env, .network = a->network};
	struct tool_result res;
	int rc = tool_call_start(a->r, a->call_is_bash ? "run_command" : name, targs, &ctx,
				 &agent_tool_ops, a, &a->tool, &res);
	json_decref(targs);
	if (rc == 0)
		tool_finished(a, &res, NULL);
}

/* ---- start ---- */

struct task *agent_start(struct runner *r, const struct task_spec *spec, struct error *err)
{
	const char *model = spec->model ? spec->model : r->cfg.model;
	if (!model) {
		error_set(err, 0, "NO_MODEL",
			  "no model: set 'model' in the request or FORCEAI_MODEL");
		return NULL;
	}
	if (spec->env && env_validate(spec->env, err) < 0)
		return NULL;
	struct agent *a = calloc(1, sizeof(*a));
	if (!a) {
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the agent");
		return NULL;
	}
	a->r = r;
	a->retry_timer.w.fd = -1; /* agent_free is the one teardown from here on */
	if (!(a->model = strdup(model))) {
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the agent");
		agent_free(a);
		return NULL;
	}
	a->max_steps = spec->max_steps ? spec->max_steps : r->cfg.agent_max_steps;
	a->max_tokens = spec->max_tokens ? spec->max_tokens : r->cfg.agent_max_tokens;
	a->network = spec->network; /* for its tool calls */
	if (spec->env && json_is_object(spec->env))
		a->env = json_deep_copy(spec->env);
	int rc = loop_timer_init(&r->loop, &a->retry_timer, on_retry_timer, a);
	if (rc < 0) {
		error_set(err, -rc, "RUNTIME_ERROR", "timerfd_create");
		agent_free(a);
		return NULL;
	}
	struct task_spec s = *spec;
	s.api = TASK_API_NATIVE;
	s.capability = "agent";
	s.timeout_ms = spec->has_timeout ? spec->timeout_ms : r->cfg.agent_timeout_ms;
	struct task *t = task_start_driven(r, &s, &agent_ops, a, err);
	if (!t) {
		agent_free(a);
		return NULL;
	}
	a->t = t;
	char sys[1024];
	snprintf(sys, sizeof(sys),
		 "You are an autonomous agent working inside a sandboxed Linux box. Use the bash "
		 "tool to run shell commands; they run in %.400s. Work step by step. When the goal "
		 "is reached, reply with a short final report and no tool call.",
		 t->cwd);
	a->messages = json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "system", "content", sys, "role",
				"user", "content", spec->command);
	if (!a->messages) {
		fail(a, "internal_error", "the goal is not valid UTF-8 text", 0);
		return t;
	}
	log_info("agent started", "{s:s,s:s,s:I}", "task", t->id, "model", a->model, "max_steps",
		 (json_int_t)a->max_steps);
	ask(a);
	return t;
}
