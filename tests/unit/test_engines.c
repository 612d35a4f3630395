/* The agent engines' pure parts (runner/model/engine_*.c): each CLI's JSONL
 * mapped onto the built-in loop's events, what does not map passed on as
 * engine.event, and the command lines. The Codex lines are as Codex CLI
 * 0.171.0 wrote them (`codex exec --json`) in tests/engines. */
#include <stdlib.h>
#include <string.h>

#include "model/engine_events.h"
#include "unit.h"

struct rec {
	char names[64][32];
	json_t *data[64];
	int n;
};

static void on_emit(void *arg, const char *name, json_t *data)
{
	struct rec *r = arg;
	if (r->n >= 64)
		return;
	snprintf(r->names[r->n], sizeof(r->names[0]), "%s", name);
	r->data[r->n++] = json_deep_copy(data);
}

static void rec_free(struct rec *r)
{
	for (int i = 0; i < r->n; i++)
		json_decref(r->data[i]);
	r->n = 0;
}

static void feed(struct engine_parser *p, const char *line)
{
	engine_parser_line(p, line, strlen(line));
}

static const char *sget(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "(none)";
}

/* The names emitted, joined by spaces. */
static void names(const struct rec *r, char *out, size_t size)
{
	out[0] = 0;
	for (int i = 0; i < r->n; i++) {
		size_t n = strlen(out);
		snprintf(out + n, size - n, "%s%s", i ? " " : "", r->names[i]);
	}
}

TEST(engine_kinds)
{
	CHECK(engine_kind_of("builtin") == ENGINE_BUILTIN);
	CHECK(engine_kind_of("codex") == ENGINE_CODEX);
	CHECK(engine_kind_of("claude-code") == ENGINE_CLAUDE);
	CHECK(engine_kind_of("claude") == ENGINE_KINDS);
	CHECK(engine_kind_of(NULL) == ENGINE_KINDS);
	CHECK_STR(engine_default_command(ENGINE_CLAUDE), "claude");
	CHECK_STR(engine_kind_name(ENGINE_CODEX), "codex");
}

TEST(codex_tool_call_and_answer)
{
	struct rec r = {0};
	struct engine_parser p;
	engine_parser_init(&p, ENGINE_CODEX, on_emit, &r);
	feed(&p,
	     "{\"type\":\"thread.started\",\"thread_id\":\"01a230d4-00e6-7fa3-a831-e2c10ef652c4\"}");
	feed(&p, "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"error\","
		 "\"message\":\"Model metadata for `test-model` not found.\"}}");
	feed(&p, "{\"type\":\"turn.started\"}");
	feed(&p, "{\"type\":\"item.started\",\"item\":{\"id\":\"item_1\",\"type\":"
		 "\"command_execution\",\"command\":\"/bin/bash -lc 'echo hi-from-tool'\","
		 "\"aggregated_output\":\"\",\"exit_code\":null,\"status\":\"in_progress\"}}");
	feed(&p, "{\"type\":\"item.updated\",\"item\":{\"id\":\"item_1\",\"type\":"
		 "\"command_execution\",\"command\":\"/bin/bash -lc 'echo hi-from-tool'\","
		 "\"aggregated_output\":\"hi-\",\"exit_code\":null,\"status\":\"in_progress\"}}");
	feed(&p, "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_1\",\"type\":"
		 "\"command_execution\",\"command\":\"/bin/bash -lc 'echo hi-from-tool'\","
		 "\"aggregated_output\":\"hi-from-tool\\n\",\"exit_code\":0,\"status\":"
		 "\"completed\"}}");
	feed(&p, "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_2\",\"type\":"
		 "\"agent_message\",\"text\":\"done: hi\"}}");
	CHECK(!p.done);
	feed(&p, "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":200,"
		 "\"cached_input_tokens\":0,\"output_tokens\":20}}");
	char got[512];
	names(&r, got, sizeof(got));
	CHECK_STR(got, "engine.event engine.event engine.event tool.call tool.result tool.result "
		       "tool.result message engine.event");
	CHECK_STR(p.session, "01a230d4-00e6-7fa3-a831-e2c10ef652c4");
	CHECK(p.done && !p.failed);
	CHECK_STR(p.answer, "done: hi");
	CHECK(p.tool_calls == 1);
	json_t *call = r.data[3];
	CHECK_STR(sget(call, "id"), "item_1");
	CHECK_STR(sget(call, "name"), "bash");
	CHECK_STR(sget(json_object_get(call, "arguments"), "command"),
		  "/bin/bash -lc 'echo hi-from-tool'");
	/* Live output: only the new bytes each time. */
	CHECK_STR(sget(r.data[4], "text"), "hi-");
	CHECK_STR(sget(r.data[5], "text"), "from-tool\n");
	CHECK(json_is_true(json_object_get(r.data[6], "done")));
	CHECK(json_integer_value(json_object_get(r.data[6], "exit_code")) == 0);
	CHECK_STR(sget(r.data[6], "status"), "succeeded");
	CHECK_STR(sget(r.data[7], "text"), "done: hi");
	/* What does not map is passed on whole. */
	CHECK_STR(sget(json_object_get(r.data[0], "raw"), "type"), "thread.started");
	CHECK_STR(sget(json_object_get(r.data[8], "raw"), "type"), "turn.completed");
	rec_free(&r);
	engine_parser_free(&p);
}

TEST(codex_failures)
{
	struct rec r = {0};
	struct engine_parser p;
	engine_parser_init(&p, ENGINE_CODEX, on_emit, &r);
	/* A command that failed, seen only when completed: call then result. */
	feed(&p,
	     "{\"type\":\"item.completed\",\"item\":{\"id\":\"i9\",\"type\":\"command_execution\","
	     "\"command\":\"false\",\"aggregated_output\":\"\",\"exit_code\":1,\"status\":"
	     "\"failed\"}}");
	CHECK_STR(r.names[0], "tool.call");
	CHECK_STR(r.names[1], "tool.result");
	CHECK_STR(sget(r.data[1], "status"), "failed");
	CHECK(json_integer_value(json_object_get(r.data[1], "exit_code")) == 1);
	feed(&p, "{\"type\":\"error\",\"message\":\"Reconnecting... 1/5\"}");
	CHECK(!p.failed);
	feed(&p, "{\"type\":\"turn.failed\",\"error\":{\"message\":\"stream disconnected before "
		 "completion\"}}");
	CHECK(p.failed && !p.done);
	CHECK_STR(p.error, "stream disconnected before completion");
	/* Not JSON, JSON that is not an object, an object without a type. */
	int before = r.n;
	feed(&p, "Reading additional input from stdin...");
	feed(&p, "[1,2]");
	feed(&p, "{\"no\":\"type\"}");
	feed(&p, "   ");
	CHECK(r.n == before + 3);
	CHECK(json_is_true(json_object_get(r.data[before], "invalid_json")));
	CHECK_STR(sget(r.data[before], "raw"), "Reading additional input from stdin...");
	CHECK(json_is_array(json_object_get(r.data[before + 1], "raw")));
	CHECK(p.invalid == 1);
	rec_free(&r);
	engine_parser_free(&p);
}

TEST(raw_lines_are_bounded_and_text)
{
	struct rec r = {0};
	struct engine_parser p;
	engine_parser_init(&p, ENGINE_CODEX, on_emit, &r);
	size_t n = ENGINE_RAW_MAX * 3;
	char *big = malloc(n + 1);
	memset(big, 'x', n);
	big[n] = 0;
	big[10] = (char)0xff; /* not UTF-8 */
	engine_parser_line(&p, big, n);
	CHECK(r.n == 1);
	json_t *raw = json_object_get(r.data[0], "raw");
	CHECK(json_is_string(raw) && json_string_length(raw) <= ENGINE_RAW_MAX + 8);
	CHECK(json_is_true(json_object_get(r.data[0], "truncated")));
	CHECK(json_integer_value(json_object_get(r.data[0], "bytes")) == (json_int_t)n);
	free(big);
	rec_free(&r);
	engine_parser_free(&p);
}

TEST(claude_stream)
{
	struct rec r = {0};
	struct engine_parser p;
	engine_parser_init(&p, ENGINE_CLAUDE, on_emit, &r);
	feed(&p,
	     "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s-1\",\"model\":\"m\"}");
	feed(&p,
	     "{\"type\":\"stream_event\",\"event\":{\"type\":\"message_start\",\"message\":{}}}");
	feed(&p,
	     "{\"type\":\"stream_event\",\"event\":{\"type\":\"content_block_delta\",\"index\":0,"
	     "\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me \"}}}");
	feed(&p, "{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":"
		 "\"Let me look.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\","
		 "\"input\":{\"command\":\"ls\"}}]},\"session_id\":\"s-1\"}");
	feed(&p,
	     "{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"tool_result\","
	     "\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"a.txt\\n\"}],"
	     "\"is_error\":false}]}}");
	feed(&p, "{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":"
		 "\"One file.\"}]}}");
	feed(&p, "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":"
		 "\"One file.\",\"session_id\":\"s-1\",\"num_turns\":2}");
	char got[512];
	names(&r, got, sizeof(got));
	CHECK_STR(got, "engine.event message.delta message tool.call tool.result tool.result "
		       "message engine.event");
	CHECK(p.done && !p.failed);
	CHECK_STR(p.answer, "One file.");
	CHECK_STR(p.session, "s-1");
	CHECK_STR(sget(r.data[3], "name"), "Bash");
	CHECK_STR(sget(json_object_get(r.data[3], "arguments"), "command"), "ls");
	CHECK_STR(sget(r.data[4], "text"), "a.txt\n");
	CHECK(json_integer_value(json_object_get(r.data[5], "exit_code")) == 0);
	rec_free(&r);
	engine_parser_free(&p);
}

TEST(claude_limits_and_errors)
{
	struct rec r = {0};
	struct engine_parser p;
	engine_parser_init(&p, ENGINE_CLAUDE, on_emit, &r);
	feed(&p, "{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"tool_result\","
		 "\"tool_use_id\":\"t2\",\"content\":\"boom\",\"is_error\":true}]}}");
	CHECK_STR(sget(r.data[1], "status"), "failed");
	feed(&p, "{\"type\":\"result\",\"subtype\":\"error_max_turns\",\"is_error\":true,"
		 "\"session_id\":\"s-2\"}");
	CHECK(p.hit_max_turns && !p.done);
	struct engine_parser q;
	engine_parser_init(&q, ENGINE_CLAUDE, on_emit, &r);
	feed(&q, "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"result\":"
		 "\"API Error: 429 rate limited\"}");
	CHECK(q.failed && !q.done);
	CHECK_STR(q.error, "API Error: 429 rate limited");
	rec_free(&r);
	engine_parser_free(&p);
	engine_parser_free(&q);
}

static const char *arg(json_t *argv, size_t i)
{
	return json_string_value(json_array_get(argv, i));
}

static bool has(json_t *argv, const char *s)
{
	for (size_t i = 0; i < json_array_size(argv); i++)
		if (!strcmp(arg(argv, i), s))
			return true;
	return false;
}

/* The session id a CLI printed goes on the next run's command line
 * (codex exec resume ID, claude --resume ID): one that starts with '-'
 * would be read as an option, so the parser keeps only well-formed ones
 * and the command line refuses any other. */
TEST(session_ids_checked)
{
	CHECK(engine_session_ok("01a230d4-00e6-7fa3-a831-e2c10ef652c4"));
	CHECK(engine_session_ok("sess_1"));
	CHECK(!engine_session_ok("--dangerously-bypass-approvals-and-sandbox"));
	CHECK(!engine_session_ok("-c"));
	CHECK(!engine_session_ok(""));
	CHECK(!engine_session_ok(NULL));
	CHECK(!engine_session_ok("a b"));
	CHECK(!engine_session_ok("a=b"));
	CHECK(!engine_session_ok("x/../y"));
	char longid[140];
	memset(longid, 'a', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = 0;
	CHECK(!engine_session_ok(longid));

	struct rec r = {0};
	struct engine_parser p;
	engine_parser_init(&p, ENGINE_CODEX, on_emit, &r);
	feed(&p, "{\"type\":\"thread.started\",\"thread_id\":\"-c\"}");
	CHECK_STR(p.session, "");
	feed(&p, "{\"type\":\"thread.started\",\"thread_id\":"
		 "\"01a230d4-00e6-7fa3-a831-e2c10ef652c4\"}");
	CHECK_STR(p.session, "01a230d4-00e6-7fa3-a831-e2c10ef652c4");
	engine_parser_free(&p);
	rec_free(&r);

	engine_parser_init(&p, ENGINE_CLAUDE, on_emit, &r);
	feed(&p, "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"--x\"}");
	feed(&p, "{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"ok\","
		 "\"session_id\":\"--fork-session\"}");
	CHECK_STR(p.session, "");
	engine_parser_free(&p);
	rec_free(&r);

	struct engine_run run = {.path = "/usr/bin/codex",
				 .base_url = "http://127.0.0.1:9/v1",
				 .session = "--full-auto"};
	json_t *argv = json_array(), *env = json_object();
	CHECK(engine_command(ENGINE_CODEX, &run, argv, env) < 0);
	run.path = "/usr/bin/claude";
	CHECK(engine_command(ENGINE_CLAUDE, &run, argv, env) < 0);
	json_decref(argv);
	json_decref(env);
}

TEST(command_lines)
{
	struct engine_run run = {.path = "/usr/bin/codex",
				 .model = "m-1",
				 .base_url = "http://127.0.0.1:9/v1",
				 .session = "sess",
				 .max_turns = 7};
	json_t *argv = json_array(), *env = json_object();
	CHECK(engine_command(ENGINE_CODEX, &run, argv, env) == 0);
	CHECK_STR(arg(argv, 0), "/usr/bin/codex");
	CHECK_STR(arg(argv, 1), "exec");
	CHECK(has(argv, "--json") && has(argv, "danger-full-access"));
	CHECK(has(argv, "model_providers.forceai.base_url=\"http://127.0.0.1:9/v1\""));
	CHECK(has(argv, "analytics.enabled=false"));
	CHECK_STR(arg(argv, json_array_size(argv) - 2), "resume");
	CHECK_STR(arg(argv, json_array_size(argv) - 1), "sess");
	json_decref(argv);
	/* A model name that would break out of the TOML string is refused. */
	run.model = "x\"y";
	argv = json_array();
	CHECK(engine_command(ENGINE_CODEX, &run, argv, env) < 0);
	json_decref(argv);

	run.model = "m-1";
	run.path = "/usr/bin/claude";
	argv = json_array();
	CHECK(engine_command(ENGINE_CLAUDE, &run, argv, env) == 0);
	CHECK(has(argv, "stream-json") && has(argv, "--dangerously-skip-permissions"));
	CHECK(has(argv, "--resume") && has(argv, "--max-turns") && has(argv, "7"));
	CHECK_STR(sget(env, "ANTHROPIC_BASE_URL"), "http://127.0.0.1:9");
	CHECK_STR(sget(env, "DISABLE_AUTOUPDATER"), "1");
	CHECK_STR(sget(env, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), "1");
	CHECK(engine_command(ENGINE_BUILTIN, &run, argv, env) < 0);
	json_decref(argv);
	json_decref(env);
}
