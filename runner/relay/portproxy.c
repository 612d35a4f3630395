/* HTTP forwarded to a port inside the box: the engine behind the port proxy's route
 * (api/proxy.c), on the runner's one loop; its phases (start, request, response, upgraded),
 * time limits and the watch on suspended clients: docs/design/relay.md#the-port-proxy. Here the
 * entry points; the record and its waits in request.c, the upstream in upstream.c, the answer
 * in respond.c, the splice in upgrade.c. */
#include "relay/portproxy.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/runner.h"
#include "relay/hop.h"
#include "relay/portproxy_internal.h"

/* ---- the table; the request from the client ---- */

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
static int build_head(struct relay_req *p, struct http_req *req, const char *target)
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
	struct relay_table *t = req->r->proxies;
	struct relay_req *p = relay_req_new(req, port);
	if (!p)
		return MHD_NO;
	if (build_head(p, req, target) < 0)
		return MHD_NO;
	relay_pool_tenant(&t->pool, req->gen);
	const char *cl = http_header(req, "Content-Length");
	p->retryable = !p->upgrade && !p->chunked_out && idempotent(req->method) &&
		       (!cl || !strcmp(cl, "0"));
	if (!(p->in = relay_in_get(t)) || relay_open_upstream(p) < 0) {
		relay_fail(p); /* not suspended yet: answered here */
		return http_fail(req, &p->err);
	}
	if (p->phase == P_CONNECTING) {
		/* Answered (502) or let on once connected. */
		p->in_first_call = true;
		relay_client_suspend(p);
	} else {
		relay_flush(p);
	}
	relay_up_events(p);
	return MHD_YES;
}

enum MHD_Result relay_body(struct http_req *req, const char *data, size_t len)
{
	struct relay_req *p = req->ctx;
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
		relay_flush(p);
	}
	p->bytes_in += taken;
	/* Left over only while the buffer is full and waits for EPOLLOUT
	 * (dropped when the upstream stopped taking the request). */
	req->body_left = p->up_write_dead ? 0 : len - taken;
	if (req->body_left)
		relay_client_suspend(p); /* resumed when the upstream took half */
	relay_up_events(p);
	return MHD_YES;
}

enum MHD_Result relay_answer(struct http_req *req)
{
	struct relay_req *p = req->ctx;
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
		relay_client_suspend(p);
		return MHD_YES;
	}
	if (!p->req_done) {
		if (p->chunked_out && !p->up_write_dead && !p->last_chunk) {
			if (buf_append_str(&p->out, "0\r\n\r\n") < 0)
				return MHD_NO;
			p->last_chunk = true;
		}
		p->req_done = true;
		relay_flush(p);
		relay_up_events(p);
	}
	if (!p->head_done) {
		if (http_stopping(p->r))
			return MHD_NO;
		relay_client_suspend(p); /* until the head is in */
		return MHD_YES;
	}
	return relay_respond(p, req);
}

/* ---- shutdown ---- */

void relay_close_all(struct runner *r)
{
	if (!r->proxies)
		return;
	r->proxies->final = true;
	r->proxies->pool.final = true;
	for (struct relay_req *p = r->proxies->head, *next; p; p = next) {
		next = p->next;
		p->refs++; /* p stays while we look at it */
		if (p->phase == P_UPGRADED) {
			relay_upgrade_close(p);
		} else if (p->phase == P_RESPONSE) {
			p->client_gone = true;
			relay_up_close(p);
			if (p->hs_waiting) {
				p->hs_waiting = false;
				relay_hup_del(p);
				http_stream_wake(&p->hs);
			}
		} else if (p->phase != P_DONE && p->phase != P_FAILED) {
			error_set(&p->err, 0, "UNAVAILABLE", "the runner is stopping");
			relay_fail(p);
		}
		next = p->next;
		relay_unref(p);
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
		struct relay_req *p = t->spare_p[--t->n_spare_p];
		buf_free(&p->out);
		free(p);
	}
	while (t->n_spare_in)
		free(t->spare_in[--t->n_spare_in]);
	buf_free(&t->conn_hdr);
	free(r->proxies);
	r->proxies = NULL;
}
