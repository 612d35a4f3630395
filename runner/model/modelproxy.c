/* Loopback model proxy: see modelproxy.h. */
#include "model/modelproxy.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include "audit/trail.h"
#include "core/cleanup.h"
#include "core/log.h"
#include "core/runner.h"
#include "http/gate.h"
#include "model/budget.h"
#include "model/modelproxy_internal.h"
#include "task/env.h"

static void wake(struct mp_req *q)
{
	if (q->suspended) {
		q->suspended = false;
		MHD_resume_connection(q->conn);
	}
	http_daemon_wake(&q->p->daemon);
}

/* ---- memory: every buffered byte of every request is counted ---- */

static bool mem_room(const struct modelproxy *p, size_t n)
{
	return p->mem + n <= MP_MEM_MAX;
}

static void mem_take(struct modelproxy *p, size_t n)
{
	p->mem += n;
}

static void resume_body(struct mp_req *q);

/* Bytes left a buffer: whoever waited for the budget tries again. */
static void mem_release(struct modelproxy *p, size_t n)
{
	p->mem -= n;
	if (!p->budget_blocked || p->mem > MP_MEM_MAX / 2)
		return;
	p->budget_blocked = false;
	for (struct mp_req *q = p->reqs; q; q = q->next) {
		if (q->body_blocked)
			resume_body(q);
		if (q->upstream_paused && q->call && buf_avail(&q->out) < MP_HIGH_WATER / 2) {
			q->upstream_paused = false;
			gw_call_resume(q->call);
		}
	}
}

/* ---- the upstream call ---- */

static void up_head(struct gw_call *c, void *arg, long status, const char *ctype,
		    const char *retry_after)
{
	(void)c;
	struct mp_req *q = arg;
	q->head = true;
	q->status = status;
	/* Only a 200 is a model's answer that used tokens. */
	q->scanning = status == 200;
	snprintf(q->ctype, sizeof(q->ctype), "%s", ctype);
	snprintf(q->retry_after, sizeof(q->retry_after), "%s", retry_after);
	wake(q);
}

static int up_data(struct gw_call *c, void *arg, const char *p, size_t n)
{
	(void)c;
	struct mp_req *q = arg;
	if (buf_avail(&q->out) >= MP_HIGH_WATER || !mem_room(q->p, n)) {
		/* The client reads slowly (or everyone's buffers are full):
		 * hold the gateway back. */
		if (buf_avail(&q->out) < MP_HIGH_WATER)
			q->p->budget_blocked = true;
		q->upstream_paused = true;
		return 1;
	}
	if (n && buf_append(&q->out, p, n) < 0)
		return -1;
	mem_take(q->p, n);
	if (q->scanning) {
		uint64_t reports = q->us.reports;
		wire_scan_feed(&q->us, p, n);
		q->out_bytes += n;
		if (q->us.reports != reports)
			q->out_at_report = q->out_bytes;
	}
	wake(q);
	return 0;
}

/* Every admitted call is settled once, however it ended (docs/design.md
 * design/model.md#usage-and-budgets): its hold released, and charged
 * - a whole 200 answer: the usage it reported, or, none reported, an
 *   estimate (the request's bytes as input, the answer's as output);
 * - a 200 answer cut short (the client hung up, the gateway broke off):
 *   what it reported so far plus the answer bytes after that report as
 *   output (nothing reported: the estimate of a whole one);
 * - no answer, but the gateway had the whole request when the client left
 *   or its time ran out: the hold itself (input estimate + BUDGET_OUT_HOLD),
 *   since the model may have written all of it (a non-streamed answer
 *   comes at once, at the end);
 * - any other status, or the gateway never reached: nothing (no model ran).
 * gone: the client left before the answer ended. */
static void settle(struct mp_req *q, bool gone)
{
	struct task_token *k = q->tok;
	if (q->settled || !q->admitted || !k)
		return;
	q->settled = true;
	bool answer = q->head && q->status == 200;
	if (q->scanning) {
		q->scanning = false;
		wire_scan_eof(&q->us);
	}
	bool whole = answer && !gone && q->eof && q->err == GW_OK;
	struct mu_usage u = {0};
	bool charge = false;
	if (answer && q->us.has_usage && (whole || !q->rt.metered)) {
		u = q->us.usage;
		charge = true;
	} else if (answer && q->rt.metered) {
		bool rep = q->us.has_usage;
		budget_estimate(&u, rep ? &q->us.usage : NULL, q->body_seen,
				q->out_bytes - (rep ? q->out_at_report : 0));
		if (!rep)
			k->b.unmetered++;
		k->b.estimated++;
		charge = true;
	} else if (!q->head && q->rt.metered && q->called && q->body_done &&
		   (gone || q->err == GW_TIMEOUT)) {
		u.prompt_tokens = (int64_t)budget_tokens_of(q->body_seen);
		u.completion_tokens = BUDGET_OUT_HOLD;
		u.total_tokens = u.prompt_tokens + u.completion_tokens;
		k->b.estimated++;
		charge = true;
	}
	budget_settle(&k->b, q->hold, charge ? &u : NULL);
	if (charge && gone)
		log_info("model call ended by the client: charged", "{s:s,s:s,s:I,s:b}", "task",
			 k->t ? k->t->id : "", "format", q->w->name, "total_tokens",
			 (json_int_t)u.total_tokens, "reported", q->us.has_usage);
	if (charge && k->t && k->watch && k->watch->usage)
		k->watch->usage(k->watch->arg, &k->b);
}

static void up_done(struct gw_call *c, void *arg, enum gw_err err, const char *msg)
{
	(void)c;
	struct mp_req *q = arg;
	q->call = NULL;
	q->eof = true;
	q->err = err;
	snprintf(q->errmsg, sizeof(q->errmsg), "%s", msg ? msg : "");
	settle(q, false);
	wake(q);
}

/* curl wants request body bytes: what the client sent so far. */
static size_t up_read(struct gw_call *c, void *arg, char *buf, size_t max)
{
	(void)c;
	struct mp_req *q = arg;
	size_t n = buf_avail(&q->up);
	if (!n) {
		if (q->body_done)
			return 0;
		q->send_paused = true;
		return GW_READ_PAUSE;
	}
	if (n > max)
		n = max;
	memcpy(buf, q->up.data + q->up.off, n);
	q->up.off += n;
	mem_release(q->p, n);
	if (q->body_blocked && buf_avail(&q->up) < MP_UP_WINDOW / 2)
		resume_body(q);
	return n;
}

static const struct gw_call_ops up_ops = {up_head, up_data, up_done, up_read};

static ssize_t body_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct mp_req *q = cls;
	size_t n = buf_take(&q->out, buf, max);
	if (n) {
		mem_release(q->p, n);
		if (q->upstream_paused && buf_avail(&q->out) < MP_HIGH_WATER / 2) {
			q->upstream_paused = false;
			gw_call_resume(q->call);
		}
		return (ssize_t)n;
	}
	if (q->eof)
		return q->err == GW_OK ? MHD_CONTENT_READER_END_OF_STREAM
				       : MHD_CONTENT_READER_END_WITH_ERROR;
	MHD_suspend_connection(q->conn);
	q->suspended = true;
	return 0;
}

static enum MHD_Result queue_head(struct mp_req *q);

/* The body waits for room (the window or the budget): the client's
 * connection sleeps; up_read or a released budget wakes it. */
static void resume_body(struct mp_req *q)
{
	q->body_blocked = false;
	wake(q);
}

/* The gateway call, as soon as the body starts (POST: streamed through
 * up_read) or once the request is complete (GET). */
static int start_call(struct mp_req *q)
{
	struct gw_request rq = {.method = q->post ? "POST" : "GET",
				.path = q->path.data,
				.accept = q->accept[0] ? q->accept : NULL,
				.content_type = q->ctype_in[0] ? q->ctype_in : NULL,
				.stream_body = q->post,
				.body_size = q->body_done ? (long long)q->body_seen
							  : q->content_length,
				.from_root = q->rt.base == WIRE_BASE_ROOT,
				.key_header = q->w->key_header,
				.headers = (const char *const *)q->hdrs};
	if (q->p->stopping)
		return -1;
	q->called = true;
	q->call = gw_call_start(q->p->r, &rq, &up_ops, q);
	return q->call ? 0 : -1;
}

/* A chunk of the request body: into the window, as much as fits; the rest
 * stays with libmicrohttpd (and the kernel, and the client) until curl
 * has sent what is here. */
static enum MHD_Result take_body(struct mp_req *q, const char *data, size_t *size)
{
	if (q->discard) {
		*size = 0;
		return MHD_YES;
	}
	if (q->body_seen + *size > MP_MAX_BODY) {
		q->too_big = q->discard = true;
		if (q->call) {
			gw_call_cancel(q->call);
			q->call = NULL;
		}
		mem_release(q->p, buf_avail(&q->up));
		buf_free(&q->up);
		*size = 0;
		return MHD_YES;
	}
	if (!q->called && start_call(q) < 0) {
		q->start_failed = q->discard = true;
		*size = 0;
		return MHD_YES;
	}
	if (!q->call) {
		/* The gateway answered and ended before the body did (an early
		 * error): the rest of the body has nowhere to go. */
		q->discard = true;
		mem_release(q->p, buf_avail(&q->up));
		buf_free(&q->up);
		*size = 0;
		return MHD_YES;
	}
	size_t room = MP_UP_WINDOW - buf_avail(&q->up);
	size_t take = *size < room ? *size : room;
	if (take && !mem_room(q->p, take)) {
		q->p->budget_blocked = true;
		take = 0;
	}
	if (take) {
		if (buf_append(&q->up, data, take) < 0)
			return MHD_NO;
		mem_take(q->p, take);
		q->body_seen += take;
		/* A chunked body (or one longer than it said) holds what it
		 * turns out to be. */
		uint64_t in = budget_tokens_of(q->body_seen);
		if (q->admitted && q->hold && !q->settled && in + BUDGET_OUT_HOLD > q->hold) {
			budget_hold_more(&q->tok->b, in + BUDGET_OUT_HOLD - q->hold);
			q->hold = in + BUDGET_OUT_HOLD;
		}
		*size -= take;
		if (q->send_paused) {
			q->send_paused = false;
			gw_call_resume_send(q->call);
		}
	}
	if (*size) {
		q->body_blocked = true;
		q->suspended = true;
		MHD_suspend_connection(q->conn);
	}
	return MHD_YES;
}

/* The whole body is in (or there was none): the call runs to its end. */
static enum MHD_Result body_complete(struct mp_req *q)
{
	q->body_done = true;
	if (q->too_big)
		return mp_failf(q, "request_too_large", "request body over %u bytes", MP_MAX_BODY);
	if (!q->start_failed && !q->called && start_call(q) < 0)
		q->start_failed = true;
	if (q->start_failed)
		return mp_failf(q, "gateway_unavailable",
				"the runner could not start a gateway call");
	if (q->send_paused) {
		q->send_paused = false;
		gw_call_resume_send(q->call); /* read() now says: the end */
	}
	q->state = MP_WAIT_HEAD;
	if (!q->head && !q->eof) {
		q->suspended = true;
		MHD_suspend_connection(q->conn);
		return MHD_YES;
	}
	return queue_head(q);
}

static enum MHD_Result queue_head(struct mp_req *q)
{
	if (!q->head) {
		/* Failed before any response: the gateway was not reached
		 * (gateway_timeout: 504, the others 502). */
		return mp_failf(q, gw_err_code(q->err), "model gateway: %s", q->errmsg);
	}
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
								      body_reader, q, NULL);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type",
				q->ctype[0] ? q->ctype : "application/octet-stream");
	if (q->retry_after[0])
		MHD_add_response_header(resp, "Retry-After", q->retry_after);
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	q->state = MP_STREAM;
	q->responded = true;
	enum MHD_Result rc = MHD_queue_response(q->conn, (unsigned)q->status, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* ---- MHD ---- */

/* The raw target, before libmicrohttpd decodes it: the path is matched and
 * forwarded as the client wrote it, and the query is passed on. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	(void)cls;
	(void)conn;
	struct mp_req *q = calloc(1, sizeof(*q));
	if (q && uri)
		q->target = strdup(uri);
	return q;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_size, void **con_cls)
{
	(void)version;
	(void)url; /* decoded: the raw target (on_uri) is what is matched */
	struct modelproxy *p = cls;
	struct mp_req *q = *con_cls;
	if (!q || !q->begun) {
		uid_t uid = (uid_t)-1;
		if (!gate_request_begins(conn, &uid))
			return MHD_NO;
		if (!q && !(q = calloc(1, sizeof(*q))))
			return MHD_NO;
		*con_cls = q;
		q->begun = true;
		q->uid = uid;
		q->p = p;
		q->conn = conn;
		q->content_length = -1;
		/* Streamed completions are many small writes: never let Nagle
		 * hold one back waiting for an ACK. */
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		int one = 1;
		if (ci &&
		    setsockopt(ci->connect_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
			log_errno("setsockopt(TCP_NODELAY) failed", errno, "model proxy");
		q->next = p->reqs;
		if (p->reqs)
			p->reqs->prev = q;
		p->reqs = q;
		return mp_begin(q, method);
	}
	if (q->responded && q->state != MP_WAIT_HEAD) {
		*upload_size = 0;
		return MHD_YES;
	}
	if (*upload_size) {
		if (!q->post) {
			*upload_size = 0; /* a body on GET: not forwarded */
			return MHD_YES;
		}
		return take_body(q, upload_data, upload_size);
	}
	if (q->state == MP_RECV)
		return body_complete(q);
	if (q->state == MP_WAIT_HEAD) {
		if (!q->head && !q->eof) {
			q->suspended = true;
			MHD_suspend_connection(conn);
			return MHD_YES;
		}
		return queue_head(q);
	}
	return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)conn;
	struct modelproxy *p = cls;
	struct mp_req *q = *con_cls;
	if (!q)
		return;
	*con_cls = NULL;
	if (!q->begun) {
		/* on_uri made it; the request never reached on_request. */
		free(q->target);
		free(q);
		return;
	}
	gate_request_ends(conn);
	if (q->call) {
		gw_call_cancel(q->call);
		q->call = NULL;
	}
	/* The client left before the answer ended: charged all the same. */
	settle(q, true);
	/* Tasks call it as often as they like: their calls are their uid's to
	 * bound in the trail, never the client's share
	 * (docs/design/audit.md#bounds-tasks-cannot-read-write-suppress-flood-or-crowd-it). */
	char source[32] = "unknown";
	if (q->uid != (uid_t)-1)
		snprintf(source, sizeof(source), "uid:%u", (unsigned)q->uid);
	audit_emit_from(p->r, source, "model", "model call",
			mp_audit_call(q, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK));
	if (q->counted)
		q->tok->inflight--;
	if (q->tok)
		tasktoken_put(&p->tokens, q->tok);
	if (q->prev)
		q->prev->next = q->next;
	else
		p->reqs = q->next;
	if (q->next)
		q->next->prev = q->prev;
	mem_release(p, buf_avail(&q->up) + buf_avail(&q->out));
	buf_free(&q->up);
	buf_free(&q->out);
	if (q->w)
		wire_scan_free(&q->us);
	for (size_t i = 0; i < q->n_hdrs; i++)
		free(q->hdrs[i]);
	free(q->hdrs);
	buf_free(&q->path);
	free(q->target);
	free(q);
}

int modelproxy_start(struct runner *r, struct error *err)
{
	if (!r->gateway)
		return 0;
	struct modelproxy *p = calloc(1, sizeof(*p));
	if (!p)
		return error_set(err, ENOMEM, NULL, "cannot start the model proxy");
	p->r = r;
	p->tokens.r = r;
	r->modelproxy = p;
	int fd = http_listen("127.0.0.1", r->cfg.model_proxy_port, &p->port, err);
	if (fd < 0)
		return error_wrap(err, "model proxy");
	/* Tasks connect here, so it has its own limits: per uid, a deadline
	 * for request heads, a shorter idle timeout (waiting on the gateway
	 * is suspended time and does not count). */
	unsigned max_conns = gate_connection_limit(MP_MAX_CONNS, 4);
	struct gate_policy gp = {.name = "model proxy",
				 .refuse_tasks = false,
				 .max_per_client = MP_PER_CLIENT < max_conns ? MP_PER_CLIENT
									     : max_conns,
				 .first_head_ms = r->cfg.header_deadline_ms,
				 .next_head_ms = MP_NEXT_HEAD_MS};
	p->gate = gate_new(r, &gp);
	if (!p->gate) {
		close(fd);
		return error_set(err, ENOMEM, NULL,
				 "model proxy: cannot set up connection admission");
	}
	struct http_daemon_conf conf = {
		.name = "model proxy",
		.listen_fd = fd,
		.on_request = on_request,
		.on_completed = on_completed,
		.on_uri = on_uri,
		.arg = p,
		.on_connection = gate_notify,
		.connection_arg = p->gate,
		.timeout_s = MP_IDLE_S,
		.conn_memory_limit = 64 * 1024,
		.conn_limit = max_conns,
	};
	if (http_daemon_start(&p->daemon, &r->loop, &conf, err) < 0)
		return -1;
	log_info("model proxy listening", "{s:s,s:i}", "address", "127.0.0.1", "port",
		 (int)p->port);
	return 0;
}

json_t *modelproxy_report(struct runner *r)
{
	struct modelproxy *p = r->modelproxy;
	if (!p)
		return json_null();
	json_t *o = gate_report(p->gate);
	json_object_set_new(o, "requests_per_task", json_integer(MP_PER_TASK));
	json_object_set_new(o, "idle_timeout_s", json_integer(MP_IDLE_S));
	json_object_set_new(o, "buffered_bytes_max", json_integer(MP_MEM_MAX));
	json_object_set_new(o, "request_bodies", json_string("streamed to the gateway"));
	json_object_set_new(o, "wire_formats",
			    json_pack("[s,s,s]", wire_openai.name, wire_anthropic.name,
				      wire_gemini.name));
	/* What a metered call holds of max_tokens while in flight, and how
	 * an answer that did not report its usage is charged (design/model.md#usage-and-budgets).
	 */
	json_object_set_new(o, "budget_hold",
			    json_pack("{s:s,s:i,s:i}", "per_call", "input estimate + output hold",
				      "output_hold_tokens", BUDGET_OUT_HOLD, "bytes_per_token",
				      BUDGET_BYTES_PER_TOKEN));
	json_object_set_new(o, "task_budget_defaults",
			    json_pack("{s:I,s:I}", "max_tokens", (json_int_t)r->cfg.task_max_tokens,
				      "max_model_requests",
				      (json_int_t)r->cfg.task_max_model_requests));
	return o;
}

/* End a request for good (reset, shutdown): a body still arriving goes
 * nowhere, no call starts for it, a call in flight is cancelled. True when
 * it had not ended yet. */
static bool req_abort(struct mp_req *q, const char *why)
{
	q->discard = true;
	q->start_failed = true;
	if (q->call) {
		gw_call_cancel(q->call);
		q->call = NULL;
	}
	if (q->eof)
		return false;
	q->eof = true;
	q->err = GW_ABORTED;
	snprintf(q->errmsg, sizeof(q->errmsg), "%s", why);
	return true;
}

unsigned modelproxy_revoke_all(struct runner *r, unsigned *requests)
{
	struct modelproxy *p = r->modelproxy;
	unsigned n = 0;
	*requests = 0;
	if (!p)
		return 0;
	n = tasktoken_revoke_all(&p->tokens);
	for (struct mp_req *q = p->reqs; q; q = q->next) {
		if (req_abort(q, "the box was reset"))
			(*requests)++;
		if (q->suspended)
			wake(q);
	}
	http_daemon_wake(&p->daemon);
	return n;
}

unsigned modelproxy_port(struct runner *r)
{
	return r->modelproxy ? r->modelproxy->port : 0;
}

void modelproxy_stop(struct runner *r)
{
	struct modelproxy *p = r->modelproxy;
	if (!p)
		return;
	p->stopping = true;
	if (p->daemon.d) {
		/* End every upstream call first, or a resumed stream would
		 * suspend again: MHD must not be stopped with suspended
		 * connections. */
		for (struct mp_req *q = p->reqs; q; q = q->next) {
			req_abort(q, "the runner is shutting down");
			if (q->suspended) {
				q->suspended = false;
				MHD_resume_connection(q->conn);
			}
		}
		http_daemon_run(&p->daemon);
	}
	http_daemon_stop(&p->daemon);
	gate_free(p->gate); /* after the daemon: it reports closed connections */
	tasktoken_free_all(&p->tokens);
	free(p);
	r->modelproxy = NULL;
}

struct task *modelproxy_start_task(struct runner *r, const struct task_spec *spec,
				   struct error *err)
{
	struct modelproxy *p = r->modelproxy;
	if (!p) {
		error_set(err, 0, "CAPABILITY_UNAVAILABLE", "the model proxy is not running");
		return NULL;
	}
	if (spec->env && env_validate(spec->env, err) < 0)
		return NULL;
	return tasktoken_start_task(&p->tokens, p->port, spec, err);
}
