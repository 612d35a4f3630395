/* fuzz_h1parse: the port proxy's parser of upstream responses
 * (runner/relay/h1parse.c): what a task's server answers is outside input.
 *
 * Input layout: byte 0 = piece size of the body feed (1..256; 0 = all at
 * once); byte 1 bit 0 = HEAD request; the rest is the upstream's bytes.
 *
 * Checked: a head is parsed in place within its bounds (fields inside the
 * head, NUL-terminated, status 100..999, head_len <= len); H1_MORE only
 * below the limit; the body framing is one of the kinds; the chunked
 * decoder never writes past its input, gives the same data whether fed at
 * once or in pieces, and consumes less than offered only once done. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "relay/h1parse.h"

#define MAX_HEAD 4096

static void check(int cond)
{
	if (!cond)
		abort();
}

/* Decode data[0..len) fed in pieces of `piece` bytes (0 = all): the decoded
 * bytes in *out (malloc'd), -1 on an error. */
static ssize_t decode(const uint8_t *data, size_t len, size_t piece, char **out, bool *done,
		      size_t *consumed)
{
	struct h1_chunked c;
	h1_chunked_init(&c);
	char *o = malloc(len + 1), *tmp = malloc(len + 1);
	size_t olen = 0, pos = 0;
	*consumed = 0;
	while (pos < len && !c.done) {
		size_t n = piece && len - pos > piece ? piece : len - pos;
		memcpy(tmp, data + pos, n);
		size_t used = 0;
		ssize_t d = h1_chunked_decode(&c, tmp, n, &used);
		if (d < 0) {
			free(o);
			free(tmp);
			return -1;
		}
		check((size_t)d <= used && used <= n);
		check(used == n || c.done);
		memcpy(o + olen, tmp, (size_t)d);
		olen += (size_t)d;
		pos += used;
	}
	free(tmp);
	*out = o;
	*done = c.done;
	*consumed = pos;
	return (ssize_t)olen;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t piece = data[0];
	bool head_req = data[1] & 1;
	data += 2;
	size -= 2;

	char *buf = malloc(size + 1);
	memcpy(buf, data, size);
	struct h1_head h;
	enum h1_result rc = h1_parse_response_head(buf, size, MAX_HEAD, &h);
	check(rc == H1_OK || rc == H1_MORE || rc == H1_BAD || rc == H1_TOO_BIG);
	if (rc == H1_MORE)
		check(size < MAX_HEAD);
	if (rc == H1_OK) {
		check(h.head_len <= size && h.head_len <= MAX_HEAD);
		check(h.status >= 100 && h.status <= 999);
		check(h.n_fields <= H1_MAX_HEADERS);
		for (size_t i = 0; i < h.n_fields; i++) {
			const char *n = h.fields[i].name, *v = h.fields[i].value;
			check(n >= buf && n < buf + h.head_len && *n);
			check(v >= buf && v < buf + h.head_len);
			check(memchr(n, 0, (size_t)(buf + h.head_len - n)) != NULL);
			check(memchr(v, 0, (size_t)(buf + h.head_len - v)) != NULL);
			check(!strpbrk(v, "\r\n"));
		}
		enum h1_body_kind k;
		uint64_t len;
		if (h1_response_body(&h, head_req, &k, &len) == 0) {
			check(k == H1_BODY_NONE || k == H1_BODY_LENGTH || k == H1_BODY_CHUNKED ||
			      k == H1_BODY_CLOSE);
			check(k != H1_BODY_NONE || !len);
		}
	}
	/* The chunked decoder over the input after byte 2, both ways. */
	char *a = NULL, *b = NULL;
	bool da, db;
	size_t ca, cb;
	ssize_t na = decode(data, size, 0, &a, &da, &ca);
	ssize_t nb = decode(data, size, piece, &b, &db, &cb);
	if (na >= 0 && nb >= 0) {
		check(na == nb && da == db && ca == cb);
		check(!memcmp(a, b, (size_t)na));
	} else {
		/* An error found in pieces is an error at once, unless the
		 * message ended before it (then both stop at the end). */
		check(na < 0 && nb < 0);
	}
	free(a);
	free(b);
	free(buf);
	return 0;
}
