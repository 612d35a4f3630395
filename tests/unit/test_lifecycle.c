/* Runtime init's body and the lifecycle configuration (runner/init/config.c, runner/init/toml.c):
 * JSON and the TOML subset reach the same hooks; every bad input is an error
 * naming its field, never a crash or a partial hook. */
#include "init/config.h"

#include <string.h>

#include "core/error.h"
#include "unit.h"

static json_t *js(const char *s)
{
	json_error_t e;
	json_t *j = json_loads(s, JSON_ALLOW_NUL, &e);
	if (!j)
		fprintf(stderr, "bad test JSON: %s\n", e.text);
	return j;
}

TEST(lifecycle_json_prestart_and_periodic)
{
	json_t *j =
		js("{\"preStart\": {\"exec\": {\"command\": [\"/bin/sh\", \"-c\", \"echo hi\"]},"
		   " \"timeoutSeconds\": 30, \"failurePolicy\": \"Continue\"},"
		   " \"periodic\": [{\"name\": \"tick\", \"command\": \"date\", "
		   "\"intervalSeconds\": 5}]}");
	struct lc_config c;
	struct lc_warnings w = {0};
	struct error e;
	CHECK(lc_parse_json(j, &c, &w, &e) == 0);
	CHECK(c.has_prestart);
	CHECK_STR(c.prestart.argv[0], "/bin/sh");
	CHECK_STR(c.prestart.argv[2], "echo hi");
	CHECK(c.prestart.argv[3] == NULL);
	CHECK(c.prestart.timeout_s == 30);
	CHECK(!c.prestart.abort_on_failure);
	CHECK(c.n_periodic == 1);
	CHECK_STR(c.periodic[0].name, "tick");
	/* A string command is a shell line. */
	CHECK_STR(c.periodic[0].argv[0], "/bin/sh");
	CHECK_STR(c.periodic[0].argv[1], "-c");
	CHECK_STR(c.periodic[0].argv[2], "date");
	CHECK(c.periodic[0].interval_s == 5);
	CHECK(c.periodic[0].timeout_s == LC_TIMEOUT_DEFAULT);
	CHECK(w.n == 0);
	lc_free(&c);
	json_decref(j);
}

TEST(lifecycle_defaults_and_ignored_hooks)
{
	json_t *j = js("{\"preStart\": {\"command\": [\"true\"]}, \"prePause\": {}, "
		       "\"preTerminate\": {}}");
	struct lc_config c;
	struct lc_warnings w = {0};
	struct error e;
	CHECK(lc_parse_json(j, &c, &w, &e) == 0);
	CHECK(c.prestart.abort_on_failure); /* preStart defaults to Abort */
	CHECK(c.prestart.timeout_s == 60);
	CHECKF(w.n == 2, "warnings %u", w.n);
	CHECK(strstr(w.msg[0], "prePause") != NULL);
	lc_free(&c);
	json_decref(j);
}

static void expect_bad(const char *json, const char *needle)
{
	json_t *j = js(json);
	struct lc_config c;
	struct lc_warnings w = {0};
	struct error e;
	error_clear(&e);
	int rc = lc_parse_json(j, &c, &w, &e);
	CHECKF(rc == -1, "accepted: %s", json);
	CHECKF(strstr(e.msg, needle) != NULL, "%s: message '%s' lacks '%s'", json, e.msg, needle);
	CHECK_STR(error_code(&e), "INVALID_REQUEST_BODY");
	lc_free(&c);
	json_decref(j);
}

TEST(lifecycle_json_rejects)
{
	expect_bad("[]", "must be an object");
	expect_bad("{\"preStart\": {}}", "command is required");
	expect_bad("{\"preStart\": {\"command\": []}}", "command must be");
	expect_bad("{\"preStart\": {\"command\": [\"\"]}}", "command[0]");
	expect_bad("{\"preStart\": {\"command\": [\"a\", 1]}}", "command[1]");
	expect_bad("{\"preStart\": {\"command\": \"x\", \"timeoutSeconds\": 0}}", "timeoutSeconds");
	expect_bad("{\"preStart\": {\"command\": \"x\", \"timeoutSeconds\": 301}}",
		   "timeoutSeconds");
	expect_bad("{\"preStart\": {\"command\": \"x\", \"failurePolicy\": \"Maybe\"}}",
		   "failurePolicy");
	expect_bad("{\"preStart\": {\"command\": \"x\", \"name\": \"n\"}}", "unknown field 'name'");
	expect_bad("{\"preStart\": {\"command\": \"x\", \"exec\": {\"command\": \"y\"}}}",
		   "not both");
	expect_bad("{\"periodic\": [{\"name\": \"a\", \"command\": \"x\"}]}", "intervalSeconds");
	expect_bad("{\"periodic\": [{\"command\": \"x\", \"intervalSeconds\": 1}]}", "name");
	expect_bad(
		"{\"periodic\": [{\"name\": \"a b\", \"command\": \"x\", \"intervalSeconds\": 1}]}",
		"name");
	expect_bad("{\"periodic\": [{\"name\": \"a\", \"command\": \"x\", \"intervalSeconds\": 1, "
		   "\"failurePolicy\": \"Abort\"}]}",
		   "always Continue");
	expect_bad("{\"periodic\": [{\"name\": \"a\", \"command\": \"x\", \"intervalSeconds\": 1},"
		   "{\"name\": \"a\", \"command\": \"y\", \"intervalSeconds\": 2}]}",
		   "used twice");
	expect_bad("{\"bogus\": 1}", "unknown field 'bogus'");
}

TEST(lifecycle_toml_matches_json)
{
	const char *t = "# execd's lifecycle.toml\n"
			"[preStart]\n"
			"command = [\"/bin/sh\", '-c', \"echo \\\"hi\\\"\\n\"]  # argv\n"
			"timeoutSeconds = 30\n"
			"failurePolicy = \"Continue\"\n"
			"\n"
			"[[periodic]]\n"
			"name = \"tick\"\n"
			"intervalSeconds = 1_0\n"
			"[periodic.exec]\n"
			"command = [\n"
			"  \"date\",   # comment inside an array\n"
			"  \"+%s\",\n"
			"]\n"
			"[[periodic]]\n"
			"name = 'two'\n"
			"exec = { command = \"uptime\" }\n"
			"intervalSeconds = 2\n";
	struct lc_config c;
	struct lc_warnings w = {0};
	struct error e;
	int rc = lc_parse_toml(t, strlen(t), &c, &w, &e);
	CHECKF(rc == 0, "%s", e.msg);
	CHECK(c.has_prestart && !c.prestart.abort_on_failure && c.prestart.timeout_s == 30);
	CHECK_STR(c.prestart.argv[1], "-c");
	CHECK_STR(c.prestart.argv[2], "echo \"hi\"\n");
	CHECK(c.n_periodic == 2);
	CHECK_STR(c.periodic[0].name, "tick");
	CHECK(c.periodic[0].interval_s == 10);
	CHECK_STR(c.periodic[0].argv[0], "date");
	CHECK_STR(c.periodic[0].argv[1], "+%s");
	CHECK_STR(c.periodic[1].name, "two");
	CHECK_STR(c.periodic[1].argv[2], "uptime");
	/* Round trip through the JSON form gives the same hooks. */
	json_t *back = lc_to_json(&c);
	struct lc_config c2;
	CHECK(lc_parse_json(back, &c2, &w, &e) == 0);
	CHECK(c2.n_periodic == 2 && c2.periodic[1].interval_s == 2);
	CHECK_STR(c2.prestart.argv[2], "echo \"hi\"\n");
	lc_free(&c2);
	json_decref(back);
	lc_free(&c);
}

static void expect_bad_toml(const char *t, const char *needle)
{
	struct lc_config c;
	struct lc_warnings w = {0};
	struct error e;
	error_clear(&e);
	int rc = lc_parse_toml(t, strlen(t), &c, &w, &e);
	CHECKF(rc == -1, "accepted: %s", t);
	CHECKF(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
	lc_free(&c);
}

TEST(lifecycle_toml_rejects)
{
	expect_bad_toml("[preStart\ncommand = \"x\"\n", "expected ']'");
	expect_bad_toml("[preStart]\ncommand = \"x\n", "unterminated string");
	expect_bad_toml("[preStart]\ncommand = \"x\"\ncommand = \"y\"\n", "defined twice");
	expect_bad_toml("[preStart]\n[preStart]\n", "defined twice");
	expect_bad_toml("[preStart]\ncommand = \"x\" junk\n", "after the value");
	expect_bad_toml("[preStart]\ncommand = \"\"\"x\"\"\"\n", "multi-line");
	expect_bad_toml("[preStart]\ncommand = \"a\\qb\"\n", "escape");
	expect_bad_toml("[preStart]\ncommand = \"a\\u0000\"\n", "NUL");
	expect_bad_toml("[preStart]\ncommand = [\"a\"\n", "expected ','");
	expect_bad_toml("[preStart]\ntimeoutSeconds = 12abc\n", "expected a value");
	expect_bad_toml("x = [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]\n", "nested too deep");
	expect_bad_toml("[preStart]\ncommand = \"x\"\nfoo = 1\n", "unknown field 'foo'");
	expect_bad_toml("= 1\n", "expected a key");
	/* line numbers are told */
	expect_bad_toml("\n\n[preStart]\nbad\n", "line 4");
}

TEST(init_body_valid)
{
	json_t *j =
		js("{\"sandboxId\": \"sb-1\", \"generation\": 7, \"entrypointPolicy\": "
		   "\"restart\", \"accessTokenHash\": "
		   "\"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\","
		   " \"envs\": {\"A\": \"1\"}, \"telemetry\": {\"attributes\": {\"k\": \"v\"}, "
		   "\"other\": 1}, \"extra\": true, \"lifecycle\": {\"preStart\": {\"command\": "
		   "\"true\"}}}");
	struct rt_init_req q;
	struct error e;
	CHECK(rt_parse_init(j, &q, &e) == 0);
	CHECK_STR(q.sandbox_id, "sb-1");
	CHECK(q.generation == 7);
	CHECK(q.entrypoint_policy == RT_EP_RESTART);
	CHECK(q.has_token_hash && q.token_hash[0] == 0x9f && q.token_hash[31] == 0x08);
	CHECK(json_object_size(q.envs) == 1);
	CHECK(q.has_lifecycle && q.lifecycle.has_prestart);
	CHECKF(q.warnings.n == 2, "warnings %u", q.warnings.n);
	rt_init_req_free(&q);
	json_decref(j);
}

static void expect_bad_init(const char *json, const char *needle)
{
	json_t *j = js(json);
	struct rt_init_req q;
	struct error e;
	error_clear(&e);
	CHECKF(rt_parse_init(j, &q, &e) == -1, "accepted: %s", json);
	CHECKF(strstr(e.msg, needle) != NULL, "%s: message '%s' lacks '%s'", json, e.msg, needle);
	rt_init_req_free(&q);
	json_decref(j);
}

TEST(init_body_rejects)
{
	expect_bad_init("{}", "sandboxId");
	expect_bad_init("{\"sandboxId\": \"\", \"generation\": 1}", "sandboxId");
	expect_bad_init("{\"sandboxId\": \"a/b\", \"generation\": 1}", "sandboxId");
	expect_bad_init("{\"sandboxId\": \"a\"}", "generation");
	expect_bad_init("{\"sandboxId\": \"a\", \"generation\": -1}", "generation");
	expect_bad_init("{\"sandboxId\": \"a\", \"generation\": \"1\"}", "generation");
	expect_bad_init("{\"sandboxId\": \"a\", \"generation\": 1, \"entrypointPolicy\": \"x\"}",
			"entrypointPolicy");
	expect_bad_init("{\"sandboxId\": \"a\", \"generation\": 1, \"accessTokenHash\": \"abc\"}",
			"accessTokenHash");
	expect_bad_init(
		"{\"sandboxId\": \"a\", \"generation\": 1, \"accessTokenHash\": "
		"\"sha256:zz86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"}",
		"accessTokenHash");
	expect_bad_init("{\"sandboxId\": \"a\", \"generation\": 1, \"envs\": {\"1X\": \"v\"}}",
			"bad name");
	expect_bad_init("{\"sandboxId\": \"a\", \"generation\": 1, \"envs\": {\"X\": 1}}",
			"without NUL");
	expect_bad_init(
		"{\"sandboxId\": \"a\", \"generation\": 1, \"envs\": {\"X\": \"a\\u0000b\"}}",
		"without NUL");
	expect_bad_init("{\"sandboxId\": \"a\", \"generation\": 1, \"telemetry\": 3}", "telemetry");
	expect_bad_init("{\"sandboxId\": \"a\", \"generation\": 1, \"lifecycle\": {\"preStart\": "
			"{}}}",
			"command is required");
}

TEST(token_hash_parse)
{
	unsigned char h[32];
	CHECK(rt_parse_token_hash(
		      "sha256:9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08",
		      h) == 0);
	CHECK(h[1] == 0x86);
	CHECK(rt_parse_token_hash("sha256:", h) == -1);
	CHECK(rt_parse_token_hash(
		      "sha512:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0"
		      "f00a08",
		      h) == -1);
	CHECK(rt_parse_token_hash(NULL, h) == -1);
}
