/* Model wire formats (docs/design/model.md#wire-formats-one-module-per-format): what the loopback
 * model proxy needs to know of one API family, so that model/modelproxy.c stays the transport and a
 * fourth format is one new file (wire_<name>.c plus a line in wire.c's table). Everything here is
 * pure: no I/O, no runner state. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/usage.h"

enum wire_match {
	WIRE_NO = 0,  /* not this format's path */
	WIRE_UNKNOWN, /* this format's namespace, but no forwarded route (404 in its shape) */
	WIRE_ROUTE,   /* forwarded */
};

/* Where a forwarded path is appended: to FORCEAI_GATEWAY_URL (".../v1") or
 * to the gateway's root (the URL without its trailing "/v1"). */
enum wire_base { WIRE_BASE_V1, WIRE_BASE_ROOT };

struct wire_route {
	char path[256]; /* the gateway path, without the query */
	enum wire_base base;
	bool get, post; /* methods allowed */
	bool metered;   /* a model call that reports usage (not listing, not counting) */
};

struct wire_scan;

struct wire {
	const char *name; /* "openai", "anthropic", "gemini" */
	/* The raw request path (no query; only [A-Za-z0-9._~:/-] reach here). */
	enum wire_match (*route)(const char *path, struct wire_route *rt);
	/* Where the task's token may come: header names (NULL-terminated;
	 * "authorization" means "Bearer <token>"), and ?key= in the query. */
	const char *const *token_headers;
	bool token_in_query;
	/* The header the real key goes in: "authorization" (Bearer) or a name. */
	const char *key_header;
	/* Usage of one JSON value of a 200 response: an SSE event (event its
	 * name, "" if none) or the whole body (event NULL). */
	void (*take)(struct wire_scan *s, const char *event, json_t *j);
	const char *usage_needle; /* SSE events without it are not parsed */
	/* An error the runner itself answers, in this format's shape, for the
	 * HTTP status; code is the runner's code (e.g. "budget_exceeded").
	 * A new reference. */
	json_t *(*error)(unsigned status, const char *code, const char *message);
	/* The environment variables that carry the token, for messages. */
	const char *token_vars;
};

extern const struct wire wire_openai, wire_anthropic, wire_gemini;

/* The format serving path (WIRE_ROUTE or WIRE_UNKNOWN) and its route; NULL
 * when no format claims the path. */
const struct wire *wire_find(const char *path, struct wire_route *rt, enum wire_match *m);

/* Whether a request header goes on to the gateway: not what every proxy
 * drops (relay/hop.h: hop-by-hop, named by connection, the client's
 * Connection fields joined, or NULL), not what the transport sets itself,
 * never a credential. */
bool wire_header_forwarded(const char *name, const char *connection);

/* A usage scanner of one response: the shared framer plus what the format
 * keeps between events (Anthropic's message_start and message_delta). */
struct wire_scan {
	const struct wire *w;
	struct mu_frame frame;
	bool has_usage;
	struct mu_usage usage;
	uint64_t reports; /* JSON values that set or changed usage */
	int64_t fmt[4];   /* the format's running counts between events */
	/* The model the gateway says answered (the first one named in the
	 * response's parsed events; "" = none): the audit trail's. */
	char model[128];
};
/* Keep v as s->model if none is kept yet and v is a printable string that
 * fits. Inline: the formats call it, and wire.c's format table calls them
 * (a function in wire.c would make a module cycle). */
static inline void wire_scan_model(struct wire_scan *s, json_t *v)
{
	const char *m = json_is_string(v) ? json_string_value(v) : NULL;
	size_t n = m ? strlen(m) : 0;
	if (s->model[0] || !n || n >= sizeof(s->model))
		return;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)m[i] < 0x20 || (unsigned char)m[i] >= 0x7f)
			return; /* not a model name: said as none */
	memcpy(s->model, m, n + 1);
}
void wire_scan_init(struct wire_scan *s, const struct wire *w);
void wire_scan_feed(struct wire_scan *s, const char *p, size_t n);
void wire_scan_eof(struct wire_scan *s);
void wire_scan_free(struct wire_scan *s);
