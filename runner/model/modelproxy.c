/* Loopback model proxy: see modelproxy.h. */
#include "model/modelproxy.h"

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "model/budget.h"
#include "model/tasktoken.h"
#include "model/wire.h"
#include "relay/portproxy.h"
#include "task/env.h"
#include "model/gateway.h"
#include "http/gate.h"
#include "http/http.h"
#include "http/server.h"
#include "core/cleanup.h"
#include "audit/trail.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"

#define MP_MAX_BODY (8u << 20)     /* request bodies (long conversations) */
#define MP_HIGH_WATER (256u << 10) /* response bytes buffered before curl pauses */
#define MP_UP_WINDOW (64u << 10)   /* request bytes held before the client is paused */
#define MP_MEM_MAX (32u << 20)     /* all buffered bytes of all requests together */
#define MP_PER_TASK 64             /* requests in flight per task token */
#define MP_MAX_CONNS 512
#define MP_PER_CLIENT 256     /* connections per uid (tasks of one uid share it) */
#define MP_IDLE_S 120         /* a connection silent this long (not waiting on us) */
#define MP_NEXT_HEAD_MS 30000 /* a kept-alive connection's next request head */

struct modelproxy {
	struct runner *r;
	struct http_daemon daemon;
	unsigned port;
	struct task_tokens tokens;
	struct mp_req *reqs;
	struct gate *gate;
	size_t mem; /* bytes buffered in all requests (MP_MEM_MAX) */
	bool stopping;
	bool budget_blocked; /* someone waits for memory to be released */
};

enum mp_state { MP_RECV, MP_WAIT_HEAD, MP_STREAM };

struct mp_req {
	struct modelproxy *p;
	struct MHD_Connection *conn;
	struct task_token *tok;
	bool begun;           /* on_request has seen it */
	uid_t uid;            /* the caller's, from the gate; (uid_t)-1: unknown */
	char *target;         /* the raw request target (path and query), from on_uri */
	const struct wire *w; /* its format (OpenAI's until the path says) */
	struct wire_route rt;
	bool post;
	struct buf path; /* the gateway path and the forwarded query, NUL-terminated */
	char accept[128];
	char ctype_in[128];
	char **hdrs; /* request headers passed on ("Name: value", NULL-terminated) */
	size_t n_hdrs;
	long long content_length; /* -1: chunked */
	/* The request body streams through `up` (at most MP_UP_WINDOW). */
	struct buf up;
	uint64_t body_seen;
	bool body_done;    /* the client sent all of it */
	bool body_blocked; /* the client is paused until there is room */
	bool send_paused;  /* curl waits for body bytes */
	bool discard;      /* the rest of the body goes nowhere */
	bool too_big, start_failed;
	bool counted;  /* in tok->inflight */
	bool called;   /* the gateway call was started (it may be over) */
	bool admitted; /* by the budget: holds `hold` tokens until settled */
	bool settled;  /* charged, its hold released */
	uint64_t hold;
	uint64_t out_bytes;     /* of a 200 answer, from the gateway */
	uint64_t out_at_report; /* out_bytes when the answer last reported usage */
	enum mp_state state;
	bool responded;
	struct gw_call *call;
	bool head;
	long status;
	char ctype[128];
	char retry_after[32];
	struct buf out;
	bool eof;
	enum gw_err err;
	char errmsg[256];
	const char *fail_code; /* the runner's own refusal (mp_fail), for the audit */
	unsigned fail_status;
	bool upstream_paused;
	bool suspended;
	struct wire_scan us;
	bool scanning;
	struct mp_req *next, *prev;
};

/* The audit event of one call through the proxy (docs/design.md §13). */
static json_t *audit_call(const struct mp_req *q, bool completed)
{
	const struct task_token *k = q->tok;
	json_t *ev = json_pack("{s:{s:s?},s:s,s:s?,s:i,s:I,s:I,s:b}", "who", "task",
			       k && k->t ? k->t->id : NULL, "format", q->w ? q->w->name : "openai",
			       "path", q->rt.path, "status",
			       q->fail_code ? (int)q->fail_status : (int)q->status, "bytes_in",
			       (json_int_t)q->body_seen, "bytes_out", (json_int_t)q->out_bytes,
			       "completed", completed);
	if (q->fail_code) {
		json_object_set_new(ev, "outcome", json_string("refused"));
		json_object_set_new(ev, "code", json_string(q->fail_code));
	} else if (q->status != 200) {
		json_object_set_new(ev, "outcome", json_string("failed"));
	}
	if (q->us.has_usage)
		json_object_set_new(ev, "usage", mu_usage_json(&q->us.usage));
	/* The gateway's word for the model, never the task's request body. */
	if (q->w && q->us.model[0])
		json_object_set_new(ev, "model", json_string(q->us.model));
	return ev;
}

/* An error in the caller's wire format (OpenAI's until the path says
 * otherwise), so SDKs in the task report it properly; the status from
 * error_http_status, like every other error of the runner. */
static enum MHD_Result mp_fail(struct mp_req *q, const struct error *e)
{
	unsigned status = error_http_status(e);
	const struct wire *w = q->w ? q->w : &wire_openai;
	json_t *j = w->error(status, error_code(e), e->msg);
	struct MHD_Response *resp = http_json_response(j);
	if (!resp)
		return MHD_NO;
	/* A spent budget stays spent: the OpenAI and Anthropic SDKs (and
	 * Claude Code) honour this and do not retry the 429. */
	if (!strcmp(error_code(e), "budget_exceeded"))
		MHD_add_response_header(resp, "x-should-retry", "false");
	/* The gateway could not be reached (502) or did not answer (504): the
	 * connection is closed with the answer. Kept alive, it waited
	 * MP_NEXT_HEAD_MS for a next request, and a client that reads to the
	 * end of the connection saw its 502 only after 30 s. */
	if (status == 502 || status == 504)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	/* Held by the task's calls in flight: the budget decides again when
	 * they end. */
	if (!strcmp(error_code(e), "budget_held"))
		MHD_add_response_header(resp, "Retry-After", "1");
	q->responded = true;
	q->fail_code = error_code(e);
	q->fail_status = status;
	enum MHD_Result rc = MHD_queue_response(q->conn, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

static enum MHD_Result mp_failf(struct mp_req *q, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static enum MHD_Result mp_failf(struct mp_req *q, const char *code, const char *fmt, ...)
{
	struct error e = {.code = code};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
	va_end(ap);
	return mp_fail(q, &e);
}

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
 * §7.7): its hold released, and charged
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

static bool path_chars_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("._~:/-", c)))
			return false;
	}
	return true;
}

/* The query passed on, without any key= (a Gemini client's token is never
 * forwarded, whatever the route); *key gets the first key= value. -1 on a
 * character no client sends (400). */
static int take_query(struct mp_req *q, const char *query, char *key, size_t keylen)
{
	bool first = true;
	*key = 0;
	for (const char *p = query; p && *p;) {
		const char *amp = strchr(p, '&');
		size_t n = amp ? (size_t)(amp - p) : strlen(p);
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)p[i] <= 0x20 || (unsigned char)p[i] >= 0x7f ||
			    p[i] == '#')
				return -1;
		if (n >= 4 && !memcmp(p, "key=", 4)) {
			if (!*key && n - 4 < keylen) {
				memcpy(key, p + 4, n - 4);
				key[n - 4] = 0;
			}
		} else if (n) {
			if (buf_append(&q->path, first ? "?" : "&", 1) < 0 ||
			    buf_append(&q->path, p, n) < 0)
				return -1;
			first = false;
		}
		p = amp ? amp + 1 : p + n;
	}
	return 0;
}

struct hdr_walk {
	struct mp_req *q;
	const char *connection; /* the Connection header: it names more hop-by-hop headers */
	bool failed;
};

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key,
				  const char *value)
{
	(void)kind;
	struct hdr_walk *hw = cls;
	struct mp_req *q = hw->q;
	/* Whatever header a client put its token in, it stays here. */
	if (!key || !value || !wire_header_forwarded(key, hw->connection) ||
	    strstr(value, q->tok->value))
		return MHD_YES;
	if (q->n_hdrs >= 128) /* more than any client sends: the rest stay here */
		return MHD_YES;
	char **h = realloc(q->hdrs, (q->n_hdrs + 2) * sizeof(*h));
	if (!h) {
		hw->failed = true;
		return MHD_NO;
	}
	q->hdrs = h;
	if (asprintf(&h[q->n_hdrs], "%s: %s", key, value) < 0) {
		h[q->n_hdrs] = NULL;
		hw->failed = true;
		return MHD_NO;
	}
	h[++q->n_hdrs] = NULL;
	return MHD_YES;
}

/* The task's token, where this format's clients put it. */
static struct task_token *find_caller(struct mp_req *q, const char *qkey)
{
	for (const char *const *h = q->w->token_headers; *h; h++) {
		const char *v = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, *h);
		if (!v)
			continue;
		if (!strcasecmp(*h, "authorization")) {
			if (strncasecmp(v, "Bearer ", 7))
				continue;
			v += 7;
		}
		return tasktoken_find(&q->p->tokens, v);
	}
	if (q->w->token_in_query && *qkey)
		return tasktoken_find(&q->p->tokens, qkey);
	return NULL;
}

/* The request head is in: who calls, which route, within which budget. */
static enum MHD_Result begin(struct mp_req *q, const char *method)
{
	struct MHD_Connection *conn = q->conn;
	const char *target = q->target ? q->target : "";
	const char *qm = strchr(target, '?');
	size_t plen = qm ? (size_t)(qm - target) : strlen(target);
	char path[512];
	enum wire_match m = WIRE_NO;
	snprintf(path, sizeof(path), "%.*s", (int)(plen < 400 ? plen : 400), target);
	if (plen < sizeof(path) && path_chars_ok(path, plen)) {
		q->w = wire_find(path, &q->rt, &m);
	} else {
		/* A character no route has (%-escapes, say): 404, in the shape
		 * of the format whose namespace it is in. */
		for (char *c = path; *c; c++)
			if (!path_chars_ok(c, 1))
				*c = '!';
		q->w = wire_find(path, &q->rt, &m);
		m = WIRE_UNKNOWN;
	}
	if (!q->w)
		q->w = &wire_openai;
	if (buf_append_str(&q->path, q->rt.path) < 0)
		return MHD_NO;
	char qkey[80];
	if (take_query(q, qm ? qm + 1 : NULL, qkey, sizeof(qkey)) < 0 ||
	    buf_append(&q->path, "", 1) < 0)
		return mp_failf(q, "bad_request", "invalid query string");
	struct task_token *k = find_caller(q, qkey);
	explicit_bzero(qkey, sizeof(qkey));
	if (!k)
		return mp_failf(q, "invalid_api_key",
				"invalid or expired task token (only a live chat task's %s is "
				"accepted)",
				q->w->token_vars);
	q->tok = k;
	k->refs++;
	if (k->inflight >= MP_PER_TASK)
		return mp_failf(q, "too_many_requests",
				"%u requests of this task are in flight already", MP_PER_TASK);
	k->inflight++;
	q->counted = true;
	if (m != WIRE_ROUTE)
		return mp_failf(q, "not_allowed",
				"path %.200s is not forwarded by the runner's model proxy", path);
	q->post = !strcmp(method, "POST");
	if ((q->post && !q->rt.post) || (!q->post && (strcmp(method, "GET") || !q->rt.get)))
		return mp_failf(q, "method_not_allowed", "method %.16s is not allowed on %.200s",
				method, path);
	wire_scan_init(&q->us, q->w);
	const char *acc = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
	if (acc && strlen(acc) < sizeof(q->accept))
		snprintf(q->accept, sizeof(q->accept), "%s", acc);
	const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
	if (ct && strlen(ct) < sizeof(q->ctype_in))
		snprintf(q->ctype_in, sizeof(q->ctype_in), "%s", ct);
	/* Every Connection field's names, split as the port proxy does. */
	cleanup_buf struct buf connection = {0};
	struct hdr_walk hw = {.q = q};
	if (relay_connection_fields(conn, &connection) < 0)
		return mp_failf(q, "gateway_unavailable", "out of memory");
	hw.connection = connection.data;
	MHD_get_connection_values(conn, MHD_HEADER_KIND, add_header, &hw);
	if (hw.failed)
		return mp_failf(q, "gateway_unavailable", "out of memory");
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
	if (cl) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(cl, &end, 10);
		if (errno || *end || *cl == '-')
			return mp_failf(q, "bad_request", "invalid Content-Length");
		if (v > MP_MAX_BODY)
			return mp_failf(q, "request_too_large", "request body over %u bytes",
					MP_MAX_BODY);
		q->content_length = (long long)v;
	}
	/* A metered call holds its input's estimate and BUDGET_OUT_HOLD until
	 * it is settled: concurrent calls cannot all start on one remainder. */
	uint64_t hold = q->rt.metered
				? budget_tokens_of(
					  q->content_length > 0 ? (uint64_t)q->content_length : 0) +
					  BUDGET_OUT_HOLD
				: 0;
	char why[256];
	enum budget_verdict v = budget_admit(&k->b, hold, why, sizeof(why));
	if (v == BUDGET_HELD)
		return mp_failf(q, "budget_held", "%s", why);
	if (v != BUDGET_ADMIT) {
		log_warn("model call refused: budget spent", "{s:s,s:s,s:s}", "task",
			 k->t ? k->t->id : "", "format", q->w->name, "why", why);
		if (k->watch && k->watch->refused)
			k->watch->refused(k->watch->arg, &k->b);
		return mp_failf(q, "budget_exceeded", "%s", why);
	}
	q->admitted = true;
	q->hold = hold;
	return MHD_YES;
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
		return begin(q, method);
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
	 * bound in the trail, never the client's share (docs/design.md §13.4). */
	char source[32] = "unknown";
	if (q->uid != (uid_t)-1)
		snprintf(source, sizeof(source), "uid:%u", (unsigned)q->uid);
	audit_emit_from(p->r, source, "model", "model call",
			audit_call(q, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK));
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
	 * an answer that did not report its usage is charged (§7.7). */
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
