/* Engine `codex`: OpenAI's Codex CLI, `codex exec --json`
 * (docs/design/model.md#agent-engines-finding-an-engine).
 *
 * Its JSONL (thread events): thread.started {thread_id}; turn.started;
 * item.started / item.updated / item.completed {item: {id, type, ...}} with
 * item types agent_message {text}, command_execution {command,
 * aggregated_output, exit_code, status}, file_change {changes, status},
 * mcp_tool_call {server, tool, arguments, result, error, status},
 * web_search {query}, reasoning, todo_list, error {message};
 * turn.completed {usage}; turn.failed {error: {message}}; error {message}. */
#include <stdio.h>
#include <string.h>

#include "model/engine_events.h"

static int add(json_t *argv, const char *s)
{
	return json_array_append_new(argv, json_string(s));
}

static int addf(json_t *argv, const char *fmt, const char *v)
{
	char b[1200];
	int n = snprintf(b, sizeof(b), fmt, v);
	if (n < 0 || (size_t)n >= sizeof(b))
		return -1;
	return add(argv, b);
}

/* A TOML basic string needs no escapes for what we put in it. */
static bool toml_plain(const char *s)
{
	for (; *s; s++)
		if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
			return false;
	return true;
}

int codex_command(const struct engine_run *run, json_t *argv, json_t *env)
{
	if (!toml_plain(run->base_url) || (run->model && !toml_plain(run->model)))
		return -1;
	int rc = 0;
	rc |= add(argv, run->path);
	rc |= add(argv, "exec");
	rc |= add(argv, "--json");
	rc |= add(argv, "--skip-git-repo-check");
	/* The runner is the sandbox: Codex's own (Landlock + seccomp) is off. */
	rc |= add(argv, "--sandbox");
	rc |= add(argv, "danger-full-access");
	/* Its own provider entry: the model proxy, the Responses API, the
	 * per-task token from OPENAI_API_KEY. */
	static const char *const fixed[] = {
		"model_provider=\"forceai\"",
		"model_providers.forceai.name=\"forceai\"",
		"model_providers.forceai.env_key=\"OPENAI_API_KEY\"",
		"model_providers.forceai.wire_api=\"responses\"",
		/* Nothing beyond the gateway: no analytics, no update check,
		 * no OpenTelemetry export. */
		"analytics.enabled=false",
		"check_for_update_on_startup=false",
		"otel.exporter=\"none\"",
		"approval_policy=\"never\"",
	};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		rc |= add(argv, "-c");
		rc |= add(argv, fixed[i]);
	}
	/* Features that fetch from or talk to hosts other than the model
	 * provider (plugin and app catalogues on github.com and chatgpt.com,
	 * skill dependency installs, in-app updates, browsers). */
	static const char *const off[] =
		{"plugins",        "remote_plugin",  "plugin_sharing",
		 "apps",           "in_app_updates", "skill_mcp_dependency_install",
		 "tool_suggest",   "browser_use",    "browser_use_external",
		 "in_app_browser", "computer_use",   "image_generation"};
	for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
		rc |= add(argv, "--disable");
		rc |= add(argv, off[i]);
	}
	rc |= add(argv, "-c");
	rc |= addf(argv, "model_providers.forceai.base_url=\"%s\"", run->base_url);
	if (run->model) {
		rc |= add(argv, "-m");
		rc |= add(argv, run->model);
	}
	/* Its state database (SQLite) makes temporary files: in a directory the
	 * task may write (SQLite's own fallbacks, /var/tmp first, are not). */
	if (!json_object_get(env, "TMPDIR"))
		rc |= json_object_set_new(env, "TMPDIR", json_string("/tmp"));
	if (run->session && *run->session) {
		rc |= add(argv, "resume");
		rc |= add(argv, run->session);
	}
	return rc ? -1 : 0;
}

/* The tool.call of an item: name and arguments in the built-in loop's terms
 * where there is one (a shell command is `bash` {command}). */
static void tool_call(struct engine_parser *p, json_t *item, struct engine_track *tr)
{
	if (tr->called)
		return;
	tr->called = true;
	p->tool_calls++;
	const char *type = engine_str(item, "type");
	json_t *args;
	const char *name = type;
	char namebuf[200];
	if (!strcmp(type, "command_execution")) {
		name = "bash";
		args = json_pack("{s:s?}", "command", engine_str(item, "command"));
	} else if (!strcmp(type, "file_change")) {
		name = "apply_patch";
		args = json_pack("{s:O?}", "changes", json_object_get(item, "changes"));
	} else if (!strcmp(type, "mcp_tool_call")) {
		snprintf(namebuf, sizeof(namebuf), "%.90s__%.90s",
			 engine_str(item, "server") ? engine_str(item, "server") : "mcp",
			 engine_str(item, "tool") ? engine_str(item, "tool") : "tool");
		name = namebuf;
		json_t *a = json_object_get(item, "arguments");
		args = a ? json_incref(a) : json_object();
	} else {
		args = json_pack("{s:s?}", "query", engine_str(item, "query"));
	}
	json_t *ev = json_pack("{s:s,s:s,s:o}", "id", tr->id, "name", name, "arguments",
			       args ? args : json_object());
	engine_emit(p, "tool.call", ev);
}

/* New bytes of a command's aggregated output as live tool.result. */
static void live_output(struct engine_parser *p, json_t *item, struct engine_track *tr)
{
	json_t *out = json_object_get(item, "aggregated_output");
	if (!json_is_string(out))
		return;
	size_t n = json_string_length(out);
	if (n <= tr->emitted) {
		tr->emitted = n; /* it never shrinks; if it did, follow it */
		return;
	}
	engine_emit_output(p, tr->id, json_string_value(out) + tr->emitted, n - tr->emitted);
	tr->emitted = n;
}

static void tool_done(struct engine_parser *p, json_t *item, struct engine_track *tr)
{
	const char *type = engine_str(item, "type");
	const char *st = engine_str(item, "status");
	json_t *ec = json_object_get(item, "exit_code");
	bool ok = st && !strcmp(st, "completed") &&
		  (!json_is_integer(ec) || !json_integer_value(ec));
	json_t *ev = json_pack("{s:s,s:b,s:s}", "id", tr->id, "done", 1, "status",
			       ok ? "succeeded" : "failed");
	if (json_is_integer(ec))
		json_object_set(ev, "exit_code", ec);
	else if (!strcmp(type, "command_execution"))
		json_object_set_new(ev, "exit_code", json_integer(ok ? 0 : -1));
	json_t *out = json_object_get(item, "aggregated_output");
	if (json_is_string(out))
		json_object_set_new(ev, "output_bytes",
				    json_integer((json_int_t)json_string_length(out)));
	json_t *res = json_object_get(item, "result");
	if (res && !json_is_null(res))
		json_object_set(ev, "result", res);
	json_t *er = json_object_get(item, "error");
	if (er && !json_is_null(er))
		json_object_set(ev, "error",
				json_is_object(er) && json_object_get(er, "message")
					? json_object_get(er, "message")
					: er);
	engine_emit(p, "tool.result", ev);
}

static bool is_tool(const char *type)
{
	return !strcmp(type, "command_execution") || !strcmp(type, "file_change") ||
	       !strcmp(type, "mcp_tool_call") || !strcmp(type, "web_search");
}

static void item_event(struct engine_parser *p, const char *what, json_t *o)
{
	json_t *item = json_object_get(o, "item");
	const char *type = engine_str(item, "type");
	const char *id = engine_str(item, "id");
	if (!type || !id) {
		engine_pass(p, o);
		return;
	}
	bool completed = !strcmp(what, "item.completed");
	if (!strcmp(type, "agent_message")) {
		const char *text = engine_str(item, "text");
		if (!completed || !text) {
			engine_pass(p, o);
			return;
		}
		engine_set_answer(p, text);
		engine_emit(p, "message", json_pack("{s:s,s:s}", "id", id, "text", text));
		return;
	}
	if (!is_tool(type)) {
		engine_pass(p, o); /* reasoning, todo_list, error items, new kinds */
		return;
	}
	struct engine_track *tr = engine_track_get(p, id, true);
	tool_call(p, item, tr);
	live_output(p, item, tr);
	if (completed)
		tool_done(p, item, tr);
}

void codex_parse(struct engine_parser *p, json_t *o)
{
	const char *type = engine_str(o, "type");
	if (!strcmp(type, "thread.started") && engine_str(o, "thread_id")) {
		/* It goes on the next run's command line (resume ID): only a
		 * well-formed one is kept. */
		if (engine_session_ok(engine_str(o, "thread_id")))
			snprintf(p->session, sizeof(p->session), "%s", engine_str(o, "thread_id"));
		engine_pass(p, o);
	} else if (!strncmp(type, "item.", 5)) {
		item_event(p, type, o);
	} else if (!strcmp(type, "turn.completed")) {
		p->done = true;
		p->failed = false;
		engine_pass(p, o); /* its usage is the CLI's own count, not the runner's */
	} else if (!strcmp(type, "turn.failed")) {
		json_t *e = json_object_get(o, "error");
		p->failed = true;
		p->done = false;
		engine_set_error(p, json_is_object(e) ? engine_str(e, "message")
						      : json_string_value(e));
		engine_pass(p, o);
	} else if (!strcmp(type, "error")) {
		engine_set_error(p, engine_str(o, "message"));
		engine_pass(p, o);
	} else {
		engine_pass(p, o);
	}
}
