/* WebSocket connections (docs/design/interactive.md#websocket-connections): libmicrohttpd's
 * microhttpd_ws does the framing, the socket sits on the runner's one epoll loop, and the runner
 * adds what a library cannot know: one output queue per connection under one window (input is
 * not decoded while the queue is at the window, so replies to a client that does not read never
 * pile up), pausable input, keep-alive pings and timeouts. Everything runs on the loop thread. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/http.h"

#define WS_TEXT 1
#define WS_BINARY 2

/* A client message larger than this is refused with close code 1009. */
#define WS_MAX_MESSAGE (1u << 20)

struct ws_conn;

struct ws_ops {
	/* The handshake is done; the handler may send. */
	void (*on_open)(struct ws_conn *c);
	/* A whole message from the client (WS_TEXT: valid UTF-8). */
	void (*on_message)(struct ws_conn *c, int opcode, const uint8_t *data, size_t len);
	/* The queue fell below half the window after ws_has_room() said no. */
	void (*on_writable)(struct ws_conn *c);
	/* The connection is gone (or never opened); the last call, for the
	 * handler to drop its state. c is freed after the loop batch. */
	void (*on_close)(struct ws_conn *c);
};

/* A request that asks for a WebSocket (Upgrade: websocket). */
bool ws_is_upgrade_request(struct http_req *req);
/* Check the handshake and answer 101; ops->on_open follows once the
 * response is on the wire. A bad handshake is answered 400 (426 for another
 * protocol version) and ops->on_close is called at once. window: output
 * bytes that may wait in the queue (0: the stream window of the config). */
enum MHD_Result ws_upgrade(struct http_req *req, const struct ws_ops *ops, void *arg,
			   size_t window);

/* For tests and fuzzing: a WebSocket server connection over an already
 * connected socket (no HTTP); the fd is owned from here on. extra: bytes
 * already read from it. NULL with errno set on failure. */
struct ws_conn *ws_open_fd(struct runner *r, int fd, const void *extra, size_t extra_len,
			   const struct ws_ops *ops, void *arg, size_t window);

void *ws_arg(struct ws_conn *c);
/* Queue a whole message (copied). 0, or -1 once the connection is closing. */
int ws_send(struct ws_conn *c, int opcode, const void *data, size_t len);
/* The same with a prefix (a channel byte, a replay header) before data. */
int ws_send2(struct ws_conn *c, int opcode, const void *head, size_t head_len, const void *data,
	     size_t len);
/* Whether the output queue is under the window; when not, on_writable
 * follows once it has drained to half. */
bool ws_has_room(struct ws_conn *c);
/* Stop (or resume) reading from the client: its messages wait in the
 * socket, and TCP tells the client to slow down. */
void ws_pause_input(struct ws_conn *c, bool paused);
/* Send a close frame after what is queued, then end the connection when
 * the client answers (or after a short grace). code 0: no status. */
void ws_close(struct ws_conn *c, uint16_t code, const char *reason);
bool ws_closing(struct ws_conn *c);

/* The runner's side: keep-alives and timeouts (1 s tick), open count, and
 * the end of every connection at shutdown (code 1001). */
void ws_tick(struct runner *r);
unsigned ws_count(struct runner *r);
void ws_close_all(struct runner *r);
