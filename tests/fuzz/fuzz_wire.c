/* fuzz_wire: the model proxy's usage scanners (runner/model/wire_*.c on the
 * framer of runner/model/usage.c) and the route table.
 *
 * Input layout: byte 0 picks the wire format (openai, anthropic, gemini);
 * byte 1 the piece size (1..256); the rest is a response body, fed in
 * pieces of that size, then EOF. The same body is also matched as a route
 * path (up to its first NUL).
 *
 * Checked: no crash/leak/UB; the usage found never has a negative count
 * and its total is at least prompt + completion for every format but
 * OpenAI's (whose total_tokens is the gateway's word); the same body fed
 * whole, and fed one byte at a time, gives exactly the same usage (split
 * points never matter); a matched route's gateway path is the request path
 * itself (Gemini; v1 model calls go to v1beta) or the path without its
 * "/v1" (OpenAI, Anthropic). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/wire.h"

static void scan(const struct wire *w, const uint8_t *p, size_t n, size_t piece,
		 struct wire_scan *out)
{
	wire_scan_init(out, w);
	for (size_t i = 0; i < n; i += piece)
		wire_scan_feed(out, (const char *)p + i, n - i < piece ? n - i : piece);
	wire_scan_eof(out);
}

static void same(const struct wire_scan *a, const struct wire_scan *b, const char *what)
{
	/* reports too: the proxy's estimate of a cut answer starts where the
	 * last report was (budget_estimate). */
	if (a->has_usage != b->has_usage || a->reports != b->reports ||
	    (a->has_usage && memcmp(&a->usage, &b->usage, sizeof(a->usage)))) {
		fprintf(stderr, "usage depends on split points (%s)\n", what);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct wire *const ws[] = {&wire_openai, &wire_anthropic, &wire_gemini};
	if (size < 2)
		return 0;
	const struct wire *w = ws[data[0] % 3];
	size_t piece = (size_t)data[1] + 1;
	const uint8_t *body = data + 2;
	size_t n = size - 2;

	struct wire_scan a, whole, bytes;
	scan(w, body, n, piece, &a);
	scan(w, body, n, n ? n : 1, &whole);
	same(&a, &whole, "pieces vs whole");
	if (n <= 4096) {
		scan(w, body, n, 1, &bytes);
		same(&bytes, &whole, "bytes vs whole");
		wire_scan_free(&bytes);
	}
	if (a.has_usage) {
		const struct mu_usage *u = &a.usage;
		if (u->prompt_tokens < 0 || u->completion_tokens < 0 || u->total_tokens < 0 ||
		    u->cache_read_tokens < 0 || u->cache_creation_tokens < 0) {
			fprintf(stderr, "negative usage\n");
			abort();
		}
		if (w != &wire_openai &&
		    u->total_tokens < u->prompt_tokens + u->completion_tokens) {
			fprintf(stderr, "total below its parts\n");
			abort();
		}
	}
	wire_scan_free(&a);
	wire_scan_free(&whole);

	char path[512];
	size_t pl = strnlen((const char *)body, n < sizeof(path) - 1 ? n : sizeof(path) - 1);
	memcpy(path, body, pl);
	path[pl] = 0;
	struct wire_route rt;
	enum wire_match m;
	const struct wire *f = wire_find(path, &rt, &m);
	if (m == WIRE_ROUTE) {
		const char *want = rt.base == WIRE_BASE_ROOT ? path : path + 3;
		bool v1_gemini = f == &wire_gemini && !strncmp(path, "/v1/", 4) &&
				 !strncmp(rt.path, "/v1beta/", 8) && !strcmp(rt.path + 7, path + 3);
		if (!f || (strcmp(rt.path, want) && !v1_gemini) || (!rt.get && !rt.post)) {
			fprintf(stderr, "route %s maps to %s\n", path, rt.path);
			abort();
		}
	}
	return 0;
}
