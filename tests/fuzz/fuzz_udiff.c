/* fuzz_udiff: the unified diffs of ?patch=1 (runner/text/udiff.c), whose texts a task writes.
 *
 * Input: byte 0 picks where the rest is split into the old text a and the new text b. Checked
 * beyond the sanitizers: identical texts give an empty patch; otherwise the patch applied to a,
 * hunk by hunk (context and removed lines must match a exactly, "\ No newline at end of file"
 * honoured), gives b byte for byte; hunk headers count their lines right. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/udiff.h"

struct cur {
	const char *p, *end;
};

/* The next line of a patch (without its '\n'). */
static int next_line(struct cur *c, const char **l, size_t *n)
{
	if (c->p >= c->end)
		return 0;
	const char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
	if (!nl)
		abort(); /* every patch line ends with '\n' */
	*l = c->p;
	*n = (size_t)(nl - c->p);
	c->p = nl + 1;
	return 1;
}

static const char NO_NL[] = "\\ No newline at end of file";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t k = 1 + (size - 1) * data[0] / 256;
	const char *a = (const char *)data + 1, *b = (const char *)data + k;
	size_t alen = k - 1, blen = size - k;
	size_t n;
	char *p = udiff(a, alen, b, blen, "a", "b", &n);
	if (!p)
		abort();
	if (alen == blen && !memcmp(a, b, alen)) {
		if (n)
			abort();
		free(p);
		return 0;
	}
	/* Apply. */
	char *out = malloc(alen + blen + 1);
	size_t o = 0, ai = 0; /* ai: byte offset in a */
	size_t aline = 0;     /* lines of a consumed */
	struct cur c = {p, p + n};
	const char *l;
	size_t ln;
	if (!next_line(&c, &l, &ln) || ln < 4 || memcmp(l, "--- ", 4) || !next_line(&c, &l, &ln) ||
	    ln < 4 || memcmp(l, "+++ ", 4))
		abort();
	while (next_line(&c, &l, &ln)) {
		unsigned long a0, ca, b0, cb;
		char hdr[128];
		if (ln >= sizeof(hdr) || ln < 2 || memcmp(l, "@@", 2))
			abort();
		memcpy(hdr, l, ln);
		hdr[ln] = 0;
		if (sscanf(hdr, "@@ -%lu,%lu +%lu,%lu @@", &a0, &ca, &b0, &cb) != 4)
			abort();
		size_t first = ca ? a0 - 1 : a0;
		if (first < aline)
			abort();
		/* Unchanged lines up to the hunk: copied. */
		while (aline < first) {
			const char *nl = memchr(a + ai, '\n', alen - ai);
			size_t len = nl ? (size_t)(nl - (a + ai)) + 1 : alen - ai;
			memcpy(out + o, a + ai, len);
			o += len;
			ai += len;
			aline++;
		}
		unsigned long seen_a = 0, seen_b = 0;
		while (seen_a < ca || seen_b < cb) {
			if (!next_line(&c, &l, &ln) || ln < 1)
				abort();
			char tag = l[0];
			const char *body = l + 1;
			size_t blen2 = ln - 1;
			int nl = 1;
			/* the marker follows the line it is about */
			if (c.p < c.end && (size_t)(c.end - c.p) >= sizeof(NO_NL) - 1 &&
			    !memcmp(c.p, NO_NL, sizeof(NO_NL) - 1)) {
				next_line(&c, &l, &ln);
				nl = 0;
			}
			if (tag == ' ' || tag == '-') {
				if (ai + blen2 + (size_t)nl > alen || memcmp(a + ai, body, blen2) ||
				    (nl && a[ai + blen2] != '\n') || (!nl && ai + blen2 != alen))
					abort(); /* context or removal does not match a */
				ai += blen2 + (size_t)nl;
				aline++;
				seen_a++;
			}
			if (tag == ' ' || tag == '+') {
				memcpy(out + o, body, blen2);
				o += blen2;
				if (nl)
					out[o++] = '\n';
				seen_b++;
			}
			if (tag != ' ' && tag != '-' && tag != '+')
				abort();
		}
		if (seen_a != ca || seen_b != cb)
			abort();
	}
	memcpy(out + o, a + ai, alen - ai);
	o += alen - ai;
	if (o != blen || memcmp(out, b, blen))
		abort(); /* the patch does not turn a into b */
	free(out);
	free(p);
	return 0;
}
