/* fuzz_relayhead: the forwarded heads' rules (runner/relay/hop.c): the
 * request head the port proxy sends to a task's server, built from what a
 * client sent, and the filter of the upstream's response fields.
 *
 * Input layout: byte 0 = flags (bit 0 a Content-Length, bit 1 chunked,
 * bit 2 an upgrade, bit 3 the response filter's upgrade); then lines
 * separated by '\n': the first is the client's Connection list, each other
 * "name:value" is a field (names keep only token characters and values
 * lose CR, LF and NUL, as libmicrohttpd lets through).
 *
 * Checked: the head starts with the request line and ends with one blank
 * line; every line is "name: value" with a token name; no field the rules
 * drop (hop-by-hop, named in Connection, the runner's token,
 * Proxy-Authorization, the framing, X-Forwarded-Proto/Host) comes from the
 * client; exactly one Host, one X-Forwarded-For (ending with the peer),
 * one X-Forwarded-Proto, at most one framing field and Connection only
 * for an upgrade; every client field not dropped appears, in order; the response
 * filter never keeps a hop-by-hop field (Upgrade only when asked) nor one
 * named in Connection. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "relay/hop.h"

static void check(int cond)
{
	if (!cond)
		abort();
}

static bool tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is(const char *name, size_t len, const char *want)
{
	return len == strlen(want) && !strncasecmp(name, want, len);
}

/* Dropped by the request rules, whatever the value. */
static bool dropped(const char *name, size_t len, const char *conn)
{
	static const char *const own[] = {"Content-Length",      "Expect",
					  "Proxy-Authorization", "X-EXECD-ACCESS-TOKEN",
					  "X-Forwarded-Proto",   "X-Forwarded-Host",
					  "X-Forwarded-For"};
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		if (is(name, len, own[i]))
			return true;
	return relay_hop_by_hop(name, len) || relay_connection_names(conn, name, len);
}

struct field {
	char *name, *value;
	size_t nlen, vlen;
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 8192)
		return 0;
	unsigned flags = data[0];
	char *text = malloc(size);
	memcpy(text, data + 1, size - 1);
	text[size - 1] = 0;
	/* Lines: the Connection list, then fields. */
	struct field f[64];
	size_t nf = 0;
	char *conn = NULL;
	for (char *line = text, *next; line && nf < 64; line = next) {
		next = memchr(line, '\n', (size_t)(text + size - 1 - line));
		if (next)
			*next++ = 0;
		size_t len = strlen(line);
		char *v = line;
		/* Values: no CR (nor LF, nor NUL: the line ends there). */
		for (size_t i = 0, o = 0; i <= len; i++)
			if (line[i] != '\r')
				v[o++] = line[i];
		if (!conn) {
			conn = line;
			continue;
		}
		char *colon = strchr(line, ':');
		if (!colon || colon == line)
			continue;
		*colon = 0;
		bool ok = true;
		for (char *c = line; *c; c++)
			ok &= tchar((unsigned char)*c);
		if (!ok)
			continue;
		f[nf] = (struct field){line, colon + 1, strlen(line), strlen(colon + 1)};
		nf++;
	}
	if (!conn)
		conn = "";

	struct buf out = {0};
	struct relay_head h;
	const char *cl = flags & 1 ? "12" : NULL;
	bool chunked = flags & 2;
	const char *upgrade = flags & 4 ? "websocket" : NULL;
	relay_head_start(&h, &out, "GET", "/x", conn);
	for (size_t i = 0; i < nf; i++)
		relay_head_field(&h, f[i].name, f[i].nlen, f[i].value, f[i].vlen);
	check(relay_head_finish(&h, 8080, "192.0.2.1", cl, chunked, upgrade) == 0);
	buf_append(&out, "", 1);

	const char *s = out.data;
	check(!strncmp(s, "GET /x HTTP/1.1\r\n", 17));
	size_t total = strlen(s);
	check(total >= 21 && !strcmp(s + total - 4, "\r\n\r\n"));
	unsigned host = 0, xff = 0, proto = 0, framing = 0, connection = 0;
	size_t next_field = 0; /* the client's fields kept appear in order */
	size_t matched = 0, kept = 0;
	for (const char *l = s + 17; *l && strncmp(l, "\r\n", 2);) {
		const char *e = strstr(l, "\r\n");
		check(e != NULL);
		const char *c = memchr(l, ':', (size_t)(e - l));
		check(c && c > l && c[1] == ' ');
		size_t nlen = (size_t)(c - l);
		for (size_t i = 0; i < nlen; i++)
			check(tchar((unsigned char)l[i]));
		const char *v = c + 2;
		size_t vlen = (size_t)(e - v);
		bool ours = false;
		if (is(l, nlen, "Host"))
			host++;
		if (is(l, nlen, "X-Forwarded-For")) {
			xff++, ours = true;
			check(vlen >= 9 && !memcmp(e - 9, "192.0.2.1", 9));
		} else if (is(l, nlen, "X-Forwarded-Proto")) {
			proto++, ours = true;
		} else if (is(l, nlen, "Content-Length") || is(l, nlen, "Transfer-Encoding")) {
			framing++, ours = true;
		} else if (is(l, nlen, "Connection") || is(l, nlen, "Upgrade")) {
			connection++, ours = true;
			check(upgrade != NULL);
		} else if (is(l, nlen, "Host") && !memcmp(v, "127.0.0.1:8080", 14) && vlen == 14) {
			ours = true; /* possibly: the client may send this too */
		}
		if (!ours || is(l, nlen, "Host")) {
			/* A client's field: the next one kept, in order. */
			while (next_field < nf &&
			       (dropped(f[next_field].name, f[next_field].nlen, conn) ||
				f[next_field].nlen != nlen || memcmp(f[next_field].name, l, nlen) ||
				f[next_field].vlen != vlen || memcmp(f[next_field].value, v, vlen)))
				next_field++;
			if (next_field < nf) {
				next_field++;
				matched++;
				check(!dropped(l, nlen, conn));
			} else {
				/* The runner's own Host, the client having sent none. */
				check(is(l, nlen, "Host") && vlen == 14 &&
				      !memcmp(v, "127.0.0.1:8080", 14));
			}
		}
		l = e + 2;
	}
	/* ... and none is lost. */
	for (size_t i = 0; i < nf; i++)
		kept += !dropped(f[i].name, f[i].nlen, conn);
	check(matched == kept);
	check(host >= 1 && xff == 1 && proto == 1 && framing <= 1);
	check(framing == (cl || chunked ? 1u : 0u));
	check(connection == (upgrade ? 2u : 0u));
	buf_free(&out);

	/* The response filter, on the same fields with the same Connection. */
	bool up = flags & 8;
	for (size_t i = 0; i < nf; i++) {
		bool kept = relay_response_field_kept(f[i].name, f[i].nlen, conn, up);
		if (up && is(f[i].name, f[i].nlen, "Upgrade"))
			check(kept);
		else if (relay_hop_by_hop(f[i].name, f[i].nlen) ||
			 relay_connection_names(conn, f[i].name, f[i].nlen) ||
			 is(f[i].name, f[i].nlen, "Content-Length"))
			check(!kept);
	}
	free(text);
	return 0;
}
