/* What the port proxy's files share (relay/portproxy.c, request.c,
 * upstream.c, respond.c, upgrade.c): one forwarded request's record, the table of
 * them, and the steps each file lends the others. Not for use outside
 * relay/. */
#pragma once
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/loop.h"
#include "http/http.h"
#include "relay/h1parse.h"
#include "relay/pool.h"
#include "relay/splice.h"

#define HEAD_MAX (16 * 1024)   /* upstream response head */
#define OUT_MAX (64 * 1024)    /* request bytes on their way to the upstream */
#define BODY_BLOCK (64 * 1024) /* response body bytes per turn of the loop */
/* A body of known length goes through the response's own buffer (not the
 * connection's, as chunked framing does), so it can take more per turn:
 * each turn is a libmicrohttpd round (its epoll_wait, a recv, a send), and
 * 64 KiB turns were the gap to nginx on large bodies (nginx reads ~512 KiB
 * per readv into its 8 buffers). Sized to the body at most, and only for
 * BIG_BLOCKS_MAX bodies at a time (16 MiB in all), so that many downloads
 * at once cannot grow the runner: the others get BODY_BLOCK. */
#define BODY_BLOCK_BIG (1024 * 1024)
#define BIG_BLOCKS_MAX 16
#define SPARES 16     /* request records and head buffers kept for reuse */
#define OUT_KEEP 4096 /* a spare record keeps a request buffer up to this size */

enum phase {
	P_CONNECTING, /* the client waits in its first call */
	P_REQUEST,    /* forwarding the request, reading the response head */
	P_RESPONSE,   /* the response is queued: its body streams */
	P_UPGRADED,   /* spliced */
	P_FAILED,     /* err holds the answer */
	P_DONE,
};

struct relay_table {
	struct runner *r;
	struct relay_req *head;
	unsigned count;
	bool final; /* the loop has ended: records are freed at once */
	struct relay_pool pool;
	/* One timer for every request's upstream time limit and the pool. */
	struct loop_timer sweep;
	bool sweep_init;
	unsigned waiting;    /* requests waiting on their upstream */
	unsigned big_blocks; /* bodies streaming through a BODY_BLOCK_BIG buffer */
	/* Spare request records and head buffers: with musl's allocator a
	 * freed 16 KiB buffer went back to the kernel (munmap, then page
	 * faults) on every request. */
	struct relay_req *spare_p[SPARES];
	char *spare_in[SPARES];
	unsigned n_spare_p, n_spare_in;
	/* The request's Connection fields while its head is built: one buffer
	 * for every request (the loop is single-threaded), no allocation per
	 * request once it has grown to the largest. */
	struct buf conn_hdr;
	uint64_t reused, opened, retried;
};

struct relay_req {
	struct runner *r;
	struct relay_req *next, *prev;
	int refs; /* the request (until libmicrohttpd is done), the stream */
	struct http_req *req;
	struct MHD_Connection *conn;
	enum phase phase;
	struct error err;
	unsigned port;
	bool head_request;
	bool upgrade;       /* the client asked for a protocol upgrade */
	bool chunked_out;   /* the request body goes to the upstream chunked */
	bool in_first_call; /* suspended in the first call (connecting) */
	bool req_done;      /* the request body is complete */
	bool last_chunk;    /* the chunked terminator is in out */
	bool up_write_dead; /* the upstream stopped taking the request: drop the rest */
	bool suspended;     /* we suspended the client connection */
	bool client_gone;
	bool reused;    /* up_fd came from the pool */
	bool retryable; /* idempotent and bodiless: may be sent again once */
	bool retried;
	bool got_bytes; /* the upstream answered something on up_fd */
	bool keep;      /* up_fd may go back to the pool once the body is in */
	bool in_hand;   /* the head came with the whole body (or there is none) */
	bool stray;     /* ... and the upstream said more: not reusable */

	struct relay_conn *up; /* the upstream connection, or NULL */
	int up_fd;             /* up's socket, or -1 */
	bool waiting;          /* counted in the table's waiting (the sweep checks us) */
	uint64_t progress_ms;  /* the upstream's last sign of life, monotonic */
	int client_fd;
	struct loop_watch hup_w; /* the client socket while suspended */
	bool hup_wanted;         /* ... from the sweep, if the wait lasts */
	uint64_t hup_since_ms;

	struct buf out; /* request bytes for the upstream */
	/* The audit event's figures (plain requests): body bytes taken from the
	 * client and body bytes given to it; counters only on the hot path. */
	uint64_t bytes_in, bytes_out;

	char *in; /* the response head, then body bytes read with it */
	size_t in_len;
	size_t pend_off; /* body bytes in in[pend_off..in_len) */
	bool head_done;

	struct http_stream hs;
	bool hs_waiting; /* the stream is suspended until the upstream is readable */
	bool big_block;  /* ... through a buffer counted in the table's big_blocks */
	enum h1_body_kind body_kind;
	bool framing_bad;   /* h1_response_body refused the head (or a 101) */
	uint64_t body_left; /* H1_BODY_LENGTH */
	struct h1_chunked ch;
	bool body_end;

	struct MHD_UpgradeResponseHandle *urh;
	struct loop_watch cl_w; /* the upgraded client socket */
	struct relay_splice sp;

	struct h1_head head; /* last: not cleared for a new request (parsed whole) */
};

/* relay/request.c: the record, the client connection, the upstream's
 * time limits and watched events (it calls none of the files below). */
struct relay_req *relay_req_new(struct http_req *req, unsigned port);
char *relay_in_get(struct relay_table *t);
void relay_in_put(struct relay_table *t, char *in);
void relay_up_close(struct relay_req *p);
void relay_up_release(struct relay_req *p);
void relay_unref(struct relay_req *p);
void relay_hup_del(struct relay_req *p);
void relay_hup_later(struct relay_req *p);
void relay_client_suspend(struct relay_req *p);
void relay_client_resume(struct relay_req *p);
void relay_fail(struct relay_req *p);
void relay_sweep_arm(struct relay_table *t);
void relay_progress(struct relay_req *p);
void relay_flush(struct relay_req *p);
void relay_up_events(struct relay_req *p);
/* relay/upgrade.c: a 101's two sockets spliced. */
void relay_on_upgraded(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
		       size_t extra_in_size, MHD_socket sock,
		       struct MHD_UpgradeResponseHandle *urh);
void relay_upgrade_close(struct relay_req *p);
void relay_upgrade_pump(struct relay_req *p);
/* relay/upstream.c: connecting, the response head read in. */
int relay_open_upstream(struct relay_req *p);
/* relay/respond.c: the answer from the upstream's head, the body streamed. */
enum MHD_Result relay_respond(struct relay_req *p, struct http_req *req);
