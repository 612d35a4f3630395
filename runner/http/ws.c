#include "http/ws.h"

/* Built only with wslay (HAVE_WSLAY); ws_unavailable.c stands in otherwise. */
#ifdef HAVE_WSLAY

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include <wslay/wslay.h>

#include "core/log.h"
#include "core/runner.h"
#include "core/util.h"

#define WS_PING_MS 30000 /* a ping after this long without anything from the client */
#define WS_IDLE_MS 90000 /* nothing at all (not even a pong) for this long: closed */
#define WS_CLOSE_MS 2000 /* after our close frame, how long the client has to answer */

struct ws_table {
	struct ws_conn *head;
	unsigned count;
};

struct ws_conn {
	struct runner *r;
	const struct ws_ops *ops;
	void *arg;
	size_t window;
	wslay_event_context_ptr ctx;
	int fd;
	struct MHD_UpgradeResponseHandle *urh; /* NULL: ws_open_fd */
	struct http_req *req;                  /* until the upgrade is done or failed */
	struct loop_watch w;
	unsigned char *extra; /* bytes read past the handshake */
	size_t extra_len, extra_off;
	bool opened, dead, linked;
	bool input_paused, starved, eof;
	int depth; /* inside wslay: no re-entry, no free */
	uint64_t last_recv_ms, last_ping_ms, closing_since_ms;
	struct ws_conn *next, *prev;
};

/* ---- SHA-1 (FIPS 180-4), only for Sec-WebSocket-Accept ---- */

static uint32_t rol(uint32_t x, int n)
{
	return (x << n) | (x >> (32 - n));
}

static void sha1_block(uint32_t h[5], const unsigned char *p)
{
	uint32_t w[80];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 80; i++)
		w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
	uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
	for (int i = 0; i < 80; i++) {
		uint32_t f, k;
		if (i < 20) {
			f = (b & c) | (~b & d);
			k = 0x5a827999;
		} else if (i < 40) {
			f = b ^ c ^ d;
			k = 0x6ed9eba1;
		} else if (i < 60) {
			f = (b & c) | (b & d) | (c & d);
			k = 0x8f1bbcdc;
		} else {
			f = b ^ c ^ d;
			k = 0xca62c1d6;
		}
		uint32_t t = rol(a, 5) + f + e + k + w[i];
		e = d;
		d = c;
		c = rol(b, 30);
		b = a;
		a = t;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
}

static void sha1(const void *data, size_t len, unsigned char out[20])
{
	uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
	const unsigned char *p = data;
	size_t left = len;
	for (; left >= 64; left -= 64, p += 64)
		sha1_block(h, p);
	unsigned char tail[128] = {0};
	memcpy(tail, p, left);
	tail[left] = 0x80;
	size_t tlen = left + 1 + 8 <= 64 ? 64 : 128;
	uint64_t bits = (uint64_t)len * 8;
	for (int i = 0; i < 8; i++)
		tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
	sha1_block(h, tail);
	if (tlen == 128)
		sha1_block(h, tail + 64);
	for (int i = 0; i < 5; i++) {
		out[4 * i] = (unsigned char)(h[i] >> 24);
		out[4 * i + 1] = (unsigned char)(h[i] >> 16);
		out[4 * i + 2] = (unsigned char)(h[i] >> 8);
		out[4 * i + 3] = (unsigned char)h[i];
	}
}

/* ---- the connection ---- */

static struct ws_table *table(struct runner *r)
{
	if (!r->ws)
		r->ws = calloc(1, sizeof(*r->ws));
	return r->ws;
}

void *ws_arg(struct ws_conn *c)
{
	return c->arg;
}

struct runner *ws_runner(struct ws_conn *c)
{
	return c->r;
}

static void ws_free_deferred(struct loop *loop, void *arg)
{
	(void)loop;
	struct ws_conn *c = arg;
	free(c->extra);
	free(c);
}

/* Unlink from the upgrade request, if it still refers to us. */
static void detach_req(struct ws_conn *c)
{
	if (!c->req)
		return;
	c->req->ctx = NULL;
	c->req->ctx_free = NULL;
	c->req = NULL;
}

static void teardown(struct ws_conn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	loop_watch_del(&c->r->loop, &c->w);
	if (c->ops->on_close)
		c->ops->on_close(c);
	if (c->linked) {
		struct ws_table *t = c->r->ws;
		if (c->prev)
			c->prev->next = c->next;
		else
			t->head = c->next;
		if (c->next)
			c->next->prev = c->prev;
		t->count--;
		c->linked = false;
	}
	if (c->ctx)
		wslay_event_context_free(c->ctx);
	c->ctx = NULL;
	detach_req(c);
	if (c->urh) {
		/* libmicrohttpd owns the socket: it closes it and finishes the
		 * request (notify-completed) the next time it runs. */
		if (MHD_upgrade_action(c->urh, MHD_UPGRADE_ACTION_CLOSE) != MHD_YES)
			log_warn("websocket: closing the upgraded connection failed", NULL);
		c->urh = NULL;
		http_run_soon(c->r);
	} else if (c->fd >= 0) {
		close(c->fd);
	}
	c->fd = -1;
	if (loop_defer(&c->r->loop, ws_free_deferred, c) < 0)
		log_error("out of memory freeing a websocket", NULL);
}

static ssize_t recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
	(void)flags;
	struct ws_conn *c = user;
	if (c->input_paused) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	if (c->extra_off < c->extra_len) {
		size_t n = c->extra_len - c->extra_off;
		if (n > len)
			n = len;
		memcpy(buf, c->extra + c->extra_off, n);
		c->extra_off += n;
		c->last_recv_ms = monotonic_ms();
		return (ssize_t)n;
	}
	ssize_t n;
	do
		n = recv(c->fd, buf, len, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		} else {
			wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		}
		return -1;
	}
	if (n == 0) {
		/* The client went away without a close frame. */
		c->eof = true;
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	c->last_recv_ms = monotonic_ms();
	return n;
}

static ssize_t send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
		       void *user)
{
	struct ws_conn *c = user;
	ssize_t n;
	do
		n = send(c->fd, data, len, MSG_NOSIGNAL | (flags & WSLAY_MSG_MORE ? MSG_MORE : 0));
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		wslay_event_set_error(ctx, errno == EAGAIN || errno == EWOULDBLOCK
						   ? WSLAY_ERR_WOULDBLOCK
						   : WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return n;
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
		   void *user)
{
	(void)ctx;
	struct ws_conn *c = user;
	if (c->dead || c->closing_since_ms || wslay_is_ctrl_frame(arg->opcode))
		return; /* ping, pong and close are wslay's; nothing counts after our close */
	if (c->ops->on_message)
		c->ops->on_message(c, arg->opcode == WSLAY_TEXT_FRAME ? WS_TEXT : WS_BINARY,
				   arg->msg, arg->msg_length);
}

static void update_events(struct ws_conn *c);
static void service(struct ws_conn *c, bool readable);

static void on_socket(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	struct ws_conn *c = w->arg;
	if ((events & (EPOLLHUP | EPOLLERR)) && c->input_paused) {
		/* Gone for good: nothing more can be delivered either way. */
		teardown(c);
		return;
	}
	service(c, (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) != 0);
}

/* Read what there is, send what is queued, tell a starved producer, and
 * decide what to wait for next. */
static void service(struct ws_conn *c, bool readable)
{
	if (c->dead || c->depth)
		return;
	c->depth++;
	int rc = 0;
	if (readable && !c->input_paused && wslay_event_want_read(c->ctx))
		rc = wslay_event_recv(c->ctx);
	if (rc == 0 && !c->dead && wslay_event_want_write(c->ctx))
		rc = wslay_event_send(c->ctx);
	/* The producer may refill the queue: once, then send again. */
	if (rc == 0 && !c->dead && c->starved && c->opened &&
	    wslay_event_get_queued_msg_length(c->ctx) <= c->window / 2) {
		c->starved = false;
		if (c->ops->on_writable)
			c->ops->on_writable(c);
		if (!c->dead && wslay_event_want_write(c->ctx))
			rc = wslay_event_send(c->ctx);
	}
	c->depth--;
	if (c->dead)
		return;
	if (rc < 0 || c->eof) {
		teardown(c);
		return;
	}
	if (!wslay_event_want_read(c->ctx) && !wslay_event_want_write(c->ctx)) {
		/* Close frames both ways (or a protocol error answered). */
		teardown(c);
		return;
	}
	update_events(c);
}

static void update_events(struct ws_conn *c)
{
	/* Edge-triggered: a paused reader or a half-closed client must not
	 * make a level-triggered loop spin; everything is read or written
	 * until EAGAIN, and resuming input reads at once (ws_pause_input). */
	uint32_t ev = EPOLLET | EPOLLRDHUP;
	if (wslay_event_want_read(c->ctx) && !c->input_paused)
		ev |= EPOLLIN;
	if (wslay_event_want_write(c->ctx))
		ev |= EPOLLOUT;
	if (loop_watch_set(&c->r->loop, &c->w, ev) < 0)
		log_warn("websocket: epoll_ctl(MOD) failed", NULL);
}

/* Work queued from inside a callback is picked up by the outer service();
 * otherwise do it now. */
static void kick(struct ws_conn *c)
{
	if (!c->dead && !c->depth)
		service(c, false);
}

static const struct wslay_event_callbacks callbacks = {
	.recv_callback = recv_cb,
	.send_callback = send_cb,
	.on_msg_recv_callback = on_msg,
};

static struct ws_conn *conn_new(struct runner *r, const struct ws_ops *ops, void *arg,
				size_t window)
{
	struct ws_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->r = r;
	c->ops = ops;
	c->arg = arg;
	c->fd = -1;
	c->window = window ? window : r->cfg.stream_window;
	if (c->window < 64 * 1024)
		c->window = 64 * 1024;
	return c;
}

/* The socket is ours from here: wslay context, epoll, the handler. */
static int conn_start(struct ws_conn *c, int fd, const void *extra, size_t extra_len)
{
	struct ws_table *t = table(c->r);
	if (!t)
		return -ENOMEM;
	c->fd = fd;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	/* Keystrokes and their echoes are tiny: no Nagle delay (as ssh does).
	 * Not a TCP socket (tests: a socketpair) is fine. */
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (extra_len) {
		c->extra = malloc(extra_len);
		if (!c->extra)
			return -ENOMEM;
		memcpy(c->extra, extra, extra_len);
		c->extra_len = extra_len;
	}
	if (wslay_event_context_server_init(&c->ctx, &callbacks, c) != 0)
		return -ENOMEM;
	wslay_event_config_set_max_recv_msg_length(c->ctx, WS_MAX_MESSAGE);
	int rc = loop_watch_add(&c->r->loop, &c->w, fd, EPOLLIN | EPOLLRDHUP | EPOLLET, on_socket,
				c);
	if (rc < 0)
		return rc;
	c->next = t->head;
	if (t->head)
		t->head->prev = c;
	t->head = c;
	t->count++;
	c->linked = true;
	c->last_recv_ms = c->last_ping_ms = monotonic_ms();
	c->opened = true;
	c->depth++;
	if (c->ops->on_open)
		c->ops->on_open(c);
	c->depth--;
	/* Bytes that came with the handshake are read now, not on the next
	 * readiness event (there may be none). */
	service(c, true);
	return 0;
}

struct ws_conn *ws_open_fd(struct runner *r, int fd, const void *extra, size_t extra_len,
			   const struct ws_ops *ops, void *arg, size_t window)
{
	struct ws_conn *c = conn_new(r, ops, arg, window);
	if (!c) {
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	int rc = conn_start(c, fd, extra, extra_len);
	if (rc < 0) {
		teardown(c);
		errno = -rc;
		return NULL;
	}
	return c;
}

static void on_upgraded(void *cls, struct MHD_Connection *connection, void *con_cls,
			const char *extra_in, size_t extra_in_size, MHD_socket sock,
			struct MHD_UpgradeResponseHandle *urh)
{
	(void)connection;
	(void)con_cls;
	struct ws_conn *c = cls;
	c->urh = urh;
	/* The request stays open (upgraded) until we close: from here the
	 * connection frees itself, not the request. */
	detach_req(c);
	int rc = conn_start(c, sock, extra_in, extra_in_size);
	if (rc < 0) {
		log_errno("websocket: cannot start the connection", -rc, NULL);
		teardown(c);
	}
}

/* The request ended without an upgrade (client gone, MHD refused it). */
static void req_ctx_free(struct http_req *req)
{
	struct ws_conn *c = req->ctx;
	if (!c)
		return;
	c->req = NULL;
	req->ctx = NULL;
	teardown(c);
}

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

static enum MHD_Result refuse(struct http_req *req, const struct ws_ops *ops, void *arg,
			      unsigned status, const char *msg)
{
	/* A connection that never opens still ends with on_close, so the
	 * handler drops what it prepared. */
	struct ws_conn tmp = {.r = req->r, .ops = ops, .arg = arg, .fd = -1};
	if (ops->on_close)
		ops->on_close(&tmp);
	if (status == 426) {
		char *s = NULL;
		json_t *j = json_pack("{s:s,s:s}", "code", "UPGRADE_REQUIRED", "message", msg);
		if (j)
			s = json_dumps(j, JSON_COMPACT);
		json_decref(j);
		if (!s)
			return MHD_NO;
		enum MHD_Result rc = http_text(req, 426, "application/json", s, strlen(s),
					       "Sec-WebSocket-Version", "13");
		free(s);
		return rc;
	}
	return http_error(req, status, "BAD_WEBSOCKET_HANDSHAKE", "%s", msg);
}

enum MHD_Result ws_upgrade(struct http_req *req, const struct ws_ops *ops, void *arg, size_t window)
{
	if (!ws_is_upgrade_request(req))
		return refuse(req, ops, arg, 400,
			      "this endpoint needs a WebSocket upgrade "
			      "(Upgrade: websocket)");
	if (!has_token(http_header(req, "Connection"), "upgrade"))
		return refuse(req, ops, arg, 400, "Connection header without the upgrade token");
	const char *ver = http_header(req, "Sec-WebSocket-Version");
	if (!ver || strcmp(ver, "13"))
		return refuse(req, ops, arg, 426, "only WebSocket version 13 is supported");
	const char *key = http_header(req, "Sec-WebSocket-Key");
	if (!key_ok(key))
		return refuse(req, ops, arg, 400, "Sec-WebSocket-Key is not 16 bytes in base64");
	if (req->body_len)
		return refuse(req, ops, arg, 400, "a WebSocket handshake has no body");

	char joined[64];
	snprintf(joined, sizeof(joined), "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
	unsigned char digest[20];
	sha1(joined, strlen(joined), digest);
	struct buf acc = {0};
	if (buf_append_base64(&acc, digest, sizeof(digest)) < 0 || buf_append(&acc, "", 1) < 0) {
		buf_free(&acc);
		return refuse(req, ops, arg, 500, "out of memory");
	}

	struct ws_conn *c = conn_new(req->r, ops, arg, window);
	struct MHD_Response *resp = c ? MHD_create_response_for_upgrade(on_upgraded, c) : NULL;
	if (!resp) {
		buf_free(&acc);
		free(c);
		return refuse(req, ops, arg, 500, "out of memory");
	}
	MHD_add_response_header(resp, "Upgrade", "websocket");
	MHD_add_response_header(resp, "Connection", "Upgrade");
	MHD_add_response_header(resp, "Sec-WebSocket-Accept", acc.data);
	buf_free(&acc);
	c->req = req;
	req->ctx = c;
	req->ctx_free = req_ctx_free;
	req->responded = true;
	enum MHD_Result rc = MHD_queue_response(req->conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	MHD_destroy_response(resp);
	if (rc != MHD_YES) {
		/* Refused by libmicrohttpd (HTTP/1.0 client, ...): the request
		 * ends and req_ctx_free tears the connection down. */
		log_warn("websocket: the upgrade response was refused", NULL);
	}
	return rc;
}

int ws_send2(struct ws_conn *c, int opcode, const void *head, size_t head_len, const void *data,
	     size_t len)
{
	if (c->dead || !c->ctx)
		return -1;
	uint8_t stackbuf[16 * 1024];
	uint8_t *joined = NULL;
	const uint8_t *msg = head_len ? head : data;
	size_t total = head_len + len;
	if (head_len && len) {
		joined = total > sizeof(stackbuf) ? malloc(total) : stackbuf;
		if (!joined)
			return -1;
		memcpy(joined, head, head_len);
		memcpy(joined + head_len, data, len);
		msg = joined;
	}
	struct wslay_event_msg m = {
		.opcode = opcode == WS_TEXT ? WSLAY_TEXT_FRAME : WSLAY_BINARY_FRAME,
		.msg = msg,
		.msg_length = total,
	};
	int rc = wslay_event_queue_msg(c->ctx, &m);
	if (joined && joined != stackbuf)
		free(joined);
	if (rc != 0)
		return -1;
	kick(c);
	return 0;
}

int ws_send(struct ws_conn *c, int opcode, const void *data, size_t len)
{
	return ws_send2(c, opcode, NULL, 0, data, len);
}

size_t ws_queued(struct ws_conn *c)
{
	return c->ctx ? wslay_event_get_queued_msg_length(c->ctx) : 0;
}

bool ws_has_room(struct ws_conn *c)
{
	if (c->dead || !c->ctx || ws_closing(c))
		return false;
	if (wslay_event_get_queued_msg_length(c->ctx) < c->window)
		return true;
	c->starved = true;
	return false;
}

void ws_pause_input(struct ws_conn *c, bool paused)
{
	if (c->dead || c->input_paused == paused)
		return;
	c->input_paused = paused;
	if (!paused && c->depth == 0) {
		/* Messages may already wait in the socket or in extra bytes:
		 * edge or not, read them now. */
		service(c, true);
		return;
	}
	if (!c->depth)
		update_events(c);
}

bool ws_closing(struct ws_conn *c)
{
	return c->dead || c->closing_since_ms != 0 || !c->ctx ||
	       wslay_event_get_close_sent(c->ctx) || wslay_event_get_close_received(c->ctx);
}

void ws_close(struct ws_conn *c, uint16_t code, const char *reason)
{
	if (c->dead || !c->ctx)
		return;
	if (!c->closing_since_ms)
		c->closing_since_ms = monotonic_ms();
	size_t rl = reason ? strlen(reason) : 0;
	if (rl > 123)
		rl = 123;
	wslay_event_queue_close(c->ctx, code, (const uint8_t *)reason, rl);
	/* Nothing more is read as input; the close answer is still awaited. */
	c->input_paused = false;
	kick(c);
}

void ws_tick(struct runner *r)
{
	if (!r->ws)
		return;
	uint64_t now = monotonic_ms();
	for (struct ws_conn *c = r->ws->head, *next; c; c = next) {
		next = c->next;
		if (c->closing_since_ms && now - c->closing_since_ms > WS_CLOSE_MS) {
			teardown(c);
			continue;
		}
		if (now - c->last_recv_ms > WS_IDLE_MS) {
			log_info("websocket: idle client disconnected", NULL);
			ws_close(c, 1001, "idle");
			continue;
		}
		if (now - c->last_recv_ms > WS_PING_MS && now - c->last_ping_ms > WS_PING_MS &&
		    !ws_closing(c)) {
			struct wslay_event_msg m = {.opcode = WSLAY_PING};
			if (wslay_event_queue_msg(c->ctx, &m) == 0)
				c->last_ping_ms = now;
			kick(c);
		}
	}
}

unsigned ws_count(struct runner *r)
{
	return r->ws ? r->ws->count : 0;
}

void ws_close_all(struct runner *r)
{
	if (!r->ws)
		return;
	while (r->ws->head) {
		struct ws_conn *c = r->ws->head;
		/* One try to say goodbye; whatever does not fit is dropped. */
		ws_close(c, 1001, "server shutting down");
		teardown(c);
	}
	free(r->ws);
	r->ws = NULL;
}

#endif /* HAVE_WSLAY */
