/* A model proxy request's head admitted (see modelproxy_internal.h): the
 * caller's token, the route, the headers passed on, the budget; and the
 * answers the runner gives itself, in the caller's wire format. */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "http/http.h"
#include "model/budget.h"
#include "model/modelproxy_internal.h"
#include "relay/portproxy.h"

/* The audit event of one call through the proxy (docs/design/audit.md). */
json_t *mp_audit_call(const struct mp_req *q, bool completed)
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

enum MHD_Result mp_failf(struct mp_req *q, const char *code, const char *fmt, ...)
{
	struct error e = {.code = code};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
	va_end(ap);
	return mp_fail(q, &e);
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

/* The format and route of the target's path (into path, for messages):
 * WIRE_ROUTE when forwarded; *query is what follows '?', or NULL. */
static enum wire_match find_route(struct mp_req *q, char *path, size_t cap, const char **query)
{
	const char *target = q->target ? q->target : "";
	const char *qm = strchr(target, '?');
	size_t plen = qm ? (size_t)(qm - target) : strlen(target);
	enum wire_match m = WIRE_NO;
	snprintf(path, cap, "%.*s", (int)(plen < 400 ? plen : 400), target);
	if (plen < cap && path_chars_ok(path, plen)) {
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
	*query = qm ? qm + 1 : NULL;
	return m;
}

/* The headers kept of the request: Accept, Content-Type, the ones passed
 * on, the body's length. -1 with e set when refused. */
static int take_headers(struct mp_req *q, struct error *e)
{
	struct MHD_Connection *conn = q->conn;
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
		return error_set(e, 0, "gateway_unavailable", "out of memory");
	hw.connection = connection.data;
	MHD_get_connection_values(conn, MHD_HEADER_KIND, add_header, &hw);
	if (hw.failed)
		return error_set(e, 0, "gateway_unavailable", "out of memory");
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
	if (!cl)
		return 0;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(cl, &end, 10);
	if (errno || *end || *cl == '-')
		return error_set(e, 0, "bad_request", "invalid Content-Length");
	if (v > MP_MAX_BODY)
		return error_set(e, 0, "request_too_large", "request body over %u bytes",
				 MP_MAX_BODY);
	q->content_length = (long long)v;
	return 0;
}

/* The task's budget admits the call, or not (-1, e set). A metered call
 * holds its input's estimate and BUDGET_OUT_HOLD until it is settled:
 * concurrent calls cannot all start on one remainder. */
static int admit_budget(struct mp_req *q, struct task_token *k, struct error *e)
{
	uint64_t in = q->content_length > 0 ? (uint64_t)q->content_length : 0;
	uint64_t hold = q->rt.metered ? budget_tokens_of(in) + BUDGET_OUT_HOLD : 0;
	char why[256];
	enum budget_verdict v = budget_admit(&k->b, hold, why, sizeof(why));
	if (v == BUDGET_HELD)
		return error_set(e, 0, "budget_held", "%s", why);
	if (v != BUDGET_ADMIT) {
		log_warn("model call refused: budget spent", "{s:s,s:s,s:s}", "task",
			 k->t ? k->t->id : "", "format", q->w->name, "why", why);
		if (k->watch && k->watch->refused)
			k->watch->refused(k->watch->arg, &k->b);
		return error_set(e, 0, "budget_exceeded", "%s", why);
	}
	q->admitted = true;
	q->hold = hold;
	return 0;
}

enum MHD_Result mp_begin(struct mp_req *q, const char *method)
{
	char path[512];
	const char *query;
	enum wire_match m = find_route(q, path, sizeof(path), &query);
	if (buf_append_str(&q->path, q->rt.path) < 0)
		return MHD_NO;
	char qkey[80];
	if (take_query(q, query, qkey, sizeof(qkey)) < 0 || buf_append(&q->path, "", 1) < 0)
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
	struct error e = {0};
	if (take_headers(q, &e) < 0 || admit_budget(q, k, &e) < 0)
		return mp_fail(q, &e);
	return MHD_YES;
}
