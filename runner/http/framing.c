/* The request framing the API server refuses before any route runs (http/internal.h). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "http/internal.h"

/* Message framing the runner refuses even where libmicrohttpd 0.9.75 lets
 * it through (RFC 9112 §6.1, §5.4, §3.2, §5.1, RFC 9110 §5.5): both
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
		if (n != 7 || strncasecmp(value, "chunked", 7) ||
		    value[n + strspn(value + n, " \t")])
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
	struct hdr_pos first[16]; /* most requests have fewer: no allocation */
};

static enum MHD_Result hdr_collect(void *cls, enum MHD_ValueKind kind, const char *key,
				   size_t key_size, const char *value, size_t value_size)
{
	(void)kind;
	(void)key_size;
	struct hdr_list *l = cls;
	if (l->n == l->cap) {
		size_t cap = l->cap * 2;
		struct hdr_pos *nh = l->h == l->first ? malloc(cap * sizeof(*nh))
						      : realloc(l->h, cap * sizeof(*nh));
		if (!nh) {
			l->oom = true;
			return MHD_NO;
		}
		if (l->h == l->first)
			memcpy(nh, l->first, sizeof(l->first));
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
	struct hdr_list l = {.cap = sizeof(l.first) / sizeof(l.first[0])};
	l.h = l.first;
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
	if (l.h != l.first)
		free(l.h);
	return cut;
}

const char *http_framing_problem(struct MHD_Connection *conn, const char *head)
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

enum MHD_Result http_framing_error(struct http_req *req, const char *problem)
{
	struct error e;
	error_set(&e, 0, "BAD_REQUEST_FRAMING", "request refused: %s", problem);
	/* Answered at once, never held for a drain (design/wire.md#endpoint-and-http-layer): a body
	 * whose framing is in doubt cannot be read to its end. */
	req->in_head = false;
	struct MHD_Response *resp = http_json_response(http_error_body(&e));
	if (resp)
		MHD_add_response_header(resp, "Connection", "close");
	return http_queue(req, error_http_status(&e), resp);
}
