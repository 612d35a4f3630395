/* http/sse.c: the one server-sent events writer. The bytes of each stream's events are the
 * ones the streams wrote by hand before (the wire does not change), and any data comes back
 * exactly through a client's parser (the WHATWG rules, written here). */
#include "http/sse.h"

#include <stdint.h>
#include <stdlib.h>

#include "unit.h"

static char *str(struct buf *b)
{
	buf_append(b, "", 1);
	return b->data;
}

TEST(sse_event_bytes_as_before)
{
	struct buf b = {0};
	/* The audit tail's record and its "lost" event. */
	sse_event(&b, 42, NULL, "{\"a\":1}", 7);
	sse_event(&b, SSE_NO_ID, "lost", "{\"from\":1,\"to\":3}", 17);
	CHECK_STR(str(&b),
		  "id: 42\ndata: {\"a\":1}\n\nevent: lost\ndata: {\"from\":1,\"to\":3}\n\n");
	buf_free(&b);
	/* The directory watch's and MCP's events, a native event head. */
	sse_event(&b, SSE_NO_ID, "message", "{}", 2);
	sse_head(&b, 7, "started\n{ignored", 7);
	buf_append_lit(&b, "{}" SSE_END);
	buf_append_lit(&b, SSE_KEEPALIVE);
	CHECK_STR(str(&b),
		  "event: message\ndata: {}\n\nid: 7\nevent: started\ndata: {}\n\n" SSE_KEEPALIVE);
	buf_free(&b);
	/* id 0 is an id; the largest one below SSE_NO_ID fits the head bound. */
	sse_event(&b, 0, "x", "", 0);
	CHECK_STR(str(&b), "id: 0\nevent: x\ndata: \n\n");
	buf_free(&b);
}

TEST(sse_head_to_bounds)
{
	char d[SSE_HEAD_MAX + 6];
	size_t n = sse_head_to(d, sizeof(d), UINT64_MAX - 1, "stdout", 6);
	CHECK(n == sizeof("id: 18446744073709551614\nevent: stdout\ndata: ") - 1);
	CHECK(!memcmp(d, "id: 18446744073709551614\nevent: stdout\ndata: ", n));
	/* Too small for the worst case: nothing written, never a cut head. */
	memset(d, 'Z', sizeof(d));
	CHECK(sse_head_to(d, sizeof(d) - 1, 1, "stdout", 6) == 0);
	CHECK(d[0] == 'Z');
}

TEST(sse_multiline_data)
{
	struct buf b = {0};
	sse_event(&b, SSE_NO_ID, NULL, "a\nb\r\nc\rd", 8);
	CHECK_STR(str(&b), "data: a\ndata: b\ndata: c\ndata: d\n\n");
	buf_free(&b);
	/* A final line break is a last, empty line (a client gets "x\n" back). */
	sse_event(&b, SSE_NO_ID, NULL, "x\n", 2);
	CHECK_STR(str(&b), "data: x\ndata: \n\n");
	buf_free(&b);
	/* CR at the very end, then CR CR LF: two breaks. */
	sse_event(&b, SSE_NO_ID, NULL, "\r\r\n", 3);
	CHECK_STR(str(&b), "data: \ndata: \ndata: \n\n");
	buf_free(&b);
}

/* A client's parser (WHATWG HTML, "event stream interpretation"), enough for one event: the
 * data field's lines joined by LF; -1 if the bytes are not exactly one event. */
static int parse_one(const char *s, size_t len, struct buf *data, char *name, size_t namesz)
{
	size_t i = 0;
	bool any = false;
	name[0] = 0;
	while (i < len) {
		size_t e = i;
		while (e < len && s[e] != '\n' && s[e] != '\r')
			e++;
		if (e == len)
			return -1; /* an unterminated line */
		size_t next = e + (s[e] == '\r' && e + 1 < len && s[e + 1] == '\n' ? 2 : 1);
		if (e == i) /* the blank line: the event is dispatched */
			return any && next == len ? 0 : -1;
		const char *colon = memchr(s + i, ':', e - i);
		size_t flen = colon ? (size_t)(colon - (s + i)) : e - i;
		const char *v = colon ? colon + 1 : s + e;
		if (v < s + e && *v == ' ')
			v++;
		size_t vlen = (size_t)(s + e - v);
		if (flen == 4 && !memcmp(s + i, "data", 4)) {
			if (any)
				buf_append_lit(data, "\n");
			buf_append(data, v, vlen);
			any = true;
		} else if (flen == 5 && !memcmp(s + i, "event", 5)) {
			snprintf(name, namesz, "%.*s", (int)vlen, v);
		}
		i = next;
	}
	return -1;
}

static uint32_t rng = 2463534242u;
static uint32_t xs(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	return rng;
}

TEST(sse_data_round_trips)
{
	static const char alphabet[] = "ab\r\n: \0x";
	for (int round = 0; round < 5000; round++) {
		char in[24];
		size_t len = xs() % sizeof(in);
		for (size_t k = 0; k < len; k++)
			in[k] = alphabet[xs() % (sizeof(alphabet) - 1)];
		struct buf ev = {0}, got = {0}, want = {0};
		sse_event(&ev, round, "e", in, len);
		/* What the client must see: every CR LF and lone CR as LF. */
		for (size_t k = 0; k < len; k++) {
			if (in[k] == '\r' && k + 1 < len && in[k + 1] == '\n')
				continue;
			buf_append(&want, in[k] == '\r' ? "\n" : &in[k], 1);
		}
		char name[8];
		int rc = parse_one(ev.data, ev.len, &got, name, sizeof(name));
		bool same = rc == 0 && got.len == want.len &&
			    (!got.len || !memcmp(got.data, want.data, got.len)) &&
			    !strcmp(name, "e");
		if (!CHECKF(same, "round %d: %zu bytes in, rc %d, %zu back", round, len, rc,
			    got.len))
			round = 5000;
		buf_free(&ev);
		buf_free(&got);
		buf_free(&want);
	}
}
