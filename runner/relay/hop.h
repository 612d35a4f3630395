/* The rules of a forwarded HTTP/1 head (docs/design/interactive.md,
 * design/model.md#wire-formats-one-module-per-format): which fields are hop-by-hop (RFC 9110
 * §7.6.1), which ones the Connection field names, and the request head the port proxy sends
 * upstream. One home for the port proxy (relay/portproxy.c) and the model proxy (model/wire.c,
 * model/modelproxy.c), so that a field dropped by one is dropped by both
 * and the Connection list is split one way (h1_list_has_token). Pure: no
 * I/O, no runner state. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"

/* Is the field hop-by-hop whatever the message says: Connection,
 * Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade?
 * (Case-insensitive; name need not be NUL-terminated.) */
bool relay_hop_by_hop(const char *name, size_t len);
/* Does the Connection field's value (all of them joined by ",", or NULL)
 * name the field (so it is hop-by-hop too)? */
bool relay_connection_names(const char *connection, const char *name, size_t len);
/* Does a client's request field stop at the proxy, whichever proxy: is it
 * hop-by-hop, named by connection, the framing the proxy redoes
 * (Content-Length, Expect) or the proxy's credentials (Proxy-Authorization)?
 * Both proxies drop these, then a list of their own. */
bool relay_request_field_dropped(const char *name, size_t len, const char *connection);
/* Append one Connection field's value to the joined list *b (", "-less:
 * joined by ","). -1 when out of memory. */
int relay_connection_join(struct buf *b, const char *value);

/* Does a field of the upstream's response go on to the client? Not when
 * hop-by-hop, named by its Connection field (conn, or NULL), nor the
 * framing libmicrohttpd redoes (Content-Length), nor Proxy-Authenticate;
 * Upgrade only when the answer is a 101 (upgrade). */
bool relay_response_field_kept(const char *name, size_t len, const char *conn, bool upgrade);

/* The port proxy's request head for the upstream, field by field. */
struct relay_head {
	struct buf *out;
	const char *connection; /* the client's Connection fields, joined (or NULL) */
	struct buf xff;         /* the client's X-Forwarded-For fields so far */
	bool host;              /* the client sent Host */
	bool failed;            /* out of memory */
};
/* "METHOD TARGET HTTP/1.1\r\n" into out (emptied first is the caller's). */
void relay_head_start(struct relay_head *h, struct buf *out, const char *method, const char *target,
		      const char *connection);
/* One of the client's fields: kept, dropped (hop-by-hop, the framing and
 * forwarding fields the runner sets itself, the runner's own token,
 * Proxy-Authorization), or folded into X-Forwarded-For. */
void relay_head_field(struct relay_head *h, const char *name, size_t name_len, const char *value,
		      size_t value_len);
/* The fields the runner sets: Host (when the client sent none),
 * X-Forwarded-For (the client's list, then peer_ip), X-Forwarded-Proto,
 * the framing (content_length as given, else chunked when asked), and,
 * for an upgrade (upgrade non-NULL), Connection and Upgrade; then the
 * blank line. 0, or -1 when out of memory (h is freed either way). */
int relay_head_finish(struct relay_head *h, unsigned port, const char *peer_ip,
		      const char *content_length, bool chunked, const char *upgrade);
