/* fuzz_linesplit: the execd event stream's line splitter (runner/linesplit.c).
 *
 * Input layout: byte 0 picks max_line (1..128, or 65536 as in production
 * when >= 128); byte 1 the number of cut points (0..15); then two bytes per
 * cut point (positions in the payload, any order); the rest is the payload.
 * The payload is fed in the pieces between the sorted cut points (empty
 * pieces included), then flushed.
 *
 * Checked against an independent model of the contract (linesplit.h):
 * '\n', '\r' and "\r\n" each end a line, wherever the reads were cut; a
 * line longer than max_line comes out in pieces of max_line bytes; an empty
 * line is a line; a trailing partial line comes out at flush. So: the same
 * lines in the same order, no line over max_line, no '\r'/'\n' inside one,
 * and the bytes of all lines plus the terminators add up to the input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "task/linesplit.h"

struct lines {
	char *data; /* concatenated line bytes */
	size_t len, cap;
	size_t *lens;
	size_t n, ncap;
};

static void add_line(struct lines *l, const char *s, size_t len)
{
	if (!l->data || l->len + len > l->cap) {
		l->cap = (l->len + len) * 2 + 64;
		l->data = realloc(l->data, l->cap);
	}
	if (len)
		memcpy(l->data + l->len, s, len);
	l->len += len;
	if (l->n == l->ncap) {
		l->ncap = l->ncap * 2 + 16;
		l->lens = realloc(l->lens, l->ncap * sizeof(*l->lens));
	}
	l->lens[l->n++] = len;
	if (!l->data || !l->lens)
		abort();
}

static size_t g_max_line;

static int on_line(void *arg, const char *line, size_t len)
{
	if (len > g_max_line) {
		fprintf(stderr, "line of %zu bytes over max_line %zu\n", len, g_max_line);
		abort();
	}
	if (memchr(line, '\n', len) || memchr(line, '\r', len)) {
		fprintf(stderr, "line terminator inside a line\n");
		abort();
	}
	add_line(arg, line, len);
	return 0;
}

/* The model: split the whole payload at once. */
static size_t model(const char *p, size_t len, size_t max, struct lines *out)
{
	size_t terminators = 0, start = 0, i = 0;
	while (i < len) {
		if (p[i] != '\r' && p[i] != '\n') {
			i++;
			continue;
		}
		size_t l = i - start;
		if (l == 0)
			add_line(out, p + start, 0);
		for (size_t o = 0; o < l; o += max)
			add_line(out, p + start + o, l - o < max ? l - o : max);
		if (p[i] == '\r' && i + 1 < len && p[i + 1] == '\n') {
			terminators += 2;
			i += 2;
		} else {
			terminators++;
			i++;
		}
		start = i;
	}
	for (size_t o = start; o < len; o += max)
		add_line(out, p + o, len - o < max ? len - o : max);
	return terminators;
}

static int cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	return x < y ? -1 : x > y;
}

static void free_lines(struct lines *l)
{
	free(l->data);
	free(l->lens);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t max_line = data[0] >= 128 ? 65536 : (size_t)data[0] + 1;
	size_t ncut = data[1] % 16;
	if (size < 2 + 2 * ncut)
		return 0;
	const uint8_t *cuts_raw = data + 2;
	const char *payload = (const char *)data + 2 + 2 * ncut;
	size_t plen = size - 2 - 2 * ncut;
	size_t cuts[18];
	size_t nc = 0;
	cuts[nc++] = 0;
	for (size_t i = 0; i < ncut; i++) {
		size_t v = (size_t)cuts_raw[2 * i] << 8 | cuts_raw[2 * i + 1];
		cuts[nc++] = plen ? v % (plen + 1) : 0;
	}
	cuts[nc++] = plen;
	qsort(cuts, nc, sizeof(cuts[0]), cmp_size);

	g_max_line = max_line;
	struct lines got = {0}, want = {0};
	struct linesplit ls;
	linesplit_init(&ls, max_line);
	for (size_t i = 0; i + 1 < nc; i++) {
		/* A copy of exactly the piece, so ASan sees any read past it. */
		size_t n = cuts[i + 1] - cuts[i];
		char *piece = malloc(n ? n : 1);
		memcpy(piece, payload + cuts[i], n);
		if (linesplit_feed(&ls, piece, n, on_line, &got) != 0)
			abort();
		free(piece);
	}
	if (linesplit_flush(&ls, on_line, &got) != 0)
		abort();
	/* After a flush the splitter starts afresh. */
	if (linesplit_flush(&ls, on_line, &got) != 0)
		abort();
	linesplit_free(&ls);

	size_t terminators = model(payload, plen, max_line, &want);
	if (got.len + terminators != plen) {
		fprintf(stderr, "bytes: lines %zu + terminators %zu != input %zu\n", got.len,
			terminators, plen);
		abort();
	}
	if (got.n != want.n || got.len != want.len ||
	    (got.n && memcmp(got.lens, want.lens, got.n * sizeof(size_t)) != 0) ||
	    (got.len && memcmp(got.data, want.data, got.len) != 0)) {
		fprintf(stderr,
			"lines differ from the model: got %zu lines (%zu bytes), want %zu (%zu)\n",
			got.n, got.len, want.n, want.len);
		abort();
	}
	free_lines(&got);
	free_lines(&want);
	return 0;
}
