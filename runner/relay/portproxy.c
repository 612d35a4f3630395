/* HTTP forwarded to a port inside the box (docs/design.md §9): the engine
 * behind the port proxy's route (api/proxy.c), on the runner's one loop.
 * One struct proxy per forwarded request:
 *
 *   start    the route checked the port: connect (non-blocking) with the
 *            client's connection suspended, so that a refused connection is
 *            still answered 502 before any body is read;
 *   request  the request head and body go to the upstream through a bounded
 *            buffer (the client is suspended while it is full); the response
 *            head is read meanwhile, bounded (H1_MAX_HEADERS, HEAD_MAX);
 *   response the body is read from the upstream only as libmicrohttpd asks
 *            for it (the stream suspends when the upstream has nothing), so
 *            a slow client holds the upstream back and memory stays flat;
 *   upgraded a 101 answer: libmicrohttpd hands over the client socket and
 *            both sockets are spliced as raw bytes on the loop.
 *
 * While a connection is suspended, libmicrohttpd does not watch it: a watch
 * of ours on the client socket (EPOLLRDHUP) notices a client that leaves.
 * The upstream has --proxy-timeout-ms to accept the connection, to take
 * each part of the request, and once it has all of it, to send the whole
 * response head (504 beyond); the body has no time limit (a server-sent
 * event stream may be idle for long). */
#include "relay/portproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "relay/h1parse.h"
#include "http/http.h"
#include "relay/hop.h"
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
	struct proxy *head;
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
	struct proxy *spare_p[SPARES];
	char *spare_in[SPARES];
	unsigned n_spare_p, n_spare_in;
	/* The request's Connection fields while its head is built: one buffer
	 * for every request (the loop is single-threaded), no allocation per
	 * request once it has grown to the largest. */
	struct buf conn_hdr;
	uint64_t reused, opened, retried;
};

struct proxy {
	struct runner *r;
	struct proxy *next, *prev;
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

static void up_events(struct proxy *p);
static void splice_pump(struct proxy *p);
static void on_timeout(struct proxy *p);
static void sweep_arm(struct relay_table *t);

/* ---- lifetime ---- */

int relay_init(struct runner *r)
{
	r->proxies = calloc(1, sizeof(*r->proxies));
	if (!r->proxies)
		return -1;
	r->proxies->r = r;
	r->proxies->pool.loop = &r->loop;
	return 0;
}

unsigned relay_count(struct runner *r)
{
	return r->proxies ? r->proxies->count : 0;
}

static void hup_del(struct proxy *p)
{
	p->hup_wanted = false;
	loop_watch_del(&p->r->loop, &p->hup_w);
}

static void hup_add(struct proxy *p);

static char *in_get(struct relay_table *t)
{
	return t->n_spare_in ? t->spare_in[--t->n_spare_in] : malloc(HEAD_MAX);
}

static void in_put(struct relay_table *t, char *in)
{
	if (in && t->n_spare_in < SPARES && !t->final)
		t->spare_in[t->n_spare_in++] = in;
	else
		free(in);
}

/* ---- the sweep: upstream time limits and the pool, one timer ---- */

static uint64_t sweep_period_ms(const struct runner *r)
{
	uint64_t ms = r->cfg.proxy_timeout_ms / 8;
	if (!r->cfg.proxy_timeout_ms) /* 0 = none: the sweep serves the pool and hang-ups only */
		return 250;
	return ms < 10 ? 10 : ms > 250 ? 250 : ms;
}

static void on_sweep(struct loop *loop, struct loop_timer *tm)
{
	struct relay_table *t = tm->arg;
	struct runner *r = t->r;
	uint64_t now = monotonic_ms(), period = sweep_period_ms(r);
	uint64_t limit = r->cfg.proxy_timeout_ms;
	bool hup_due = false;
	for (struct proxy *p = t->head; p; p = p->next) {
		if (p->hup_wanted && !p->hup_w.added) {
			if (now - p->hup_since_ms >= period)
				hup_add(p);
			else
				hup_due = true;
		}
		/* on_timeout never frees p (records are freed after the
		 * loop's batch, loop_defer). */
		if (limit && p->waiting && now - p->progress_ms >= limit)
			on_timeout(p);
	}
	relay_pool_check(&t->pool, now);
	if (!t->waiting && !t->pool.idle && !hup_due)
		loop_timer_stop(loop, tm);
}

static void sweep_arm(struct relay_table *t)
{
	struct runner *r = t->r;
	if (!r || t->final)
		return;
	if (!t->sweep_init) {
		if (loop_timer_init(&r->loop, &t->sweep, on_sweep, t) < 0) {
			log_errno("proxy: timerfd_create failed: no upstream time limits", errno,
				  NULL);
			return;
		}
		t->sweep_init = true;
	}
	if (!t->sweep.armed) {
		uint64_t ms = sweep_period_ms(r);
		loop_timer_start(&r->loop, &t->sweep, ms, ms);
	}
}

/* Everything towards the upstream: socket, watch, buffers. */
static void up_close(struct proxy *p)
{
	if (p->up)
		relay_conn_close(&p->r->proxies->pool, p->up);
	p->up = NULL;
	p->up_fd = -1;
	if (p->waiting) {
		p->waiting = false;
		p->r->proxies->waiting--;
	}
	/* A small request buffer stays with the record for its next request
	 * (a malloc and a free per request less); a grown one goes. */
	if (p->out.cap > OUT_KEEP)
		buf_free(&p->out);
	else
		buf_reset(&p->out);
	in_put(p->r->proxies, p->in);
	p->in = NULL;
	p->in_len = p->pend_off = 0;
}

/* The response is complete: the upstream connection goes back to the pool
 * if it can carry another request (p->keep, the request sent whole,
 * nothing left over), else it is closed. */
static void up_release(struct proxy *p)
{
	if (p->up && p->keep && p->req_done && !p->up_write_dead && buf_avail(&p->out) == 0 &&
	    p->in_len == p->pend_off && !p->client_gone && !p->stray) {
		if (relay_pool_put(&p->r->proxies->pool, p->up))
			sweep_arm(p->r->proxies);
		p->up = NULL;
		p->up_fd = -1;
	}
	up_close(p);
}

static void proxy_free_cb(struct loop *loop, void *arg)
{
	(void)loop;
	struct proxy *p = arg;
	struct relay_table *t = p->r->proxies;
	relay_splice_free(&p->sp);
	if (t && !t->final && t->n_spare_p < SPARES) {
		t->spare_p[t->n_spare_p++] = p;
	} else {
		buf_free(&p->out);
		free(p);
	}
}

static void proxy_unref(struct proxy *p)
{
	if (--p->refs > 0)
		return;
	struct relay_table *t = p->r->proxies;
	if (p->prev)
		p->prev->next = p->next;
	else
		t->head = p->next;
	if (p->next)
		p->next->prev = p->prev;
	t->count--;
	hup_del(p);
	loop_watch_del(&p->r->loop, &p->cl_w);
	up_close(p);
	/* Watches of this batch may still point into p. */
	if (t->final)
		proxy_free_cb(&p->r->loop, p);
	else if (loop_defer(&p->r->loop, proxy_free_cb, p) < 0)
		log_warn("proxy: out of memory: a request record is leaked", NULL);
}

/* The request's audit event (http/http.c): the body bytes each way. Only
 * called when the trail records it; the event is built before ctx_free. */
static void proxy_audit_end(struct http_req *req)
{
	struct proxy *p = req->ctx;
	if (p)
		http_audit_note_bytes(req, p->bytes_in, p->bytes_out);
}

/* libmicrohttpd is done with the request (answered, cut, or closed after an
 * upgrade). */
static void proxy_req_free(struct http_req *req)
{
	struct proxy *p = req->ctx;
	req->ctx = NULL;
	p->req = NULL;
	p->conn = NULL;
	p->suspended = false;
	hup_del(p);
	if (p->phase != P_DONE && p->phase != P_UPGRADED)
		up_close(p);
	if (p->phase != P_UPGRADED)
		p->phase = P_DONE;
	proxy_unref(p);
}

/* ---- the client connection ---- */

static void on_client_hup(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	struct proxy *p = w->arg;
	p->client_gone = true;
	hup_del(p);
	if (p->phase != P_UPGRADED)
		up_close(p);
	if (p->hs_waiting) {
		p->hs_waiting = false;
		http_stream_wake(&p->hs); /* fill() cuts the connection */
	} else if (p->suspended) {
		p->suspended = false;
		http_req_resume(p->req);
	}
}

/* While libmicrohttpd does not watch the client (suspended), we do: a
 * client that leaves must not leave us waiting on an idle upstream. */
static void hup_add(struct proxy *p)
{
	p->hup_wanted = false;
	if (p->hup_w.added || p->client_fd < 0)
		return;
	int rc = loop_watch_add(&p->r->loop, &p->hup_w, p->client_fd, EPOLLRDHUP, on_client_hup, p);
	if (rc < 0)
		log_errno("proxy: cannot watch the client socket", -rc, NULL);
}

/* Most waits end within microseconds (the upstream answers): the watch
 * (two epoll_ctl) is added by the sweep to a wait that lasts a sweep
 * period, so a client that leaves is still cut within two periods. */
static void hup_later(struct proxy *p)
{
	if (p->hup_w.added || p->hup_wanted)
		return;
	p->hup_wanted = true;
	p->hup_since_ms = monotonic_ms();
	sweep_arm(p->r->proxies);
}

static void client_suspend(struct proxy *p)
{
	if (p->suspended || !p->req)
		return;
	http_req_suspend(p->req);
	p->suspended = true;
	hup_later(p);
}

static void client_resume(struct proxy *p)
{
	if (!p->suspended)
		return;
	p->suspended = false;
	hup_del(p);
	http_req_resume(p->req);
}

/* The request fails with err (set): the client gets it at its next call. */
static void fail(struct proxy *p)
{
	if (p->phase == P_FAILED || p->phase == P_DONE)
		return;
	log_info("proxy: upstream failed", "{s:i,s:s,s:s}", "port", (int)p->port, "code",
		 error_code(&p->err), "error", p->err.msg);
	p->phase = P_FAILED;
	up_close(p);
	client_resume(p);
}

/* ---- the upstream: connect, request, response head ---- */

static void progress(struct proxy *p)
{
	p->progress_ms = monotonic_ms();
}

/* Do we wait on the upstream (connecting, writing, awaiting the head)? */
static bool waiting_on_upstream(struct proxy *p)
{
	if (p->phase == P_CONNECTING)
		return true;
	if (p->phase != P_REQUEST)
		return false;
	return (buf_avail(&p->out) && !p->up_write_dead) || (p->req_done && !p->head_done);
}

/* While we wait on the upstream the table's sweep checks us; progress moves
 * the deadline (checked by the sweep), not a timer of our own: a timerfd per
 * request was three system calls of every proxied request. */
static void timer_update(struct proxy *p)
{
	bool waiting = waiting_on_upstream(p) && p->up_fd >= 0;
	if (waiting && !p->waiting) {
		progress(p);
		p->waiting = true;
		p->r->proxies->waiting++;
		sweep_arm(p->r->proxies);
	} else if (!waiting && p->waiting) {
		p->waiting = false;
		p->r->proxies->waiting--;
	}
}

static void on_timeout(struct proxy *p)
{
	if (!waiting_on_upstream(p))
		return;
	if (p->head_done) {
		/* The answer is in but the upstream takes no more of the
		 * request: the rest of the body is dropped, the answer goes
		 * out once the client has sent it all. */
		p->up_write_dead = true;
		buf_reset(&p->out);
		client_resume(p);
		up_events(p);
		return;
	}
	error_set(&p->err, 0, "GATEWAY_TIMEOUT", "port %u: no response within %llu ms", p->port,
		  (unsigned long long)p->r->cfg.proxy_timeout_ms);
	fail(p);
}

/* Write what is buffered; false when the upstream failed (p failed). */
static void flush_out(struct proxy *p)
{
	while (!p->up_write_dead && buf_avail(&p->out) > 0) {
		ssize_t n = send(p->up_fd, p->out.data + p->out.off, buf_avail(&p->out),
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			p->out.off += (size_t)n;
			progress(p);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		/* The upstream closed its side: an answer may already be
		 * there (413, 401); else reading finds out. */
		p->up_write_dead = true;
		buf_reset(&p->out);
	}
	/* A request that may be sent again keeps its head (retry). */
	if (buf_avail(&p->out) == 0 && !p->retryable)
		buf_reset(&p->out);
}

/* A complete final (or informational) head at the start of in. */
static bool head_parsed(struct proxy *p)
{
	for (;;) {
		enum h1_result rc = h1_parse_response_head(p->in, p->in_len, HEAD_MAX, &p->head);
		if (rc == H1_MORE)
			return false;
		if (rc != H1_OK) {
			error_set(&p->err, 0, "BAD_GATEWAY", "port %u: %s", p->port,
				  rc == H1_TOO_BIG ? "response head over 16 KiB or 100 fields"
						   : "invalid HTTP response head");
			fail(p);
			return false;
		}
		if (p->head.status >= 200 || p->head.status == 101)
			break;
		/* 100 Continue, 103 Early Hints: not passed on. */
		memmove(p->in, p->in + p->head.head_len, p->in_len - p->head.head_len);
		p->in_len -= p->head.head_len;
	}
	if (p->head.status == 101 && !p->upgrade) {
		error_set(&p->err, 0, "BAD_GATEWAY", "port %u: 101 without an upgrade request",
			  p->port);
		fail(p);
		return false;
	}
	p->head_done = true;
	p->pend_off = p->head.head_len;
	/* The body's framing, told once: the answer (respond) uses it too. */
	p->framing_bad =
		p->head.status == 101 ||
		h1_response_body(&p->head, p->head_request, &p->body_kind, &p->body_left) < 0;
	if (!p->framing_bad)
		p->in_hand =
			p->body_kind == H1_BODY_NONE ||
			(p->body_kind == H1_BODY_LENGTH && p->in_len - p->pend_off >= p->body_left);
	return true;
}

static int connect_upstream(struct proxy *p);

/* A pooled connection that the server closed before answering (it may
 * have timed it out just as we sent): an idempotent request without a
 * body is sent once more, on a new connection. Anything else fails. */
static bool retry(struct proxy *p)
{
	if (!p->reused || !p->retryable || p->retried || p->got_bytes || p->phase != P_REQUEST)
		return false;
	p->retried = true;
	p->reused = false;
	p->r->proxies->retried++;
	relay_conn_close(&p->r->proxies->pool, p->up);
	p->up = NULL;
	p->up_fd = -1;
	p->up_write_dead = false;
	p->out.off = 0; /* the head, kept by flush_out */
	p->in_len = 0;
	if (connect_upstream(p) < 0) {
		fail(p);
		return true;
	}
	if (p->phase == P_REQUEST)
		flush_out(p);
	up_events(p);
	return true;
}

static void read_head(struct proxy *p)
{
	while (!p->head_done && p->phase == P_REQUEST) {
		ssize_t n = recv(p->up_fd, p->in + p->in_len, HEAD_MAX - p->in_len, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			int e = n < 0 ? errno : 0;
			if (retry(p))
				return;
			error_set(&p->err, e, "BAD_GATEWAY",
				  "port %u: connection closed before a response", p->port);
			fail(p);
			return;
		}
		/* No progress(): the whole head must come within the time
		 * limit (a trickling upstream is cut as a silent one). */
		p->got_bytes = true;
		p->in_len += (size_t)n;
		/* The body waits for libmicrohttpd to ask for it. */
		if (head_parsed(p) && p->req_done)
			client_resume(p);
	}
}

static void up_events(struct proxy *p)
{
	timer_update(p);
	if (!p->up)
		return;
	uint32_t ev = 0;
	switch (p->phase) {
	case P_CONNECTING:
		ev = EPOLLOUT;
		break;
	case P_REQUEST:
		if (buf_avail(&p->out) && !p->up_write_dead)
			ev |= EPOLLOUT;
		/* With the whole answer in, the connection stays watched as
		 * it will be in the pool (no epoll_ctl per request); anything
		 * it says now is stray (on_up_event). */
		if (!p->head_done || (p->in_hand && !p->stray))
			ev |= EPOLLIN;
		break;
	case P_RESPONSE:
		ev = p->hs_waiting ? EPOLLIN : 0;
		break;
	case P_UPGRADED:
		ev = relay_splice_up_events(&p->sp);
		break;
	default:
		break;
	}
	loop_watch_set(&p->r->loop, &p->up->w, ev);
}

static int connect_v6(struct proxy *p);

static void on_up_event(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	struct proxy *p = w->arg;
	switch (p->phase) {
	case P_CONNECTING: {
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (getsockopt(p->up_fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = errno;
		if (soerr == ECONNREFUSED && p->up->family == AF_INET) {
			/* Nobody on 127.0.0.1: the server may listen on ::1 only. */
			if (connect_v6(p) < 0) {
				fail(p);
				return;
			}
			if (p->phase == P_CONNECTING)
				break;
		} else if (soerr) {
			error_set(&p->err, soerr, "BAD_GATEWAY", "port %u: cannot connect",
				  p->port);
			fail(p);
			return;
		}
		p->phase = P_REQUEST;
		progress(p);
		flush_out(p);
		client_resume(p); /* its first call again, now to go on */
		break;
	}
	case P_REQUEST:
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
			flush_out(p);
			/* Room again: the client's body goes on. */
			if (!p->req_done && buf_avail(&p->out) < OUT_MAX / 2)
				client_resume(p);
		}
		if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && p->head_done)
			p->stray = true;
		else if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
			read_head(p);
		break;
	case P_RESPONSE:
		if (p->hs_waiting) {
			p->hs_waiting = false;
			hup_del(p);
			http_stream_wake(&p->hs);
		}
		break;
	case P_UPGRADED:
		splice_pump(p);
		return;
	default:
		return;
	}
	up_events(p);
}

struct head_fields {
	struct relay_head h;
	const struct http_req *req;
};

static enum MHD_Result add_req_field(void *cls, enum MHD_ValueKind kind, const char *key,
				     size_t key_size, const char *value, size_t value_size)
{
	(void)kind;
	struct head_fields *f = cls;
	/* The app behind the port is the task's: the runner's token is not its to see. */
	if (!http_field_carries_token(f->req, key, key_size, value, value_size))
		relay_head_field(&f->h, key, key_size, value, value_size);
	return MHD_YES;
}

static enum MHD_Result join_connection(void *cls, enum MHD_ValueKind kind, const char *key,
				       const char *value)
{
	(void)kind;
	if (value && !strcasecmp(key, "Connection"))
		relay_connection_join(cls, value);
	return MHD_YES;
}

int relay_connection_fields(struct MHD_Connection *conn, struct buf *out)
{
	MHD_get_connection_values(conn, MHD_HEADER_KIND, join_connection, out);
	return buf_append(out, "", 1);
}

/* The request head for the upstream, by relay/hop.c's rules. */
static int build_head(struct proxy *p, struct http_req *req, const char *target)
{
	struct buf *conn_hdr = &p->r->proxies->conn_hdr;
	buf_reset(conn_hdr);
	if (relay_connection_fields(req->conn, conn_hdr) < 0)
		return -1;
	const char *upgrade = http_header(req, "Upgrade");
	p->upgrade = upgrade && *upgrade && h1_list_has_token(conn_hdr->data, "upgrade");

	struct head_fields f = {.req = req};
	relay_head_start(&f.h, &p->out, req->method, target, conn_hdr->data);
	MHD_get_connection_values_n(req->conn, MHD_HEADER_KIND, add_req_field, &f);
	/* http.c formatted the client's address once for the request. */
	const char *ip = strcmp(req->client, "?") ? req->client : "unknown";
	const char *cl = http_header(req, "Content-Length");
	/* http.c let only "chunked" through as Transfer-Encoding */
	p->chunked_out = !cl && http_header(req, "Transfer-Encoding");
	return relay_head_finish(&f.h, p->port, ip, cl, p->chunked_out,
				 p->upgrade ? upgrade : NULL);
}

/* ---- the request ---- */

static void up_attach(struct proxy *p, struct relay_conn *u)
{
	u->w.cb = on_up_event;
	u->w.arg = p;
	p->up = u;
	p->up_fd = u->w.fd;
}

static int connect_upstream(struct proxy *p)
{
	bool connecting = false;
	struct relay_conn *u = relay_conn_open(&p->r->proxies->pool, p->port, AF_INET, on_up_event,
					       p, &connecting, &p->err);
	if (!u)
		return -1;
	up_attach(p, u);
	p->phase = connecting ? P_CONNECTING : P_REQUEST;
	return 0;
}

/* 127.0.0.1 refused after an asynchronous connect: the same request on a
 * new connection to [::1]:port (the head is still all in p->out). */
static int connect_v6(struct proxy *p)
{
	relay_conn_close(&p->r->proxies->pool, p->up);
	p->up = NULL;
	p->up_fd = -1;
	bool connecting = false;
	struct relay_conn *u = relay_conn_open(&p->r->proxies->pool, p->port, AF_INET6, on_up_event,
					       p, &connecting, &p->err);
	if (!u)
		return -1;
	up_attach(p, u);
	p->phase = connecting ? P_CONNECTING : P_REQUEST;
	return 0;
}

/* An idle pooled connection to the port when there is one, else a new one.
 * An upgrade always gets a new one (it is never given back). */
static int open_upstream(struct proxy *p)
{
	struct relay_table *t = p->r->proxies;
	struct relay_conn *u = p->upgrade ? NULL : relay_pool_take(&t->pool, p->port);
	if (!u) {
		t->opened++;
		return connect_upstream(p);
	}
	t->reused++;
	p->reused = true;
	up_attach(p, u);
	p->phase = P_REQUEST;
	return 0;
}

static bool idempotent(const char *m)
{
	static const char *const ok[] = {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcasecmp(m, ok[i]))
			return true;
	return false;
}

enum MHD_Result relay_start(struct http_req *req, unsigned port, const char *target)
{
	struct runner *r = req->r;
	struct relay_table *t = r->proxies;
	struct proxy *p;
	struct buf out = {0};
	if (t->n_spare_p) {
		p = t->spare_p[--t->n_spare_p];
		out = p->out; /* a spare's buffer, reset by up_close */
	} else if (!(p = malloc(sizeof(*p)))) {
		return MHD_NO;
	}
	memset(p, 0, offsetof(struct proxy, head)); /* the parsed head is written whole */
	p->out = out;
	p->r = r;
	p->refs = 1;
	p->req = req;
	p->conn = req->conn;
	p->port = port;
	p->up_fd = -1;
	p->client_fd = -1;
	relay_splice_init(&p->sp);
	p->head_request = !strcmp(req->method, "HEAD");
	p->next = r->proxies->head;
	if (p->next)
		p->next->prev = p;
	r->proxies->head = p;
	r->proxies->count++;
	req->ctx = p;
	req->ctx_free = proxy_req_free;
	req->audit_end = proxy_audit_end;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci)
		p->client_fd = ci->connect_fd;

	if (build_head(p, req, target) < 0)
		return MHD_NO;
	relay_pool_tenant(&t->pool, req->gen);
	const char *cl = http_header(req, "Content-Length");
	p->retryable = !p->upgrade && !p->chunked_out && idempotent(req->method) &&
		       (!cl || !strcmp(cl, "0"));
	if (!(p->in = in_get(t)) || open_upstream(p) < 0) {
		p->phase = P_FAILED;
		up_close(p);
		log_info("proxy: upstream failed", "{s:i,s:s,s:s}", "port", (int)port, "code",
			 error_code(&p->err), "error", p->err.msg);
		return http_fail(req, &p->err);
	}
	if (p->phase == P_CONNECTING) {
		/* Answered (502) or let on once connected. */
		p->in_first_call = true;
		client_suspend(p);
	} else {
		flush_out(p);
	}
	up_events(p);
	return MHD_YES;
}

enum MHD_Result relay_body(struct http_req *req, const char *data, size_t len)
{
	struct proxy *p = req->ctx;
	if (!p || p->client_gone)
		return MHD_NO;
	if (p->phase != P_REQUEST || p->up_write_dead)
		return MHD_YES; /* dropped: the answer is known (failed, or given early) */
	/* Take what fits; what the upstream takes at once makes room again. */
	size_t taken = 0;
	while (taken < len && !p->up_write_dead) {
		size_t room = buf_avail(&p->out) < OUT_MAX ? OUT_MAX - buf_avail(&p->out) : 0;
		size_t frame = p->chunked_out ? 24 : 0;
		size_t n = room > frame ? room - frame : 0;
		if (n > len - taken)
			n = len - taken;
		if (!n)
			break;
		int rc = 0;
		if (p->chunked_out)
			rc = buf_appendf(&p->out, "%zx\r\n", n);
		rc |= buf_append(&p->out, data + taken, n);
		if (p->chunked_out)
			rc |= buf_append_str(&p->out, "\r\n");
		if (rc < 0)
			return MHD_NO;
		taken += n;
		flush_out(p);
	}
	p->bytes_in += taken;
	/* Left over only while the buffer is full and waits for EPOLLOUT
	 * (dropped when the upstream stopped taking the request). */
	req->body_left = p->up_write_dead ? 0 : len - taken;
	if (req->body_left)
		client_suspend(p); /* resumed when the upstream took half */
	up_events(p);
	return MHD_YES;
}

static void copy_fields(struct proxy *p, struct MHD_Response *resp, bool upgrade)
{
	const char *conn = h1_field(&p->head, "Connection");
	for (size_t i = 0; i < p->head.n_fields; i++) {
		const char *name = p->head.fields[i].name, *v = p->head.fields[i].value;
		if (!relay_response_field_kept(name, strlen(name), conn, upgrade))
			continue;
		if (upgrade && !strcasecmp(name, "Upgrade")) {
			MHD_add_response_header(resp, name, v);
			continue;
		}
		if (MHD_add_response_header(resp, name, v) != MHD_YES)
			log_warn("proxy: response field dropped", "{s:i,s:s}", "port", (int)p->port,
				 "field", name);
	}
}

/* Up to max body bytes into buf: the count; 0 = nothing now (the
 * upstream socket is watched); -1 = the end; -2 = cut short. */
static ssize_t body_read(struct proxy *p, char *buf, size_t max)
{
	if (p->client_gone)
		return -2;
	if (p->body_end)
		return -1;
	for (;;) {
		size_t pend = p->in_len - p->pend_off;
		ssize_t n;
		bool from_in = pend > 0;
		size_t want = max;
		if (p->body_kind == H1_BODY_LENGTH && want > p->body_left)
			want = (size_t)p->body_left;
		if (from_in) {
			n = (ssize_t)(want < pend ? want : pend);
			memcpy(buf, p->in + p->pend_off, (size_t)n);
			if (p->body_kind != H1_BODY_CHUNKED)
				p->pend_off += (size_t)n;
		} else {
			if (p->up_fd < 0)
				return -2;
			n = recv(p->up_fd, buf, want, MSG_DONTWAIT);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				/* Nothing now: the stream suspends until the
				 * upstream is readable (or the client leaves). */
				p->hs_waiting = true;
				hup_later(p);
				up_events(p);
				return 0;
			}
			if (n < 0)
				return -2;
			if (n == 0) {
				/* The end of a body delimited by the close;
				 * anything else is cut short. */
				if (p->body_kind != H1_BODY_CLOSE)
					return -2;
				p->body_end = true;
				up_close(p);
				return -1;
			}
		}
		if (p->body_kind == H1_BODY_CHUNKED) {
			size_t used = 0;
			ssize_t out = h1_chunked_decode(&p->ch, buf, (size_t)n, &used);
			if (from_in)
				p->pend_off += used;
			if (out < 0) {
				log_warn("proxy: invalid chunked body from the upstream", "{s:i}",
					 "port", (int)p->port);
				return -2;
			}
			if (p->ch.done) {
				/* Bytes after the last chunk: not ours to reuse. */
				if (!from_in && used < (size_t)n)
					p->keep = false;
				p->body_end = true;
				up_release(p);
				return out > 0 ? out : -1;
			}
			if (out == 0)
				continue; /* framing only */
			return out;
		}
		if (p->body_kind == H1_BODY_LENGTH) {
			p->body_left -= (uint64_t)n;
			if (!p->body_left) {
				p->body_end = true;
				up_release(p);
			}
		}
		return n;
	}
}

/* The stream's producer: the next bytes of the body, received straight
 * into libmicrohttpd's send buffer (one copy in, one out), and only now
 * that libmicrohttpd has room (a slow client holds the upstream back). */
static size_t body_produce_into(struct http_stream *s, char *dst, size_t max)
{
	struct proxy *p = (struct proxy *)((char *)s - offsetof(struct proxy, hs));
	ssize_t n = body_read(p, dst, max);
	if (n > 0)
		p->bytes_out += (uint64_t)n;
	if (n == -1 || (n > 0 && p->body_end))
		s->done = true;
	else if (n == -2)
		s->failed = true;
	return n > 0 ? (size_t)n : 0;
}

static void body_close(struct http_stream *s)
{
	struct proxy *p = (struct proxy *)((char *)s - offsetof(struct proxy, hs));
	p->hs_waiting = false;
	/* The response, and the buffer with it, is freed right after this. */
	if (p->big_block) {
		p->big_block = false;
		p->r->proxies->big_blocks--;
	}
	proxy_unref(p);
}

static const struct http_stream_ops body_ops = {
	.produce_into = body_produce_into,
	.close = body_close,
};

static void on_upgraded(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
			size_t extra_in_size, MHD_socket sock,
			struct MHD_UpgradeResponseHandle *urh);

static enum MHD_Result respond(struct proxy *p, struct http_req *req)
{
	struct MHD_Response *resp;
	if (p->head.status == 101) {
		resp = MHD_create_response_for_upgrade(on_upgraded, p);
		if (!resp)
			return MHD_NO;
		copy_fields(p, resp, true);
		p->keep = false;
		loop_watch_set(&p->r->loop, &p->up->w, 0);
		if (http_queue(req, 101, resp) != MHD_YES) {
			error_set(&p->err, 0, "BAD_GATEWAY",
				  "port %u: the upgrade cannot be passed on (HTTP/1.1 only)",
				  p->port);
			fail(p);
			return http_fail(req, &p->err);
		}
		return MHD_YES;
	}
	if (p->framing_bad) {
		error_set(&p->err, 0, "BAD_GATEWAY", "port %u: invalid Content-Length", p->port);
		fail(p);
		return http_fail(req, &p->err);
	}
	uint64_t size = UINT64_MAX;
	if (p->body_kind == H1_BODY_LENGTH)
		size = p->body_left;
	if (p->head_request) {
		/* No body, but the size of the one a GET would get. */
		uint64_t cl = 0;
		enum h1_body_kind k;
		struct h1_head tmp = p->head;
		if (h1_response_body(&tmp, false, &k, &cl) == 0 && k == H1_BODY_LENGTH)
			size = cl;
	}
	if (p->body_kind == H1_BODY_CHUNKED)
		h1_chunked_init(&p->ch);
	/* The upstream connection can carry another request after this one
	 * (then it goes back to the pool): HTTP/1.1, no close either way, a
	 * body whose end is known without the connection's end. */
	p->keep = !p->upgrade && p->head.minor >= 1 && p->body_kind != H1_BODY_CLOSE &&
		  !h1_field_has_token(&p->head, "Connection", "close");
	if (p->body_kind == H1_BODY_NONE || (p->body_kind == H1_BODY_LENGTH && !p->body_left))
		p->body_end = true;
	bool no_body = p->body_end && !p->head_request;
	/* A small body that came with the head is answered from memory: no
	 * stream, and the upstream connection is free again at once. */
	bool in_hand = !p->head_request && p->body_kind == H1_BODY_LENGTH && p->body_left &&
		       p->in_len - p->pend_off >= p->body_left;
	if (no_body) {
		resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
	} else if (in_hand) {
		resp = MHD_create_response_from_buffer((size_t)p->body_left, p->in + p->pend_off,
						       MHD_RESPMEM_MUST_COPY);
		p->bytes_out += p->body_left;
		p->pend_off += (size_t)p->body_left;
		p->body_left = 0;
		p->body_end = true;
	} else {
		size_t block = BODY_BLOCK;
		struct relay_table *t = p->r->proxies;
		if (p->body_kind == H1_BODY_LENGTH && !p->head_request &&
		    p->body_left > BODY_BLOCK && t->big_blocks < BIG_BLOCKS_MAX) {
			block = p->body_left < BODY_BLOCK_BIG ? (size_t)p->body_left
							      : BODY_BLOCK_BIG;
			p->big_block = true;
			t->big_blocks++;
		}
		p->refs++; /* the stream's */
		resp = http_stream_response(req, &p->hs, &body_ops, size, block);
	}
	if (!resp)
		return MHD_NO;
	copy_fields(p, resp, false); /* the fields point into p->in */
	if (p->body_end)
		up_release(p);
	p->phase = P_RESPONSE;
	return http_queue(req, p->head.status, resp);
}

enum MHD_Result relay_answer(struct http_req *req)
{
	struct proxy *p = req->ctx;
	if (!p)
		return http_failf(req, "RUNTIME_ERROR", "proxy state lost");
	if (p->client_gone)
		return MHD_NO;
	if (p->in_first_call) {
		/* The first call again (resumed): connected, or failed. */
		p->in_first_call = false;
		if (p->phase == P_FAILED)
			return http_fail(req, &p->err);
		return MHD_YES;
	}
	if (p->phase == P_FAILED)
		return http_fail(req, &p->err);
	if (p->phase != P_REQUEST) {
		if (http_stopping(p->r))
			return MHD_NO;
		client_suspend(p);
		return MHD_YES;
	}
	if (!p->req_done) {
		if (p->chunked_out && !p->up_write_dead && !p->last_chunk) {
			if (buf_append_str(&p->out, "0\r\n\r\n") < 0)
				return MHD_NO;
			p->last_chunk = true;
		}
		p->req_done = true;
		flush_out(p);
		up_events(p);
	}
	if (!p->head_done) {
		if (http_stopping(p->r))
			return MHD_NO;
		client_suspend(p); /* until the head is in */
		return MHD_YES;
	}
	return respond(p, req);
}

/* ---- upgraded: both sockets spliced ---- */

static void splice_close(struct proxy *p)
{
	struct loop *loop = &p->r->loop;
	loop_watch_del(loop, &p->cl_w);
	up_close(p);
	relay_splice_free(&p->sp);
	p->phase = P_DONE;
	struct MHD_UpgradeResponseHandle *urh = p->urh;
	p->urh = NULL;
	if (urh) {
		/* libmicrohttpd closes the client socket and completes the
		 * request (proxy_req_free). */
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
		http_run_soon(p->r);
	}
}

static void splice_pump(struct proxy *p)
{
	if (relay_splice_pump(&p->sp, p->client_fd, p->up_fd) <= 0) {
		splice_close(p);
		return;
	}
	loop_watch_set(&p->r->loop, &p->cl_w, relay_splice_client_events(&p->sp));
	up_events(p);
}

static void on_client_event(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	splice_pump(w->arg);
}

static void on_upgraded(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
			size_t extra_in_size, MHD_socket sock,
			struct MHD_UpgradeResponseHandle *urh)
{
	(void)conn;
	(void)con_cls;
	struct proxy *p = cls;
	p->urh = urh;
	p->client_fd = sock;
	p->phase = P_UPGRADED;
	buf_free(&p->out);
	/* Bytes that came with the heads belong to the new protocol. */
	int src = relay_splice_open(&p->sp, extra_in, extra_in_size, p->in + p->pend_off,
				    p->in_len - p->pend_off);
	in_put(p->r->proxies, p->in);
	p->in = NULL;
	p->in_len = p->pend_off = 0;
	int fl = fcntl(sock, F_GETFL);
	if (src < 0 || p->up_fd < 0 || fl < 0 || fcntl(sock, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    loop_watch_add(&p->r->loop, &p->cl_w, sock, 0, on_client_event, p) < 0) {
		log_warn("proxy: cannot splice an upgraded connection", "{s:i}", "port",
			 (int)p->port);
		splice_close(p);
		return;
	}
	int one = 1;
	setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	splice_pump(p);
}

/* ---- shutdown ---- */

void relay_close_all(struct runner *r)
{
	if (!r->proxies)
		return;
	r->proxies->final = true;
	r->proxies->pool.final = true;
	for (struct proxy *p = r->proxies->head, *next; p; p = next) {
		next = p->next;
		p->refs++; /* p stays while we look at it */
		if (p->phase == P_UPGRADED) {
			splice_close(p);
		} else if (p->phase == P_RESPONSE) {
			p->client_gone = true;
			up_close(p);
			if (p->hs_waiting) {
				p->hs_waiting = false;
				hup_del(p);
				http_stream_wake(&p->hs);
			}
		} else if (p->phase != P_DONE && p->phase != P_FAILED) {
			error_set(&p->err, 0, "UNAVAILABLE", "the runner is stopping");
			fail(p);
		}
		next = p->next;
		proxy_unref(p);
	}
	relay_pool_flush(&r->proxies->pool);
	if (r->proxies->sweep_init)
		loop_timer_close(&r->loop, &r->proxies->sweep);
	r->proxies->sweep_init = false;
}

void relay_free_all(struct runner *r)
{
	struct relay_table *t = r->proxies;
	if (!t)
		return;
	while (t->n_spare_p) {
		struct proxy *p = t->spare_p[--t->n_spare_p];
		buf_free(&p->out);
		free(p);
	}
	while (t->n_spare_in)
		free(t->spare_in[--t->n_spare_in]);
	buf_free(&t->conn_hdr);
	free(r->proxies);
	r->proxies = NULL;
}
