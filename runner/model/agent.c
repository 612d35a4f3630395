/* The built-in agent loop: see agent.h. */
#include "model/agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/budget.h"
#include "model/chatstream.h"
#include "model/contextbound.h"
#include "model/conversation.h"
#include "model/args.h"
#include "model/limits.h"
#include "model/gateway.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "audit/trail.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/utf8.h"
#include "core/base64.h"
#include "tools/tools.h"

struct agent {
	struct runner *r;
	struct task *t;
	char *model;
	json_t *env; /* the request's env for tool commands (or NULL) */
	uint64_t max_steps;
	enum task_network network; /* of its tool calls */
	unsigned step;
	json_t *messages;
	struct budget b; /* the task's model budget: the same one a chat task's token has */

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

	struct conversation *conv; /* kept after the task
				      (docs/design/model.md#limits-the-same-for-every-engine) */
	/* The gateway's GET /models, asked once before the first turn: a
	 * context length for the model lowers the bound
	 * (design/model.md#the-built-in-loops-context-bound). */
	struct gw_call *models_call;
	struct buf models_body;
	long models_status;
	uint64_t context_bound; /* bytes: --agent-context-max, or less */
	uint64_t model_context; /* tokens, as /models said (0: not said) */
	size_t largest_request; /* bytes of the largest model request sent */
	unsigned elided;        /* messages shortened by the context bound */
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
static void finish(struct agent *a, enum task_status st, const char *limit, int exit_code,
		   const char *answer);
static void ask(struct agent *a);
static void next_tool(struct agent *a);

static json_t *summary(struct agent *a)
{
	json_t *o = json_pack("{s:i,s:s,s:s}", "steps", (int)a->step, "model", a->model, "engine",
			      "builtin");
	json_object_set_new(o, "usage", budget_usage_json(&a->b));
	json_t *b = budget_json(&a->b);
	if (b)
		json_object_set_new(o, "budget", b);
	if (a->conv)
		json_object_set_new(o, "conversation", json_string(a->conv->id));
	json_object_set_new(o, "context",
			    json_pack("{s:I,s:I,s:I,s:i}", "model_context_tokens",
				      (json_int_t)a->model_context, "max_bytes",
				      (json_int_t)a->context_bound, "largest_request_bytes",
				      (json_int_t)a->largest_request, "elided_messages",
				      (int)a->elided));
	return o;
}

/* The budget is spent: the agent ends as a chat task's next call would be
 * refused (max_tokens or max_model_requests). True when it ended. */
static bool budget_over(struct agent *a)
{
	if (!budget_spent(&a->b))
		return false;
	finish(a, TS_LIMIT,
	       a->b.max_tokens && (uint64_t)a->b.used.total_tokens >= a->b.max_tokens
		       ? MODEL_LIMIT_TOKENS
		       : MODEL_LIMIT_REQUESTS,
	       1, NULL);
	return true;
}

static void stop_work(struct agent *a, enum task_status why)
{
	if (a->call) {
		gw_call_cancel(a->call);
		a->call = NULL;
	}
	if (a->models_call) {
		gw_call_cancel(a->models_call);
		a->models_call = NULL;
	}
	(void)why;
	loop_timer_stop(&a->r->loop, &a->retry_timer);
	if (a->tool) {
		tool_call_cancel(a->tool); /* kills a command's tree */
		a->tool = NULL;
	}
}

void agent_task_finish(struct task *t, enum task_status st, const char *limit, int exit_code,
		       json_t *summary, const char *answer)
{
	if (answer)
		json_object_set_new(summary, "answer", json_string(answer));
	task_driven_finish(t, st, limit, exit_code, summary);
	json_decref(summary);
}

/* Terminal exit (the agent is freed: return right after); limit: st TS_LIMIT's name. */
static void finish(struct agent *a, enum task_status st, const char *limit, int exit_code,
		   const char *answer)
{
	stop_work(a, TS_CANCELLED);
	agent_task_finish(a->t, st, limit, exit_code, summary(a), answer);
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
	finish(a, why, NULL, why == TS_TIMEOUT ? 124 : 143, NULL);
}

static void on_release(struct task *t)
{
	struct agent *a = t->driver_arg;
	stop_work(a, TS_KILLED);
	agent_free(a);
}

static const struct task_driver_ops agent_ops = {on_cancel, on_release};

/* The history as a conversation keeps it: every tool call of the last turn
 * answered (a strict gateway refuses a call without its result). */
static void save_conversation(struct agent *a)
{
	json_t *m = a->messages;
	size_t n = json_array_size(m), last = n;
	for (size_t i = n; i-- > 0;) {
		const char *role = json_string_value(json_object_get(json_array_get(m, i), "role"));
		if (role && !strcmp(role, "assistant")) {
			last = i;
			break;
		}
	}
	json_t *tcs = last < n ? json_object_get(json_array_get(m, last), "tool_calls") : NULL;
	size_t i;
	json_t *tc;
	json_array_foreach(tcs, i, tc) {
		const char *id = json_string_value(json_object_get(tc, "id"));
		bool answered = false;
		for (size_t j = last + 1; j < n && !answered; j++) {
			const char *tid = json_string_value(
				json_object_get(json_array_get(m, j), "tool_call_id"));
			answered = tid && id && !strcmp(tid, id);
		}
		if (!answered && id)
			json_array_append_new(
				m,
				json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id", id,
					  "content", "not run: the task ended before this call"));
	}
	int rc = conv_save(a->r, a->conv, m);
	if (rc < 0)
		log_errno("cannot save a conversation", -rc, a->conv->id);
}

static void agent_free(struct agent *a)
{
	if (a->conv) {
		if (a->messages)
			save_conversation(a);
		conv_release(a->r, a->conv);
		a->conv = NULL;
	}
	buf_free(&a->models_body);
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
	audit_emit(a->r, "agent", "model call",
		   json_pack("{s:{s:s},s:s,s:s*,s:i,s:s,s:o*}", "who", "task", a->t->id, "format",
			     "openai", "model", a->model, "status", (int)a->cs.http_status,
			     "outcome", err == GW_OK ? "ok" : "failed", "usage",
			     a->cs.has_usage ? MU_TOKENS_JSON(&a->cs.usage) : NULL));
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
	char why[256];
	/* One call at a time: nothing to hold against concurrent ones. */
	if (budget_admit(&a->b, 0, why, sizeof(why)) != BUDGET_ADMIT) {
		budget_over(a);
		return;
	}
	a->step++;
	if (a->cs_live)
		chatstream_free(&a->cs);
	chatstream_init(&a->cs, on_text, a);
	a->cs_live = true;
	a->retry_after[0] = 0;
	json_t *tools = tool_defs();
	char *td = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
	a->elided +=
		context_bound(a->messages, a->context_bound,
			      (td ? strlen(td) : 8192) + 256); /* the request around the messages */
	free(td);
	json_t *req = json_pack("{s:s,s:O,s:o,s:s,s:b,s:{s:b}}", "model", a->model, "messages",
				a->messages, "tools", tools, "tool_choice", "auto", "stream", 1,
				"stream_options", "include_usage", 1);
	char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (!body) {
		fail(a, "internal_error", "out of memory building the model request", 0);
		return;
	}
	if (strlen(body) > a->largest_request)
		a->largest_request = strlen(body);
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
		struct mu_usage u = {.prompt_tokens = cs->usage.prompt_tokens,
				     .completion_tokens = cs->usage.completion_tokens,
				     .total_tokens = cs->usage.total_tokens};
		budget_charge(&a->b, &u);
		json_t *ev = MU_TOKENS_JSON(&cs->usage);
		json_object_set_new(ev, "step", json_integer(a->step));
		json_object_set_new(ev, "total", MU_TOKENS_JSON(&a->b.used));
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
		finish(a, TS_SUCCEEDED, NULL, 0, answer ? answer : "");
		free(answer);
		return;
	}
	if (budget_over(a))
		return;
	if (a->step >= a->max_steps) {
		finish(a, TS_LIMIT, MODEL_LIMIT_STEPS, 1, NULL);
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

static const struct tool_call_ops agent_tool_ops = {.output = on_tool_output, .done = on_tool_done};

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

/* ---- the model's context, from the gateway's GET /models ---- */

#define MODELS_BODY_MAX (1u << 20)
#define BYTES_PER_TOKEN                                                                            \
	3 /* of JSON-encoded conversation: a low estimate, so the bound errs short */

static void models_head(struct gw_call *c, void *arg, long status, const char *ctype,
			const char *retry_after)
{
	(void)c;
	(void)ctype;
	(void)retry_after;
	((struct agent *)arg)->models_status = status;
}

static int models_data(struct gw_call *c, void *arg, const char *p, size_t n)
{
	(void)c;
	struct agent *a = arg;
	if (a->models_body.len + n > MODELS_BODY_MAX)
		return -1; /* not a list of models worth reading */
	return buf_append(&a->models_body, p, n) < 0 ? -1 : 0;
}

static void models_done(struct gw_call *c, void *arg, enum gw_err err, const char *msg)
{
	(void)c;
	(void)msg;
	struct agent *a = arg;
	a->models_call = NULL;
	if (err == GW_OK && a->models_status == 200) {
		json_t *j = json_loadb(a->models_body.data ? a->models_body.data : "",
				       a->models_body.len, 0, NULL);
		a->model_context = model_context_of(j, a->model);
		json_decref(j);
		if (a->model_context && a->model_context <= UINT64_MAX / BYTES_PER_TOKEN &&
		    a->model_context * BYTES_PER_TOKEN < a->context_bound)
			a->context_bound = a->model_context * BYTES_PER_TOKEN;
	}
	buf_free(&a->models_body);
	ask(a); /* whatever /models said: a gateway without it is fine */
}

static const struct gw_call_ops models_ops = {models_head, models_data, models_done, NULL};

/* The first turn, after asking /models (or at once when that cannot start). */
static void first_turn(struct agent *a)
{
	struct gw_request rq = {.method = "GET", .path = "/models", .accept = "application/json"};
	a->models_call = gw_call_start(a->r, &rq, &models_ops, a);
	if (!a->models_call)
		ask(a);
}

/* ---- start ---- */

/* The agent's record from the request and the options, its retry timer
 * ready; NULL with err set. */
static struct agent *agent_new(struct runner *r, const struct task_spec *spec, struct error *err)
{
	/* engine_task_start checked the model and the env (model/engine.c). */
	const struct model_args *args = model_args_of(spec);
	struct agent *a = args->model ? calloc(1, sizeof(*a)) : NULL;
	if (!a) {
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the agent");
		return NULL;
	}
	a->r = r;
	a->context_bound = r->cfg.agent_context_max;
	a->retry_timer.w.fd = -1; /* agent_free is the one teardown from here on */
	if (!(a->model = strdup(args->model))) {
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the agent");
		agent_free(a);
		return NULL;
	}
	a->max_steps = args->max_steps ? args->max_steps : r->cfg.agent_max_steps;
	/* The request's, else --agent-max-tokens (the older, agent-only name),
	 * else --task-max-tokens. */
	a->b.max_tokens = args->max_tokens          ? args->max_tokens
			  : r->cfg.agent_max_tokens ? r->cfg.agent_max_tokens
						    : r->cfg.task_max_tokens;
	a->b.max_requests = args->max_requests ? args->max_requests
					       : r->cfg.task_max_model_requests;
	a->network = spec->network; /* for its tool calls */
	if (spec->env && json_is_object(spec->env))
		a->env = json_deep_copy(spec->env);
	int rc = loop_timer_init(&r->loop, &a->retry_timer, on_retry_timer, a);
	if (rc < 0) {
		error_set(err, -rc, "RUNTIME_ERROR", "timerfd_create");
		agent_free(a);
		return NULL;
	}
	return a;
}

/* The first messages (a continued conversation's history, or the system
 * prompt), then the goal, and the first turn. */
static void agent_begin(struct agent *a, const struct task_spec *spec, struct conversation *conv)
{
	struct task *t = a->t;
	json_t *history = conv ? conv_load(a->r, conv) : NULL;
	if (conv) {
		a->conv = conv;
		conv_attach(conv, t);
	}
	if (history && json_array_size(history) >= 2) {
		/* A continued conversation: its history, then the new goal. */
		a->messages = history;
		if (json_array_append_new(a->messages, json_pack("{s:s,s:s}", "role", "user",
								 "content", spec->command)) < 0) {
			fail(a, "internal_error", "the goal is not valid UTF-8 text", 0);
			return;
		}
		log_info("agent continues a conversation", "{s:s,s:s,s:i}", "task", t->id,
			 "conversation", conv->id, "messages", (int)json_array_size(history));
		first_turn(a);
		return;
	}
	json_decref(history);
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
		return;
	}
	log_info("agent started", "{s:s,s:s,s:I}", "task", t->id, "model", a->model, "max_steps",
		 (json_int_t)a->max_steps);
	first_turn(a);
}

struct task *agent_start(struct runner *r, const struct task_spec *spec, struct conversation *conv,
			 struct error *err)
{
	struct agent *a = agent_new(r, spec, err);
	if (!a)
		return NULL;
	struct task_spec s = *spec;
	s.api = TASK_API_NATIVE;
	s.timeout_ms = spec->has_timeout ? spec->timeout_ms : r->cfg.agent_timeout_ms;
	cleanup_json json_t *audit = json_pack("{s:s,s:s}", "engine", "builtin", "model", a->model);
	cleanup_json json_t *started = json_pack("{s:s,s:s?}", "engine", "builtin", "conversation",
						 conv ? conv->id : NULL);
	s.audit_fields = audit;
	s.started_fields = started;
	struct task *t = task_start_driven(r, &s, &agent_ops, a, err);
	if (!t) {
		agent_free(a);
		return NULL;
	}
	a->t = t;
	agent_begin(a, spec, conv);
	return t;
}
