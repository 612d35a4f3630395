/* Agent engines: the registry and the driver of a coding-agent CLI (see engine.h). */
#include "model/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/jsonesc.h"
#include "core/fileio.h"
#include "core/version.h"
#include "model/gateway.h"
#include "model/agent.h"
#include "model/conversation.h"
#include "model/args.h"
#include "model/limits.h"
#include "model/chattask.h"
#include "model/modelproxy.h"
#include "task/env.h"
#include "task/linesplit.h"

#define DEFAULT_TASK_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define LINE_MAX_BYTES (1u << 20) /* a longer JSONL line is passed on cut */
#define STDERR_TAIL 2048          /* of the CLI's stderr, for its error message */
/* A CLI's package.json is a few KiB; up to 5 are read per engine and GET. */
#define PACKAGE_JSON_MAX (64u << 10)

/* ---- the registry ---- */

/* The --agent-engine entry for k (the last one given wins), or NULL. */
static const char *configured(struct runner *r, enum engine_kind k)
{
	const char *found = NULL;
	const char *name = engine_kind_name(k);
	size_t n = strlen(name);
	for (unsigned i = 0; i < r->cfg.n_agent_engines; i++) {
		const char *e = r->cfg.agent_engine[i];
		if (!strncmp(e, name, n) && e[n] == '=')
			found = e + n + 1;
	}
	return found;
}

static bool executable(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111);
}

static const char *path_of(struct runner *r, json_t *req_env)
{
	(void)r;
	const char *p = json_string_value(json_object_get(req_env, "PATH"));
	if (!p)
		p = getenv("PATH");
	return p && *p ? p : DEFAULT_TASK_PATH;
}

/* The CLI of engine k: --agent-engine's, else the first executable of its
 * name on PATH (the request's env PATH, else the runner's). 0 with path set,
 * or -1 with err (ENGINE_NOT_FOUND naming what was looked up). */
static int engine_find(struct runner *r, enum engine_kind k, json_t *req_env, char *path,
		       size_t size, struct error *err)
{
	const char *c = configured(r, k);
	if (c) {
		if (!executable(c))
			return error_set(err, 0, "ENGINE_NOT_FOUND",
					 "engine %s: %s (from --agent-engine) is not an executable "
					 "file",
					 engine_kind_name(k), c);
		snprintf(path, size, "%s", c);
		return 0;
	}
	const char *cmd = engine_default_command(k);
	const char *dirs = path_of(r, req_env);
	for (const char *d = dirs; *d;) {
		const char *end = strchr(d, ':');
		size_t n = end ? (size_t)(end - d) : strlen(d);
		if (n && d[0] == '/' && n + strlen(cmd) + 2 <= size) {
			snprintf(path, size, "%.*s/%s", (int)n, d, cmd);
			if (executable(path))
				return 0;
		}
		d += n;
		if (*d == ':')
			d++;
	}
	return error_set(err, 0, "ENGINE_NOT_FOUND",
			 "engine %s: no executable '%s' on PATH %.400s (install it or set "
			 "--agent-engine %s=/path/to/%s)",
			 engine_kind_name(k), cmd, dirs, engine_kind_name(k), cmd);
}

int engines_check_config(struct runner *r, struct error *err)
{
	for (unsigned i = 0; i < r->cfg.n_agent_engines; i++) {
		const char *e = r->cfg.agent_engine[i];
		const char *eq = strchr(e, '=');
		char name[64];
		snprintf(name, sizeof(name), "%.*s", (int)(eq - e), e);
		enum engine_kind k = engine_kind_of(name);
		if (k == ENGINE_KINDS || k == ENGINE_BUILTIN)
			return error_set(
				err, 0, NULL,
				"invalid --agent-engine '%s': no CLI engine '%s' (expected "
				"codex or claude-code)",
				e, name);
	}
	return 0;
}

/* The npm package a CLI came from (its package.json above the real path):
 * the version without running anything. The CLI often lies in a directory a
 * task can write (an npm prefix in its home on PATH), and this runs as root
 * on the loop: each package.json is opened once, never through a symlink
 * (the path was just resolved: a link now is a swap), without blocking, and
 * read only when the descriptor is a regular file of at most 64 KiB
 * (read_regular; a FIFO there once held PID 1 in open() for good). */
static json_t *npm_version(const char *path)
{
	char real[PATH_MAX];
	if (!realpath(path, real))
		return json_null();
	for (int up = 0; up < 5; up++) {
		char *slash = strrchr(real, '/');
		if (!slash || slash == real)
			break;
		*slash = 0;
		char pj[PATH_MAX + 16];
		snprintf(pj, sizeof(pj), "%s/package.json", real);
		char *data;
		size_t len;
		int rc = read_regular(AT_FDCWD, pj, RF_NO_SYMLINKS, PACKAGE_JSON_MAX, &data, &len,
				      NULL);
		if (rc < 0) {
			if (rc != -ENOENT && rc != -ENOTDIR)
				log_warn("engine version: package.json not read", "{s:s,s:s}",
					 "file", pj, "why", open_regular_strerror(rc, NULL));
			continue;
		}
		json_t *j = json_loadb(data, len, 0, NULL);
		free(data);
		const char *name = json_string_value(json_object_get(j, "name"));
		const char *ver = json_string_value(json_object_get(j, "version"));
		json_t *out = NULL;
		if (name && ver &&
		    (!strcmp(name, "@openai/codex") || !strcmp(name, "@anthropic-ai/claude-code")))
			out = json_pack("{s:s,s:s}", "package", name, "version", ver);
		json_decref(j);
		if (out)
			return out;
	}
	return json_null();
}

json_t *engines_report(struct runner *r)
{
	json_t *a = json_array();
	/* Every engine calls models through the gateway: without one, each says
	 * so and how to give it. */
	static const char no_gateway[] = "no model gateway: start the runner with --gateway-url "
					 "URL (FORCEAI_GATEWAY_URL)";
	json_t *b =
		json_pack("{s:s,s:b,s:s,s:s}", "name", "builtin", "available", gateway_enabled(r),
			  "source", "runner", "version", FORCEAI_RUNNER_VERSION);
	if (!gateway_enabled(r))
		json_object_set_new(b, "error", json_string(no_gateway));
	json_array_append_new(a, b);
	for (int k = ENGINE_CODEX; k < ENGINE_KINDS; k++) {
		char path[PATH_MAX];
		struct error err;
		bool ok = engine_find(r, (enum engine_kind)k, NULL, path, sizeof(path), &err) == 0;
		json_t *o =
			json_pack("{s:s,s:b,s:s}", "name", engine_kind_name((enum engine_kind)k),
				  "available", ok && gateway_enabled(r), "source",
				  configured(r, (enum engine_kind)k) ? "--agent-engine" : "PATH");
		if (ok) {
			json_object_set_new(o, "path", json_string(path));
			if (!gateway_enabled(r))
				json_object_set_new(o, "error", json_string(no_gateway));
			json_t *v = npm_version(path);
			json_object_set(o, "version",
					json_is_object(v) ? json_object_get(v, "version") : v);
			if (json_is_object(v))
				json_object_set(o, "package", json_object_get(v, "package"));
			json_decref(v);
		} else {
			json_object_set_new(o, "path", json_null());
			json_object_set_new(o, "version", json_null());
			json_object_set_new(o, "error", json_string(err.msg));
		}
		json_array_append_new(a, o);
	}
	return a;
}

/* ---- the CLI driver ---- */

struct cli {
	struct runner *r;
	struct task *t;
	enum engine_kind kind;
	char *model;
	uint64_t max_steps, max_tokens;
	struct conversation *conv;

	struct task *child;
	struct task_reader rd;
	bool rd_attached;
	struct linesplit ls;
	struct engine_parser parser;
	struct buf err_tail;
	int child_exit;
	const char *child_status;

	struct modelproxy_watch watch;
	struct mu_usage usage; /* the proxy's count: authoritative */
	unsigned requests;
	json_t *final_usage, *final_budget; /* of the CLI's chat task, once it ended */

	bool stopping;              /* a limit or a cancel: the CLI's tree is being ended */
	enum task_status stop_with; /* what the task ends with then */
	const char *stop_limit;     /* stop_with TS_LIMIT: which (model/limits.h) */
	struct loop_timer stop_timer;
};

static void cli_free(struct cli *c)
{
	if (c->rd_attached)
		task_reader_detach(&c->rd);
	if (c->child) {
		modelproxy_watch(c->child, NULL);
		if (!c->child->finished)
			task_kill(c->child, TS_CANCELLED);
	}
	loop_timer_close(&c->r->loop, &c->stop_timer);
	linesplit_free(&c->ls);
	engine_parser_free(&c->parser);
	buf_free(&c->err_tail);
	json_decref(c->final_usage);
	json_decref(c->final_budget);
	if (c->conv)
		conv_release(c->r, c->conv);
	free(c->model);
	if (c->t && c->t->driver_arg == c) {
		c->t->driver = NULL;
		c->t->driver_arg = NULL;
	}
	free(c);
}

static json_t *summary(struct cli *c)
{
	json_t *u = c->final_usage ? json_incref(c->final_usage) : MU_TOKENS_JSON(&c->usage);
	if (!c->final_usage)
		json_object_set_new(u, "requests", json_integer(c->requests));
	json_t *o = json_pack("{s:i,s:s,s:o,s:s}", "steps", (int)c->requests, "model", c->model,
			      "usage", u, "engine", engine_kind_name(c->kind));
	if (c->conv)
		json_object_set_new(o, "conversation", json_string(c->conv->id));
	if (c->parser.session[0])
		json_object_set_new(o, "engine_session", json_string(c->parser.session));
	if (c->final_budget)
		json_object_set(o, "budget", c->final_budget);
	if (c->child_status) {
		json_object_set_new(o, "engine_exit_code", json_integer(c->child_exit));
		json_object_set_new(o, "engine_status", json_string(c->child_status));
	}
	return o;
}

/* The end (c is freed: return right after). */
static void cli_finish(struct cli *c, enum task_status st, const char *limit, int exit_code,
		       const char *answer)
{
	if (c->conv && c->parser.session[0])
		snprintf(c->conv->session, sizeof(c->conv->session), "%s", c->parser.session);
	agent_task_finish(c->t, st, limit, exit_code, summary(c), answer);
	cli_free(c);
}

static void cli_fail(struct cli *c, const char *code, const char *msg)
{
	if (c->conv && c->parser.session[0])
		snprintf(c->conv->session, sizeof(c->conv->session), "%s", c->parser.session);
	json_t *extra = summary(c);
	log_warn("agent engine failed", "{s:s,s:s,s:s,s:s}", "task", c->t->id, "engine",
		 engine_kind_name(c->kind), "code", code, "message", msg);
	task_driven_fail(c->t, code, msg, extra);
	json_decref(extra);
	cli_free(c);
}

/* End the CLI's tree; the task ends with st once it is gone (reader at end). */
static void cli_stop(struct cli *c, enum task_status st, const char *limit)
{
	if (c->stopping)
		return;
	c->stopping = true;
	c->stop_with = st;
	c->stop_limit = limit;
	/* Not from inside the proxy's callbacks: on the next loop turn. */
	loop_timer_start(&c->r->loop, &c->stop_timer, 1, 0);
}

static void on_stop_timer(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct cli *c = t->arg;
	if (c->child && !c->child->finished)
		task_kill(c->child, TS_CANCELLED);
}

/* The proxy refused a call: the budget (max_steps as max_model_requests,
 * max_tokens) is spent. */
static void on_proxy_refused(void *arg, const struct budget *b)
{
	struct cli *c = arg;
	cli_stop(c, TS_LIMIT,
		 b->max_requests && b->requests >= b->max_requests ? MODEL_LIMIT_STEPS
								   : MODEL_LIMIT_TOKENS);
}

static void on_proxy_usage(void *arg, const struct budget *b)
{
	struct cli *c = arg;
	struct mu_usage call = {
		.prompt_tokens = b->used.prompt_tokens - c->usage.prompt_tokens,
		.completion_tokens = b->used.completion_tokens - c->usage.completion_tokens,
		.total_tokens = b->used.total_tokens - c->usage.total_tokens,
	};
	c->usage = b->used;
	c->requests = (unsigned)b->requests;
	json_t *ev = MU_TOKENS_JSON(&call);
	json_object_set_new(ev, "step", json_integer(c->requests));
	json_object_set_new(ev, "total", MU_TOKENS_JSON(&b->used));
	json_object_set_new(ev, "source", json_string("model_proxy"));
	task_emit(c->t, "usage", ev);
	json_decref(ev);
	/* The call that crossed the limit may finish; the next would be refused. */
	if (b->max_tokens && (uint64_t)b->used.total_tokens >= b->max_tokens)
		cli_stop(c, TS_LIMIT, MODEL_LIMIT_TOKENS);
}

static void on_parsed(void *arg, const char *name, json_t *data)
{
	struct cli *c = arg;
	if (strcmp(name, "engine.event") && strcmp(name, "tool.result"))
		json_object_set_new(data, "step", json_integer(c->requests));
	task_emit(c->t, name, data);
}

static int on_line(void *arg, const char *line, size_t len)
{
	struct cli *c = arg;
	engine_parser_line(&c->parser, line, len);
	return 0;
}

static void keep_stderr(struct cli *c, const char *p, size_t n)
{
	buf_append(&c->err_tail, p, n);
	if (c->err_tail.len > 2 * STDERR_TAIL) {
		memmove(c->err_tail.data, c->err_tail.data + c->err_tail.len - STDERR_TAIL,
			STDERR_TAIL);
		c->err_tail.len = STDERR_TAIL;
	}
	json_t *ev = json_object();
	struct buf lit = {0};
	buf_append_json_str(&lit, p, n);
	json_t *s = json_loadb(lit.data, lit.len, JSON_DECODE_ANY, NULL);
	buf_free(&lit);
	json_object_set_new(ev, "stderr", s ? s : json_string(""));
	task_emit(c->t, "engine.event", ev);
	json_decref(ev);
}

/* The child's own exit event: the proxy's final usage is in it. */
static void child_exit_event(struct cli *c, const char *data, size_t len)
{
	const char *nl = memchr(data, '\n', len);
	if (!nl || nl - data != 4 || memcmp(data, "exit", 4))
		return;
	json_t *ev = json_loadb(nl + 1, len - 5, 0, NULL);
	json_t *u = json_object_get(ev, "usage");
	if (json_is_object(u)) {
		json_decref(c->final_usage);
		c->final_usage = json_incref(u);
		c->requests = (unsigned)json_integer_value(json_object_get(u, "requests"));
	}
	json_t *b = json_object_get(ev, "budget");
	if (json_is_object(b)) {
		json_decref(c->final_budget);
		c->final_budget = json_incref(b);
	}
	json_decref(ev);
}

static void child_ended(struct cli *c)
{
	linesplit_flush(&c->ls, on_line, c);
	struct task *ch = c->child;
	c->child_exit = ch->exit_code;
	c->child_status = task_status_str(ch);
	modelproxy_watch(ch, NULL);
	c->child = NULL;
	struct engine_parser *p = &c->parser;
	if (c->stopping) {
		enum task_status st = c->stop_with;
		cli_finish(c, st, c->stop_limit,
			   st == TS_TIMEOUT                        ? 124
			   : st == TS_CANCELLED || st == TS_KILLED ? 143
								   : 1,
			   NULL);
		return;
	}
	if (p->done && !p->failed) {
		cli_finish(c, TS_SUCCEEDED, NULL, 0, p->answer ? p->answer : "");
		return;
	}
	if (p->hit_max_turns) {
		cli_finish(c, TS_LIMIT, MODEL_LIMIT_STEPS, 1, NULL);
		return;
	}
	char msg[1200];
	if (p->failed || p->error[0]) {
		snprintf(msg, sizeof(msg), "%s: %s", engine_kind_name(c->kind), p->error);
	} else {
		/* What it last said on stderr tells why. */
		size_t n = c->err_tail.len > 600 ? 600 : c->err_tail.len;
		const char *tail = c->err_tail.data ? c->err_tail.data + c->err_tail.len - n : "";
		snprintf(msg, sizeof(msg),
			 "%s ended (%s, exit code %d) without a final result (%u lines, %u not "
			 "JSON)%s%.*s",
			 engine_kind_name(c->kind), c->child_status, c->child_exit, p->lines,
			 p->invalid, n ? "; stderr: " : "", (int)n, tail);
	}
	cli_fail(c, "engine_failed", msg);
}

static void on_child_wake(struct task_reader *rd)
{
	struct cli *c = (struct cli *)((char *)rd - offsetof(struct cli, rd));
	static char rbuf[SPOOL_MAX_REC];
	struct spool_rec rec;
	const char *data;
	int rc;
	while ((rc = task_reader_next_ref(rd, &rec, rbuf, &data)) == 1) {
		if (rec.type == SPOOL_EVENT)
			child_exit_event(c, data, rec.len);
		else if (rec.type == SPOOL_STDOUT)
			linesplit_feed(&c->ls, data, rec.len, on_line, c);
		else
			keep_stderr(c, data, rec.len);
	}
	if (rc < 0)
		log_errno("reading an engine's output failed", -rc, c->t->id);
	if (!task_reader_at_end(rd))
		return;
	task_reader_detach(rd);
	c->rd_attached = false;
	child_ended(c);
}

static void on_cancel(struct task *t, enum task_status why)
{
	struct cli *c = t->driver_arg;
	if (!c->child) {
		cli_finish(c, why, NULL, why == TS_TIMEOUT ? 124 : 143, NULL);
		return;
	}
	/* A cancel overrides a limit being enforced: the client asked. */
	c->stopping = true;
	c->stop_with = why;
	c->stop_limit = NULL;
	if (why == TS_KILLED)
		task_kill_now(c->child, why);
	else
		task_kill(c->child, TS_CANCELLED);
}

static void on_release(struct task *t)
{
	struct cli *c = t->driver_arg;
	c->t = NULL;
	cli_free(c);
}

static const struct task_driver_ops cli_ops = {on_cancel, on_release};

/* The engine's record from the request and the options; NULL with err set. */
static struct cli *cli_new(struct runner *r, const struct task_spec *spec, enum engine_kind k,
			   const char *model, struct error *err)
{
	struct cli *c = calloc(1, sizeof(*c));
	if (!c) {
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the agent");
		return NULL;
	}
	c->r = r;
	c->kind = k;
	c->stop_timer.w.fd = -1;
	linesplit_init(&c->ls, LINE_MAX_BYTES);
	engine_parser_init(&c->parser, k, on_parsed, c);
	const struct model_args *args = model_args_of(spec);
	c->max_steps = args->max_steps ? args->max_steps : r->cfg.agent_max_steps;
	c->max_tokens = args->max_tokens ? args->max_tokens : r->cfg.agent_max_tokens;
	c->watch = (struct modelproxy_watch){on_proxy_usage, on_proxy_refused, c};
	int rc = loop_timer_init(&r->loop, &c->stop_timer, on_stop_timer, c);
	if (!(c->model = strdup(model)) || rc < 0) {
		error_set(err, rc < 0 ? -rc : ENOMEM, "RUNTIME_ERROR", "cannot start the agent");
		cli_free(c);
		return NULL;
	}
	return c;
}

/* The command line into cmd: the engine's argv, quoted; the goal from the
 * environment env (no quoting of what the client wrote). -1 with err set. */
static int cli_command(struct cli *c, const struct task_spec *spec, const char *path,
		       struct conversation *conv, struct buf *cmd, json_t *env, struct error *err)
{
	char base[64];
	snprintf(base, sizeof(base), "http://127.0.0.1:%u/v1", modelproxy_port(c->r));
	struct engine_run run = {.path = path,
				 .model = c->model,
				 .base_url = base,
				 .session = conv->session[0] ? conv->session : NULL,
				 .max_turns = (unsigned)c->max_steps};
	cleanup_json json_t *argv = json_array();
	if (engine_command(c->kind, &run, argv, env) < 0)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "the model name or the proxy address cannot be given to %s",
				 engine_kind_name(c->kind));
	json_object_set_new(env, "FORCEAI_AGENT_GOAL", json_string(spec->command));
	if (c->kind == ENGINE_CLAUDE) /* the task's token, in the variable Claude Code reads */
		buf_append_str(
			cmd, "ANTHROPIC_AUTH_TOKEN=\"${ANTHROPIC_AUTH_TOKEN:-$OPENAI_API_KEY}\" ");
	buf_append_str(cmd, "exec");
	size_t i;
	json_t *v;
	json_array_foreach(argv, i, v) {
		buf_append_lit(cmd, " ");
		buf_append_sh_quoted(cmd, json_string_value(v));
	}
	buf_append_str(cmd, " -- \"$FORCEAI_AGENT_GOAL\"");
	if (buf_append(cmd, "", 1) < 0) /* a C string for the task's shell */
		return error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the agent");
	return 0;
}

/* The engine's process, a chat task of the agent task t: the limits are
 * the proxy's budget (a call past them is refused before it reaches the
 * gateway). A failure ends t. */
static void cli_start_child(struct cli *c, struct task *t, const char *path, const char *cmd,
			    json_t *env)
{
	struct model_args ca = {.max_tokens = c->max_tokens, .max_requests = c->max_steps};
	struct task_spec cs = {.api = TASK_API_TOOL,
			       .command = cmd,
			       .cwd = t->cwd,
			       .env = env,
			       .cap = &model_cap_chat,
			       .cap_args = &ca,
			       .network = TASK_NET_FULL,
			       .state_in_fd = -1,
			       .state_out_fd = -1};
	struct error cerr;
	struct task *child = modelproxy_start_task(c->r, &cs, &cerr);
	json_object_clear(env);
	if (!child) {
		char m[sizeof(cerr.msg) + 64];
		snprintf(m, sizeof(m), "cannot start %.300s: %.700s", path, cerr.msg);
		cli_fail(c, "engine_start_failed", m);
		return;
	}
	c->child = child;
	modelproxy_watch(child, &c->watch);
	c->rd.wake = on_child_wake;
	task_reader_attach(child, &c->rd, true);
	c->rd_attached = true;
	log_info("agent engine started", "{s:s,s:s,s:s,s:s,s:i}", "task", t->id, "engine",
		 engine_kind_name(c->kind), "path", path, "conversation", c->conv->id, "pid",
		 (int)child->shim_pid);
	on_child_wake(&c->rd); /* what is already there */
}

static struct task *cli_start(struct runner *r, const struct task_spec *spec,
			      struct conversation *conv, enum engine_kind k, const char *path,
			      const char *model, struct error *err)
{
	struct cli *c = cli_new(r, spec, k, model, err);
	if (!c)
		return NULL;
	cleanup_buf struct buf cmd = {0};
	cleanup_json json_t *env =
		spec->env && json_is_object(spec->env) ? json_deep_copy(spec->env) : json_object();
	if (cli_command(c, spec, path, conv, &cmd, env, err) < 0) {
		cli_free(c);
		return NULL;
	}
	struct task_spec s = *spec;
	s.api = TASK_API_NATIVE;
	cleanup_json json_t *audit =
		json_pack("{s:s,s:s}", "engine", engine_kind_name(k), "model", model);
	cleanup_json json_t *started =
		json_pack("{s:s,s:s}", "engine", engine_kind_name(k), "conversation", conv->id);
	s.audit_fields = audit;
	s.started_fields = started;
	s.timeout_ms = spec->has_timeout ? spec->timeout_ms : r->cfg.agent_timeout_ms;
	struct task *t = task_start_driven(r, &s, &cli_ops, c, err);
	if (!t) {
		cli_free(c);
		return NULL;
	}
	c->t = t;
	c->conv = conv;
	conv_attach(conv, t);
	cli_start_child(c, t, path, cmd.data, env);
	return t;
}

/* What an agent task needs before anything starts: a known engine, a model, a valid env, the
 * CLI's path (CLI engines). 0 with *k, *model and path set, or -1 with err. */
static int engine_resolve(struct runner *r, const struct task_spec *spec, enum engine_kind *k,
			  const char **model, char *path, size_t size, struct error *err)
{
	const struct model_args *args = model_args_of(spec);
	*k = args->engine ? engine_kind_of(args->engine) : ENGINE_BUILTIN;
	if (*k == ENGINE_KINDS) {
		char avail[160] = "builtin";
		for (int i = ENGINE_CODEX; i < ENGINE_KINDS; i++) {
			char p[PATH_MAX];
			if (engine_find(r, (enum engine_kind)i, spec->env, p, sizeof(p), NULL) ==
			    0) {
				size_t n = strlen(avail);
				snprintf(avail + n, sizeof(avail) - n, ", %s",
					 engine_kind_name((enum engine_kind)i));
			}
		}
		return error_set(err, 0, "UNKNOWN_ENGINE",
				 "unknown engine '%.64s' (engines: builtin, codex, claude-code; "
				 "available here: %s)",
				 args->engine, avail);
	}
	*model = args->model ? args->model : r->cfg.model;
	if (!*model)
		return error_set(err, 0, "NO_MODEL",
				 "no model: set 'model' in the request or FORCEAI_MODEL");
	if (spec->env && env_validate(spec->env, err) < 0)
		return -1;
	path[0] = '\0';
	if (*k != ENGINE_BUILTIN && engine_find(r, *k, spec->env, path, size, err) < 0)
		return -1;
	return 0;
}

/* model_cap_agent's check: what engine_task_start would refuse, before the request's
 * checkpoint is spent on it. */
static int engine_task_check(struct runner *r, const struct task_spec *spec, struct error *err)
{
	enum engine_kind k;
	const char *model;
	char path[PATH_MAX];
	if (engine_resolve(r, spec, &k, &model, path, sizeof(path), err) < 0)
		return -1;
	return conv_check(r, model_args_of(spec)->conversation, k, err);
}

struct task *engine_task_start(struct runner *r, const struct task_spec *spec, struct error *err)
{
	const struct model_args *args = model_args_of(spec);
	enum engine_kind k;
	const char *model;
	char path[PATH_MAX];
	if (engine_resolve(r, spec, &k, &model, path, sizeof(path), err) < 0)
		return NULL;
	struct conversation *conv = conv_claim(r, args->conversation, k, spec->cwd, err);
	if (!conv)
		return NULL;
	struct task_spec s = *spec;
	struct model_args a = *args;
	a.model = model;
	s.cap_args = &a;
	if (args->conversation && !spec->cwd && conv->cwd[0])
		s.cwd = conv->cwd; /* the CLIs find their sessions by directory */
	struct task *t = k == ENGINE_BUILTIN ? agent_start(r, &s, conv, err)
					     : cli_start(r, &s, conv, k, path, model, err);
	if (!t) {
		conv_abandon(r, conv);
		return NULL;
	}
	char *cwd = !conv->cwd[0] && t->cwd ? strdup(t->cwd) : NULL;
	if (cwd) {
		free(conv->cwd);
		conv->cwd = cwd;
	}
	return t;
}

const struct task_capability model_cap_agent = {
	.name = "agent",
	.audit_door = "agent",
	.needs_gateway = true,
	.agent_fields = true,
	.goal = true,
	.no_input = true,
	.changes = TASK_CHANGES_ON,
	.check = engine_task_check,
	.start = engine_task_start,
};
