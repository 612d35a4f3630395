/* The port proxy's answer (relay/portproxy.c has the whole story): the
 * upstream's head passed on, its body streamed as libmicrohttpd asks. */
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "core/log.h"
#include "core/runner.h"
#include "relay/hop.h"
#include "relay/portproxy_internal.h"

static void copy_fields(struct relay_req *p, struct MHD_Response *resp, bool upgrade)
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
static ssize_t body_read(struct relay_req *p, char *buf, size_t max)
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
				relay_hup_later(p);
				relay_up_events(p);
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
				relay_up_close(p);
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
				relay_up_release(p);
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
				relay_up_release(p);
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
	struct relay_req *p = (struct relay_req *)((char *)s - offsetof(struct relay_req, hs));
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
	struct relay_req *p = (struct relay_req *)((char *)s - offsetof(struct relay_req, hs));
	p->hs_waiting = false;
	/* The response, and the buffer with it, is freed right after this. */
	if (p->big_block) {
		p->big_block = false;
		p->r->proxies->big_blocks--;
	}
	relay_unref(p);
}

static const struct http_stream_ops body_ops = {
	.produce_into = body_produce_into,
	.close = body_close,
};

enum MHD_Result relay_respond(struct relay_req *p, struct http_req *req)
{
	struct MHD_Response *resp;
	if (p->head.status == 101) {
		resp = MHD_create_response_for_upgrade(relay_on_upgraded, p);
		if (!resp)
			return MHD_NO;
		copy_fields(p, resp, true);
		p->keep = false;
		loop_watch_set(&p->r->loop, &p->up->w, 0);
		if (http_queue(req, 101, resp) != MHD_YES) {
			error_set(&p->err, 0, "BAD_GATEWAY",
				  "port %u: the upgrade cannot be passed on (HTTP/1.1 only)",
				  p->port);
			relay_fail(p);
			return http_fail(req, &p->err);
		}
		return MHD_YES;
	}
	if (p->framing_bad) {
		error_set(&p->err, 0, "BAD_GATEWAY", "port %u: invalid Content-Length", p->port);
		relay_fail(p);
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
		relay_up_release(p);
	p->phase = P_RESPONSE;
	return http_queue(req, p->head.status, resp);
}
