/* The route of /mcp (docs/design/mcp-tools.md#mcp-streamable-http): the headers checked (Origin,
 * Accept, MCP-Protocol-Version, Mcp-Session-Id), the body read and parsed (mcp/proto.c), then one
 * call into the MCP server's engine (mcp/session.c: sessions, tool calls, streams); and GET
 * /v1/mcp/servers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "audit/chain.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/runner.h"
#include "mcp/proto.h"
#include "mcp/session.h"
#include "mcp/upstream.h"

/* What the audit trail keeps of a JSON-RPC message (docs/design/audit.md):
 * the method, the tool, a file tool's path and content hash, the session's
 * first 8 characters; never the whole arguments (a file's content). */
static json_t *mcp_audit(const struct mcp_msg *m, const char *sid)
{
	char sess[9] = "";
	if (sid)
		snprintf(sess, sizeof(sess), "%s", sid);
	json_t *a = m->arguments;
	const char *path = json_string_value(json_object_get(a, "path"));
	json_t *ev = json_pack("{s:s*,s:s*,s:s*,s:s*}", "method", m->method, "tool", m->tool,
			       "path", path, "session", sid ? sess : NULL);
	const char *content = json_string_value(json_object_get(a, "content"));
	if (content) {
		char h[AUDIT_HASH_HEX];
		size_t n = json_string_length(json_object_get(a, "content"));
		auditchain_hash(content, n, h);
		json_object_set_new(ev, "bytes", json_integer((json_int_t)n));
		json_object_set_new(ev, "sha256", json_string(h));
	}
	return ev;
}

static enum MHD_Result do_post(struct http_req *req, struct mcp_req *q)
{
	if (q->too_big)
		return mcp_answer_error(req, 413, NULL, MCP_INVALID_REQUEST,
					"message over %llu bytes (--mcp-max-body)",
					(unsigned long long)req->r->cfg.mcp_max_body);
	bool json_ok, sse_ok;
	mcp_accept(http_header(req, "Accept"), &json_ok, &sse_ok);
	if (!json_ok && !sse_ok)
		return mcp_answer_error(req, 406, NULL, MCP_INVALID_REQUEST,
					"Not Acceptable: Accept must include application/json or "
					"text/event-stream");
	struct mcp_msg m;
	int code;
	char msg[256];
	if (mcp_parse(q->body.data ? q->body.data : "", q->body.len, &m, &code, msg, sizeof(msg)) <
	    0) {
		/* Not a JSON-RPC message (not JSON, not one object of the JSON-RPC shape, a
		 * batch), or a notification that cannot be taken (it gets no response): the
		 * transport cannot accept it, 400 (Streamable HTTP). Bad params of a well-formed
		 * request are that request's error response. */
		bool refused = code == MCP_PARSE_ERROR || code == MCP_INVALID_REQUEST ||
			       m.kind != MCP_REQUEST;
		enum MHD_Result res =
			mcp_answer(req, refused ? 400 : 200, mcp_error(m.id, code, msg), NULL);
		mcp_msg_free(&m);
		return res;
	}
	const char *hv = http_header(req, "MCP-Protocol-Version");
	const char *sid = http_header(req, "Mcp-Session-Id");
	bool stateless = hv && !strcmp(hv, MCP_STATELESS_VERSION);
	enum MHD_Result res;
	if (hv && !stateless && !mcp_version_known(hv)) {
		res = mcp_answer_error(req, 400, m.id, MCP_INVALID_REQUEST,
				       "Bad Request: unsupported MCP-Protocol-Version %.40s (this "
				       "server: 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26)",
				       hv);
	} else if (stateless) {
		if (m.meta_version && strcmp(m.meta_version, MCP_STATELESS_VERSION))
			res = mcp_answer_error(
				req, 400, m.id, MCP_INVALID_REQUEST,
				"Bad Request: _meta protocolVersion %.40s differs from "
				"the MCP-Protocol-Version header",
				m.meta_version);
		else
			res = mcp_dispatch(req, &m, NULL, true, sse_ok);
	} else if (m.kind == MCP_REQUEST && !strcmp(m.method, "initialize")) {
		res = sid ? mcp_answer_error(req, 400, m.id, MCP_INVALID_REQUEST,
					     "Bad Request: initialize inside a session")
			  : mcp_initialize(req, &m);
	} else if (!sid) {
		res = mcp_answer_error(req, 400, m.id, MCP_INVALID_REQUEST,
				       "Bad Request: Mcp-Session-Id header is required (initialize "
				       "first, or send MCP-Protocol-Version: 2026-07-28)");
	} else {
		struct mcp_session *s = mcp_session_find(req->r, sid);
		res = s ? mcp_dispatch(req, &m, s, false, sse_ok)
			: mcp_answer_error(req, 404, m.id, MCP_SERVER_ERROR, "Session not found");
	}
	http_audit_note(req, mcp_audit(&m, sid));
	mcp_msg_free(&m);
	return res;
}

/* The request's session (GET, DELETE), or NULL once answered (400 without one, 404 unknown). */
static struct mcp_session *req_session(struct http_req *req, enum MHD_Result *res)
{
	const char *sid = http_header(req, "Mcp-Session-Id");
	struct mcp_session *s = sid ? mcp_session_find(req->r, sid) : NULL;
	if (!sid)
		*res = mcp_answer_error(req, 400, NULL, MCP_INVALID_REQUEST,
					"Bad Request: Mcp-Session-Id header is required");
	else if (!s)
		*res = mcp_answer_error(req, 404, NULL, MCP_SERVER_ERROR, "Session not found");
	return s;
}

static enum MHD_Result do_get(struct http_req *req)
{
	const char *hv = http_header(req, "MCP-Protocol-Version");
	if (hv && !strcmp(hv, MCP_STATELESS_VERSION))
		return mcp_answer_error(
			req, 405, NULL, MCP_SERVER_ERROR,
			"Method Not Allowed: the 2026-07-28 revision has no GET stream");
	bool json_ok, sse_ok;
	mcp_accept(http_header(req, "Accept"), &json_ok, &sse_ok);
	if (!sse_ok)
		return mcp_answer_error(req, 406, NULL, MCP_INVALID_REQUEST,
					"Not Acceptable: GET /mcp is an event stream");
	enum MHD_Result res;
	struct mcp_session *s = req_session(req, &res);
	if (!s)
		return res;
	return mcp_session_stream(req, s);
}

static enum MHD_Result do_delete(struct http_req *req)
{
	enum MHD_Result res;
	struct mcp_session *s = req_session(req, &res);
	if (!s)
		return res;
	mcp_session_end(req->r, s);
	return http_empty(req, 200);
}

enum MHD_Result api_mcp_body(struct http_req *req, const char *data, size_t len)
{
	struct mcp_req *q = mcp_req_of(req);
	if (!q)
		return MHD_NO;
	if (q->too_big || q->body.len + len > req->r->cfg.mcp_max_body) {
		q->too_big = true; /* the rest is read and dropped; answered once it is in */
		return MHD_YES;
	}
	return buf_append(&q->body, data, len) == 0 ? MHD_YES : MHD_NO;
}

enum MHD_Result api_mcp(struct http_req *req)
{
	enum MHD_Result res;
	if (mcp_req_resumed(req, &res))
		return res;
	const char *origin = http_header(req, "Origin");
	if (!mcp_origin_allowed(origin, req->r->cfg.mcp_allowed_origins)) {
		log_warn("mcp request from a foreign origin refused", "{s:s}", "origin", origin);
		return mcp_answer_error(
			req, 403, NULL, MCP_SERVER_ERROR,
			"Forbidden: Origin %.200s is not allowed (--mcp-allowed-origins)", origin);
	}
	if (!strcmp(req->method, "POST")) {
		struct mcp_req *q = mcp_req_of(req);
		return q ? do_post(req, q) : MHD_NO;
	}
	if (!strcmp(req->method, "GET"))
		return do_get(req);
	if (!strcmp(req->method, "DELETE"))
		return do_delete(req);
	return mcp_answer_error(req, 405, NULL, MCP_SERVER_ERROR,
				"Method Not Allowed: /mcp takes POST, GET and DELETE");
}

enum MHD_Result api_mcp_servers(struct http_req *req)
{
	return http_json(req, 200, json_pack("{s:o}", "servers", mcp_upstream_report(req->r)));
}
