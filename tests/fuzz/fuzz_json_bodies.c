/* fuzz_json_bodies: the JSON request bodies of every route, through the
 * same pure functions the handlers use (no HTTP, no I/O):
 *   http_parse_json_object  (every JSON route)
 *   request_parse_command   POST /command (a command or execd 1.2's argv)
 *   api_parse_task          POST /v1/tasks
 *   request_parse_session_create POST /session
 *   request_parse_session_run POST /session/{id}/run (+ session_wrap_command)
 *   env_validate, env_build the "envs"/"env" object of a task
 * (The files API gets its entries when its body parsers land.)
 *
 * Input layout: byte 0 selects the route (value % number of routes), the
 * rest is the body. Checked: an accepted body yields a spec the task engine
 * can rely on (a non-empty command without NUL, a cwd that is NULL or
 * non-empty, bounded timeouts, an environment of NAME=value strings with
 * valid names); a refused body comes with a message and a 400. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "model/args.h"
#include "core/error.h"
#include "task/env.h"
#include "http/http.h"
#include "task/request.h"
#include "task/session.h"
#include "task/task.h"

#define MAX_TIMEOUT (7ULL * 24 * 3600 * 1000)

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_json_bodies: %s%s%s\n", what, detail ? ": " : "",
		detail ? detail : "");
	abort();
}

/* execd 1.2's argv instead of a command: a non-empty array of strings, the
 * first non-empty, none with a NUL byte, and the command left empty (the
 * task engine shows the joined argv instead). */
static void check_argv(const struct task_spec *spec, json_t *body)
{
	if (!spec->command || *spec->command)
		fail("argv accepted with a command beside it", NULL);
	if (spec->argv != json_object_get(body, "argv"))
		fail("argv does not match the body", NULL);
	size_t n = json_array_size(spec->argv);
	if (!json_is_array(spec->argv) || n == 0)
		fail("empty or non-array argv accepted", NULL);
	for (size_t i = 0; i < n; i++) {
		json_t *a = json_array_get(spec->argv, i);
		if (!json_is_string(a))
			fail("non-string argv entry accepted", NULL);
		if (strlen(json_string_value(a)) != json_string_length(a))
			fail("argv entry with a NUL byte accepted", NULL);
		if (i == 0 && json_string_length(a) == 0)
			fail("empty argv[0] accepted", NULL);
	}
	if (spec->cwd && !*spec->cwd)
		fail("empty cwd kept", NULL);
	if (spec->timeout_ms > MAX_TIMEOUT)
		fail("timeout over the bound", NULL);
}

static void check_spec(const struct task_spec *spec, json_t *body, const char *key)
{
	if (spec->argv) {
		check_argv(spec, body);
		return;
	}
	if (!spec->command || !*spec->command)
		fail("accepted without a command", NULL);
	json_t *v = json_object_get(body, key);
	if (!json_is_string(v) || strlen(spec->command) != json_string_length(v))
		fail("command does not match the body", NULL);
	if (spec->cwd && !*spec->cwd)
		fail("empty cwd kept", NULL);
	if (spec->timeout_ms > MAX_TIMEOUT)
		fail("timeout over the bound", NULL);
}

static void check_env(const struct task_spec *spec)
{
	struct error err = {0};
	if (env_validate(spec->env, &err) < 0) {
		if (!err.msg[0] || error_http_status(&err) != 400)
			fail("env refused without a message or not with a 400", err.msg);
		return;
	}
	char **envp = env_build(1000, spec->cwd ? spec->cwd : "/", spec->env, &err);
	if (!envp)
		fail("env_build failed after env_validate accepted", err.msg);
	for (char **e = envp; *e; e++) {
		const char *eq = strchr(*e, '=');
		if (!eq || eq == *e)
			fail("environment entry without NAME=", *e);
		for (const char *p = *e; p < eq; p++)
			if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			      (p > *e && *p >= '0' && *p <= '9')))
				fail("invalid variable name reached the environment", *e);
	}
	env_free(envp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned route = data[0] % 4;
	const char *body_data = (const char *)data + 1;
	size_t body_len = size - 1;
	struct error err = {0};
	json_t *body = http_parse_json_object(body_data, body_len, route == 2, &err);
	if (!body) {
		if (!err.msg[0] || error_http_status(&err) != 400)
			fail("JSON refused without a message or not with a 400", err.msg);
		return 0;
	}
	if (!json_is_object(body))
		fail("parsed body is not an object", NULL);
	struct task_spec spec;
	int rc;
	switch (route) {
	case 0:
		rc = request_parse_command(body, &spec, &err);
		if (rc == 0) {
			check_spec(&spec, body, "command");
			if (spec.api != TASK_API_EXECD)
				fail("wrong api", NULL);
			if (spec.has_uid && spec.uid > 0xfffffffeu)
				fail("uid out of range", NULL);
			check_env(&spec);
		}
		break;
	case 1: {
		struct model_args margs;
		rc = api_parse_task(body, &spec, &margs, &err);
		if (rc == 0) {
			check_spec(&spec, body, "task");
			if (!spec.cap || (strcmp(spec.cap->name, "exec") != 0 &&
					  strcmp(spec.cap->name, "chat") != 0 &&
					  strcmp(spec.cap->name, "agent") != 0))
				fail("unknown capability accepted", NULL);
			check_env(&spec);
		} else if (error_http_status(&err) != 400 || !err.code || !*err.code) {
			fail("refused with an odd status or no code", err.msg);
		}
		break;
	}
	case 2: {
		const char *cwd = NULL;
		rc = request_parse_session_create(body, &cwd, &err);
		if (rc == 0 && cwd && cwd[0] != '/')
			fail("relative session cwd accepted", cwd);
		break;
	}
	default:
		rc = request_parse_session_run(body, &spec, &err);
		if (rc == 0) {
			check_spec(&spec, body, "command");
			char *w = session_wrap_command(spec.command, spec.cwd != NULL);
			if (!w || !strstr(w, spec.command))
				fail("session wrapper lost the command", NULL);
			free(w);
		}
		break;
	}
	if (rc < 0 && (!err.msg[0] || error_http_status(&err) != 400))
		fail("refused without a message or not with a 400", err.msg);
	json_decref(body);
	return 0;
}
