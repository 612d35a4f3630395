/* The port proxy (docs/design.md §14): ANY /proxy/{port}/{path}?{query}
 * forwarded to 127.0.0.1:{port} inside the box, as OpenSandbox's execd
 * does, on the runner's one loop: non-blocking upstream sockets, streamed
 * bodies both ways with backpressure, upgrades spliced as raw bytes. */
#pragma once
#include <stdbool.h>

struct runner;

/* The table of open proxied requests (r->proxies). */
int proxy_init(struct runner *r);
/* Before http_stop: end every proxied request (upgraded ones are closed,
 * waiting ones answered or cut) so libmicrohttpd can stop. */
void proxy_close_all(struct runner *r);
void proxy_free_all(struct runner *r);
/* Open proxied requests (for /metrics and tests of leaks). */
unsigned proxy_count(struct runner *r);
/* GET /proxy/{the API's own port}/{path} is the API itself (OpenSandbox's server hands out
 * that form for execd's port in Docker bridge mode, docs/design.md §20.6): the path to route
 * instead ("/{path}"), or NULL for any other path (http_hooks.self_path). */
const char *proxy_self_path(struct runner *r, const char *path);
