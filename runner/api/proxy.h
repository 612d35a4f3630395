/* The port proxy's route (docs/design/interactive.md): ANY /proxy/{port}/{path}?{query}
 * forwarded to 127.0.0.1:{port} inside the box by relay/portproxy.c; the
 * route handlers are declared in api/api.h. */
#pragma once

struct runner;

/* GET /proxy/{the API's own port}/{path} is the API itself (OpenSandbox's server hands out
 * that form for execd's port in Docker bridge mode,
 * docs/design/build.md#what-opensandboxs-server-runtimes-expect-of-the-image): the path to route
 * instead ("/{path}"), or NULL for any other path (http_hooks.self_path). */
const char *proxy_self_path(struct runner *r, const char *path);
