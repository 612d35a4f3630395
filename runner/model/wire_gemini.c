/* Google's Gemini API (generativelanguage v1beta, and v1's model calls;
 * what @google/genai and the Gemini CLI speak): models/{model}:generateContent,
 * :streamGenerateContent and :countTokens, and the model list; see wire.h. */
#include "model/wire.h"

#include <stdio.h>
#include <string.h>

#define MODEL_MAX 128

static bool model_name_ok(const char *m, size_t n)
{
	if (!n || n > MODEL_MAX || m[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = m[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* The model calls: {model}:generateContent, :streamGenerateContent,
 * :countTokens. */
static bool verb(const char *colon, struct wire_route *rt)
{
	if (!strcmp(colon, ":generateContent") || !strcmp(colon, ":streamGenerateContent")) {
		rt->post = rt->metered = true;
		return true;
	}
	if (!strcmp(colon, ":countTokens")) {
		rt->post = true;
		return true;
	}
	return false;
}

/* @google/genai 1.x+ calls the v1 API by default (/v1/models/{model}:verb):
 * the gateway serves v1beta (a superset of v1 for these methods), so they
 * go there. Other /v1 paths are OpenAI's. */
static enum wire_match route_v1(const char *path, struct wire_route *rt)
{
	const char *m = path + 11;
	const char *colon = strchr(m, ':');
	if (!colon || !model_name_ok(m, (size_t)(colon - m)) || !verb(colon, rt))
		return WIRE_NO;
	rt->base = WIRE_BASE_ROOT;
	snprintf(rt->path, sizeof(rt->path), "/v1beta/models/%s", m);
	return WIRE_ROUTE;
}

static enum wire_match route(const char *path, struct wire_route *rt)
{
	if (!strncmp(path, "/v1/models/", 11))
		return route_v1(path, rt);
	if (strncmp(path, "/v1beta/", 8))
		return WIRE_NO;
	rt->base = WIRE_BASE_ROOT; /* /v1beta is not under the gateway's /v1 */
	if (!strcmp(path, "/v1beta/models")) {
		snprintf(rt->path, sizeof(rt->path), "%s", path);
		rt->get = true;
		return WIRE_ROUTE;
	}
	if (strncmp(path, "/v1beta/models/", 15))
		return WIRE_UNKNOWN;
	const char *m = path + 15;
	const char *colon = strchr(m, ':');
	size_t mlen = colon ? (size_t)(colon - m) : strlen(m);
	if (!model_name_ok(m, mlen))
		return WIRE_UNKNOWN;
	if (!colon)
		rt->get = true; /* one model's description */
	else if (!verb(colon, rt))
		return WIRE_UNKNOWN;
	snprintf(rt->path, sizeof(rt->path), "%s", path);
	return WIRE_ROUTE;
}

static void take_one(struct wire_scan *s, json_t *j)
{
	json_t *um = json_object_get(j, "usageMetadata");
	wire_scan_model(s, json_object_get(j, "modelVersion"));
	if (!json_is_object(um))
		return;
	struct mu_usage u = {0};
	int64_t tool = 0, thoughts = 0;
	bool p = mu_count(um, "promptTokenCount", &u.prompt_tokens);
	bool c = mu_count(um, "candidatesTokenCount", &u.completion_tokens);
	bool t = mu_count(um, "totalTokenCount", &u.total_tokens);
	if (!p && !c && !t)
		return;
	mu_count(um, "toolUsePromptTokenCount", &tool);
	mu_count(um, "thoughtsTokenCount", &thoughts);
	mu_count(um, "cachedContentTokenCount", &u.cache_read_tokens);
	u.prompt_tokens += tool;
	u.completion_tokens += thoughts; /* thinking is output the caller pays for */
	if (!t || u.total_tokens < u.prompt_tokens + u.completion_tokens)
		u.total_tokens = u.prompt_tokens + u.completion_tokens;
	/* Each chunk of a stream carries the running totals: the last wins. */
	s->usage = u;
	s->has_usage = true;
}

/* A chunk (SSE with alt=sse), a whole response, or the JSON array that
 * :streamGenerateContent sends without alt=sse. */
static void take(struct wire_scan *s, const char *event, json_t *j)
{
	(void)event;
	if (json_is_object(j)) {
		take_one(s, j);
		return;
	}
	size_t i;
	json_t *el;
	json_array_foreach(j, i, el) {
		if (json_is_object(el))
			take_one(s, el);
	}
}

static const char *status_word(unsigned status)
{
	switch (status) {
	case 400:
	case 413:
		return "INVALID_ARGUMENT";
	case 401:
		return "UNAUTHENTICATED";
	case 403:
		return "PERMISSION_DENIED";
	case 404:
		return "NOT_FOUND";
	case 405:
		return "UNIMPLEMENTED";
	case 429:
		return "RESOURCE_EXHAUSTED";
	case 503:
		return "UNAVAILABLE";
	case 504:
		return "DEADLINE_EXCEEDED";
	}
	return status >= 500 ? "INTERNAL" : "FAILED_PRECONDITION";
}

/* google.rpc.Status, the runner's code as an ErrorInfo reason. */
static json_t *error(unsigned status, const char *code, const char *message)
{
	return json_pack("{s:{s:i,s:s,s:s,s:[{s:s,s:s,s:s}]}}", "error", "code", (int)status,
			 "message", message, "status", status_word(status), "details", "@type",
			 "type.googleapis.com/google.rpc.ErrorInfo", "reason", code, "domain",
			 "forceai-runner");
}

static const char *const token_headers[] = {"x-goog-api-key", NULL};

const struct wire wire_gemini = {
	.name = "gemini",
	.route = route,
	.token_headers = token_headers,
	.token_in_query = true,
	.key_header = "x-goog-api-key",
	.take = take,
	.usage_needle = "\"usageMetadata\"",
	.error = error,
	.token_vars = "GEMINI_API_KEY",
};
