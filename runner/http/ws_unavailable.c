/* A build without wslay (the static build when Debian's wslay source could
 * not be fetched: scripts/build-static-deps.sh then skips it and says so).
 * WebSocket routes answer 501 WEBSOCKET_UNAVAILABLE naming the reason, and
 * /v1/hardening reports "websocket": false; everything else works. No
 * framing is hand-written in its place, by design. */
#include "http/ws.h"

#ifndef HAVE_WSLAY
#include <errno.h>
#include <strings.h>
#include <unistd.h>

#include "core/error.h"

bool ws_is_upgrade_request(struct http_req *req)
{
	const char *up = http_header(req, "Upgrade");
	return up && !strcasecmp(up, "websocket");
}

enum MHD_Result ws_upgrade(struct http_req *req, const struct ws_ops *ops, void *arg, size_t window)
{
	(void)ops;
	(void)arg;
	(void)window;
	struct error err;
	error_set(&err, 0, "WEBSOCKET_UNAVAILABLE",
		  "this build of forceai-runner has no WebSocket support (built without wslay)");
	return http_fail(req, &err);
}

struct ws_conn *ws_open_fd(struct runner *r, int fd, const void *extra, size_t extra_len,
			   const struct ws_ops *ops, void *arg, size_t window)
{
	(void)r, (void)extra, (void)extra_len, (void)ops, (void)arg, (void)window;
	close(fd);
	errno = ENOSYS;
	return NULL;
}

/* No connection can exist: these are never reached with one. */
void *ws_arg(struct ws_conn *c)
{
	(void)c;
	return NULL;
}
struct runner *ws_runner(struct ws_conn *c)
{
	(void)c;
	return NULL;
}
int ws_send(struct ws_conn *c, int opcode, const void *data, size_t len)
{
	(void)c, (void)opcode, (void)data, (void)len;
	return -1;
}
int ws_send2(struct ws_conn *c, int opcode, const void *head, size_t head_len, const void *data,
	     size_t len)
{
	(void)c, (void)opcode, (void)head, (void)head_len, (void)data, (void)len;
	return -1;
}
bool ws_has_room(struct ws_conn *c)
{
	(void)c;
	return false;
}
size_t ws_queued(struct ws_conn *c)
{
	(void)c;
	return 0;
}
void ws_pause_input(struct ws_conn *c, bool paused)
{
	(void)c, (void)paused;
}
void ws_close(struct ws_conn *c, uint16_t code, const char *reason)
{
	(void)c, (void)code, (void)reason;
}
bool ws_closing(struct ws_conn *c)
{
	(void)c;
	return true;
}
void ws_tick(struct runner *r)
{
	(void)r;
}
unsigned ws_count(struct runner *r)
{
	(void)r;
	return 0;
}
void ws_close_all(struct runner *r)
{
	(void)r;
}
#endif /* !HAVE_WSLAY */
