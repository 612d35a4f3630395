/* fuzz_multipart: the multipart/form-data parser of /files/upload
 * (runner/multipart.c).
 *
 * Input layout: byte 0 seeds the chunk sizes; then the request's
 * Content-Type value up to the first '\n'; the rest is the body.
 *
 * The body is parsed twice: in one multipart_feed call, and in chunks of
 * 1..64 bytes chosen from byte 0 (so delimiters, "\r\n" pairs and header
 * blocks get split everywhere). Checked: both give the same parts (same
 * name, filename, content type, and the same data bytes once the runs of
 * data are joined), the same result from feed and finish; callbacks come
 * in order (begin, data..., end; data only inside a part); the part's
 * strings are NUL-terminated within their arrays; a part's data is never
 * more than the body. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files/multipart.h"

struct log {
	char *data;
	size_t len, cap;
	bool in_part;
	size_t body_len, data_total;
};

static void put(struct log *l, const void *p, size_t n)
{
	if (l->len + n > l->cap) {
		l->cap = (l->len + n) * 2 + 256;
		l->data = realloc(l->data, l->cap);
		if (!l->data)
			abort();
	}
	memcpy(l->data + l->len, p, n);
	l->len += n;
}

static void die(const char *what)
{
	fprintf(stderr, "fuzz_multipart: %s\n", what);
	abort();
}

static void check_str(const char *s, size_t cap, const char *what)
{
	if (!memchr(s, 0, cap))
		die(what);
}

static int on_begin(void *arg, const struct mp_part *part)
{
	struct log *l = arg;
	if (l->in_part)
		die("part begun inside a part");
	check_str(part->name, sizeof(part->name), "name not terminated");
	check_str(part->filename, sizeof(part->filename), "filename not terminated");
	check_str(part->content_type, sizeof(part->content_type), "content type not terminated");
	if (!part->has_filename && part->filename[0])
		die("filename without has_filename");
	l->in_part = true;
	put(l, "B", 1);
	put(l, part->name, strlen(part->name) + 1);
	put(l, part->has_filename ? "F" : "-", 1);
	put(l, part->filename, strlen(part->filename) + 1);
	put(l, part->content_type, strlen(part->content_type) + 1);
	put(l, "\n", 1);
	return 0;
}

static int on_data(void *arg, const char *data, size_t len)
{
	struct log *l = arg;
	if (!l->in_part)
		die("data outside a part");
	if (len == 0)
		die("empty data callback");
	l->data_total += len;
	if (l->data_total > l->body_len)
		die("more data than body");
	/* Runs of data are joined: the log does not depend on the chunking. */
	put(l, data, len);
	return 0;
}

static int on_end(void *arg)
{
	struct log *l = arg;
	if (!l->in_part)
		die("part ended outside a part");
	l->in_part = false;
	put(l, "\nE\n", 3);
	return 0;
}

static const struct mp_callbacks cbs = {on_begin, on_data, on_end};

static int run(const char *ct, const char *body, size_t len, unsigned seed, bool chunked,
	       struct log *l, int *finish_rc)
{
	struct multipart *m = malloc(sizeof(*m));
	if (!m)
		abort();
	l->body_len = len;
	int rc = multipart_init(m, ct, &cbs, l);
	if (rc != 0) {
		if (!m->err[0])
			die("init failed without a message");
		*finish_rc = -2;
		free(m);
		return rc;
	}
	size_t off = 0;
	unsigned x = seed * 2654435761u + 1;
	while (off < len || (!chunked && off == 0 && len == 0)) {
		size_t n = len - off;
		if (chunked) {
			x = x * 1103515245u + 12345u;
			size_t c = 1 + (x >> 16) % 64;
			if (c < n)
				n = c;
		}
		/* An exact copy of the piece: ASan sees any read past it. */
		char *piece = malloc(n ? n : 1);
		memcpy(piece, body + off, n);
		rc = multipart_feed(m, piece, n);
		free(piece);
		off += n;
		if (rc != 0)
			break;
		if (n == 0)
			break;
	}
	if (rc == -1 && !m->err[0])
		die("feed failed without a message");
	if (rc != 0 && multipart_feed(m, "x", 1) != -1)
		die("feed after an error did not fail");
	*finish_rc = multipart_finish(m);
	if (*finish_rc == -1 && !m->err[0])
		die("finish failed without a message");
	free(m);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned seed = data[0];
	const char *rest = (const char *)data + 1;
	size_t rlen = size - 1;
	const char *nl = memchr(rest, '\n', rlen);
	size_t ctlen = nl ? (size_t)(nl - rest) : rlen;
	if (ctlen > 1024)
		return 0;
	char ct[1025];
	memcpy(ct, rest, ctlen);
	ct[ctlen] = 0;
	const char *body = nl ? nl + 1 : rest + rlen;
	size_t blen = nl ? rlen - ctlen - 1 : 0;

	struct log a = {0}, b = {0};
	int fa, fb;
	int ra = run(ct, body, blen, seed, false, &a, &fa);
	int rb = run(ct, body, blen, seed, true, &b, &fb);
	if (ra != rb || fa != fb) {
		fprintf(stderr, "fuzz_multipart: whole feed %d/%d, chunked %d/%d\n", ra, fa, rb,
			fb);
		abort();
	}
	if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0)) {
		fprintf(stderr,
			"fuzz_multipart: parts differ with chunking (%zu vs %zu log bytes)\n",
			a.len, b.len);
		abort();
	}
	free(a.data);
	free(b.data);
	return 0;
}
