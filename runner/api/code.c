/* The code-context routes (docs/design/code.md): OpenSandbox execd's /code on
 * the runner's port, E2B's code-interpreter API on --code-interpreter-listen.
 * Both are thin: the contexts are code/code.c's. */
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "code/code.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/runner.h"
#include "core/randomid.h"
#include "task/task.h"

/* A string field (http/body.h); on these routes an empty one counts as absent. */
static int get_string(json_t *body, const char *key, const char **out, struct error *err)
{
	if (body_str(body, key, false, out, err) < 0)
		return -1;
	if (*out && !**out)
		*out = NULL;
	return 0;
}

static int get_env(json_t *body, const char *key, json_t **out, struct error *err)
{
	json_t *v = json_object_get(body, key);
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "field '%s' must be an object of strings", key);
	const char *k;
	json_t *s;
	json_object_foreach(v, k, s) {
		if (!*k || strchr(k, '=') || strlen(k) != strlen(k))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "%s: '%.64s' is not a variable name", key, k);
		if (!json_is_string(s) || strlen(json_string_value(s)) != json_string_length(s))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "%s: the value of '%.64s' must be a string without NUL",
					 key, k);
	}
	*out = v;
	return 0;
}

static int check_cwd(const char *cwd, struct error *err)
{
	if (cwd && cwd[0] != '/')
		return error_set(err, 0, "INVALID_REQUEST_BODY", "cwd must be an absolute path");
	return 0;
}

static struct code_ctx *find_param(struct http_req *req)
{
	return is_hex_id(req->param) ? code_ctx_find(req->r, req->param) : NULL;
}

static enum MHD_Result not_found(struct http_req *req, const char *id)
{
	return http_failf(req, "CONTEXT_NOT_FOUND", "context %.64s not found", id);
}

/* ---- OpenSandbox execd: /code ---- */

/* POST /code/context (execd: `language` required) and E2B's POST
 * /contexts (an empty body allowed; the language defaults to python). */
static enum MHD_Result context_create(struct http_req *req, bool e2b)
{
	cleanup_json json_t *body = http_body_json(req, e2b);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	const char *lang, *cwd;
	struct error err;
	if (get_string(body, "language", &lang, &err) < 0 ||
	    get_string(body, "cwd", &cwd, &err) < 0 || check_cwd(cwd, &err) < 0)
		return http_fail(req, &err);
	if (!lang && !e2b)
		return http_failf(req, "INVALID_REQUEST_BODY", "field 'language' is required");
	struct code_ctx *c = code_ctx_create(req->r, lang ? lang : "python", cwd, &err);
	if (!c)
		return http_fail(req, &err);
	return http_json(req, 200, code_ctx_json(c));
}

enum MHD_Result api_code_context_create(struct http_req *req)
{
	return context_create(req, false);
}

static json_t *list_of(struct runner *r, const char *language)
{
	json_t *a = json_array();
	for (struct code_ctx *c = r->code->head; a && c; c = c->next)
		if (!language || !strcmp(c->language, language))
			json_array_append_new(a, code_ctx_json(c));
	return a;
}

enum MHD_Result api_code_contexts_list(struct http_req *req)
{
	const char *lang = http_query(req, "language");
	return http_json(req, 200, list_of(req->r, lang && *lang ? lang : NULL));
}

enum MHD_Result api_code_contexts_delete(struct http_req *req)
{
	const char *lang = http_query(req, "language");
	if (!lang || !*lang)
		return http_failf(req, "MISSING_QUERY", "missing query parameter 'language'");
	for (struct code_ctx *c = req->r->code->head, *next; c; c = next) {
		next = c->next;
		if (!strcmp(c->language, lang))
			code_ctx_delete(c);
	}
	return http_empty(req, 200);
}

enum MHD_Result api_code_context_get(struct http_req *req)
{
	struct code_ctx *c = find_param(req);
	if (!c)
		return not_found(req, req->param);
	return http_json(req, 200, code_ctx_json(c));
}

enum MHD_Result api_code_context_delete(struct http_req *req)
{
	struct code_ctx *c = find_param(req);
	if (!c)
		return not_found(req, req->param);
	code_ctx_delete(c);
	return http_empty(req, 200);
}

enum MHD_Result api_code_languages(struct http_req *req)
{
	return http_json(req, 200, json_pack("{s:o}", "languages", code_languages()));
}

enum MHD_Result api_code_run(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct error err;
	const char *code, *id = NULL, *lang = NULL;
	if (get_string(body, "code", &code, &err) < 0)
		return http_fail(req, &err);
	json_t *cj = json_object_get(body, "code");
	if (!json_is_string(cj))
		return http_failf(req, "INVALID_REQUEST_BODY", "field 'code' is required");
	code = json_string_value(cj);
	json_t *ctx = json_object_get(body, "context");
	if (ctx && !json_is_null(ctx)) {
		if (!json_is_object(ctx))
			return http_failf(req, "INVALID_REQUEST_BODY",
					  "field 'context' must be an object {id, language}");
		if (get_string(ctx, "id", &id, &err) < 0 ||
		    get_string(ctx, "language", &lang, &err) < 0)
			return http_fail(req, &err);
	}
	json_t *env;
	if (get_env(body, "envs", &env, &err) < 0)
		return http_fail(req, &err);
	struct code_ctx *c;
	if (id) {
		c = is_hex_id(id) ? code_ctx_find(req->r, id) : NULL;
		if (!c)
			return not_found(req, id);
		if (lang && strcmp(lang, c->language))
			return http_failf(req, "INVALID_REQUEST_BODY",
					  "context %s is a %s context, not %.32s", c->id,
					  c->language, lang);
	} else if (lang) {
		c = code_ctx_default(req->r, lang, &err);
		if (!c)
			return http_fail(req, &err);
	} else {
		/* Neither: a shell command, as execd runs it. */
		if (!*code)
			return http_failf(req, "INVALID_REQUEST_BODY", "field 'code' is empty");
		struct task_spec spec = {.api = TASK_API_EXECD,
					 .command = code,
					 .env = env,
					 .state_in_fd = -1,
					 .state_out_fd = -1};
		return api_command_stream(req, &spec);
	}
	return code_exec_start(req, c, code, env, CODE_EXECD);
}

enum MHD_Result api_code_interrupt(struct http_req *req)
{
	const char *id = http_query(req, "id");
	if (!id || !*id)
		return http_failf(req, "MISSING_QUERY", "missing query parameter 'id'");
	struct code_ctx *c = is_hex_id(id) ? code_ctx_find(req->r, id) : NULL;
	if (!c)
		return not_found(req, id);
	struct error err;
	if (code_ctx_interrupt(c, &err) < 0)
		return http_fail(req, &err);
	return http_empty(req, 200);
}

/* ---- E2B's code interpreter (its SDK's wire format) ---- */

static enum MHD_Result e2b_run(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct error err;
	const char *id, *lang;
	json_t *env;
	json_t *cj = json_object_get(body, "code");
	if (!json_is_string(cj))
		return http_failf(req, "INVALID_REQUEST_BODY", "field 'code' is required");
	if (get_string(body, "context_id", &id, &err) < 0 ||
	    get_string(body, "language", &lang, &err) < 0 ||
	    get_env(body, "env_vars", &env, &err) < 0)
		return http_fail(req, &err);
	if (id && lang)
		return http_failf(req, "INVALID_REQUEST_BODY",
				  "give context_id or language, not both");
	struct code_ctx *c;
	if (id) {
		c = is_hex_id(id) ? code_ctx_find(req->r, id) : NULL;
		if (!c)
			return not_found(req, id);
	} else {
		c = code_ctx_default(req->r, lang ? lang : "python", &err);
		if (!c)
			return http_fail(req, &err);
	}
	return code_exec_start(req, c, json_string_value(cj), env, CODE_E2B);
}

static enum MHD_Result e2b_context_create(struct http_req *req)
{
	return context_create(req, true);
}

static enum MHD_Result e2b_contexts_list(struct http_req *req)
{
	return http_json(req, 200, list_of(req->r, NULL));
}

static enum MHD_Result e2b_context_restart(struct http_req *req)
{
	struct code_ctx *c = find_param(req);
	if (!c)
		return not_found(req, req->param);
	struct error err;
	if (code_ctx_restart(c, &err) < 0)
		return http_fail(req, &err);
	return http_empty(req, 200);
}

static enum MHD_Result e2b_health(struct http_req *req)
{
	return http_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define E2B_TOKEN .token_header = "X-Access-Token"
const struct http_route e2b_routes[] = {
	{"GET", "/health", e2b_health, NULL, NULL, .public = true},
	{"POST", "/execute", e2b_run, NULL, NULL, E2B_TOKEN},
	{"POST", "/contexts", e2b_context_create, NULL, NULL, E2B_TOKEN},
	{"GET", "/contexts", e2b_contexts_list, NULL, NULL, E2B_TOKEN},
	{"POST", "/contexts/*/restart", e2b_context_restart, NULL, NULL, E2B_TOKEN},
	{"DELETE", "/contexts/*", api_code_context_delete, NULL, NULL, E2B_TOKEN},
};
const size_t e2b_n_routes = sizeof(e2b_routes) / sizeof(e2b_routes[0]);
