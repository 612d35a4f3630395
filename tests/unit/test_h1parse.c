/* The port proxy's HTTP/1 response parser (runner/relay/h1parse.c). */
#include "relay/h1parse.h"

#include <stdlib.h>

#include "unit.h"

static enum h1_result parse(const char *s, struct h1_head *h, char *buf, size_t max)
{
	size_t n = strlen(s);
	memcpy(buf, s, n);
	return h1_parse_response_head(buf, n, max, h);
}

TEST(response_heads)
{
	struct h1_head h;
	char buf[4096];
	const char *ok = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-A:  spaced  \r\n"
			 "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nbody";
	CHECK(parse(ok, &h, buf, sizeof(buf)) == H1_OK);
	CHECK(h.status == 200 && h.minor == 1 && h.n_fields == 4);
	CHECK(h.head_len == strlen(ok) - 4);
	CHECK_STR(h1_field(&h, "content-type"), "text/plain");
	CHECK_STR(h1_field(&h, "X-A"), "spaced");
	CHECK_STR(h.fields[3].value, "b=2");
	CHECK(h1_field(&h, "Missing") == NULL);

	/* Bare LF line ends, no reason phrase, an empty value. */
	CHECK(parse("HTTP/1.0 404\nX-Empty:\n\n", &h, buf, sizeof(buf)) == H1_OK);
	CHECK(h.status == 404 && h.minor == 0);
	CHECK_STR(h1_field(&h, "X-Empty"), "");

	/* Incomplete, at every length short of the end. */
	size_t n = strlen(ok) - 4;
	for (size_t i = 0; i < n; i++) {
		memcpy(buf, ok, i);
		CHECK(h1_parse_response_head(buf, i, sizeof(buf), &h) == H1_MORE);
	}

	const char *bad[] = {
		"HTTP/2 200 OK\r\n\r\n",
		"HTTP/1.1 20 OK\r\n\r\n",
		"HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 099 OK\r\n\r\n",
		"HTTP/1.1  200 OK\r\n\r\n",
		"http/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nNo-Colon\r\n\r\n",
		"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nName : x\r\n\r\n",
		"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\x01b\r\n\r\n",
		"HTTP/1.1 200 O\x7fK\r\n\r\n",
		"\x16\x03\x01 garbage\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(parse(bad[i], &h, buf, sizeof(buf)) == H1_BAD);
	/* Garbage is refused before a full head arrives. */
	CHECK(parse("SSH-2.0-x", &h, buf, sizeof(buf)) == H1_BAD);

	/* Limits: bytes and fields. */
	char big[2048];
	memset(big, 'a', sizeof(big));
	memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
	CHECK(h1_parse_response_head(big, sizeof(big), 1024, &h) == H1_TOO_BIG);
	CHECK(h1_parse_response_head(big, 1000, 1024, &h) == H1_MORE);
	static char many[8192];
	size_t m = (size_t)sprintf(many, "HTTP/1.1 200 OK\r\n");
	for (int i = 0; i <= H1_MAX_HEADERS; i++)
		m += (size_t)sprintf(many + m, "X-%d: v\r\n", i);
	m += (size_t)sprintf(many + m, "\r\n");
	CHECK(h1_parse_response_head(many, m, sizeof(many), &h) == H1_TOO_BIG);
}

TEST(list_tokens)
{
	CHECK(h1_list_has_token("keep-alive, Upgrade", "upgrade"));
	CHECK(h1_list_has_token(" close ", "close"));
	CHECK(!h1_list_has_token("upgraded", "upgrade"));
	CHECK(!h1_list_has_token("", "close"));
	CHECK(h1_list_has_token("a,,b", "b"));
}

static int body_of(const char *head, bool head_req, enum h1_body_kind *k, uint64_t *len)
{
	static char buf[1024];
	struct h1_head h;
	size_t n = strlen(head);
	memcpy(buf, head, n);
	if (h1_parse_response_head(buf, n, sizeof(buf), &h) != H1_OK)
		return -2;
	return h1_response_body(&h, head_req, k, len);
}

TEST(body_framing)
{
	enum h1_body_kind k;
	uint64_t len;
	CHECK(body_of("HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n", false, &k, &len) == 0);
	CHECK(k == H1_BODY_LENGTH && len == 42);
	CHECK(body_of("HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n", true, &k, &len) == 0);
	CHECK(k == H1_BODY_NONE);
	CHECK(body_of("HTTP/1.1 204 No\r\nContent-Length: 42\r\n\r\n", false, &k, &len) == 0);
	CHECK(k == H1_BODY_NONE);
	CHECK(body_of("HTTP/1.1 304 NM\r\n\r\n", false, &k, &len) == 0 && k == H1_BODY_NONE);
	CHECK(body_of("HTTP/1.1 200 OK\r\n\r\n", false, &k, &len) == 0 && k == H1_BODY_CLOSE);
	CHECK(body_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
		      false, &k, &len) == 0);
	CHECK(k == H1_BODY_CHUNKED);
	CHECK(body_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false, &k,
		      &len) == 0 &&
	      k == H1_BODY_CHUNKED);
	CHECK(body_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", false, &k,
		      &len) == 0 &&
	      k == H1_BODY_CLOSE);
	CHECK(body_of("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\nContent-Length: 7\r\n\r\n", false,
		      &k, &len) == 0 &&
	      len == 7);
	CHECK(body_of("HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n", false,
		      &k, &len) == -1);
	CHECK(body_of("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false, &k, &len) == -1);
	CHECK(body_of("HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", false, &k, &len) == -1);
	CHECK(body_of("HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", false, &k, &len) == -1);
	CHECK(body_of("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", false, &k,
		      &len) == -1);
}

/* Decode in, fed in pieces cut at a and b; the data, or NULL on an error. */
static char *decode_split(const char *in, size_t len, size_t a, size_t b, size_t *outlen,
			  bool *done, size_t *rest)
{
	struct h1_chunked c;
	h1_chunked_init(&c);
	char *out = malloc(len + 1);
	char *tmp = malloc(len + 1);
	size_t o = 0;
	size_t cuts[3] = {a, b, len};
	size_t pos = 0;
	*rest = 0;
	for (int i = 0; i < 3 && !c.done; i++) {
		size_t n = cuts[i] - pos;
		memcpy(tmp, in + pos, n);
		size_t used = 0;
		ssize_t d = h1_chunked_decode(&c, tmp, n, &used);
		if (d < 0) {
			free(out);
			free(tmp);
			return NULL;
		}
		memcpy(out + o, tmp, (size_t)d);
		o += (size_t)d;
		if (c.done)
			*rest = len - (pos + used);
		pos = cuts[i];
	}
	free(tmp);
	*outlen = o;
	*done = c.done;
	return out;
}

TEST(chunked_coding)
{
	const char *in = "5\r\nhello\r\n1;ext=1\r\n \r\nA\n0123456789\n0\r\nTrailer: x\r\n\r\nNEXT";
	size_t len = strlen(in);
	int good = 1;
	for (size_t a = 0; a <= len; a++)
		for (size_t b = a; b <= len; b++) {
			size_t olen, rest;
			bool done;
			char *out = decode_split(in, len, a, b, &olen, &done, &rest);
			if (!out) {
				good = 0;
				continue;
			}
			/* All data, done, and "NEXT" left unread once the whole
			 * message was offered. */
			if (olen != 16 || memcmp(out, "hello 0123456789", 16) || !done || rest != 4)
				good = 0;
			free(out);
		}
	CHECK(good);

	const char *bad[] = {
		"x\r\n",
		"\r\n",
		"5 x\r\nhello\r\n0\r\n\r\n",
		"5\r\nhelloXX0\r\n\r\n",
		"11111111111111111\r\n",
		"5\r\nhel\x01o\r\n0\r\n\r\n", /* ... but data is data: fine */
	};
	for (size_t i = 0; i < 5; i++) {
		size_t olen, rest;
		bool done;
		char *out = decode_split(bad[i], strlen(bad[i]), 0, 0, &olen, &done, &rest);
		CHECK(out == NULL);
		free(out);
	}
	size_t olen, rest;
	bool done;
	char *out = decode_split(bad[5], strlen(bad[5]), 0, 0, &olen, &done, &rest);
	CHECK(out && olen == 5 && done);
	free(out);

	/* Bounded: an endless extension or trailer is an error, not memory. */
	static char ext[H1_CHUNK_LINE_MAX + 16];
	memset(ext, 'e', sizeof(ext));
	memcpy(ext, "5;", 2);
	struct h1_chunked c;
	h1_chunked_init(&c);
	size_t used;
	CHECK(h1_chunked_decode(&c, ext, sizeof(ext), &used) < 0);
	static char tr[H1_TRAILER_MAX + 64];
	memset(tr, 't', sizeof(tr));
	memcpy(tr, "0\r\n", 3);
	h1_chunked_init(&c);
	CHECK(h1_chunked_decode(&c, tr, sizeof(tr), &used) < 0);
}
