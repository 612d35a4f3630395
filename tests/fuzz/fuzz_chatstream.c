/* fuzz_chatstream: the Chat Completions stream parser (runner/chatstream.c)
 * (the proxy's usage scanners have fuzz_wire).
 *
 * Input layout: byte 0 picks the HTTP status (0 -> 200, else one of a few
 * error statuses); byte 1 the piece size (1..256); the rest is the body, fed
 * in pieces of that size, then EOF.
 *
 * Checked: no crash/leak/UB; the parser decides exactly one final result at
 * EOF; CS_OK only with [DONE] seen and status 200; the assembled text equals
 * the concatenation of the deltas handed out; every tool call of an OK
 * result has a name and NUL-terminated arguments; the same body fed whole
 * gives the same result and text (split points never matter). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/chatstream.h"

struct acc {
	struct buf b;
};

static void on_text(void *arg, const char *t, size_t n)
{
	struct acc *a = arg;
	if (n == 0) {
		fprintf(stderr, "empty delta\n");
		abort();
	}
	buf_append(&a->b, t, n);
}

static enum cs_result parse(long status, const uint8_t *p, size_t n, size_t piece,
			    struct chatstream *cs, struct acc *a)
{
	chatstream_init(cs, on_text, a);
	chatstream_status(cs, status);
	for (size_t i = 0; i < n; i += piece)
		chatstream_feed(cs, (const char *)p + i, n - i < piece ? n - i : piece);
	return chatstream_eof(cs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const long statuses[] = {200, 400, 401, 403, 404, 429, 500, 503};
	if (size < 2)
		return 0;
	long status = statuses[data[0] % 8];
	size_t piece = (size_t)data[1] + 1;
	const uint8_t *body = data + 2;
	size_t n = size - 2;

	struct chatstream cs, whole;
	struct acc a = {0}, b = {0};
	enum cs_result r = parse(status, body, n, piece, &cs, &a);
	enum cs_result r2 = parse(status, body, n, n ? n : 1, &whole, &b);
	if (r == CS_RUNNING || r2 == CS_RUNNING) {
		fprintf(stderr, "no final result at EOF\n");
		abort();
	}
	if (r != r2) {
		fprintf(stderr, "result depends on split points: %d vs %d\n", r, r2);
		abort();
	}
	if (r == CS_OK) {
		if (status != 200 || !cs.got_done) {
			fprintf(stderr, "OK without [DONE] or with status %ld\n", status);
			abort();
		}
		if (a.b.len != cs.text.len ||
		    (a.b.len && memcmp(a.b.data, cs.text.data, a.b.len))) {
			fprintf(stderr, "deltas differ from the assembled text\n");
			abort();
		}
		if (a.b.len != b.b.len || (a.b.len && memcmp(a.b.data, b.b.data, a.b.len))) {
			fprintf(stderr, "text depends on split points\n");
			abort();
		}
		for (unsigned i = 0; i < cs.n_tools; i++) {
			const struct cs_tool_call *t = &cs.tools[i];
			if (!t->used || !t->name.len || !t->args.data ||
			    t->args.data[t->args.len]) {
				fprintf(stderr, "bad tool call %u in an OK result\n", i);
				abort();
			}
		}
	}
	chatstream_free(&cs);
	chatstream_free(&whole);
	buf_free(&a.b);
	buf_free(&b.b);

	return 0;
}
