/* MCP messages without I/O: see proto.h. */
#include "mcp/proto.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const STATEFUL[] = {"2025-11-25", "2025-06-18", "2025-03-26"};

bool mcp_version_known(const char *v)
{
	for (size_t i = 0; v && i < sizeof(STATEFUL) / sizeof(STATEFUL[0]); i++)
		if (!strcmp(v, STATEFUL[i]))
			return true;
	return false;
}

const char *mcp_negotiate(const char *requested)
{
	for (size_t i = 0; requested && i < sizeof(STATEFUL) / sizeof(STATEFUL[0]); i++)
		if (!strcmp(requested, STATEFUL[i]))
			return STATEFUL[i];
	return MCP_LATEST_VERSION;
}

static int fail(int *code, char *msg, size_t msglen, int c, const char *m)
{
	*code = c;
	snprintf(msg, msglen, "%s", m);
	return -1;
}

static bool valid_id(json_t *id)
{
	return json_is_string(id) || json_is_integer(id);
}

/* A string member of an object, or NULL; *bad when present but not a string. */
static const char *str_member(json_t *o, const char *key, bool *bad)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return NULL;
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
		*bad = true;
		return NULL;
	}
	return json_string_value(v);
}

int mcp_parse(const char *data, size_t len, struct mcp_msg *m, int *code, char *msg, size_t msglen)
{
	memset(m, 0, sizeof(*m));
	json_error_t jerr;
	m->root = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!m->root)
		return fail(code, msg, msglen, MCP_PARSE_ERROR,
			    "Parse error: the body is not JSON");
	if (json_is_array(m->root))
		return fail(code, msg, msglen, MCP_INVALID_REQUEST,
			    "Invalid Request: JSON-RPC batches are not supported");
	if (!json_is_object(m->root))
		return fail(code, msg, msglen, MCP_INVALID_REQUEST,
			    "Invalid Request: the body must be a JSON-RPC object");
	json_t *id = json_object_get(m->root, "id");
	if (id && valid_id(id))
		m->id = id;
	json_t *ver = json_object_get(m->root, "jsonrpc");
	if (!json_is_string(ver) || strcmp(json_string_value(ver), "2.0"))
		return fail(code, msg, msglen, MCP_INVALID_REQUEST,
			    "Invalid Request: \"jsonrpc\" must be \"2.0\"");
	json_t *method = json_object_get(m->root, "method");
	if (!method) {
		/* A response to a request of ours (none are sent today: accepted, ignored). */
		if (!json_object_get(m->root, "result") && !json_object_get(m->root, "error"))
			return fail(code, msg, msglen, MCP_INVALID_REQUEST,
				    "Invalid Request: no \"method\" (and not a response)");
		m->kind = MCP_RESPONSE;
		return 0;
	}
	if (!json_is_string(method) || !json_string_length(method) ||
	    strlen(json_string_value(method)) != json_string_length(method))
		return fail(code, msg, msglen, MCP_INVALID_REQUEST,
			    "Invalid Request: \"method\" must be a non-empty string");
	m->method = json_string_value(method);
	if (id && !valid_id(id))
		return fail(code, msg, msglen, MCP_INVALID_REQUEST,
			    "Invalid Request: \"id\" must be a string or an integer");
	m->kind = id ? MCP_REQUEST : MCP_NOTIFICATION;
	json_t *params = json_object_get(m->root, "params");
	if (params && !json_is_object(params) && !json_is_null(params))
		return fail(code, msg, msglen, MCP_INVALID_PARAMS,
			    "Invalid params: \"params\" must be an object");
	m->params = json_is_object(params) ? params : NULL;
	bool bad = false;
	json_t *meta = json_object_get(m->params, "_meta");
	if (meta && !json_is_object(meta))
		return fail(code, msg, msglen, MCP_INVALID_PARAMS,
			    "Invalid params: \"_meta\" must be an object");
	m->meta_version = str_member(meta, "io.modelcontextprotocol/protocolVersion", &bad);
	json_t *tok = json_object_get(meta, "progressToken");
	if (tok && !valid_id(tok))
		return fail(code, msg, msglen, MCP_INVALID_PARAMS,
			    "Invalid params: \"progressToken\" must be a string or an integer");
	m->progress_token = tok;
	if (!strcmp(m->method, "initialize")) {
		m->protocol_version = str_member(m->params, "protocolVersion", &bad);
	} else if (!strcmp(m->method, "tools/call")) {
		m->tool = str_member(m->params, "name", &bad);
		if (!m->tool || bad)
			return fail(code, msg, msglen, MCP_INVALID_PARAMS,
				    "Invalid params: tools/call needs a string \"name\"");
		json_t *args = json_object_get(m->params, "arguments");
		if (args && !json_is_object(args) && !json_is_null(args))
			return fail(code, msg, msglen, MCP_INVALID_PARAMS,
				    "Invalid params: \"arguments\" must be an object");
		m->arguments = json_is_object(args) ? args : NULL;
	} else if (!strcmp(m->method, "notifications/cancelled")) {
		json_t *rid = json_object_get(m->params, "requestId");
		m->cancel_id = valid_id(rid) ? rid : NULL;
	}
	if (bad)
		return fail(code, msg, msglen, MCP_INVALID_PARAMS,
			    "Invalid params: a member that must be a string is not one");
	return 0;
}

void mcp_msg_free(struct mcp_msg *m)
{
	json_decref(m->root);
	memset(m, 0, sizeof(*m));
}

/* host[:port] of an origin "scheme://host[:port]" is a localhost form. */
static bool localhost_origin(const char *o)
{
	const char *h;
	if (!strncasecmp(o, "http://", 7))
		h = o + 7;
	else if (!strncasecmp(o, "https://", 8))
		h = o + 8;
	else
		return false;
	static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]"};
	for (size_t i = 0; i < 3; i++) {
		size_t n = strlen(hosts[i]);
		if (strncasecmp(h, hosts[i], n))
			continue;
		const char *p = h + n;
		if (!*p)
			return true;
		if (*p != ':' || !p[1])
			return false;
		for (p++; *p; p++)
			if (*p < '0' || *p > '9')
				return false;
		return true;
	}
	return false;
}

bool mcp_origin_allowed(const char *origin, const char *allowlist)
{
	if (!origin)
		return true;
	if (!allowlist || !*allowlist)
		return localhost_origin(origin);
	size_t on = strlen(origin);
	for (const char *p = allowlist; *p;) {
		size_t n = strcspn(p, ",");
		const char *s = p;
		size_t k = n;
		while (k && (*s == ' ' || *s == '\t'))
			s++, k--;
		while (k && (s[k - 1] == ' ' || s[k - 1] == '\t'))
			k--;
		if ((k == 1 && *s == '*') || (k == on && !strncasecmp(s, origin, on)))
			return true;
		p += n;
		if (*p == ',')
			p++;
	}
	return false;
}

void mcp_accept(const char *accept, bool *json, bool *sse)
{
	if (!accept || !*accept) {
		*json = *sse = true;
		return;
	}
	*json = strcasestr(accept, "application/json") || strstr(accept, "*/*") ||
		strcasestr(accept, "application/*");
	*sse = strcasestr(accept, "text/event-stream") || strstr(accept, "*/*");
}

json_t *mcp_result(json_t *id, json_t *result)
{
	return json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result",
			 result ? result : json_object());
}

json_t *mcp_error(json_t *id, int code, const char *message)
{
	return json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
			 "error", "code", code, "message", message);
}
