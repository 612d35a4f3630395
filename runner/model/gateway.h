/* The one road to a model (docs/design/model.md#the-gateway-client): HTTP calls to
 * FORCEAI_GATEWAY_URL with libcurl's multi interface driven by the runner's event loop, so a model
 * call never blocks task streaming or other requests. Protocols http/https only, no redirects,
 * proxy environment ignored, the key injected here (or no Authorization at all in vault mode). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

struct runner;
struct gw_call;

enum gw_err {
	GW_OK = 0,
	GW_UNREACHABLE, /* resolve / connect failed */
	GW_TLS,         /* handshake or certificate verification failed */
	GW_TIMEOUT,     /* connect or overall timeout */
	GW_CONNECTION,  /* the connection broke mid-response */
	GW_ABORTED,     /* the consumer aborted (data returned -1) */
};
const char *gw_err_code(enum gw_err e);

struct gw_call_ops {
	/* The final response head: status, Content-Type ("" if none),
	 * Retry-After ("" if none). */
	void (*head)(struct gw_call *c, void *arg, long status, const char *ctype,
		     const char *retry_after);
	/* Body bytes: 0 = taken, 1 = pause (gw_call_resume later; the same
	 * bytes are delivered again), -1 = abort the call. */
	int (*data)(struct gw_call *c, void *arg, const char *p, size_t n);
	/* Exactly once (unless cancelled); the call is freed right after. */
	void (*done)(struct gw_call *c, void *arg, enum gw_err err, const char *msg);
	/* A streamed request body (gw_request.stream_body): copy up to max
	 * bytes into buf and return the count; 0 = the body is complete;
	 * GW_READ_PAUSE = nothing yet (gw_call_resume_send when there is). */
	size_t (*read)(struct gw_call *c, void *arg, char *buf, size_t max);
};
#define GW_READ_PAUSE ((size_t)-1)

struct gw_request {
	const char *method; /* "GET" or "POST" */
	const char *path;   /* appended to the gateway URL, e.g. "/chat/completions" */
	const char *body;   /* POST body (copied) */
	size_t body_len;
	const char *content_type; /* of the body; NULL = application/json */
	const char *accept;       /* NULL = none */
	/* POST body from ops->read instead of body/body_len, sent as it comes
	 * (nothing is buffered here); body_size: its length, -1 = unknown
	 * (sent chunked). */
	bool stream_body;
	long long body_size;
	/* path is relative to the gateway's root (the URL without a trailing
	 * "/v1") instead of to the URL itself: Gemini's /v1beta routes. */
	bool from_root;
	/* The header the real key goes in: NULL or "authorization" = Bearer,
	 * else that name with the bare key (x-api-key, x-goog-api-key). */
	const char *key_header;
	/* More "Name: value" request headers (NULL-terminated; may be NULL),
	 * already filtered by the caller. */
	const char *const *headers;
};

struct error;
int gateway_init(struct runner *r, struct error *err);
bool gateway_enabled(struct runner *r);
void gateway_stop(struct runner *r);
/* NULL on failure (logged). */
struct gw_call *gw_call_start(struct runner *r, const struct gw_request *rq,
			      const struct gw_call_ops *ops, void *arg);
/* No more callbacks; the transfer is dropped. */
void gw_call_cancel(struct gw_call *c);
void gw_call_resume(struct gw_call *c);      /* after data() paused */
void gw_call_resume_send(struct gw_call *c); /* after read() paused */
