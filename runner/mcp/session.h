/* The box as an MCP server (mcp/session.c): sessions, tool calls that run on
 * (answered as SSE or one JSON body), the sessions' GET streams. The route
 * (api/mcp.c) reads the request, checks its headers and calls these. */
#pragma once
#include <stdbool.h>
#include <jansson.h>

#include "core/buf.h"
#include "http/http.h"
#include "mcp/proto.h"
#include "mcp/upstream.h"

struct runner;
struct mcp_session;

/* Per request (req->ctx): the body as it arrives, and a tools/list that waits. */
struct mcp_req {
	struct buf body;
	bool too_big;
	/* tools/list waiting for stdio servers that are starting */
	struct mcp_up_waiter w;
	struct http_req *req;
	json_t *list_id;
	bool listing, list_ready, list_stateless;
};
/* req's mcp_req, made on first use; NULL when out of memory. */
struct mcp_req *mcp_req_of(struct http_req *req);
/* A tools/list that waited for the stdio servers is answered now (true, *res set). */
bool mcp_req_resumed(struct http_req *req, enum MHD_Result *res);

/* A JSON-RPC message as the answer (Mcp-Session-Id added when sid is given). */
enum MHD_Result mcp_answer(struct http_req *req, unsigned status, json_t *msg, const char *sid);
/* A JSON-RPC error (id may be NULL) as the answer. */
enum MHD_Result mcp_answer_error(struct http_req *req, unsigned status, json_t *id, int code,
				 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The session whose id is sid (compared in constant time), or NULL. */
struct mcp_session *mcp_session_find(struct runner *r, const char *sid);
/* initialize: a new session (an idle one may be evicted at the limit), or 503. */
enum MHD_Result mcp_initialize(struct http_req *req, struct mcp_msg *m);
/* One parsed message of a session (sess), or of the stateless revision (sess NULL). */
enum MHD_Result mcp_dispatch(struct http_req *req, struct mcp_msg *m, struct mcp_session *sess,
			     bool stateless, bool sse_ok);
/* GET /mcp: the session's stream of server notifications. */
enum MHD_Result mcp_session_stream(struct http_req *req, struct mcp_session *s);
/* DELETE /mcp: the session's calls are cancelled, its streams end. */
void mcp_session_end(struct runner *r, struct mcp_session *s);

/* notifications/tools/list_changed to every session's open GET stream. */
void mcp_notify_tools_changed(struct runner *r);
/* End every MCP session (a reset: they were the previous tenant's). */
void mcp_end_sessions(struct runner *r);
/* End every session and call (shutdown, after http_stop). */
void mcp_free_all(struct runner *r);
