/* Anthropic's Messages API (what Claude Code and the Anthropic SDKs
 * speak): POST /v1/messages and /v1/messages/count_tokens, see wire.h. */
#include "model/wire.h"

#include <stdio.h>
#include <string.h>

static enum wire_match route(const char *path, struct wire_route *rt)
{
	if (strncmp(path, "/v1/messages", 12) || (path[12] && path[12] != '/'))
		return WIRE_NO;
	bool count = !strcmp(path, "/v1/messages/count_tokens");
	if (path[12] && !count)
		return WIRE_UNKNOWN;
	snprintf(rt->path, sizeof(rt->path), "%s", path + 3); /* FORCEAI_GATEWAY_URL + /messages */
	rt->base = WIRE_BASE_V1;
	rt->post = true;
	rt->metered = !count;
	return WIRE_ROUTE;
}

/* message_start carries message.usage (input, cache and the first output
 * tokens), each message_delta the cumulative counts so far; a whole
 * (non-streamed) message has "usage" at the top. A count present in a
 * later object replaces the earlier one: they are running totals. */
static void take(struct wire_scan *s, const char *event, json_t *j)
{
	if (!json_is_object(j))
		return;
	json_t *type = json_object_get(j, "type");
	const char *t = json_is_string(type) ? json_string_value(type) : event ? event : "";
	json_t *us = NULL;
	if (!strcmp(t, "message_start")) {
		json_t *m = json_object_get(j, "message");
		us = json_is_object(m) ? json_object_get(m, "usage") : NULL;
		if (json_is_object(m))
			wire_scan_model(s, json_object_get(m, "model"));
	} else if (!strcmp(t, "message_delta") || (!event && !strcmp(t, "message"))) {
		us = json_object_get(j, "usage");
		wire_scan_model(s, json_object_get(j, "model")); /* a whole message's */
	}
	if (!json_is_object(us))
		return;
	int64_t *in = &s->fmt[0], *cc = &s->fmt[1], *cr = &s->fmt[2], *out = &s->fmt[3];
	bool any = mu_count(us, "input_tokens", in);
	any |= mu_count(us, "cache_creation_input_tokens", cc);
	any |= mu_count(us, "cache_read_input_tokens", cr);
	any |= mu_count(us, "output_tokens", out);
	if (!any)
		return;
	s->usage.prompt_tokens = *in + *cc + *cr;
	s->usage.completion_tokens = *out;
	s->usage.total_tokens = s->usage.prompt_tokens + *out;
	s->usage.cache_read_tokens = *cr;
	s->usage.cache_creation_tokens = *cc;
	s->has_usage = true;
}

static json_t *error(unsigned status, const char *code, const char *message)
{
	const char *type;
	if (!strcmp(code, "budget_exceeded"))
		type = "budget_exceeded";
	else if (status == 401)
		type = "authentication_error";
	else if (status == 403)
		type = "permission_error";
	else if (status == 404 || status == 405)
		type = "not_found_error";
	else if (status == 413)
		type = "request_too_large";
	else if (status == 429)
		type = "rate_limit_error";
	else if (status == 504)
		type = "timeout_error";
	else if (status >= 500)
		type = "api_error";
	else
		type = "invalid_request_error";
	return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type, "message",
			 message);
}

static const char *const token_headers[] = {"x-api-key", "authorization", NULL};

const struct wire wire_anthropic = {
	.name = "anthropic",
	.route = route,
	.token_headers = token_headers,
	.key_header = "x-api-key",
	.take = take,
	.usage_needle = "\"usage\"",
	.error = error,
	.token_vars = "ANTHROPIC_AUTH_TOKEN or ANTHROPIC_API_KEY",
};
