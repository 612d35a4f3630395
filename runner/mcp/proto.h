/* MCP's JSON-RPC messages and Streamable HTTP rules, without I/O (docs/design/mcp-tools.md): the
 * parser of what a client POSTs to /mcp (also driven by tests/fuzz/fuzz_mcp.c), protocol
 * version negotiation, the Origin allowlist, the Accept header. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* JSON-RPC error codes. */
#define MCP_PARSE_ERROR -32700
#define MCP_INVALID_REQUEST -32600
#define MCP_METHOD_NOT_FOUND -32601
#define MCP_INVALID_PARAMS -32602
#define MCP_INTERNAL_ERROR -32603
#define MCP_SERVER_ERROR -32000 /* limits, sessions, versions: the message says which */

/* The stateless revision: no initialize, no sessions, the version on every request. */
#define MCP_STATELESS_VERSION "2026-07-28"
#define MCP_LATEST_VERSION "2025-11-25"

enum mcp_kind { MCP_REQUEST, MCP_NOTIFICATION, MCP_RESPONSE };

struct mcp_msg {
	enum mcp_kind kind;
	json_t *root;       /* owned */
	json_t *id;         /* request id (string or integer; borrowed from root), or NULL */
	const char *method; /* requests and notifications */
	json_t *params;     /* an object, or NULL */
	/* initialize */
	const char *protocol_version;
	/* tools/call */
	const char *tool;
	json_t *arguments;      /* an object, or NULL */
	json_t *progress_token; /* string or integer, or NULL */
	/* notifications/cancelled */
	json_t *cancel_id;
	/* params._meta["io.modelcontextprotocol/protocolVersion"] (the stateless revision) */
	const char *meta_version;
};

/* Parse one message (a batch is refused, docs/design/mcp-tools.md#mcp-streamable-http). 0, or -1
 * with the JSON-RPC error code and a message; m->id is then still set when the request had a usable
 * one (for the error response), and m->kind once the message is known to be a request or a
 * notification (MCP_INVALID_PARAMS). mcp_msg_free in every case. */
int mcp_parse(const char *data, size_t len, struct mcp_msg *m, int *code, char *msg, size_t msglen);
void mcp_msg_free(struct mcp_msg *m);

/* A stateful revision this server speaks (what MCP-Protocol-Version may say on a session). */
bool mcp_version_known(const char *v);
/* The version answered to an initialize asking for requested (NULL: none asked): the same
 * when it is a stateful revision spoken here, else the latest. */
const char *mcp_negotiate(const char *requested);

/* Origin check against a comma-separated allowlist of exact origins ("*": any). Without an
 * allowlist (NULL or empty) only localhost forms pass: http or https, host localhost,
 * 127.0.0.1 or [::1], any port. An absent Origin (not a browser) passes. */
bool mcp_origin_allowed(const char *origin, const char *allowlist);

/* What an Accept header allows: JSON and/or an event stream (absent: both). */
void mcp_accept(const char *accept, bool *json, bool *sse);

/* {"jsonrpc":"2.0","id":id,"result":result} (result stolen), and the error form (id NULL:
 * null). New references. */
json_t *mcp_result(json_t *id, json_t *result);
json_t *mcp_error(json_t *id, int code, const char *message);
