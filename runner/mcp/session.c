/* /mcp: the box as an MCP server over Streamable HTTP, its engine: the sessions, the tool calls
 * that run on and their streams (the route: api/mcp.c; the revisions, stateless and in
 * sessions: docs/design/mcp-tools.md#mcp-streamable-http). The tools are the tool layer's
 * (tools/tools.h); messages are parsed by mcp/proto.c (pure, fuzzed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/randomid.h"
#include "core/version.h"
#include "core/list.h"
#include "http/sse.h"
#include "mcp/proto.h"
#include "mcp/session.h"
#include "mcp/upstream.h"
#include "tools/tools.h"

#define MCP_SESSION_IDLE_MS (3600 * 1000ULL) /* an idle session may be evicted after this */
/* A call's events waiting for its client: past this the command's output waits in its spool
 * and the spool's backpressure pauses the command (design/mcp-tools.md#mcp-streamable-http), as a
 * native stream does. */
#define MCP_STREAM_WINDOW (64 * 1024)
/* A GET stream's events waiting for its client: more list_changed would tell it nothing new. */
#define MCP_GSTREAM_WINDOW (4 * 1024)

struct mcp_session;

/* A tool call that runs on: answered on a streamed response (hs), an SSE stream (progress,
 * then the response) or, for a client that takes only JSON, the response as one JSON body
 * written when it is there. */
struct mcp_call {
	struct http_stream hs; /* first: the stream's view */
	struct runner *r;
	struct mcp_session *sess; /* NULL: stateless, or its session ended */
	json_t *id, *progress_token;
	struct tool_call *tc;
	struct mcp_up_call *uc; /* a tool of a stdio server behind /mcp (mcp/upstream.h) */
	uint64_t progress;
	bool stateless;
	bool sse;     /* an event stream, else one JSON body */
	bool counted; /* in the table's in-flight count */
	struct mcp_call *next, *prev;
};

/* A session's GET stream: server notifications (tools/list_changed). */
struct mcp_gstream {
	struct http_stream hs;
	struct mcp_session *sess;
	struct mcp_gstream *next, *prev;
};

struct mcp_session {
	char id[33];
	char version[16];
	uint64_t last_used_ms;
	struct mcp_call *calls;
	struct mcp_gstream *gets;
	struct mcp_session *next, *prev;
};

struct mcp_table {
	struct mcp_session *sessions;
	unsigned n_sessions;
	unsigned inflight;
	struct mcp_call *loose; /* calls without a session (stateless) */
};

static struct mcp_table *table(struct runner *r)
{
	if (!r->mcp)
		r->mcp = calloc(1, sizeof(*r->mcp));
	return r->mcp;
}

/* ---- answers ---- */

enum MHD_Result mcp_answer(struct http_req *req, unsigned status, json_t *msg, const char *sid)
{
	struct MHD_Response *resp = http_json_response(msg);
	if (resp && sid)
		MHD_add_response_header(resp, "Mcp-Session-Id", sid);
	return http_queue(req, status, resp);
}

enum MHD_Result mcp_answer_error(struct http_req *req, unsigned status, json_t *id, int code,
				 const char *fmt, ...)
{
	char m[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	return mcp_answer(req, status, mcp_error(id, code, m), NULL);
}

static void put_message(struct http_stream *hs, json_t *msg)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	if (s) {
		sse_event(&hs->out, SSE_NO_ID, "message", s, strlen(s));
		free(s);
	}
	http_stream_wake(hs);
}

/* ---- sessions ---- */

struct mcp_session *mcp_session_find(struct runner *r, const char *sid)
{
	struct mcp_table *t = table(r);
	for (struct mcp_session *s = t ? t->sessions : NULL; s; s = s->next)
		if (secret_equal(s->id, sid))
			return s;
	return NULL;
}

static void call_unlink(struct mcp_call *c)
{
	struct mcp_table *t = c->r->mcp;
	if (c->counted && t) {
		t->inflight--;
		c->counted = false;
	}
	struct mcp_call **head = c->sess ? &c->sess->calls : t ? &t->loose : NULL;
	if (!head)
		return;
	LIST_UNLINK(*head, c);
	c->sess = NULL;
}

static void call_link(struct mcp_call *c, struct mcp_session *s)
{
	struct mcp_table *t = c->r->mcp;
	c->sess = s;
	struct mcp_call **head = s ? &s->calls : &t->loose;
	LIST_PUSH(*head, c);
	t->inflight++;
	c->counted = true;
}

/* The call ends without its result (cancelled, session ended): the tool's work stops. */
static void call_abort(struct mcp_call *c, const char *why)
{
	if (c->tc) {
		tool_call_cancel(c->tc);
		c->tc = NULL;
	}
	if (c->uc) {
		mcp_upstream_cancel(c->uc);
		c->uc = NULL;
	}
	call_unlink(c);
	if (!c->sse) {
		/* A JSON body is owed all the same. */
		json_t *e = mcp_error(c->id, MCP_SERVER_ERROR, why);
		char *t = e ? json_dumps(e, JSON_COMPACT) : NULL;
		if (t)
			buf_append_str(&c->hs.out, t);
		free(t);
		json_decref(e);
	}
	c->hs.done = true; /* a cancelled request gets no response on its event stream (MCP) */
	http_stream_wake(&c->hs);
}

static void session_free(struct runner *r, struct mcp_session *s)
{
	struct mcp_table *t = r->mcp;
	while (s->calls)
		call_abort(s->calls, "the session ended");
	for (struct mcp_gstream *g = s->gets, *n; g; g = n) {
		n = g->next;
		g->sess = NULL;
		g->next = g->prev = NULL;
		g->hs.done = true;
		http_stream_wake(&g->hs);
	}
	LIST_UNLINK(t->sessions, s);
	t->n_sessions--;
	log_info("mcp session ended", "{s:s}", "session", s->id);
	free(s);
}

static struct mcp_session *session_new(struct runner *r, const char *version)
{
	struct mcp_table *t = table(r);
	if (!t)
		return NULL;
	if (t->n_sessions >= r->cfg.mcp_max_sessions) {
		/* Make room from the longest idle one with nothing open, if any is old enough. */
		struct mcp_session *old = NULL;
		for (struct mcp_session *s = t->sessions; s; s = s->next)
			if (!s->calls && !s->gets && (!old || s->last_used_ms < old->last_used_ms))
				old = s;
		if (!old || monotonic_ms() - old->last_used_ms < MCP_SESSION_IDLE_MS)
			return NULL;
		session_free(r, old);
	}
	struct mcp_session *s = calloc(1, sizeof(*s));
	if (!s || random_id(s->id) < 0) {
		free(s);
		return NULL;
	}
	snprintf(s->version, sizeof(s->version), "%s", version);
	s->last_used_ms = monotonic_ms();
	LIST_PUSH(t->sessions, s);
	t->n_sessions++;
	log_info("mcp session started", "{s:s,s:s}", "session", s->id, "version", version);
	return s;
}

void mcp_end_sessions(struct runner *r)
{
	struct mcp_table *t = r->mcp;
	while (t && t->sessions)
		session_free(r, t->sessions);
}

void mcp_free_all(struct runner *r)
{
	struct mcp_table *t = r->mcp;
	if (!t)
		return;
	while (t->sessions)
		session_free(r, t->sessions);
	while (t->loose)
		call_abort(t->loose, "the runner is stopping");
	free(t);
	r->mcp = NULL;
}

/* ---- streams ---- */

static void call_free(struct mcp_call *c)
{
	if (c->tc)
		tool_call_cancel(c->tc);
	if (c->uc)
		mcp_upstream_cancel(c->uc);
	call_unlink(c);
	json_decref(c->id);
	json_decref(c->progress_token);
	free(c);
}

static void stream_produce(struct http_stream *hs)
{
	(void)hs; /* events are put in hs->out as they happen */
}

/* The client took what waited: a command held back by the window reads on. This may
 * finish the call (on_done), which only appends to hs->out. */
static void call_produce(struct http_stream *hs)
{
	struct mcp_call *c = (struct mcp_call *)hs;
	if (c->tc && buf_avail(&hs->out) < MCP_STREAM_WINDOW)
		tool_call_resume(c->tc);
}

static void call_stream_close(struct http_stream *hs)
{
	/* The client closed the stream: a cancel (MCP), the command's tree is killed. */
	call_free((struct mcp_call *)hs);
}

/* A call's keep-alive (http/sse.h's policy): an SSE comment, or white space before a JSON
 * body (JSON allows it). */
static const struct http_stream_ops call_sse_ops = {.produce = call_produce,
						    .close = call_stream_close,
						    .keepalive_ms = SSE_KEEPALIVE_CALL_MS,
						    .keepalive = SSE_KEEPALIVE};
static const struct http_stream_ops call_json_ops = {.produce = call_produce,
						     .close = call_stream_close,
						     .keepalive_ms = SSE_KEEPALIVE_CALL_MS,
						     .keepalive = "\n"};

static void gstream_close(struct http_stream *hs)
{
	struct mcp_gstream *g = (struct mcp_gstream *)hs;
	if (g->sess) {
		LIST_UNLINK(g->sess->gets, g);
	}
	free(g);
}

static const struct http_stream_ops gstream_ops = {.produce = stream_produce,
						   .close = gstream_close,
						   .keepalive_ms = SSE_KEEPALIVE_MS,
						   .keepalive = SSE_KEEPALIVE};

/* ---- tools/call ---- */

static json_t *call_result(struct tool_result *res, bool stateless)
{
	json_t *content = json_array();
	json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text",
						 tool_json_text(res->text.data, res->text.len)));
	json_t *o = json_pack("{s:o,s:b}", "content", content, "isError", res->is_error);
	if (res->structured)
		json_object_set(o, "structuredContent", res->structured);
	if (stateless)
		json_object_set_new(o, "resultType", json_string("complete"));
	return o;
}

static void on_output(void *arg, int stream, const char *p, size_t n)
{
	(void)stream;
	struct mcp_call *c = arg;
	if (!c->progress_token || !c->sse || !n)
		return;
	c->progress += n;
	json_t *note =
		json_pack("{s:s,s:s,s:{s:O,s:I,s:o}}", "jsonrpc", "2.0", "method",
			  "notifications/progress", "params", "progressToken", c->progress_token,
			  "progress", (json_int_t)c->progress, "message", tool_json_text(p, n));
	if (note)
		put_message(&c->hs, note);
	json_decref(note);
}

/* Output is taken only while the call's events fit in the window (tools.h: room). */
static bool on_room(void *arg)
{
	struct mcp_call *c = arg;
	return !c->progress_token || !c->sse || buf_avail(&c->hs.out) < MCP_STREAM_WINDOW;
}

static void call_answered(struct mcp_call *c, json_t *msg)
{
	call_unlink(c);
	if (c->sse) {
		put_message(&c->hs, msg);
	} else {
		char *t = json_dumps(msg, JSON_COMPACT);
		if (t)
			buf_append_str(&c->hs.out, t);
		free(t);
	}
	json_decref(msg);
	c->hs.done = true;
	http_stream_wake(&c->hs);
}

static void on_done(void *arg, struct tool_result *res)
{
	struct mcp_call *c = arg;
	c->tc = NULL;
	json_t *msg = mcp_result(c->id, call_result(res, c->stateless));
	tool_result_free(res);
	call_answered(c, msg);
}

static const struct tool_call_ops mcp_tool_ops = {.output = on_output,
						  .done = on_done,
						  .room = on_room};

/* A stdio server's answer: its result as it gave it, or an isError result saying why not. */
static void on_upstream_done(void *arg, json_t *result, const char *error)
{
	struct mcp_call *c = arg;
	c->uc = NULL;
	json_t *r;
	if (result) {
		r = json_deep_copy(result);
	} else {
		r = json_pack("{s:[{s:s,s:s}],s:b}", "content", "type", "text", "text",
			      error ? error : "the server failed", "isError", 1);
	}
	if (c->stateless)
		json_object_set_new(r, "resultType", json_string("complete"));
	call_answered(c, mcp_result(c->id, r));
}

static void mcp_req_free(struct http_req *req)
{
	struct mcp_req *q = req->ctx;
	if (!q)
		return;
	mcp_upstream_unwait(req->r, &q->w);
	json_decref(q->list_id);
	buf_free(&q->body);
	free(q);
	req->ctx = NULL;
}

static enum MHD_Result tools_call(struct http_req *req, struct mcp_msg *m, struct mcp_session *sess,
				  bool stateless, bool sse_ok)
{
	struct runner *r = req->r;
	bool upstream = !tools_known(m->tool) && mcp_upstream_has(r, m->tool);
	if (!tools_known(m->tool) && !upstream)
		return mcp_answer_error(req, 200, m->id, MCP_INVALID_PARAMS,
					"Unknown tool '%.128s' (tools/list lists the tools)",
					m->tool);
	struct mcp_table *t = table(r);
	if (!t)
		return MHD_NO;
	if (t->inflight >= r->cfg.mcp_max_inflight)
		return mcp_answer_error(
			req, 429, m->id, MCP_SERVER_ERROR,
			"too many tool calls in flight (limit %u, --mcp-max-inflight)",
			r->cfg.mcp_max_inflight);
	struct mcp_call *c = calloc(1, sizeof(*c));
	if (!c)
		return MHD_NO;
	c->r = r;
	c->id = json_incref(m->id);
	c->progress_token = json_incref(m->progress_token);
	c->stateless = stateless;
	c->sse = sse_ok;
	struct tool_ctx ctx = {0};
	struct tool_result res;
	int rc;
	if (upstream) {
		char msg[400];
		c->uc = mcp_upstream_call(r, m->tool, m->arguments, on_upstream_done, c, msg,
					  sizeof(msg));
		if (!c->uc) {
			memset(&res, 0, sizeof(res));
			tool_result_fail(&res, "%s", msg);
			rc = 0;
		} else {
			rc = 1;
		}
	} else {
		rc = tool_call_start(r, m->tool, m->arguments, &ctx, &mcp_tool_ops, c, &c->tc,
				     &res);
	}
	if (rc == 0) {
		json_t *msg = mcp_result(m->id, call_result(&res, stateless));
		tool_result_free(&res);
		call_free(c);
		return mcp_answer(req, 200, msg, NULL);
	}
	call_link(c, sess);
	return http_stream_start(req, &c->hs, c->sse ? &call_sse_ops : &call_json_ops,
				 c->sse ? SSE_CONTENT_TYPE : "application/json");
}

/* ---- requests ---- */

static json_t *server_info(void)
{
	return json_pack("{s:s,s:s,s:s}", "name", "forceai-runner", "title",
			 "forceai-runner sandbox box", "version", FORCEAI_RUNNER_VERSION);
}

static json_t *capabilities(void)
{
	return json_pack("{s:{s:b}}", "tools", "listChanged", 1);
}

/* The runner's tools, then those of the stdio servers that are ready. */
static json_t *tools_result(struct runner *r)
{
	json_t *all = tools_list();
	json_t *up = mcp_upstream_tools(r);
	json_array_extend(all, up);
	json_decref(up);
	return json_pack("{s:o}", "tools", all);
}

static void list_ready(struct mcp_up_waiter *w)
{
	struct mcp_req *q = (struct mcp_req *)((char *)w - offsetof(struct mcp_req, w));
	q->list_ready = true;
	http_req_resume(q->req);
}

/* tools/list while stdio servers start: answered once they are ready or failed. */
static enum MHD_Result list_wait(struct http_req *req, struct mcp_msg *m, bool stateless)
{
	struct mcp_req *q = req->ctx;
	q->listing = true;
	q->list_id = json_incref(m->id);
	q->list_stateless = stateless;
	q->req = req;
	q->w.ready = list_ready;
	mcp_upstream_wait(req->r, &q->w);
	http_req_suspend(req);
	return MHD_YES;
}

static const char INSTRUCTIONS[] =
	"Tools that act inside an isolated sandbox box: run_command runs a shell command "
	"confined as the task user; read_file, write_file, edit_file, list_directory, "
	"search_files and grep work on its files under the same rules.";

enum MHD_Result mcp_dispatch(struct http_req *req, struct mcp_msg *m, struct mcp_session *sess,
			     bool stateless, bool sse_ok)
{
	if (sess)
		sess->last_used_ms = monotonic_ms();
	if (m->kind == MCP_RESPONSE)
		return http_empty(req, 202);
	if (m->kind == MCP_NOTIFICATION) {
		if (!strcmp(m->method, "notifications/cancelled") && m->cancel_id) {
			struct mcp_table *t = table(req->r);
			struct mcp_call *c = sess ? sess->calls : t ? t->loose : NULL;
			for (; c; c = c->next)
				if (json_equal(c->id, m->cancel_id)) {
					log_info("mcp request cancelled", "{s:s}", "session",
						 sess ? sess->id : "");
					call_abort(c, "cancelled");
					break;
				}
		}
		return http_empty(req, 202);
	}
	json_t *result;
	const char *method = m->method;
	if (!strcmp(method, "ping")) {
		result = json_object();
	} else if (!strcmp(method, "tools/list")) {
		if (req->r->mcp_upstream && mcp_upstream_start_all(req->r))
			return list_wait(req, m, stateless);
		result = tools_result(req->r);
	} else if (!strcmp(method, "tools/call")) {
		return tools_call(req, m, sess, stateless, sse_ok);
	} else if (!strcmp(method, "server/discover")) {
		result = json_pack("{s:[s,s,s,s],s:o,s:o,s:s}", "supportedVersions",
				   MCP_STATELESS_VERSION, "2025-11-25", "2025-06-18", "2025-03-26",
				   "capabilities", capabilities(), "serverInfo", server_info(),
				   "instructions", INSTRUCTIONS);
	} else if (!strcmp(method, "initialize")) {
		return mcp_answer(
			req, 400,
			mcp_error(m->id, MCP_INVALID_REQUEST,
				  stateless ? "initialize is not part of the 2026-07-28 revision: "
					      "send requests directly (server/discover)"
					    : "this session is initialized already"),
			NULL);
	} else {
		return mcp_answer(req, 200,
				  mcp_error(m->id, MCP_METHOD_NOT_FOUND, "Method not found"), NULL);
	}
	if (stateless)
		json_object_set_new(result, "resultType", json_string("complete"));
	return mcp_answer(req, 200, mcp_result(m->id, result), NULL);
}

enum MHD_Result mcp_initialize(struct http_req *req, struct mcp_msg *m)
{
	const char *version = mcp_negotiate(m->protocol_version);
	struct mcp_session *s = session_new(req->r, version);
	if (!s)
		return mcp_answer_error(
			req, 503, m->id, MCP_SERVER_ERROR,
			"too many MCP sessions (limit %u, --mcp-max-sessions): end one "
			"with DELETE /mcp",
			req->r->cfg.mcp_max_sessions);
	json_t *result = json_pack("{s:s,s:o,s:o,s:s}", "protocolVersion", version, "capabilities",
				   capabilities(), "serverInfo", server_info(), "instructions",
				   INSTRUCTIONS);
	return mcp_answer(req, 200, mcp_result(m->id, result), s->id);
}

void mcp_notify_tools_changed(struct runner *r)
{
	struct mcp_table *t = r->mcp;
	json_t *note = json_pack("{s:s,s:s}", "jsonrpc", "2.0", "method",
				 "notifications/tools/list_changed");
	for (struct mcp_session *s = t ? t->sessions : NULL; s; s = s->next)
		for (struct mcp_gstream *g = s->gets; g; g = g->next)
			/* A client that has not taken the last ones has a list_changed waiting
			 * already (keep-alives go only to an empty queue): it refetches once. */
			if (buf_avail(&g->hs.out) < MCP_GSTREAM_WINDOW)
				put_message(&g->hs, note);
	json_decref(note);
}

/* ---- what the route asks ---- */

struct mcp_req *mcp_req_of(struct http_req *req)
{
	struct mcp_req *q = req->ctx;
	if (!q) {
		if (!(q = calloc(1, sizeof(*q))))
			return NULL;
		req->ctx = q;
		req->ctx_free = mcp_req_free;
	}
	return q;
}

bool mcp_req_resumed(struct http_req *req, enum MHD_Result *res)
{
	struct mcp_req *q = req->ctx;
	if (!q || !q->listing)
		return false;
	/* Resumed: the stdio servers settled (or the runner stops). */
	q->listing = false;
	mcp_upstream_unwait(req->r, &q->w);
	json_t *result = tools_result(req->r);
	if (q->list_stateless)
		json_object_set_new(result, "resultType", json_string("complete"));
	*res = mcp_answer(req, 200, mcp_result(q->list_id, result), NULL);
	return true;
}

enum MHD_Result mcp_session_stream(struct http_req *req, struct mcp_session *s)
{
	struct mcp_gstream *g = calloc(1, sizeof(*g));
	if (!g)
		return MHD_NO;
	g->sess = s;
	LIST_PUSH(s->gets, g);
	s->last_used_ms = monotonic_ms();
	return http_stream_start(req, &g->hs, &gstream_ops, SSE_CONTENT_TYPE);
}

void mcp_session_end(struct runner *r, struct mcp_session *s)
{
	session_free(r, s);
}
