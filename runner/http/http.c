#include "http/http.h"
#include "core/error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/gate.h"
#include "core/cleanup.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/util.h"

struct http_server {
	const struct http_route *routes;
	size_t n_routes;
	struct MHD_Daemon *d;
	struct gate *gate; /* who may connect (tasks may not) */
	int listen_fd;
	unsigned port;
	struct loop_watch epoll_watch;
	struct loop_timer timer; /* MHD's own timeouts */
	struct loop_hook pump;
	bool need_run;
	uint64_t deadline; /* of the armed MHD timer, monotonic ms */
	bool quiesced;
	bool stopping; /* http_stop: streams end instead of suspending */
	struct http_stream *streams;
	unsigned n_streams;
};

/* Does path match pattern? Captures the '*' segment into out. */
static bool match(const char *pattern, const char *path, char *out, size_t outlen)
{
	while (*pattern && *path) {
		if (*pattern == '*') {
			size_t n = strcspn(path, "/");
			if (n == 0 || n >= outlen)
				return false;
			memcpy(out, path, n);
			out[n] = 0;
			path += n;
			pattern++;
			continue;
		}
		if (*pattern != *path)
			return false;
		pattern++;
		path++;
	}
	return *pattern == 0 && *path == 0;
}

static enum MHD_Result queue(struct http_req *req, unsigned status, struct MHD_Response *resp)
{
	if (!resp)
		return MHD_NO;
	req->responded = true;
	enum MHD_Result rc = MHD_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

struct MHD_Response *http_json_response(json_t *body)
{
	char *s = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!s)
		return NULL;
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(s);
		return NULL;
	}
	MHD_add_response_header(resp, "Content-Type", "application/json");
	return resp;
}

json_t *http_error_body(const struct error *e)
{
	return json_pack("{s:s,s:s}", "code", error_code(e), "message", e->msg);
}

enum MHD_Result http_json(struct http_req *req, unsigned status, json_t *body)
{
	return queue(req, status, http_json_response(body));
}

enum MHD_Result http_error(struct http_req *req, unsigned status, const char *code,
			   const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return http_json(req, status, json_pack("{s:s,s:s}", "code", code, "message", msg));
}

enum MHD_Result http_fail(struct http_req *req, const struct error *e)
{
	return http_json(req, error_http_status(e), http_error_body(e));
}

enum MHD_Result http_failf(struct http_req *req, const char *code, const char *fmt, ...)
{
	struct error e = {.code = code};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
	va_end(ap);
	return http_fail(req, &e);
}

enum MHD_Result http_empty(struct http_req *req, unsigned status)
{
	/* An explicit Content-Length: 0 — clients (openapi-fetch) rely on it. */
	struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
	return queue(req, status, resp);
}

enum MHD_Result http_text(struct http_req *req, unsigned status, const char *ctype,
			  const char *data, size_t len, const char *hname, const char *hval)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", ctype);
	if (hname)
		MHD_add_response_header(resp, hname, hval);
	return queue(req, status, resp);
}

const char *http_query(struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_header(struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

json_t *http_parse_json_object(const char *data, size_t len, bool allow_empty,
				struct error *err)
{
	if (len == 0) {
		if (allow_empty)
			return json_object();
		error_set(err, 0, "INVALID_REQUEST_BODY", "the request body must be a JSON object");
		return NULL;
	}
	json_error_t jerr;
	/* Depth is bounded by jansson (JSON_PARSER_MAX_DEPTH); NUL bytes in
	 * strings are refused unless asked for, which we never do. */
	cleanup_json json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		error_set(err, 0, "INVALID_REQUEST_BODY", "invalid JSON at line %d column %d: %s",
			  jerr.line, jerr.column, jerr.text);
		return NULL;
	}
	if (!json_is_object(j)) {
		error_set(err, 0, "INVALID_REQUEST_BODY", "the request body must be a JSON object");
		return NULL;
	}
	return take_ptr(j);
}

json_t *http_body_json(struct http_req *req, bool allow_empty)
{
	struct error err;
	json_t *j = http_parse_json_object(req->body, req->body_len, allow_empty, &err);
	if (!j)
		http_fail(req, &err);
	return j;
}

/* ---- streams ---- */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct http_stream *s = cls;
	ssize_t n = s->ops->fill(s, buf, max);
	if (n > 0) {
		s->last_send_ms = monotonic_ms();
		return n;
	}
	if (n < 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* Stopping: MHD_stop_daemon() aborts the process if a connection is
	 * still suspended, so a stream with nothing more to send now ends. */
	if (s->r->http->stopping)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	/* Nothing to send: sleep until the producer wakes us (no polling). */
	MHD_suspend_connection(s->conn);
	s->suspended = true;
	return 0;
}

static void stream_unlink(struct http_server *h, struct http_stream *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else if (h->streams == s)
		h->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->next = s->prev = NULL;
	h->n_streams--;
}

static void stream_free_cb(void *cls)
{
	struct http_stream *s = cls;
	struct runner *r = s->r;
	s->closed = true;
	stream_unlink(r->http, s);
	s->ops->close(s);
}

enum MHD_Result http_stream_start(struct http_req *req, struct http_stream *s,
				  const struct http_stream_ops *ops, const char *content_type)
{
	struct http_server *h = req->r->http;
	s->ops = ops;
	s->r = req->r;
	s->conn = req->conn;
	s->suspended = false;
	s->closed = false;
	s->last_send_ms = monotonic_ms();
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, s,
						  stream_free_cb);
	if (!resp) {
		ops->close(s);
		return MHD_NO;
	}
	s->next = h->streams;
	s->prev = NULL;
	if (h->streams)
		h->streams->prev = s;
	h->streams = s;
	h->n_streams++;
	MHD_add_response_header(resp, "Content-Type", content_type);
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	return queue(req, 200, resp);
}

void http_stream_wake(struct http_stream *s)
{
	if (!s->suspended || s->closed)
		return;
	s->suspended = false;
	MHD_resume_connection(s->conn);
	s->r->http->need_run = true;
}

/* ---- request dispatch ---- */

static bool authorized(struct http_req *req)
{
	const char *want = req->r->cfg.token;
	if (!want)
		return true;
	const char *got = http_header(req, "X-EXECD-ACCESS-TOKEN");
	return got && secret_equal(got, want);
}

/* execd's clients read "error" as well as {code, message}. */
static enum MHD_Result unauthorized(struct http_req *req)
{
	struct error e;
	error_set(&e, 0, "UNAUTHORIZED", "invalid or missing header X-EXECD-ACCESS-TOKEN");
	json_t *body = http_error_body(&e);
	json_object_set_new(body, "error", json_sprintf("Unauthorized: %s", e.msg));
	return http_json(req, error_http_status(&e), body);
}

/* Message framing the runner refuses even where libmicrohttpd 0.9.75 lets
 * it through (RFC 9112 §6.1, §6.3, §3.2, §5.1, RFC 9110 §5.5): both
 * Content-Length and Transfer-Encoding (request smuggling), repeated
 * Content-Length, Transfer-Encoding or Host, a transfer coding other than
 * chunked, a header name that is not a token (white space before the
 * colon), a NUL or other control character in a header value (which would
 * silently cut the value short here but not in a proxy in front). The
 * connection is closed after the 400, so nothing after the ambiguous
 * request is read as another one. */
struct framing {
	unsigned host, cl, te;
	bool te_other, bad_name, bad_value;
};

static bool is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static enum MHD_Result framing_it(void *cls, enum MHD_ValueKind kind, const char *key,
				  size_t key_size, const char *value, size_t value_size)
{
	(void)kind;
	struct framing *f = cls;
	if (!key_size)
		f->bad_name = true;
	for (size_t i = 0; i < key_size; i++)
		if (!is_tchar((unsigned char)key[i]))
			f->bad_name = true;
	for (size_t i = 0; value && i < value_size; i++) {
		unsigned char c = (unsigned char)value[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			f->bad_value = true;
	}
	if (!value)
		value = "";
	if (!strcasecmp(key, "Host"))
		f->host++;
	else if (!strcasecmp(key, "Content-Length"))
		f->cl++;
	else if (!strcasecmp(key, "Transfer-Encoding")) {
		f->te++;
		value += strspn(value, " \t");
		size_t n = strcspn(value, " \t");
		if (n != 7 || strncasecmp(value, "chunked", 7) || value[n + strspn(value + n, " \t")])
			f->te_other = true;
	}
	return MHD_YES;
}

/* libmicrohttpd 0.9.75 parses the request head in place and measures each
 * header value with strlen(): a NUL inside a value cuts it silently (what
 * follows is dropped; a proxy in front saw all of it), so the check above
 * never sees the NUL. The head's bytes stay where they were read: after
 * the end of a value there may be only its line end (1-2 bytes the parser
 * zeroed) before the next header line starts, or, after the last one, the
 * empty line too (2-4 bytes). Anything more was hidden behind a NUL. (A NUL
 * right before a bare LF looks like a CR here; nothing hides behind it.)
 * Pointers outside the head as read (a folded line was copied) are not
 * judged. */
struct hdr_pos {
	const char *key, *value;
	size_t vlen;
};

struct hdr_list {
	struct hdr_pos *h;
	size_t n, cap;
	bool oom;
};

static enum MHD_Result hdr_collect(void *cls, enum MHD_ValueKind kind, const char *key,
				   size_t key_size, const char *value, size_t value_size)
{
	(void)kind;
	(void)key_size;
	struct hdr_list *l = cls;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 32;
		struct hdr_pos *nh = realloc(l->h, cap * sizeof(*nh));
		if (!nh) {
			l->oom = true;
			return MHD_NO;
		}
		l->h = nh;
		l->cap = cap;
	}
	l->h[l->n++] = (struct hdr_pos){key, value, value ? value_size : 0};
	return MHD_YES;
}

static bool header_value_cut(struct MHD_Connection *conn, const char *head)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
	if (!ci || !head)
		return false;
	const char *end = head + ci->header_size;
	struct hdr_list l = {0};
	MHD_get_connection_values_n(conn, MHD_HEADER_KIND, hdr_collect, &l);
	bool cut = l.oom; /* cannot check: refuse */
	for (size_t i = 0; i < l.n && !cut; i++) {
		const char *v = l.h[i].value;
		if (!v || v < head || v >= end || l.h[i].vlen >= (size_t)(end - v))
			continue;
		const char *p = v + l.h[i].vlen, *q = p;
		while (q < end && !*q)
			q++;
		if (i + 1 < l.n) {
			const char *next = l.h[i + 1].key;
			if (next <= p || next >= end)
				continue;
			cut = q != next || q - p > 2;
		} else {
			cut = q != end || q - p > 4;
		}
	}
	free(l.h);
	return cut;
}

static const char *framing_problem(struct MHD_Connection *conn, const char *head)
{
	struct framing f = {0};
	MHD_get_connection_values_n(conn, MHD_HEADER_KIND, framing_it, &f);
	if (!f.bad_value && header_value_cut(conn, head))
		f.bad_value = true;
	if (f.cl && f.te)
		return "both Content-Length and Transfer-Encoding";
	if (f.cl > 1 || f.te > 1 || f.host > 1)
		return "a repeated Content-Length, Transfer-Encoding or Host header";
	if (f.te_other)
		return "a transfer coding other than chunked";
	if (f.bad_name)
		return "a header name that is not a token";
	if (f.bad_value)
		return "a control character (or NUL) in a header value";
	return NULL;
}

static enum MHD_Result framing_error(struct http_req *req, const char *problem)
{
	struct error e;
	error_set(&e, 0, "BAD_REQUEST_FRAMING", "request refused: %s", problem);
	struct MHD_Response *resp = http_json_response(http_error_body(&e));
	if (resp)
		MHD_add_response_header(resp, "Connection", "close");
	return queue(req, error_http_status(&e), resp);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_size, void **con_cls)
{
	(void)version;
	struct runner *r = cls;
	struct http_req *req = *con_cls;
	if (!req) {
		/* A task's connection (or one over its client's limit): no
		 * handler runs, not even for a request already buffered. */
		if (!gate_request_begins(conn, NULL))
			return MHD_NO;
		req = calloc(1, sizeof(*req));
		if (!req)
			return MHD_NO;
		*con_cls = req;
		req->r = r;
		req->conn = conn;
		req->method = method;
		req->path = url;
		const char *problem = framing_problem(conn, method);
		if (problem)
			return framing_error(req, problem);
		bool path_known = false;
		const struct http_server *h = r->http;
		for (size_t i = 0; i < h->n_routes; i++) {
			const struct http_route *rt = &h->routes[i];
			if (!match(rt->pattern, url, req->param_buf, sizeof(req->param_buf)))
				continue;
			path_known = true;
			if (!strcmp(rt->method, method)) {
				req->route = rt;
				req->param = req->param_buf;
				break;
			}
		}
		if (!authorized(req))
			return unauthorized(req);
		if (!req->route) {
			if (path_known)
				return http_failf(req, "METHOD_NOT_ALLOWED",
						  "method %.16s is not allowed on %.200s", method, url);
			return http_failf(req, "NOT_FOUND", "no route %.16s %.200s", method, url);
		}
		const char *cl = http_header(req, "Content-Length");
		if (cl && !req->route->body && strtoull(cl, NULL, 10) > r->cfg.max_body)
			return http_failf(req, "PAYLOAD_TOO_LARGE", "request body over %llu bytes",
					  (unsigned long long)r->cfg.max_body);
		return MHD_YES;
	}
	if (req->responded) {
		*upload_size = 0; /* discard the rest of a refused body */
		return MHD_YES;
	}
	if (*upload_size && req->route->body) {
		size_t n = *upload_size;
		*upload_size = 0;
		return req->route->body(req, upload_data, n);
	}
	if (*upload_size) {
		if (req->body_too_big || req->body_len + *upload_size > r->cfg.max_body) {
			/* A body without Content-Length (chunked) grew too big:
			 * libmicrohttpd takes a response only once the body is in,
			 * so drop the rest and answer 413 then. */
			req->body_too_big = true;
			*upload_size = 0;
			return MHD_YES;
		}
		char *nb = realloc(req->body, req->body_len + *upload_size + 1);
		if (!nb)
			return MHD_NO;
		memcpy(nb + req->body_len, upload_data, *upload_size);
		req->body = nb;
		req->body_len += *upload_size;
		req->body[req->body_len] = 0;
		*upload_size = 0;
		return MHD_YES;
	}
	if (req->body_too_big)
		return http_failf(req, "PAYLOAD_TOO_LARGE", "request body over %llu bytes",
				  (unsigned long long)r->cfg.max_body);
	return req->route->fn(req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	gate_request_ends(conn);
	struct http_req *req = *con_cls;
	if (!req)
		return;
	req->completed_ok = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
	if (req->ctx_free)
		req->ctx_free(req);
	free(req->body);
	free(req);
	*con_cls = NULL;
}

void http_mhd_log(void *cls, const char *fmt, va_list ap)
{
	const char *who = cls ? cls : "http";
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = 0;
	log_warn(who, "{s:s}", "detail", msg);
}

static void run_mhd(struct runner *r)
{
	struct http_server *h = r->http;
	h->need_run = false;
	MHD_run(h->d);
}

static void on_mhd_epoll(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	run_mhd(w->arg);
}

static void on_mhd_timer(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	run_mhd(t->arg);
}

/* After every dispatch batch: run MHD if a stream was resumed, then arm the
 * timer for MHD's next own deadline (idle timeouts). */
static void pump(struct loop *loop, void *arg)
{
	struct runner *r = arg;
	struct http_server *h = r->http;
	if (!h || !h->d)
		return;
	if (h->need_run)
		run_mhd(r);
	MHD_UNSIGNED_LONG_LONG ms;
	if (MHD_get_timeout(h->d, &ms) == MHD_YES) {
		/* Re-arm only when the deadline really moves: one syscall per
		 * loop turn adds up when output streams fast. */
		uint64_t deadline = monotonic_ms() + ms;
		if (!h->timer.armed || ms == 0 || deadline + 50 < h->deadline ||
		    deadline > h->deadline + 50) {
			loop_timer_start(loop, &h->timer, ms, 0);
			h->deadline = deadline;
		}
	} else if (h->timer.armed) {
		loop_timer_stop(loop, &h->timer);
	}
}

static int open_listener(struct runner *r, struct error *err)
{
	struct sockaddr_storage ss = {0};
	socklen_t slen;
	int family;
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, r->cfg.listen_host, &s4->sin_addr) == 1) {
		family = AF_INET;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)r->cfg.listen_port);
		slen = sizeof(*s4);
	} else {
		family = AF_INET6;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)r->cfg.listen_port);
		inet_pton(AF_INET6, r->cfg.listen_host, &s6->sin6_addr);
		slen = sizeof(*s6);
	}
	cleanup_close int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return error_set(err, errno, NULL, "socket");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, slen) < 0 || listen(fd, 256) < 0) {
		bool v6 = family == AF_INET6;
		return error_set(err, errno, NULL, "cannot listen on %s%s%s:%u", v6 ? "[" : "",
				 r->cfg.listen_host, v6 ? "]" : "", r->cfg.listen_port);
	}
	if (getsockname(fd, (struct sockaddr *)&ss, &slen) == 0)
		r->http->port = ntohs(family == AF_INET ? s4->sin_port : s6->sin6_port);
	return take_fd(fd);
}

int http_start(struct runner *r, const struct http_route *routes, size_t n_routes,
	       struct error *err)
{
	struct http_server *h = calloc(1, sizeof(*h));
	if (!h)
		return error_set(err, ENOMEM, NULL, "cannot start the HTTP server");
	h->routes = routes;
	h->n_routes = n_routes;
	r->http = h;
	h->listen_fd = open_listener(r, err);
	if (h->listen_fd < 0)
		return -1;
	unsigned timeout_s = (unsigned)((r->cfg.header_timeout_ms + 999) / 1000);
	unsigned max_conns = gate_connection_limit(1024, 2);
	struct gate_policy gp = {.name = "http",
				 .refuse_tasks = true,
				 .max_per_client = r->cfg.max_client_conns < max_conns
							   ? r->cfg.max_client_conns
							   : max_conns,
				 .first_head_ms = r->cfg.header_deadline_ms,
				 .next_head_ms = r->cfg.header_timeout_ms};
	h->gate = gate_new(r, &gp);
	if (!h->gate)
		return error_set(err, ENOMEM, NULL, "cannot set up connection admission");
	h->d = MHD_start_daemon(
		MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL,
		on_request, r, MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, (void *)"http",
		MHD_OPTION_LISTEN_SOCKET, h->listen_fd,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, r, MHD_OPTION_NOTIFY_CONNECTION,
		gate_notify, h->gate, MHD_OPTION_CONNECTION_TIMEOUT,
		timeout_s ? timeout_s : 1, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32 * 1024,
		MHD_OPTION_CONNECTION_LIMIT, max_conns, MHD_OPTION_STRICT_FOR_CLIENT, 1,
		/* SIGPIPE is ignored (signals.c): lets MHD use sendfile for downloads. */
		MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,
		MHD_OPTION_END);
	if (!h->d)
		return error_set(err, 0, NULL, "cannot start the HTTP server (libmicrohttpd)");
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info)
		return error_set(err, 0, NULL, "libmicrohttpd has no epoll support");
	int rc = loop_watch_add(&r->loop, &h->epoll_watch, info->epoll_fd, EPOLLIN, on_mhd_epoll, r);
	if (rc == 0)
		rc = loop_timer_init(&r->loop, &h->timer, on_mhd_timer, r);
	if (rc < 0)
		return error_set(err, -rc, NULL, "cannot watch the HTTP server");
	loop_hook_add(&r->loop, &h->pump, pump, r);
	return 0;
}

json_t *http_access_report(struct runner *r)
{
	return r->http && r->http->gate ? gate_report(r->http->gate) : json_null();
}

unsigned http_port(struct runner *r)
{
	return r->http ? r->http->port : 0;
}

void http_quiesce(struct runner *r)
{
	struct http_server *h = r->http;
	if (!h || !h->d || h->quiesced)
		return;
	h->quiesced = true;
	/* Streams with nothing more to say (metrics/watch) end now. */
	for (struct http_stream *s = h->streams; s; s = s->next)
		http_stream_wake(s);
	MHD_socket fd = MHD_quiesce_daemon(h->d);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	else
		log_warn("could not stop accepting connections", NULL);
}

bool http_busy(struct runner *r)
{
	return r->http && r->http->n_streams > 0;
}

void http_tick(struct runner *r)
{
	struct http_server *h = r->http;
	if (!h)
		return;
	uint64_t now = monotonic_ms();
	for (struct http_stream *s = h->streams; s;) {
		struct http_stream *next = s->next;
		if (s->ops->tick)
			s->ops->tick(s, now);
		s = next;
	}
}

void http_stop(struct runner *r)
{
	struct http_server *h = r->http;
	if (!h)
		return;
	if (h->d) {
		/* MHD must not be stopped with suspended connections: wake them
		 * and run MHD until none is left suspended (a resumed connection
		 * leaves MHD's suspended list only inside MHD_run, and with
		 * `stopping` set a stream cannot suspend again). */
		h->stopping = true;
		for (int i = 0; i < 4; i++) {
			bool any = false;
			for (struct http_stream *s = h->streams; s; s = s->next) {
				any |= s->suspended;
				http_stream_wake(s);
			}
			if (!any && i > 0)
				break;
			MHD_run(h->d);
		}
		loop_watch_del(&r->loop, &h->epoll_watch);
		MHD_stop_daemon(h->d);
		h->d = NULL;
	}
	gate_free(h->gate); /* after the daemon: it reports closed connections */
	/* MHD closed the listening socket (or quiesce handed it to us). */
	loop_timer_close(&r->loop, &h->timer);
	loop_hook_del(&r->loop, &h->pump);
	free(h);
	r->http = NULL;
}
