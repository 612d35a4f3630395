/* The HTTP endpoint: libmicrohttpd driven by the runner's epoll loop
 * (external-epoll mode), request routing, auth, JSON errors, and streamed
 * responses that suspend while they have nothing to send. http.c:
 * dispatch, auth, framing, life cycle; response.c: responses and request
 * bodies; stream.c: streamed bodies; server.c (server.h): the daemon and
 * loop glue shared with the model proxy. */
#pragma once
#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/buf.h"
#include "http/body.h"

struct runner;
struct http_req;

/* A route: method ("*": any) and path pattern ('*' matches one non-empty
 * segment, captured as req->param; a final "**" the rest of the path); fn
 * answers once the body is complete; body, if set, takes each body chunk
 * as it arrives (no buffering, no max-body) and may leave the rest of it in
 * req->body_left (it then suspends the connection: libmicrohttpd hands the
 * rest over once resumed); start, if set, runs once the head is in, before
 * any body, and may answer at once or suspend (it is then called again, as
 * fn, once resumed). */
typedef enum MHD_Result (*http_route_fn)(struct http_req *req);
typedef enum MHD_Result (*http_body_fn)(struct http_req *req, const char *data, size_t len);
struct http_route {
	const char *method;
	const char *pattern;
	http_route_fn fn;
	http_body_fn body;
	http_route_fn start;
	/* Answered without the access token (execd 1.2: /ping and /ready, so a
	 * Kubernetes httpGet probe works). Tasks still cannot reach it: the gate
	 * refuses their connections before any route runs. */
	bool public;
	/* The header that carries the access token on this route besides
	 * X-EXECD-ACCESS-TOKEN (E2B's SDK sends X-Access-Token), or NULL. */
	const char *token_header;
};

struct http_req {
	struct runner *r;
	struct MHD_Connection *conn;
	const char *method;
	const char *path;
	char *body;
	size_t body_len;
	bool body_too_big;
	bool responded;
	const struct http_route *route; /* NULL = none matched */
	const char *param;              /* the {id} segment of the path, if any */
	char param_buf[128];
	void *ctx;         /* per-route state (e.g. an upload) */
	bool completed_ok; /* set before ctx_free: false when the client went away */
	size_t body_left;  /* a body route leaves this many bytes of the chunk for later */
	char *raw_query;   /* the query string as sent (NULL: none), for strict parsers */
	char *raw_target;  /* the request target as sent (path and query, undecoded) */
	bool suspended;    /* http_req_suspend: waits for http_req_resume */
	struct http_req *snext, *sprev;
	uint64_t gen; /* the generation it arrived in (http_hooks.request_gen) */
	void (*ctx_free)(struct http_req *req);
	/* A refusal decided on the head while the client still sends a body (docs/design.md
	 * design/wire.md#endpoint-and-http-layer): held until the body is read and discarded (up to
	 * HTTP_DRAIN_MAX bytes within HTTP_DRAIN_MS), so a client that writes before it reads sees
	 * the answer, not a reset. */
	bool in_head; /* the first call: the body has not been read */
	struct MHD_Response *deferred;
	unsigned deferred_status;
	uint64_t drained, drain_start_ms;
	/* The audit trail's record of it (audit/trail.h): one event when it
	 * ends, with what handlers noted (http_audit_note). */
	char client[48];      /* the peer's numeric address */
	bool authed;          /* it proved the token (or none is set): the client's */
	unsigned status;      /* the status answered (0: none) */
	const char *err_code; /* the error code answered, if any */
	uint64_t start_us;    /* monotonic */
	json_t *audit;        /* fields handlers added, or NULL */
	/* Called just before the event is built, only when it is recorded: a
	 * handler that counts on its hot path (the port proxy's bytes) notes its
	 * totals here rather than on every chunk. */
	void (*audit_end)(struct http_req *req);
	/* http_audit_note_bytes: the byte counts of the event, without an object. */
	bool audit_bytes;
	uint64_t audit_bytes_in, audit_bytes_out;
	/* The field value that authenticated it (NULL: none), for the doors that
	 * forward (http_field_carries_token). */
	const char *auth_token;
};

/* Fields (stolen) for this request's audit event: path, bytes, a content
 * hash, a task id... Later notes win. Never a secret (docs/design/audit.md). */
void http_audit_note(struct http_req *req, json_t *fields);
/* The same as noting {"bytes_in": in, "bytes_out": out} last, for a hot door
 * (the port proxy, from audit_end): no JSON object per request. */
void http_audit_note_bytes(struct http_req *req, uint64_t in, uint64_t out);

/* A streamed response body. The HTTP layer sends what is in `out`; when
 * it is empty it calls produce(), which appends more to `out` and sets
 * `done` once the last bytes are in. Nothing appended and not done: the
 * connection sleeps until http_stream_wake. close() runs when the
 * connection is done with the stream, whether it finished or the client
 * went away (`out` is freed by the layer just before). */
struct http_stream;
struct http_stream_ops {
	void (*produce)(struct http_stream *s);
	void (*close)(struct http_stream *s);
	/* Called from the 1 s tick (optional): work of the stream's own. */
	void (*tick)(struct http_stream *s, uint64_t now_mono_ms);
	/* The keep-alive (http/sse.h, the one policy): after keepalive_ms (0: none) without a
	 * byte sent, keepalive goes once the producer has nothing and the stream is not done. */
	uint32_t keepalive_ms;
	const char *keepalive;
	/* Optional, instead of produce: write up to max bytes straight into
	 * libmicrohttpd's send buffer (no copy through `out`, and no buffer of
	 * the stream's own to hold a large event); returns the bytes written,
	 * 0 when there is nothing now. It may still use `out` (it must then
	 * move what it can of it to dst itself). */
	size_t (*produce_into)(struct http_stream *s, char *dst, size_t max);
	/* Optional: more is due within a moment (the producer's source is
	 * resting, docs/design/performance.md#decisions) and the producer will wake the stream
	 * when it comes or when the rest ends. A short tail is then held for
	 * the next send instead of going out in a packet of its own. */
	bool (*more_soon)(struct http_stream *s);
};

struct http_stream {
	const struct http_stream_ops *ops;
	struct runner *r;
	struct MHD_Connection *conn;
	struct buf out; /* bytes to send */
	bool done;      /* nothing more after out */
	bool failed;    /* cut short: the connection is closed, not completed */
	bool suspended;
	bool closed;
	bool ending;                /* http_streams_end: ends as soon as it has nothing to send */
	bool keepalive_due;         /* silent for ops->keepalive_ms: the next empty turn sends it */
	uint64_t last_send_ms;      /* monotonic */
	struct http_daemon *daemon; /* the one serving it: a wake runs it alone */
	struct http_stream *next, *prev;
};

/* Serve the routes (a table that outlives the server) on the configured
 * address; connections from tasks, as `tasks` tells them (outliving the
 * server too; http/gate.h), are refused there and on http_listen_extra's. */
struct error;
struct gate_tasks;
int http_start(struct runner *r, const struct http_route *routes, size_t n_routes,
	       const struct gate_tasks *tasks, struct error *err);
/* The routes answered without the token, as ["GET /ping", ...] (a new
 * reference; an empty array before http_start). */
json_t *http_public_routes(struct runner *r);
/* What the layer above decides for the server (main registers them; any may be NULL), so the
 * HTTP layer never calls up:
 * - self_path: the server's own API reached under another path (below);
 * - the request gate, before a request's handler runs: request_blocked refuses it now (e set,
 *   answered with http_fail); request_gen is the generation a request belongs to: one whose
 *   generation changed while its body was being received is refused (the runtime profiles'
 *   reset, profile/profile.h);
 * - connections upgraded away from HTTP (WebSocket, http/ws.c): counted as busy, ticked with
 *   the streams, and closed first by http_stop (libmicrohttpd must not stop with one open). */
struct http_hooks {
	bool (*request_blocked)(struct runner *r, const char *method, const char *path,
				struct error *e);
	uint64_t (*request_gen)(struct runner *r);
	/* A path that names the server's own API under another form (the port proxy's
	 * /proxy/{own port}/{path},
	 * docs/design/build.md#what-opensandboxs-server-runtimes-expect-of-the-image): the path to
	 * route instead (a suffix of path, or a static string), NULL when it is not one. Routed
	 * once, with every check of the route it lands on (token, body limits, the reset gate). */
	const char *(*self_path)(struct runner *r, const char *path);
	unsigned (*upgraded_count)(struct runner *r);
	void (*upgraded_tick)(struct runner *r);
	void (*upgraded_close_all)(struct runner *r);
	/* The door a path belongs to, for the audit trail (NULL: not audited,
	 * e.g. the probes). */
	const char *(*audit_door)(const char *path);
};
/* After http_start; hooks outlives the server. */
void http_set_hooks(struct runner *r, const struct http_hooks *hooks);
unsigned http_port(struct runner *r);
/* After http_start: serve another route table (outliving the server) on
 * host:port too (a client API of its own port: E2B's code interpreter), with
 * the same token, gate and limits. The port bound (port 0: ephemeral), or
 * 0 with err set. */
unsigned http_listen_extra(struct runner *r, const char *name, const char *host, unsigned port,
			   const struct http_route *routes, size_t n_routes, struct error *err);
/* Who may connect (gate.h), for GET /v1/hardening. New reference. */
json_t *http_access_report(struct runner *r);
void http_quiesce(struct runner *r); /* stop accepting */
bool http_busy(struct runner *r);    /* streams still open */
void http_tick(struct runner *r);
void http_stop(struct runner *r);
/* Run libmicrohttpd before the next wait (a connection was resumed or an
 * upgraded one closed outside its callbacks). */
void http_run_soon(struct runner *r);
/* Suspend a request while its handler waits (a body route that cannot
 * take more yet); libmicrohttpd calls the handler again after resume. At
 * shutdown every suspended request is resumed and http_stopping() is true. */
void http_req_suspend(struct http_req *req);
void http_req_resume(struct http_req *req);
bool http_stopping(struct runner *r);

/* Responses (each returns the MHD result to hand back from the handler). */
enum MHD_Result http_json(struct http_req *req, unsigned status, json_t *body); /* steals body */
/* Deprecated (the status is chosen by the caller): use http_fail. */
enum MHD_Result http_error(struct http_req *req, unsigned status, const char *code, const char *fmt,
			   ...) __attribute__((format(printf, 4, 5)));
/* The error as a JSON {code, message} response, its status from
 * error_http_status(): the one way an error becomes a response. */
struct error;
enum MHD_Result http_fail(struct http_req *req, const struct error *e);
/* http_fail of an error made here (no errno). */
enum MHD_Result http_failf(struct http_req *req, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The one JSON error body: {"code", "message"} (new reference). */
json_t *http_error_body(const struct error *e);
/* A response carrying body (stolen) as application/json; NULL when out of
 * memory. For daemons that answer without a struct http_req. */
struct MHD_Response *http_json_response(json_t *body);
enum MHD_Result http_empty(struct http_req *req, unsigned status);
enum MHD_Result http_text(struct http_req *req, unsigned status, const char *ctype,
			  const char *data, size_t len, const char *hname, const char *hval);
/* Queue resp (NULL: out of memory, MHD_NO) as the answer to req. */
enum MHD_Result http_queue(struct http_req *req, unsigned status, struct MHD_Response *resp);
/* A streamed response of size bytes (UINT64_MAX: unknown, sent chunked to
 * HTTP/1.1 clients) that the caller completes with headers and queues with
 * http_queue; libmicrohttpd takes at most block bytes at a time. NULL when
 * out of memory (ops->close has run). */
struct MHD_Response *http_stream_response(struct http_req *req, struct http_stream *s,
					  const struct http_stream_ops *ops, uint64_t size,
					  size_t block);
/* Start a streamed response with the given content type. */
enum MHD_Result http_stream_start(struct http_req *req, struct http_stream *s,
				  const struct http_stream_ops *ops, const char *content_type);
void http_stream_wake(struct http_stream *s);
/* End every stream (reset): each sends what it has (a task stream its
 * terminal event) and closes; force also cuts the connections of those
 * still open (a client that does not read). Returns the streams open. */
unsigned http_streams_end(struct runner *r, bool force);
unsigned http_stream_count(struct runner *r);

/* The request body parsed as a JSON object (http_parse_json_object, http/body.h, which also
 * has the typed getters); on failure responds 400 and returns NULL (check req->responded).
 * allow_empty: empty body → {} */
json_t *http_body_json(struct http_req *req, bool allow_empty);
const char *http_query(struct http_req *req, const char *name);
const char *http_header(struct http_req *req, const char *name);
/* Is got the runner's access token (its SHA-256 once a runtime init bound
 * one)? Compared in constant time (http/token.c). */
bool http_token_ok(struct runner *r, const char *got);
/* Must a door that forwards the client's request (the port proxy, any
 * face that relays) drop this field, because it carries the runner's
 * access token? Yes for every field the runner reads its token from
 * (X-EXECD-ACCESS-TOKEN, X-Access-Token) whatever they hold, and for any
 * other (Authorization, Cookie, a custom field) whose value holds the token
 * that authenticated the request, or the startup token, written as is,
 * %-encoded or inside base64 (docs/design/relay.md#no-door-hands-the-runners-token-on). Fails
 * closed. */
bool http_field_carries_token(const struct http_req *req, const char *name, size_t name_len,
			      const char *value, size_t value_len);
