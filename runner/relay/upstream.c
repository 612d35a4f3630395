/* The port proxy's side towards the upstream (relay/portproxy.c has the
 * whole story): the sweep (time limits and the pool, one timer),
 * connecting, the request written out, the response head read in. */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "core/runner.h"
#include "relay/portproxy_internal.h"

/* A complete final (or informational) head at the start of in. */
static bool head_parsed(struct relay_req *p)
{
	for (;;) {
		enum h1_result rc = h1_parse_response_head(p->in, p->in_len, HEAD_MAX, &p->head);
		if (rc == H1_MORE)
			return false;
		if (rc != H1_OK) {
			error_set(&p->err, 0, "BAD_GATEWAY", "port %u: %s", p->port,
				  rc == H1_TOO_BIG ? "response head over 16 KiB or 100 fields"
						   : "invalid HTTP response head");
			relay_fail(p);
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
		relay_fail(p);
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

static void on_up_event(struct loop *loop, struct loop_watch *w, uint32_t events);

static void up_attach(struct relay_req *p, struct relay_conn *u)
{
	u->w.cb = on_up_event;
	u->w.arg = p;
	p->up = u;
	p->up_fd = u->w.fd;
}

/* A new connection to 127.0.0.1:port (AF_INET), or to [::1]:port when
 * 127.0.0.1 refused an asynchronous connect (the server may listen on ::1
 * only); one in hand is closed first (the head is still all in p->out). */
static int connect_upstream(struct relay_req *p, int family)
{
	if (p->up)
		relay_conn_close(&p->r->proxies->pool, p->up);
	p->up = NULL;
	p->up_fd = -1;
	bool connecting = false;
	struct relay_conn *u = relay_conn_open(&p->r->proxies->pool, p->port, family, on_up_event,
					       p, &connecting, &p->err);
	if (!u)
		return -1;
	up_attach(p, u);
	p->phase = connecting ? P_CONNECTING : P_REQUEST;
	return 0;
}

/* A pooled connection that the server closed before answering (it may
 * have timed it out just as we sent): an idempotent request without a
 * body is sent once more, on a new connection. Anything else fails. */
static bool retry(struct relay_req *p)
{
	if (!p->reused || !p->retryable || p->retried || p->got_bytes || p->phase != P_REQUEST)
		return false;
	p->retried = true;
	p->reused = false;
	p->r->proxies->retried++;
	p->up_write_dead = false;
	p->out.off = 0; /* the head, kept by relay_flush */
	p->in_len = 0;
	if (connect_upstream(p, AF_INET) < 0) {
		relay_fail(p);
		return true;
	}
	if (p->phase == P_REQUEST)
		relay_flush(p);
	relay_up_events(p);
	return true;
}

static void read_head(struct relay_req *p)
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
			relay_fail(p);
			return;
		}
		/* No progress(): the whole head must come within the time
		 * limit (a trickling upstream is cut as a silent one). */
		p->got_bytes = true;
		p->in_len += (size_t)n;
		/* The body waits for libmicrohttpd to ask for it. */
		if (head_parsed(p) && p->req_done)
			relay_client_resume(p);
	}
}

static void on_up_event(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	struct relay_req *p = w->arg;
	switch (p->phase) {
	case P_CONNECTING: {
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (getsockopt(p->up_fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = errno;
		if (soerr == ECONNREFUSED && p->up->family == AF_INET) {
			if (connect_upstream(p, AF_INET6) < 0) {
				relay_fail(p);
				return;
			}
			if (p->phase == P_CONNECTING)
				break;
		} else if (soerr) {
			error_set(&p->err, soerr, "BAD_GATEWAY", "port %u: cannot connect",
				  p->port);
			relay_fail(p);
			return;
		}
		p->phase = P_REQUEST;
		relay_progress(p);
		relay_flush(p);
		relay_client_resume(p); /* its first call again, now to go on */
		break;
	}
	case P_REQUEST:
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
			relay_flush(p);
			/* Room again: the client's body goes on. */
			if (!p->req_done && buf_avail(&p->out) < OUT_MAX / 2)
				relay_client_resume(p);
		}
		if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && p->head_done)
			p->stray = true;
		else if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
			read_head(p);
		break;
	case P_RESPONSE:
		if (p->hs_waiting) {
			p->hs_waiting = false;
			relay_hup_del(p);
			http_stream_wake(&p->hs);
		}
		break;
	case P_UPGRADED:
		relay_upgrade_pump(p);
		return;
	default:
		return;
	}
	relay_up_events(p);
}

/* An idle pooled connection to the port when there is one, else a new one.
 * An upgrade always gets a new one (it is never given back). */
int relay_open_upstream(struct relay_req *p)
{
	struct relay_table *t = p->r->proxies;
	struct relay_conn *u = p->upgrade ? NULL : relay_pool_take(&t->pool, p->port);
	if (!u) {
		t->opened++;
		return connect_upstream(p, AF_INET);
	}
	t->reused++;
	p->reused = true;
	up_attach(p, u);
	p->phase = P_REQUEST;
	return 0;
}
