/* The API server: one libmicrohttpd daemon (http/server.c) serving the
 * route table it is given, with auth, framing checks and request bodies. */
#include "http/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "audit/trail.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "http/peer.h"
#include "core/list.h"
#include "http/gate.h"
#include "http/internal.h"

/* Does path match pattern? Captures the '*' segment into out; a final
 * "**" matches the rest (even nothing). */
static bool match(const char *pattern, const char *path, char *out, size_t outlen)
{
	while (*pattern && *path) {
		if (pattern[0] == '*' && pattern[1] == '*')
			return true;
		if (*pattern == '*') {
			size_t n = strcspn(path, "/");
			if (n == 0 || n >= outlen)
				return false;
			memcpy(out, path, n);
			out[n] = 0;
			path += n;
			pattern++;
			continue;
		}
		if (*pattern != *path)
			return false;
		pattern++;
		path++;
	}
	return (*pattern == 0 || !strcmp(pattern, "**")) && *path == 0;
}

json_t *http_public_routes(struct runner *r)
{
	json_t *list = json_array();
	const struct http_server *h = r->http;
	for (size_t i = 0; list && h && i < h->n_routes; i++)
		if (h->routes[i].public)
			json_array_append_new(list, json_sprintf("%s %s", h->routes[i].method,
								 h->routes[i].pattern));
	return list;
}

static bool authorized(struct http_req *req)
{
	struct runner *r = req->r;
	if (!r->cfg.token && !r->auth_hash_set)
		return true;
	const char *got = http_header(req, "X-EXECD-ACCESS-TOKEN");
	/* MCP clients are configured with a bearer token: the same token, on /mcp only (the
	 * port proxy forwards Authorization to the app behind it, so it is not the runner's
	 * there). */
	const char *auth = http_header(req, "Authorization");
	if (!got && req->route && req->route->token_header)
		got = http_header(req, req->route->token_header);
	if (!got && auth && !strcmp(req->path, "/mcp") && !strncasecmp(auth, "Bearer ", 7))
		got = auth + 7 + strspn(auth + 7, " ");
	if (!got || !http_token_ok(r, got))
		return false;
	/* Kept for the doors that forward (http_field_carries_token). */
	req->auth_token = got;
	return true;
}

/* execd's clients read "error" as well as {code, message}. An MCP client
 * reads a JSON-RPC error (id null: the request was not read), and is told
 * both places its token may go. */
static enum MHD_Result unauthorized(struct http_req *req)
{
	struct error e;
	if (!strcmp(req->path, "/mcp"))
		return http_json(
			req, 401,
			json_pack(
				"{s:s,s:n,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", "error", "code",
				-32000, "message",
				"Unauthorized: invalid or missing token; send the runner's access "
				"token as 'Authorization: Bearer TOKEN' or "
				"'X-EXECD-ACCESS-TOKEN: TOKEN'"));
	error_set(&e, 0, "UNAUTHORIZED", "invalid or missing header X-EXECD-ACCESS-TOKEN");
	json_t *body = http_error_body(&e);
	json_object_set_new(body, "error", json_sprintf("Unauthorized: %s", e.msg));
	return http_json(req, error_http_status(&e), body);
}

/* libmicrohttpd's first look at a request: the raw request target, kept for
 * the routes that must see the query exactly as sent, or the whole target
 * (the port proxy forwards it undecoded). Returns the request state (the
 * connection's con_cls). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	(void)cls;
	(void)conn;
	struct http_req *req = calloc(1, sizeof(*req));
	const char *q = uri ? strchr(uri, '?') : NULL;
	if (req && q)
		req->raw_query = strdup(q + 1);
	if (req && uri)
		req->raw_target = strdup(uri);
	return req;
}

static void client_addr(struct http_req *req)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	sockaddr_text(ci ? ci->client_addr : NULL, req->client, sizeof(req->client));
}

/* A handler runs: what it causes deeper down (a task) names this client. */
static enum MHD_Result run_handler(struct http_req *req, http_route_fn fn)
{
	audit_set_client(req->r, req->client);
	enum MHD_Result rc = fn(req);
	audit_set_client(req->r, NULL);
	return rc;
}

static const char *outcome_of(unsigned status)
{
	if (!status)
		return "abandoned";
	if (status < 400)
		return "ok";
	if (status == 401 || status == 403 || status == 429)
		return "refused";
	return status < 500 ? "invalid" : "failed";
}

/* The fields of a request's event by hand, for the common case: nothing
 * noted but the byte counts and every string plain (audit_str_plain). The
 * bytes are those json_pack + json_dumps write below, key for key (a JSON
 * object per request was most of the trail's cost on the port proxy's small
 * requests, docs/design/audit.md#on-by-default-the-test-only-switch-what-is-not-done); false: the
 * general way. */
static bool audit_request_text(struct http_req *req, const char *source, const char *door,
			       const char *what, const char *target, bool completed)
{
	const char *outcome = outcome_of(req->status);
	if (req->audit || !audit_str_plain(req->client) || (target && !audit_str_plain(target)) ||
	    (req->err_code && !audit_str_plain(req->err_code)))
		return false;
	/* One buffer for every event (the loop is single-threaded): no
	 * allocation per request once it has grown to the largest. */
	static struct buf b;
	buf_reset(&b);
	uint64_t in = req->audit_bytes ? req->audit_bytes_in : req->body_len;
	/* json_int_t is signed: a count that would not fit goes the general way. */
	if (in > INT64_MAX || (req->audit_bytes && req->audit_bytes_out > INT64_MAX) ||
	    req->status > INT_MAX)
		return false;
	int rc = 0;
	rc |= buf_append_lit(&b, "{\"who\":{\"client\":\"");
	rc |= buf_append_str(&b, req->client);
	rc |= buf_append_lit(&b, "\"},\"outcome\":\"");
	rc |= buf_append_str(&b, outcome);
	if (target) {
		rc |= buf_append_lit(&b, "\",\"target\":\"");
		rc |= buf_append_str(&b, target);
	}
	rc |= buf_append_lit(&b, "\",\"status\":");
	rc |= buf_append_u64(&b, req->status);
	if (req->err_code) {
		rc |= buf_append_lit(&b, ",\"code\":\"");
		rc |= buf_append_str(&b, req->err_code);
		rc |= buf_append_lit(&b, "\"");
	}
	rc |= buf_append_lit(&b, ",\"bytes_in\":");
	rc |= buf_append_u64(&b, in);
	rc |= buf_append_lit(&b, ",\"duration_us\":");
	rc |= buf_append_u64(&b, monotonic_us() - req->start_us);
	if (completed)
		rc |= buf_append_lit(&b, ",\"completed\":true");
	else
		rc |= buf_append_lit(&b, ",\"completed\":false");
	if (req->audit_bytes) {
		rc |= buf_append_lit(&b, ",\"bytes_out\":");
		rc |= buf_append_u64(&b, req->audit_bytes_out);
	}
	rc |= buf_append_lit(&b, "}");
	if (rc)
		return false;
	audit_emit_text(req->r, source, door, what, b.data, b.len, NULL);
	return true;
}

/* The one audit event of a request through the API (docs/design/audit.md):
 * its door, who, what, the answer, and what its handler noted. */
static void audit_request(struct http_req *req, enum MHD_RequestTerminationCode toe)
{
	const struct http_hooks *hk = req->r->http ? req->r->http->hooks : NULL;
	const char *door = hk && hk->audit_door ? hk->audit_door(req->path) : NULL;
	if (!door || !audit_enabled(req->r)) {
		json_decref(req->audit);
		req->audit = NULL;
		return;
	}
	if (req->audit_end)
		req->audit_end(req);
	/* "METHOD PATTERN", cut to 255 bytes as snprintf would (no printf per request). */
	char what[256];
	const char *m = req->method ? req->method : "?";
	const char *pat = req->route ? req->route->pattern : req->path ? req->path : "?";
	size_t ml = strnlen(m, sizeof(what) - 1), pl = strnlen(pat, sizeof(what) - 1);
	memcpy(what, m, ml);
	if (ml < sizeof(what) - 1)
		what[ml++] = ' ';
	if (pl > sizeof(what) - 1 - ml)
		pl = sizeof(what) - 1 - ml;
	memcpy(what + ml, pat, pl);
	what[ml + pl] = 0;
	/* The proxied app's query is its own (it may hold its secrets). */
	const char *target = strcmp(door, "proxy") && req->raw_target ? req->raw_target : req->path;
	bool completed = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
	/* A request that did not prove the token is anyone's to repeat: bound
	 * per address, never taken from the client's share
	 * (design/audit.md#bounds-tasks-cannot-read-write-suppress-flood-or-crowd-it). */
	char source[64];
	const char *src = NULL;
	if (!req->authed) {
		snprintf(source, sizeof(source), "addr:%s", req->client);
		src = source;
	}
	if (audit_request_text(req, src, door, what, target, completed))
		return;
	json_t *ev =
		json_pack("{s:{s:s},s:s,s:s*,s:i,s:s*,s:I,s:I,s:b}", "who", "client", req->client,
			  "outcome", outcome_of(req->status), "target", target, "status",
			  (int)req->status, "code", req->err_code, "bytes_in",
			  (json_int_t)req->body_len, "duration_us",
			  (json_int_t)(monotonic_us() - req->start_us), "completed", completed);
	if (ev && req->audit)
		json_object_update(ev, req->audit);
	json_decref(req->audit);
	req->audit = NULL;
	/* The byte counts are the last note (audit_end runs last). */
	if (ev && req->audit_bytes) {
		json_object_set_new(ev, "bytes_in", json_integer((json_int_t)req->audit_bytes_in));
		json_object_set_new(ev, "bytes_out",
				    json_integer((json_int_t)req->audit_bytes_out));
	}
	audit_emit_from(req->r, src, door, what, ev);
}

static uint64_t request_gen(struct runner *r)
{
	const struct http_hooks *hk = r->http->hooks;
	return hk && hk->request_gen ? hk->request_gen(r) : 0;
}

/* The first call for a request: its head is in, none of its body has been read. */
static enum MHD_Result begin_request(struct runner *r, struct http_req *req,
				     const struct http_route *routes, size_t n_routes,
				     const char *url, const char *method)
{
	const char *problem = http_framing_problem(req->conn, method);
	if (problem)
		return http_framing_error(req, problem);
	const struct http_server *h = r->http;
	/* Re-dispatched here, in this request, never through a socket: the same handler,
	 * the same token check, nothing forwarded
	 * (design/build.md#what-opensandboxs-server-runtimes-expect-of-the-image). */
	const char *self = routes == h->routes && h->hooks && h->hooks->self_path
				   ? h->hooks->self_path(r, url)
				   : NULL;
	if (self)
		req->path = url = self;
	bool path_known = false;
	for (size_t i = 0; i < n_routes; i++) {
		const struct http_route *rt = &routes[i];
		if (!match(rt->pattern, url, req->param_buf, sizeof(req->param_buf)))
			continue;
		path_known = true;
		if (!strcmp(rt->method, method) || !strcmp(rt->method, "*")) {
			req->route = rt;
			req->param = req->param_buf;
			break;
		}
	}
	/* Asked of public routes too: the audit trail bounds the events of
	 * requests without the token apart from the client's. */
	req->authed = authorized(req);
	if (!(req->route && req->route->public) && !req->authed)
		return unauthorized(req);
	if (!req->route) {
		if (path_known)
			return http_failf(req, "METHOD_NOT_ALLOWED",
					  "method %.16s is not allowed on %.200s", method, url);
		return http_failf(req, "NOT_FOUND", "no route %.16s %.200s", method, url);
	}
	const char *cl = http_header(req, "Content-Length");
	if (cl && !req->route->body && strtoull(cl, NULL, 10) > r->cfg.max_body)
		return http_failf(req, "PAYLOAD_TOO_LARGE", "request body over %llu bytes",
				  (unsigned long long)r->cfg.max_body);
	struct error pe;
	if (h->hooks && h->hooks->request_blocked && h->hooks->request_blocked(r, method, url, &pe))
		return http_fail(req, &pe);
	req->gen = request_gen(r);
	if (req->route->start)
		return run_handler(req, req->route->start);
	return MHD_YES;
}

/* Bytes of a body nobody will read, dropped; past the drain bound
 * (design/wire.md#endpoint-and-http-layer) or when late, the connection is closed as libmicrohttpd
 * would have. */
static enum MHD_Result drain(struct http_req *req, size_t *upload_size, bool late)
{
	req->drained += *upload_size;
	*upload_size = 0;
	if (req->drained <= HTTP_DRAIN_MAX && !late)
		return MHD_YES;
	log_info("refused request body too long to drain: connection closed", "{s:I}", "bytes",
		 (json_int_t)req->drained);
	return MHD_NO;
}

/* A body for a route that takes it whole: appended to req->body, NUL-terminated. A body
 * without Content-Length (chunked) that grows too big is dropped and answered 413 once it
 * is in (libmicrohttpd takes a response only then). */
static enum MHD_Result buffer_body(struct http_req *req, const char *data, size_t *upload_size)
{
	if (req->body_too_big || req->body_len + *upload_size > req->r->cfg.max_body) {
		req->body_too_big = true;
		return drain(req, upload_size, false);
	}
	char *nb = realloc(req->body, req->body_len + *upload_size + 1);
	if (!nb)
		return MHD_NO;
	memcpy(nb + req->body_len, data, *upload_size);
	req->body = nb;
	req->body_len += *upload_size;
	req->body[req->body_len] = 0;
	*upload_size = 0;
	return MHD_YES;
}

/* The body of a request refused on its head, read and discarded; the refusal goes once it
 * is all in. Past the bound the connection is closed, as libmicrohttpd would have. */
static enum MHD_Result drain_refused(struct http_req *req, size_t *upload_size)
{
	if (!*upload_size) {
		struct MHD_Response *resp = req->deferred;
		req->deferred = NULL;
		enum MHD_Result rc = MHD_queue_response(req->conn, req->deferred_status, resp);
		MHD_destroy_response(resp);
		return rc;
	}
	return drain(req, upload_size, monotonic_ms() - req->drain_start_ms > HTTP_DRAIN_MS);
}

static enum MHD_Result handle(struct runner *r, const struct http_route *routes, size_t n_routes,
			      struct MHD_Connection *conn, const char *url, const char *method,
			      const char *upload_data, size_t *upload_size, void **con_cls)
{
	struct http_req *req = *con_cls;
	if (!req || !req->r) {
		/* A task's connection (or one over its client's limit): no
		 * handler runs, not even for a request already buffered. */
		if (!gate_request_begins(conn, NULL))
			return MHD_NO;
		/* Made by on_uri (with the raw query), or here. */
		if (!req && !(req = calloc(1, sizeof(*req))))
			return MHD_NO;
		*con_cls = req;
		req->r = r;
		req->conn = conn;
		req->method = method;
		req->path = url;
		req->start_us = monotonic_us();
		client_addr(req);
		req->in_head = true;
		enum MHD_Result rc = begin_request(r, req, routes, n_routes, url, method);
		req->in_head = false;
		return rc;
	}
	if (req->deferred)
		return drain_refused(req, upload_size);
	if (req->responded) {
		*upload_size = 0; /* discard the rest of a refused body */
		return MHD_YES;
	}
	/* A reset ran while it was being received (e.g. an upload): it was the
	 * previous tenant's. The rest of it is discarded, the handler never
	 * sees it (an upload is not committed), and it gets a 503. */
	if (req->gen != request_gen(r)) {
		if (*upload_size) {
			*upload_size = 0;
			return MHD_YES;
		}
		return http_failf(req, "RESETTING",
				  "the box was reset while this request was being received");
	}
	if (*upload_size && req->route->body) {
		/* The route may take only part (backpressure: it suspends the
		 * request and gets the rest when resumed). */
		req->body_left = 0;
		audit_set_client(r, req->client);
		enum MHD_Result rc = req->route->body(req, upload_data, *upload_size);
		audit_set_client(r, NULL);
		*upload_size = req->body_left;
		return rc;
	}
	if (*upload_size)
		return buffer_body(req, upload_data, upload_size);
	if (req->body_too_big)
		return http_failf(req, "PAYLOAD_TOO_LARGE", "request body over %llu bytes",
				  (unsigned long long)r->cfg.max_body);
	return run_handler(req, req->route->fn);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_size, void **con_cls)
{
	(void)version;
	struct runner *r = cls;
	return handle(r, r->http->routes, r->http->n_routes, conn, url, method, upload_data,
		      upload_size, con_cls);
}

static enum MHD_Result on_request_extra(void *cls, struct MHD_Connection *conn, const char *url,
					const char *method, const char *version,
					const char *upload_data, size_t *upload_size,
					void **con_cls)
{
	(void)version;
	struct http_extra *x = cls;
	return handle(x->r, x->routes, x->n_routes, conn, url, method, upload_data, upload_size,
		      con_cls);
}

static void suspended_unlink(struct http_req *req)
{
	struct http_server *h = req->r ? req->r->http : NULL;
	struct http_req *none = NULL; /* no server: the neighbours are still unlinked */
	struct http_req **head = h ? &h->suspended : &none;
	LIST_UNLINK_AT(*head, req, snext, sprev);
	req->suspended = false;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	gate_request_ends(conn);
	struct http_req *req = *con_cls;
	if (!req)
		return;
	req->completed_ok = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
	if (req->r)
		audit_request(req, toe);
	if (req->suspended)
		suspended_unlink(req); /* the connection is gone: nothing to resume */
	if (req->ctx_free)
		req->ctx_free(req);
	if (req->deferred)
		MHD_destroy_response(req->deferred);
	free(req->body);
	free(req->raw_query);
	free(req->raw_target);
	free(req);
	*con_cls = NULL;
}

/* A listener of the API's clients (the main one, the extra ones) on its socket fd: its
 * connection gate (tasks refused, --max-client-connections per client, the header deadlines)
 * and its daemon on the loop. 0, or -1 with err. */
static int client_daemon(struct runner *r, int fd, struct http_daemon_conf *conf,
			 struct gate **gate, struct http_daemon *d, struct error *err)
{
	unsigned max_conns = gate_connection_limit(1024, 2 + HTTP_EXTRA_MAX);
	struct gate_policy gp = {.name = conf->name,
				 .refuse_tasks = true,
				 .tasks = r->http->tasks,
				 .max_per_client = r->cfg.max_client_conns < max_conns
							   ? r->cfg.max_client_conns
							   : max_conns,
				 .first_head_ms = r->cfg.header_deadline_ms,
				 .next_head_ms = r->cfg.header_timeout_ms};
	if (!(*gate = gate_new(r, &gp))) {
		close(fd);
		return error_set(err, ENOMEM, NULL, "%s: cannot set up connection admission",
				 conf->name);
	}
	conf->listen_fd = fd;
	conf->on_completed = on_completed;
	conf->on_connection = gate_notify;
	conf->connection_arg = *gate;
	conf->on_uri = on_uri;
	conf->timeout_s = (unsigned)((r->cfg.header_timeout_ms + 999) / 1000);
	conf->conn_memory_limit = 64 * 1024;
	conf->conn_limit = max_conns;
	return http_daemon_start(d, &r->loop, conf, err);
}

int http_start(struct runner *r, const struct http_route *routes, size_t n_routes,
	       const struct gate_tasks *tasks, struct error *err)
{
	struct http_server *h = calloc(1, sizeof(*h));
	if (!h)
		return error_set(err, ENOMEM, NULL, "cannot start the HTTP server");
	h->routes = routes;
	h->n_routes = n_routes;
	h->tasks = tasks;
	r->http = h;
	int fd = http_listen(r->cfg.listen_host, r->cfg.listen_port, &h->port, err);
	if (fd < 0)
		return error_wrap(err, "--listen (FORCEAI_RUNNER_LISTEN)");
	struct http_daemon_conf conf = {.name = "http",
					.on_request = on_request,
					.arg = r,
					.allow_upgrade = true};
	return client_daemon(r, fd, &conf, &h->gate, &h->daemon, err);
}

unsigned http_listen_extra(struct runner *r, const char *name, const char *host, unsigned port,
			   const struct http_route *routes, size_t n_routes, struct error *err)
{
	struct http_server *h = r->http;
	if (!h || h->n_extra >= HTTP_EXTRA_MAX) {
		error_set(err, 0, NULL, "%s: no room for another listener", name);
		return 0;
	}
	struct http_extra *x = &h->extra[h->n_extra];
	memset(x, 0, sizeof(*x));
	x->r = r;
	x->name = name;
	x->routes = routes;
	x->n_routes = n_routes;
	int fd = http_listen(host, port, &x->port, err);
	if (fd < 0)
		return 0;
	h->n_extra++; /* http_stop frees what was made of it, even on failure */
	struct http_daemon_conf conf = {.name = name, .on_request = on_request_extra, .arg = x};
	return client_daemon(r, fd, &conf, &x->gate, &x->daemon, err) < 0 ? 0 : x->port;
}

void http_set_hooks(struct runner *r, const struct http_hooks *hooks)
{
	r->http->hooks = hooks;
}

json_t *http_access_report(struct runner *r)
{
	return r->http && r->http->gate ? gate_report(r->http->gate) : json_null();
}

unsigned http_port(struct runner *r)
{
	return r->http ? r->http->port : 0;
}

void http_quiesce(struct runner *r)
{
	struct http_server *h = r->http;
	if (!h || !h->daemon.d || h->quiesced)
		return;
	h->quiesced = true;
	/* Streams with nothing more to say (metrics/watch) end now. */
	for (struct http_stream *s = h->streams; s; s = s->next)
		http_stream_wake(s);
	http_daemon_quiesce(&h->daemon);
	for (unsigned i = 0; i < h->n_extra; i++)
		http_daemon_quiesce(&h->extra[i].daemon);
}

bool http_busy(struct runner *r)
{
	struct http_server *h = r->http;
	if (!h)
		return false;
	return h->n_streams > 0 ||
	       (h->hooks && h->hooks->upgraded_count && h->hooks->upgraded_count(r) > 0);
}

void http_run_soon(struct runner *r)
{
	if (r->http)
		http_daemon_wake(&r->http->daemon);
}

bool http_stopping(struct runner *r)
{
	return !r->http || r->http->stopping;
}

void http_req_suspend(struct http_req *req)
{
	struct http_server *h = req->r->http;
	if (req->suspended || !h)
		return;
	req->suspended = true;
	LIST_PUSH_AT(h->suspended, req, snext, sprev);
	MHD_suspend_connection(req->conn);
}

void http_req_resume(struct http_req *req)
{
	struct http_server *h = req->r->http;
	if (!req->suspended || !h)
		return;
	suspended_unlink(req);
	MHD_resume_connection(req->conn);
	http_wake_all(h);
}

void http_tick(struct runner *r)
{
	struct http_server *h = r->http;
	if (!h)
		return;
	if (h->hooks && h->hooks->upgraded_tick)
		h->hooks->upgraded_tick(r);
	uint64_t now = monotonic_ms();
	for (struct http_stream *s = h->streams; s;) {
		struct http_stream *next = s->next;
		/* The one keep-alive timer (http/sse.h): an idle stream is woken to send it. */
		if (s->ops->keepalive_ms && !s->done && !s->ending && !buf_avail(&s->out) &&
		    now - s->last_send_ms >= s->ops->keepalive_ms) {
			s->keepalive_due = true;
			http_stream_wake(s);
		}
		if (s->ops->tick)
			s->ops->tick(s, now);
		s = next;
	}
}

void http_stop(struct runner *r)
{
	struct http_server *h = r->http;
	if (!h)
		return;
	if (h->daemon.d) {
		/* MHD must not be stopped with suspended connections: wake them
		 * and run MHD until none is left suspended (a resumed connection
		 * leaves MHD's suspended list only inside MHD_run, and with
		 * `stopping` set a stream cannot suspend again). */
		h->stopping = true;
		/* Upgraded connections go first: libmicrohttpd must not be
		 * stopped while one is still open; nor while a request is
		 * suspended (their handlers see http_stopping()). */
		if (h->hooks && h->hooks->upgraded_close_all)
			h->hooks->upgraded_close_all(r);
		while (h->suspended)
			http_req_resume(h->suspended);
		for (int i = 0; i < 4; i++) {
			bool any = false;
			for (struct http_stream *s = h->streams; s; s = s->next) {
				any |= s->suspended;
				http_stream_wake(s);
			}
			if (!any && i > 0)
				break;
			http_daemon_run(&h->daemon);
			for (unsigned k = 0; k < h->n_extra; k++)
				if (h->extra[k].daemon.d)
					http_daemon_run(&h->extra[k].daemon);
		}
	}
	for (unsigned i = 0; i < h->n_extra; i++) {
		http_daemon_stop(&h->extra[i].daemon);
		gate_free(h->extra[i].gate);
	}
	http_daemon_stop(&h->daemon);
	gate_free(h->gate); /* after the daemon: it reports closed connections */
	free(h);
	r->http = NULL;
}
