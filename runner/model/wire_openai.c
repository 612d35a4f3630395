/* OpenAI's wire format (Chat Completions, Completions, Embeddings, Models,
 * Responses): the routes the proxy always forwarded, see wire.h. */
#include "model/wire.h"

#include <stdio.h>
#include <string.h>

static enum wire_match route(const char *path, struct wire_route *rt)
{
	static const struct {
		const char *path;
		bool metered;
	} routes[] = {{"/v1/chat/completions", true},
		      {"/v1/completions", true},
		      {"/v1/embeddings", true},
		      {"/v1/responses", true},
		      {"/v1/models", false}};
	/* /v1/messages and below are Anthropic's (wire_anthropic.c). */
	if (strncmp(path, "/v1/", 4) ||
	    (!strncmp(path, "/v1/messages", 12) && (!path[12] || path[12] == '/')))
		return WIRE_NO;
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (strcmp(path, routes[i].path))
			continue;
		snprintf(rt->path, sizeof(rt->path), "%s", path + 3); /* the URL holds "/v1" */
		rt->base = WIRE_BASE_V1;
		rt->get = rt->post = true;
		rt->metered = routes[i].metered;
		return WIRE_ROUTE;
	}
	return WIRE_UNKNOWN;
}

/* {"usage": {...}} of a chat/completions/embeddings object, or the
 * Responses API's {"response": {"usage": ...}} events. */
static void take(struct wire_scan *s, const char *event, json_t *j)
{
	(void)event;
	json_t *us = json_object_get(j, "usage");
	wire_scan_model(s, json_object_get(j, "model"));
	if (!json_is_object(us)) {
		json_t *resp = json_object_get(j, "response");
		if (json_is_object(resp))
			wire_scan_model(s, json_object_get(resp, "model"));
		us = json_is_object(resp) ? json_object_get(resp, "usage") : NULL;
		if (!json_is_object(us))
			return;
	}
	struct mu_usage u = {0};
	bool p = mu_count(us, "prompt_tokens", &u.prompt_tokens) ||
		 mu_count(us, "input_tokens", &u.prompt_tokens);
	bool c = mu_count(us, "completion_tokens", &u.completion_tokens) ||
		 mu_count(us, "output_tokens", &u.completion_tokens);
	bool t = mu_count(us, "total_tokens", &u.total_tokens);
	if (!p && !c && !t)
		return;
	if (!t)
		u.total_tokens = u.prompt_tokens + u.completion_tokens;
	json_t *det = json_object_get(us, "prompt_tokens_details");
	if (!json_is_object(det))
		det = json_object_get(us, "input_tokens_details");
	if (json_is_object(det))
		mu_count(det, "cached_tokens", &u.cache_read_tokens);
	/* One usage object per response: the last one is the answer's. */
	s->usage = u;
	s->has_usage = true;
}

static json_t *error(unsigned status, const char *code, const char *message)
{
	const char *type = !strcmp(code, "budget_exceeded") ? "budget_exceeded"
			   : status == 429                  ? "rate_limit_error"
			   : status >= 500                  ? "gateway_error"
							    : "invalid_request_error";
	return json_pack("{s:{s:s,s:s,s:s}}", "error", "message", message, "type", type, "code",
			 code);
}

/* x-api-key too: the Anthropic SDKs list models at the same /v1/models. */
static const char *const token_headers[] = {"authorization", "x-api-key", NULL};

const struct wire wire_openai = {
	.name = "openai",
	.route = route,
	.token_headers = token_headers,
	.key_header = "authorization",
	.take = take,
	.usage_needle = "\"usage\"",
	.error = error,
	.token_vars = "OPENAI_API_KEY",
};
