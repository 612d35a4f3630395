/* The port proxy's route (docs/design/interactive.md): ANY /proxy/{port}/{path}?{query}.
 * The target is parsed and the port checked here; relay/portproxy.c forwards
 * the request. */
#include "api/proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "core/error.h"
#include "core/runner.h"
#include "model/modelproxy.h"
#include "relay/portproxy.h"

/* /proxy/{port}[/path][?query] as sent: the port, and the rest after it. */
static int parse_target(const char *raw, unsigned *port, const char **rest, struct error *err)
{
	if (!raw || strncmp(raw, "/proxy/", 7))
		return error_set(err, 0, "INVALID_PORT",
				 "the request target must start with /proxy/");
	const char *s = raw + 7;
	size_t n = strcspn(s, "/?");
	if (n == 0)
		return error_set(err, 0, "INVALID_PORT", "port is required: /proxy/{port}/{path}");
	unsigned long v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || i >= 5)
			return error_set(err, 0, "INVALID_PORT", "invalid port '%.*s'",
					 (int)(n > 16 ? 16 : n), s);
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v < 1 || v > 65535)
		return error_set(err, 0, "INVALID_PORT", "port %lu is outside 1..65535", v);
	*port = (unsigned)v;
	*rest = s + n;
	return 0;
}

const char *proxy_self_path(struct runner *r, const char *path)
{
	if (!path || strncmp(path, "/proxy/", 7))
		return NULL;
	const char *s = path + 7;
	size_t n = strspn(s, "0123456789");
	if (n == 0 || n > 5 || (s[n] && s[n] != '/'))
		return NULL;
	unsigned long v = strtoul(s, NULL, 10);
	if (v != http_port(r))
		return NULL; /* the model proxy's port stays refused (api_proxy_start) */
	return s[n] ? s + n : "/";
}

enum MHD_Result api_proxy_start(struct http_req *req)
{
	struct runner *r = req->r;
	struct error err = {0};
	unsigned port = 0;
	const char *rest = NULL;
	if (parse_target(req->raw_target, &port, &rest, &err) < 0)
		return http_fail(req, &err);
	/* The runner's own ports are not a task's to reach through it. */
	if (port == http_port(r) || port == modelproxy_port(r)) {
		error_set(&err, 0, "FORBIDDEN", "port %u is the runner's own", port);
		return http_fail(req, &err);
	}
	/* The upstream's target: "/path?query", "/" at least. */
	if (*rest == '/')
		return relay_start(req, port, rest);
	char *target = NULL;
	if (asprintf(&target, "/%s", rest) < 0)
		return MHD_NO;
	enum MHD_Result rc = relay_start(req, port, target);
	free(target);
	return rc;
}

enum MHD_Result api_proxy_body(struct http_req *req, const char *data, size_t len)
{
	return relay_body(req, data, len);
}

enum MHD_Result api_proxy(struct http_req *req)
{
	return relay_answer(req);
}
