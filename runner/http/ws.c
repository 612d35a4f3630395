#include "http/ws.h"

/* The framing is libmicrohttpd's microhttpd_ws (a decoder and encoder with
 * no I/O of its own, built from Debian's libmicrohttpd source for both
 * builds); this file owns the socket, the output queue and the timers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include <microhttpd_ws.h>

#include "audit/trail.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/list.h"
#include "http/internal.h"

#define WS_PING_MS 30000 /* a ping after this long without anything from the client */
#define WS_IDLE_MS 90000 /* nothing at all (not even a pong) for this long: closed */
#define WS_CLOSE_MS 2000 /* after our close frame, how long the client has to answer */
#define WS_IN_BUF 16384  /* bytes read from the socket at once (not yet decoded) */

struct ws_table {
	struct ws_conn *head;
	unsigned count;
};

/* Memory of one connection, whatever the client sends: the decoder holds
 * at most one partial message (WS_MAX_MESSAGE), the input buffer WS_IN_BUF,
 * and the output queue (every frame: data, pong, close, ping) the window
 * plus the one frame that crossed it, because input is not decoded while
 * the queue is at or over the window
 * (docs/design/interactive.md#every-byte-queued-counts-the-websocket-ping-flood). */
struct ws_conn {
	struct runner *r;
	const struct ws_ops *ops;
	void *arg;
	size_t window;
	struct MHD_WebSocketStream *ws;
	int fd;
	struct MHD_UpgradeResponseHandle *urh; /* NULL: ws_open_fd */
	struct http_req *req;                  /* until the upgrade is done or failed */
	struct loop_watch w;
	struct buf out;              /* encoded frames not yet sent (off: sent) */
	unsigned char in[WS_IN_BUF]; /* read, not yet decoded: in[in_off..in_len) */
	size_t in_off, in_len;
	uint64_t frame_left; /* bytes of the current frame not yet decoded; 0: at a frame start */
	bool opened, dead, linked;
	bool input_paused, starved, eof, close_sent, close_received, full;
	int depth; /* inside a callback: no re-entry, no free */
	uint64_t last_recv_ms, last_ping_ms, closing_since_ms;
	struct ws_conn *next, *prev;
	/* For its audit event when it ends (docs/design/audit.md): bytes each
	 * way on the wire, never their content. */
	const char *audit_door; /* NULL: not audited */
	char audit_what[160], client[48];
	uint64_t bytes_in, bytes_out, opened_us;
};

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

static void ws_free_deferred(struct loop *loop, void *arg)
{
	(void)loop;
	struct ws_conn *c = arg;
	buf_free(&c->out);
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
	if (c->audit_door)
		audit_emit(c->r, c->audit_door, "websocket closed",
			   json_pack("{s:{s:s},s:s,s:I,s:I,s:I}", "who", "client", c->client,
				     "target", c->audit_what, "bytes_in", (json_int_t)c->bytes_in,
				     "bytes_out", (json_int_t)c->bytes_out, "duration_us",
				     (json_int_t)(monotonic_us() - c->opened_us)));
	if (c->ops->on_close)
		c->ops->on_close(c);
	if (c->linked) {
		struct ws_table *t = c->r->ws;
		LIST_UNLINK(t->head, c);
		t->count--;
		c->linked = false;
	}
	if (c->ws)
		MHD_websocket_stream_free(c->ws);
	c->ws = NULL;
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

/* Append one encoded frame (the library's buffer, freed here). Every frame
 * the runner sends goes through here, so the queue is every byte queued. */
static int queue_frame(struct ws_conn *c, int status, char *frame, size_t len)
{
	int rc = -1;
	if (status == MHD_WEBSOCKET_STATUS_OK && frame)
		rc = buf_append(&c->out, frame, len) < 0 ? -1 : 0;
	if (frame)
		MHD_websocket_free(c->ws, frame);
	return rc;
}

static size_t queued(const struct ws_conn *c)
{
	return buf_avail(&c->out);
}

static int queue_close(struct ws_conn *c, uint16_t code, const char *reason, size_t rl)
{
	if (c->close_sent || !c->ws)
		return 0;
	c->close_sent = true;
	if (!c->closing_since_ms)
		c->closing_since_ms = monotonic_ms();
	char *frame = NULL;
	size_t len = 0;
	int st = MHD_websocket_encode_close(c->ws, code, code ? reason : NULL, code ? rl : 0,
					    &frame, &len);
	return queue_frame(c, st, frame, len);
}

/* Send what is queued until the socket is full. -1: the peer is gone. */
static int flush_out(struct ws_conn *c)
{
	while (buf_avail(&c->out)) {
		ssize_t n;
		do
			n = send(c->fd, c->out.data + c->out.off, buf_avail(&c->out), MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		c->out.off += (size_t)n;
		c->bytes_out += (uint64_t)n;
	}
	/* Drained: a burst's buffer is not kept for the connection's life. */
	if (c->out.cap > 64 * 1024)
		buf_free(&c->out);
	else
		buf_reset(&c->out);
	return 0;
}

/* A close code a client may send (RFC 6455 7.4). */
static bool close_code_ok(unsigned code)
{
	return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
	       (code >= 3000 && code <= 4999);
}

static void on_frame(struct ws_conn *c, int st, const char *payload, size_t len)
{
	switch (st) {
	case MHD_WEBSOCKET_STATUS_TEXT_FRAME:
	case MHD_WEBSOCKET_STATUS_BINARY_FRAME:
		/* Nothing counts after our close (or the client's). */
		if (!c->close_sent && !c->close_received && c->ops->on_message)
			c->ops->on_message(c,
					   st == MHD_WEBSOCKET_STATUS_TEXT_FRAME ? WS_TEXT
										 : WS_BINARY,
					   (const uint8_t *)payload, len);
		break;
	case MHD_WEBSOCKET_STATUS_PING_FRAME:
		if (!c->close_sent) {
			char *frame = NULL;
			size_t fl = 0;
			int est = MHD_websocket_encode_pong(c->ws, payload, len, &frame, &fl);
			if (queue_frame(c, est, frame, fl) < 0)
				queue_close(c, 1011, "out of memory", 13);
		}
		break;
	case MHD_WEBSOCKET_STATUS_CLOSE_FRAME: {
		c->close_received = true;
		unsigned short code = 0;
		if (MHD_websocket_split_close_reason(payload, len, &code, NULL, NULL) !=
			    MHD_WEBSOCKET_STATUS_OK ||
		    (code && !close_code_ok(code)))
			queue_close(c, 1002, "bad close code", 14);
		else
			queue_close(c, code ? 1000 : 0, "", 0); /* the echo (RFC 6455 5.5.1) */
		break;
	}
	default: /* pong */
		break;
	}
}

static void protocol_error(struct ws_conn *c, int st)
{
	uint16_t code = 1002;
	const char *why = "protocol error";
	if (st == MHD_WEBSOCKET_STATUS_MAXIMUM_SIZE_EXCEEDED) {
		code = 1009;
		why = "message too big";
	} else if (st == MHD_WEBSOCKET_STATUS_UTF8_ENCODING_ERROR) {
		code = 1007;
		why = "invalid UTF-8";
	}
	c->close_received = true; /* nothing more is read */
	queue_close(c, code, why, strlen(why));
}

/* Whether more input may be decoded now: not paused by the consumer, not
 * while the output queue is at the window (a flood of pings, or of
 * {"type":"ping"}, then waits in the socket: TCP backpressure), and not
 * after the close handshake. */
static bool may_read(struct ws_conn *c)
{
	if (c->dead || c->close_received || c->eof)
		return false;
	if (c->input_paused && !c->close_sent)
		return false;
	if (queued(c) >= c->window) {
		c->full = true;
		return false;
	}
	return true;
}

/* How many of the n buffered bytes at p the decoder may take now: never past
 * the end of the current frame, and a control frame only whole. The
 * library's close-frame UTF-8 check (libmicrohttpd 0.9.75, mhd_websocket.c)
 * computes its length as bytes_taken - bytes_before, which wraps around when
 * a close frame's payload arrives in pieces: it then reads far past its
 * buffer (found by fuzz_ws). 0: wait for more bytes. */
static size_t frame_take(struct ws_conn *c, const unsigned char *p, size_t n)
{
	if (c->frame_left == 0) {
		if (n < 2)
			return 0;
		size_t h = 2 +
			   ((p[1] & 0x7f) == 126   ? 2
			    : (p[1] & 0x7f) == 127 ? 8
						   : 0) +
			   (p[1] & 0x80 ? 4 : 0);
		if (n < h)
			return 0;
		uint64_t len = p[1] & 0x7f;
		if (len == 126)
			len = (uint64_t)p[2] << 8 | p[3];
		else if (len == 127)
			for (int i = 0; i < 8; i++)
				len = (i ? len << 8 : 0) | p[2 + i];
		if (len > UINT64_MAX - h)
			len = UINT64_MAX - h; /* the decoder refuses it */
		c->frame_left = h + len;
		/* A control frame (at most 125 bytes of payload: larger is the
		 * decoder's protocol error) goes in whole. */
		if ((p[0] & 0x08) && len <= 125 && n < c->frame_left) {
			c->frame_left = 0;
			return 0;
		}
	}
	return c->frame_left < n ? (size_t)c->frame_left : n;
}

/* Decode what is buffered, reading the socket when the buffer is empty,
 * until EAGAIN or a reason to stop. -1: the client is gone. */
static int read_in(struct ws_conn *c)
{
	while (may_read(c)) {
		size_t take = frame_take(c, c->in + c->in_off, c->in_len - c->in_off);
		if (take == 0) {
			/* Keep the partial frame head at the buffer's start and read
			 * more behind it. */
			if (c->in_off > 0) {
				memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
				c->in_len -= c->in_off;
				c->in_off = 0;
			}
			ssize_t n;
			do
				n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
			while (n < 0 && errno == EINTR);
			if (n < 0)
				return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
			c->bytes_in += (uint64_t)n;
			if (n == 0) {
				/* The client went away without a close frame. */
				c->eof = true;
				return 0;
			}
			c->in_len += (size_t)n;
			c->last_recv_ms = monotonic_ms();
			continue;
		}
		size_t used = 0;
		char *payload = NULL;
		size_t plen = 0;
		int st = MHD_websocket_decode(c->ws, (const char *)c->in + c->in_off, take, &used,
					      &payload, &plen);
		if (used == 0 && st == 0) {
			/* A whole head was given: the decoder must take something. */
			protocol_error(c, MHD_WEBSOCKET_STATUS_PROTOCOL_ERROR);
			return 0;
		}
		c->in_off += used;
		c->frame_left -= used < c->frame_left ? used : c->frame_left;
		if (c->in_off == c->in_len)
			c->in_off = c->in_len = 0;
		if (st < 0) {
			if (payload)
				MHD_websocket_free(c->ws, payload);
			protocol_error(c, st);
			return 0;
		}
		if (st > 0)
			on_frame(c, st, payload, plen);
		if (payload)
			MHD_websocket_free(c->ws, payload);
	}
	return 0;
}

static void update_events(struct ws_conn *c, bool rearm);

/* Read what may be read, send what is queued, tell a starved producer, and
 * decide what to wait for next. */
static void service(struct ws_conn *c)
{
	if (c->dead || c->depth)
		return;
	c->depth++;
	int rc = 0;
	bool more = false; /* rounds ran out with work left: re-arm (below) */
	for (int round = 0; rc == 0 && !c->dead; round++) {
		if (round == 4) {
			more = true;
			break;
		}
		rc = read_in(c);
		if (rc == 0 && !c->dead)
			rc = flush_out(c);
		if (rc < 0 || c->dead)
			break;
		bool again = false;
		if (c->starved && c->opened && queued(c) <= c->window / 2) {
			c->starved = false;
			if (c->ops->on_writable)
				c->ops->on_writable(c);
			again = true;
		}
		/* Input held back by a full queue resumes at half the window. */
		if (c->full && queued(c) <= c->window / 2) {
			c->full = false;
			again = true;
		}
		if (!again)
			break;
	}
	c->depth--;
	if (c->dead)
		return;
	if (rc < 0 || c->eof) {
		teardown(c);
		return;
	}
	if (c->close_sent && c->close_received && !queued(c)) {
		/* The close handshake is done (or a protocol error answered). */
		teardown(c);
		return;
	}
	update_events(c, more);
}

static void on_socket(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	struct ws_conn *c = w->arg;
	if ((events & (EPOLLHUP | EPOLLERR)) && (c->input_paused || c->full)) {
		/* Gone for good: nothing more can be delivered either way. */
		teardown(c);
		return;
	}
	service(c);
}

static void update_events(struct ws_conn *c, bool rearm)
{
	/* Edge-triggered: a paused reader or a half-closed client must not
	 * make a level-triggered loop spin; everything is read or written
	 * until EAGAIN, and resuming input reads at once (ws_pause_input).
	 * rearm: a turn stopped with bytes maybe left in the socket; a MOD
	 * makes epoll report the socket's current readiness again, so the
	 * next turn comes from the loop, after the other clients'. */
	uint32_t ev = EPOLLET | EPOLLRDHUP | EPOLLIN;
	if (queued(c))
		ev |= EPOLLOUT;
	if (rearm && loop_watch_set(&c->r->loop, &c->w, ev ^ EPOLLIN) < 0)
		log_warn("websocket: epoll_ctl(MOD) failed", NULL);
	if (loop_watch_set(&c->r->loop, &c->w, ev) < 0)
		log_warn("websocket: epoll_ctl(MOD) failed", NULL);
}

/* Work queued from inside a callback is picked up by the outer service();
 * otherwise do it now. */
static void kick(struct ws_conn *c)
{
	if (!c->dead && !c->depth)
		service(c);
}

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

/* The socket is ours from here: decoder, epoll, the handler. */
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
	if (extra_len > sizeof(c->in))
		return -E2BIG; /* libmicrohttpd's read buffer is smaller */
	if (extra_len)
		memcpy(c->in, extra, extra_len);
	c->in_len = extra_len;
	/* Whole messages only (the library reassembles fragments), each at most
	 * WS_MAX_MESSAGE including all its fragments. */
	if (MHD_websocket_stream_init(&c->ws,
				      MHD_WEBSOCKET_FLAG_SERVER | MHD_WEBSOCKET_FLAG_NO_FRAGMENTS,
				      WS_MAX_MESSAGE) != MHD_WEBSOCKET_STATUS_OK)
		return -ENOMEM;
	int rc = loop_watch_add(&c->r->loop, &c->w, fd, EPOLLIN | EPOLLRDHUP | EPOLLET, on_socket,
				c);
	if (rc < 0)
		return rc;
	LIST_PUSH(t->head, c);
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
	service(c);
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
	unsigned status;
	const char *problem = ws_handshake_problem(req, &status);
	if (problem)
		return refuse(req, ops, arg, status, problem);
	const char *key = http_header(req, "Sec-WebSocket-Key");
	char accept[32];
	if (MHD_websocket_create_accept_header(key, accept) != MHD_WEBSOCKET_STATUS_OK)
		return refuse(req, ops, arg, 400, "Sec-WebSocket-Key is not 16 bytes in base64");

	struct ws_conn *c = conn_new(req->r, ops, arg, window);
	struct MHD_Response *resp = c ? MHD_create_response_for_upgrade(on_upgraded, c) : NULL;
	if (!resp) {
		free(c);
		return refuse(req, ops, arg, 500, "out of memory");
	}
	MHD_add_response_header(resp, "Upgrade", "websocket");
	MHD_add_response_header(resp, "Connection", "Upgrade");
	MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
	c->req = req;
	req->ctx = c;
	req->ctx_free = req_ctx_free;
	req->responded = true;
	req->status = MHD_HTTP_SWITCHING_PROTOCOLS;
	const struct http_hooks *hk = req->r->http ? req->r->http->hooks : NULL;
	c->audit_door = hk && hk->audit_door ? hk->audit_door(req->path) : NULL;
	snprintf(c->audit_what, sizeof(c->audit_what), "%s", req->path);
	memcpy(c->client, req->client, sizeof(c->client));
	c->opened_us = monotonic_us();
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
	if (c->dead || !c->ws || c->close_sent)
		return -1;
	char stackbuf[16 * 1024];
	char *joined = NULL;
	const char *msg = head_len ? head : data;
	size_t total = head_len + len;
	if (head_len && len) {
		joined = total > sizeof(stackbuf) ? malloc(total) : stackbuf;
		if (!joined)
			return -1;
		memcpy(joined, head, head_len);
		memcpy(joined + head_len, data, len);
		msg = joined;
	}
	char *frame = NULL;
	size_t fl = 0;
	int st = opcode == WS_TEXT ? MHD_websocket_encode_text(c->ws, msg, total,
							       MHD_WEBSOCKET_FRAGMENTATION_NONE,
							       &frame, &fl, NULL)
				   : MHD_websocket_encode_binary(c->ws, msg, total,
								 MHD_WEBSOCKET_FRAGMENTATION_NONE,
								 &frame, &fl);
	if (joined && joined != stackbuf)
		free(joined);
	if (queue_frame(c, st, frame, fl) < 0)
		return -1;
	kick(c);
	return 0;
}

int ws_send(struct ws_conn *c, int opcode, const void *data, size_t len)
{
	return ws_send2(c, opcode, NULL, 0, data, len);
}

bool ws_has_room(struct ws_conn *c)
{
	if (c->dead || !c->ws || ws_closing(c))
		return false;
	if (queued(c) < c->window)
		return true;
	c->starved = true;
	return false;
}

void ws_pause_input(struct ws_conn *c, bool paused)
{
	if (c->dead || c->input_paused == paused)
		return;
	c->input_paused = paused;
	/* Resumed: messages may already wait in the buffer or the socket;
	 * edge or not, they are read now. */
	if (!paused)
		kick(c);
}

bool ws_closing(struct ws_conn *c)
{
	return c->dead || c->close_sent || c->close_received || !c->ws;
}

void ws_close(struct ws_conn *c, uint16_t code, const char *reason)
{
	if (c->dead || !c->ws)
		return;
	size_t rl = reason ? strlen(reason) : 0;
	if (rl > 123)
		rl = 123;
	queue_close(c, code, reason, rl);
	/* Nothing more is delivered as input; the close answer is still awaited. */
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
		    !ws_closing(c) && queued(c) < c->window) {
			char *frame = NULL;
			size_t fl = 0;
			int st = MHD_websocket_encode_ping(c->ws, NULL, 0, &frame, &fl);
			if (queue_frame(c, st, frame, fl) == 0)
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
		if (!c->dead)
			teardown(c);
	}
	free(r->ws);
	r->ws = NULL;
}
