/* Engine `claude-code`: Anthropic's Claude Code, `claude -p --output-format
 * stream-json` (docs/design/model.md#agent-engines-finding-an-engine).
 *
 * Its JSONL: system {subtype: init, session_id, model, tools}; stream_event
 * {event: a Messages API stream event} (with --include-partial-messages:
 * content_block_delta text_delta are the live text); assistant {message:
 * {content: [text | tool_use {id, name, input} | thinking]}}; user {message:
 * {content: [tool_result {tool_use_id, content, is_error}]}}; result
 * {subtype: success | error_max_turns | error_during_execution | ...,
 * is_error, result, session_id, num_turns}. */
#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "model/engine_events.h"

static int add(json_t *argv, const char *s)
{
	return json_array_append_new(argv, json_string(s));
}

int claude_command(const struct engine_run *run, json_t *argv, json_t *env)
{
	int rc = 0;
	rc |= add(argv, run->path);
	rc |= add(argv, "-p");
	rc |= add(argv, "--output-format");
	rc |= add(argv, "stream-json");
	rc |= add(argv, "--verbose"); /* stream-json in print mode needs it */
	rc |= add(argv, "--include-partial-messages");
	/* The runner is the sandbox: no permission prompts (nobody answers). */
	rc |= add(argv, "--dangerously-skip-permissions");
	if (run->model) {
		rc |= add(argv, "--model");
		rc |= add(argv, run->model);
	}
	if (run->max_turns) {
		char n[24];
		snprintf(n, sizeof(n), "%u", run->max_turns);
		rc |= add(argv, "--max-turns");
		rc |= add(argv, n);
	}
	if (run->session && *run->session) {
		rc |= add(argv, "--resume");
		rc |= add(argv, run->session);
	}
	/* The proxy's root: the SDK adds /v1/messages. */
	char base[512];
	size_t n = strlen(run->base_url);
	if (n >= sizeof(base))
		return -1;
	memcpy(base, run->base_url, n + 1);
	if (n >= 3 && !strcmp(base + n - 3, "/v1"))
		base[n - 3] = 0;
	rc |= json_object_set_new(env, "ANTHROPIC_BASE_URL", json_string(base));
	/* Nothing beyond the gateway: no updater, telemetry, error reports or
	 * other non-essential traffic. */
	static const char *const off[] = {"DISABLE_AUTOUPDATER",
					  "DISABLE_TELEMETRY",
					  "DISABLE_ERROR_REPORTING",
					  "DISABLE_BUG_COMMAND",
					  "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
					  "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY",
					  "IS_SANDBOX"};
	for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++)
		rc |= json_object_set_new(env, off[i], json_string("1"));
	return rc ? -1 : 0;
}

/* A tool_result's content: a string, or blocks of which the text ones count. */
static void result_text(json_t *c, struct buf *out)
{
	if (json_is_string(c)) {
		buf_append(out, json_string_value(c), json_string_length(c));
		return;
	}
	size_t i;
	json_t *b;
	json_array_foreach(c, i, b) {
		json_t *t = json_object_get(b, "text");
		if (json_is_string(t))
			buf_append(out, json_string_value(t), json_string_length(t));
	}
}

static void assistant(struct engine_parser *p, json_t *o)
{
	json_t *content = json_object_get(json_object_get(o, "message"), "content");
	if (!json_is_array(content)) {
		engine_pass(p, o);
		return;
	}
	size_t i;
	json_t *b;
	bool passed = false;
	json_array_foreach(content, i, b) {
		const char *type = engine_str(b, "type");
		if (type && !strcmp(type, "text") && engine_str(b, "text")) {
			engine_set_answer(p, engine_str(b, "text"));
			engine_emit(p, "message",
				    json_pack("{s:s}", "text", engine_str(b, "text")));
		} else if (type && !strcmp(type, "tool_use") && engine_str(b, "id") &&
			   engine_str(b, "name")) {
			struct engine_track *tr = engine_track_get(p, engine_str(b, "id"), true);
			if (tr->called)
				continue;
			tr->called = true;
			p->tool_calls++;
			json_t *in = json_object_get(b, "input");
			engine_emit(p, "tool.call",
				    json_pack("{s:s,s:s,s:o}", "id", engine_str(b, "id"), "name",
					      engine_str(b, "name"), "arguments",
					      in ? json_incref(in) : json_object()));
		} else if (!passed) {
			passed = true; /* thinking and new kinds: the record as it is */
			engine_pass(p, o);
		}
	}
}

static void user(struct engine_parser *p, json_t *o)
{
	json_t *content = json_object_get(json_object_get(o, "message"), "content");
	size_t i;
	json_t *b;
	bool any = false;
	json_array_foreach(content, i, b) {
		const char *type = engine_str(b, "type");
		const char *id = engine_str(b, "tool_use_id");
		if (!type || strcmp(type, "tool_result") || !id)
			continue;
		any = true;
		struct buf text = {0};
		result_text(json_object_get(b, "content"), &text);
		engine_emit_output(p, id, text.data ? text.data : "", text.len);
		bool err = json_is_true(json_object_get(b, "is_error"));
		engine_emit(p, "tool.result",
			    json_pack("{s:s,s:b,s:i,s:s,s:I}", "id", id, "done", 1, "exit_code",
				      err ? 1 : 0, "status", err ? "failed" : "succeeded",
				      "output_bytes", (json_int_t)text.len));
		buf_free(&text);
	}
	if (!any)
		engine_pass(p, o); /* the goal echoed back, or new kinds */
}

static void stream_event(struct engine_parser *p, json_t *o)
{
	json_t *ev = json_object_get(o, "event");
	const char *type = engine_str(ev, "type");
	json_t *delta = json_object_get(ev, "delta");
	if (type && !strcmp(type, "content_block_delta") && engine_str(delta, "type") &&
	    !strcmp(engine_str(delta, "type"), "text_delta") && engine_str(delta, "text")) {
		engine_emit(p, "message.delta",
			    json_pack("{s:s}", "text", engine_str(delta, "text")));
		return;
	}
	/* The rest of the Messages stream (message_start, tool input deltas,
	 * stops) is already in the assistant records: not repeated. */
	if (type && (!strcmp(type, "message_start") || !strcmp(type, "message_delta") ||
		     !strcmp(type, "message_stop") || !strcmp(type, "content_block_start") ||
		     !strcmp(type, "content_block_stop") || !strcmp(type, "content_block_delta") ||
		     !strcmp(type, "ping")))
		return;
	engine_pass(p, o);
}

static void result(struct engine_parser *p, json_t *o)
{
	const char *sub = engine_str(o, "subtype");
	const char *res = engine_str(o, "result");
	if (engine_session_ok(engine_str(o, "session_id")))
		snprintf(p->session, sizeof(p->session), "%s", engine_str(o, "session_id"));
	/* The last result decides (a resumed stream may carry more than one). */
	p->done = p->failed = p->hit_max_turns = false;
	if (sub && !strcmp(sub, "error_max_turns")) {
		p->hit_max_turns = true;
	} else if (sub && !strcmp(sub, "success") &&
		   !json_is_true(json_object_get(o, "is_error"))) {
		p->done = true;
		if (res)
			engine_set_answer(p, res);
	} else {
		p->failed = true;
		const char *m = res;
		json_t *errs = json_object_get(o, "errors");
		if ((!m || !*m) && json_is_array(errs))
			m = json_string_value(json_array_get(errs, 0));
		char b[200];
		if (!m || !*m) {
			snprintf(b, sizeof(b), "claude ended with %.64s", sub ? sub : "an error");
			m = b;
		}
		engine_set_error(p, m);
	}
	engine_pass(p, o);
}

void claude_parse(struct engine_parser *p, json_t *o)
{
	const char *type = engine_str(o, "type");
	if (!strcmp(type, "system")) {
		if (engine_session_ok(engine_str(o, "session_id")) && !p->session[0])
			snprintf(p->session, sizeof(p->session), "%s", engine_str(o, "session_id"));
		engine_pass(p, o);
	} else if (!strcmp(type, "stream_event")) {
		stream_event(p, o);
	} else if (!strcmp(type, "assistant")) {
		assistant(p, o);
	} else if (!strcmp(type, "user")) {
		user(p, o);
	} else if (!strcmp(type, "result")) {
		result(p, o);
	} else {
		engine_pass(p, o);
	}
}
