/* One forwarded request's record and its waits (relay/portproxy.c has the
 * whole story): its lifetime, the client connection suspended and watched,
 * the upstream's time limits (one sweep timer with the pool's) and the
 * events its socket is watched for. The bottom of the port proxy's files:
 * it calls none of the others. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "core/log.h"
#include "core/runner.h"
#include "relay/portproxy_internal.h"

/* ---- the record: spares, references, the end of a request ---- */

void relay_hup_del(struct relay_req *p)
{
	p->hup_wanted = false;
	loop_watch_del(&p->r->loop, &p->hup_w);
}
char *relay_in_get(struct relay_table *t)
{
	return t->n_spare_in ? t->spare_in[--t->n_spare_in] : malloc(HEAD_MAX);
}

void relay_in_put(struct relay_table *t, char *in)
{
	if (in && t->n_spare_in < SPARES && !t->final)
		t->spare_in[t->n_spare_in++] = in;
	else
		free(in);
}
/* Everything towards the upstream: socket, watch, buffers. */
void relay_up_close(struct relay_req *p)
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
	relay_in_put(p->r->proxies, p->in);
	p->in = NULL;
	p->in_len = p->pend_off = 0;
}

/* The response is complete: the upstream connection goes back to the pool
 * if it can carry another request (p->keep, the request sent whole,
 * nothing left over), else it is closed. */
void relay_up_release(struct relay_req *p)
{
	if (p->up && p->keep && p->req_done && !p->up_write_dead && buf_avail(&p->out) == 0 &&
	    p->in_len == p->pend_off && !p->client_gone && !p->stray) {
		if (relay_pool_put(&p->r->proxies->pool, p->up))
			relay_sweep_arm(p->r->proxies);
		p->up = NULL;
		p->up_fd = -1;
	}
	relay_up_close(p);
}

static void proxy_free_cb(struct loop *loop, void *arg)
{
	(void)loop;
	struct relay_req *p = arg;
	struct relay_table *t = p->r->proxies;
	relay_splice_free(&p->sp);
	if (t && !t->final && t->n_spare_p < SPARES) {
		t->spare_p[t->n_spare_p++] = p;
	} else {
		buf_free(&p->out);
		free(p);
	}
}

void relay_unref(struct relay_req *p)
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
	relay_hup_del(p);
	loop_watch_del(&p->r->loop, &p->cl_w);
	relay_up_close(p);
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
	struct relay_req *p = req->ctx;
	if (p)
		http_audit_note_bytes(req, p->bytes_in, p->bytes_out);
}

/* libmicrohttpd is done with the request (answered, cut, or closed after an
 * upgrade). */
static void proxy_req_free(struct http_req *req)
{
	struct relay_req *p = req->ctx;
	req->ctx = NULL;
	p->req = NULL;
	p->conn = NULL;
	p->suspended = false;
	relay_hup_del(p);
	if (p->phase != P_DONE && p->phase != P_UPGRADED)
		relay_up_close(p);
	if (p->phase != P_UPGRADED)
		p->phase = P_DONE;
	relay_unref(p);
}

/* A record for req (a spare one when there is one), linked into the table
 * and given as req's context; NULL when out of memory. */
struct relay_req *relay_req_new(struct http_req *req, unsigned port)
{
	struct runner *r = req->r;
	struct relay_table *t = r->proxies;
	struct relay_req *p;
	struct buf out = {0};
	if (t->n_spare_p) {
		p = t->spare_p[--t->n_spare_p];
		out = p->out; /* a spare's buffer, reset by relay_up_close */
	} else if (!(p = malloc(sizeof(*p)))) {
		return NULL;
	}
	memset(p, 0, offsetof(struct relay_req, head)); /* the parsed head is written whole */
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
	p->next = t->head;
	if (p->next)
		p->next->prev = p;
	t->head = p;
	t->count++;
	req->ctx = p;
	req->ctx_free = proxy_req_free;
	req->audit_end = proxy_audit_end;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci)
		p->client_fd = ci->connect_fd;
	return p;
}

/* ---- the client connection ---- */

static void on_client_hup(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	struct relay_req *p = w->arg;
	p->client_gone = true;
	relay_hup_del(p);
	if (p->phase != P_UPGRADED)
		relay_up_close(p);
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
static void relay_hup_add(struct relay_req *p)
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
void relay_hup_later(struct relay_req *p)
{
	if (p->hup_w.added || p->hup_wanted)
		return;
	p->hup_wanted = true;
	p->hup_since_ms = monotonic_ms();
	relay_sweep_arm(p->r->proxies);
}

void relay_client_suspend(struct relay_req *p)
{
	if (p->suspended || !p->req)
		return;
	http_req_suspend(p->req);
	p->suspended = true;
	relay_hup_later(p);
}

void relay_client_resume(struct relay_req *p)
{
	if (!p->suspended)
		return;
	p->suspended = false;
	relay_hup_del(p);
	http_req_resume(p->req);
}

/* The request fails with err (set): the client gets it at its next call. */
void relay_fail(struct relay_req *p)
{
	if (p->phase == P_FAILED || p->phase == P_DONE)
		return;
	log_info("proxy: upstream failed", "{s:i,s:s,s:s}", "port", (int)p->port, "code",
		 error_code(&p->err), "error", p->err.msg);
	p->phase = P_FAILED;
	relay_up_close(p);
	relay_client_resume(p);
}

/* ---- the sweep: upstream time limits and the pool, one timer ---- */

static void on_timeout(struct relay_req *p);

static uint64_t sweep_period_ms(const struct runner *r)
{
	uint64_t ms = r->cfg.proxy_timeout_ms / 8;
	if (!r->cfg.proxy_timeout_ms) /* 0 = none: the sweep serves the pool and hang-ups
					 only */
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
	for (struct relay_req *p = t->head; p; p = p->next) {
		if (p->hup_wanted && !p->hup_w.added) {
			if (now - p->hup_since_ms >= period)
				relay_hup_add(p);
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

void relay_sweep_arm(struct relay_table *t)
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

/* ---- waiting on the upstream: its time limit, the request out, its events ---- */

void relay_progress(struct relay_req *p)
{
	p->progress_ms = monotonic_ms();
}

/* Do we wait on the upstream (connecting, writing, awaiting the head)? */
static bool waiting_on_upstream(struct relay_req *p)
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
static void timer_update(struct relay_req *p)
{
	bool waiting = waiting_on_upstream(p) && p->up_fd >= 0;
	if (waiting && !p->waiting) {
		relay_progress(p);
		p->waiting = true;
		p->r->proxies->waiting++;
		relay_sweep_arm(p->r->proxies);
	} else if (!waiting && p->waiting) {
		p->waiting = false;
		p->r->proxies->waiting--;
	}
}

static void on_timeout(struct relay_req *p)
{
	if (!waiting_on_upstream(p))
		return;
	if (p->head_done) {
		/* The answer is in but the upstream takes no more of the
		 * request: the rest of the body is dropped, the answer goes
		 * out once the client has sent it all. */
		p->up_write_dead = true;
		buf_reset(&p->out);
		relay_client_resume(p);
		relay_up_events(p);
		return;
	}
	error_set(&p->err, 0, "GATEWAY_TIMEOUT", "port %u: no response within %llu ms", p->port,
		  (unsigned long long)p->r->cfg.proxy_timeout_ms);
	relay_fail(p);
}

/* Write what is buffered; false when the upstream failed (p failed). */
void relay_flush(struct relay_req *p)
{
	while (!p->up_write_dead && buf_avail(&p->out) > 0) {
		ssize_t n = send(p->up_fd, p->out.data + p->out.off, buf_avail(&p->out),
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			p->out.off += (size_t)n;
			relay_progress(p);
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

void relay_up_events(struct relay_req *p)
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
