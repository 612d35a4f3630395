/* HTTP/1 requests forwarded to 127.0.0.1:{port} inside the box, as
 * OpenSandbox's execd does (docs/design/interactive.md), on the runner's one loop:
 * non-blocking upstream sockets (relay/pool.c keeps idle ones), streamed
 * bodies both ways with backpressure, the heads by relay/hop.c's rules,
 * upgrades spliced as raw bytes (relay/splice.c). The route (api/proxy.c)
 * parses the target and decides the port may be reached; this does the
 * rest. */
#pragma once
#include <microhttpd.h>
#include <stddef.h>

#include "core/buf.h"

struct runner;
struct http_req;

/* Every Connection field of the request, joined by "," and NUL-terminated
 * into out (its list of hop-by-hop names, relay/hop.h): both proxies'.
 * -1 when out of memory. */
int relay_connection_fields(struct MHD_Connection *conn, struct buf *out);

/* The table of open forwarded requests (r->proxies). */
int relay_init(struct runner *r);
/* Before http_stop: end every forwarded request (upgraded ones are closed,
 * waiting ones answered or cut) so libmicrohttpd can stop. */
void relay_close_all(struct runner *r);
void relay_free_all(struct runner *r);
/* Open forwarded requests (for /metrics and tests of leaks). */
unsigned relay_count(struct runner *r);

/* The three calls of a route (http_route's start, body, handler): the
 * head is in (forward it to port as target, "/path?query"); body bytes;
 * the request is complete, or resumed. */
enum MHD_Result relay_start(struct http_req *req, unsigned port, const char *target);
enum MHD_Result relay_body(struct http_req *req, const char *data, size_t len);
enum MHD_Result relay_answer(struct http_req *req);
