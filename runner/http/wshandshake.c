/* The WebSocket handshake's request side (RFC 6455 §4.2.1), checked before the upgrade
 * (http/ws.c). */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "http/internal.h"
#include "http/ws.h"

static bool has_token(const char *value, const char *token)
{
	if (!value)
		return false;
	size_t tl = strlen(token);
	const char *p = value;
	while (*p) {
		p += strspn(p, " \t,");
		size_t n = strcspn(p, ",");
		size_t m = n;
		while (m && (p[m - 1] == ' ' || p[m - 1] == '\t'))
			m--;
		if (m == tl && !strncasecmp(p, token, tl))
			return true;
		p += n;
	}
	return false;
}

bool ws_is_upgrade_request(struct http_req *req)
{
	return has_token(http_header(req, "Upgrade"), "websocket");
}

static bool key_ok(const char *key)
{
	/* base64 of 16 bytes: 22 characters and "==". */
	if (!key || strlen(key) != 24 || strcmp(key + 22, "=="))
		return false;
	for (int i = 0; i < 22; i++) {
		char ch = key[i];
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		      (ch >= '0' && ch <= '9') || ch == '+' || ch == '/'))
			return false;
	}
	return true;
}

const char *ws_handshake_problem(struct http_req *req, unsigned *status)
{
	*status = 400;
	if (!ws_is_upgrade_request(req))
		return "this endpoint needs a WebSocket upgrade (Upgrade: websocket)";
	if (!has_token(http_header(req, "Connection"), "upgrade"))
		return "Connection header without the upgrade token";
	const char *ver = http_header(req, "Sec-WebSocket-Version");
	if (!ver || strcmp(ver, "13"))
		return *status = 426, "only WebSocket version 13 is supported";
	if (!key_ok(http_header(req, "Sec-WebSocket-Key")))
		return "Sec-WebSocket-Key is not 16 bytes in base64";
	if (req->body_len)
		return "a WebSocket handshake has no body";
	return NULL;
}
