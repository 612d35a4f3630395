/* Responses of the API server: JSON, errors, empty, text; request body and
 * query access. */
#include "http/http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "http/internal.h"

/* Does the client send a body after this head without waiting for an interim answer? A body
 * over the drain bound, announced by its length, is refused at once as before. */
static bool body_follows(struct http_req *req)
{
	const char *ex = http_header(req, "Expect");
	if (ex && *ex)
		return false; /* it waits for 100 Continue, which a refusal never sends */
	if (http_header(req, "Transfer-Encoding"))
		return true;
	const char *cl = http_header(req, "Content-Length");
	if (!cl)
		return false;
	unsigned long long n = strtoull(cl, NULL, 10);
	return n > 0 && n <= HTTP_DRAIN_MAX;
}

enum MHD_Result http_queue(struct http_req *req, unsigned status, struct MHD_Response *resp)
{
	if (!resp)
		return MHD_NO;
	if (req->in_head && status >= 400 && !req->deferred && body_follows(req)) {
		/* libmicrohttpd would answer at once and close without reading the body: the
		 * client, still writing, would get a reset instead
		 * (design/wire.md#endpoint-and-http-layer). */
		req->responded = true;
		req->status = status;
		req->deferred = resp;
		req->deferred_status = status;
		req->drain_start_ms = monotonic_ms();
		return MHD_YES;
	}
	req->responded = true;
	req->status = status;
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
	return http_queue(req, status, http_json_response(body));
}

enum MHD_Result http_error(struct http_req *req, unsigned status, const char *code, const char *fmt,
			   ...)
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
	req->err_code = error_code(e);
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
	return http_queue(req, status, resp);
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
	return http_queue(req, status, resp);
}

void http_audit_note(struct http_req *req, json_t *fields)
{
	if (!fields)
		return;
	if (!req->audit) {
		req->audit = fields;
		return;
	}
	json_object_update(req->audit, fields);
	json_decref(fields);
}

void http_audit_note_bytes(struct http_req *req, uint64_t in, uint64_t out)
{
	req->audit_bytes = true;
	req->audit_bytes_in = in;
	req->audit_bytes_out = out;
}

const char *http_query(struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_header(struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

json_t *http_body_json(struct http_req *req, bool allow_empty)
{
	struct error err;
	json_t *j = http_parse_json_object(req->body, req->body_len, allow_empty, &err);
	if (!j)
		http_fail(req, &err);
	return j;
}
