/* Unified diffs (pure): see udiff.h. */
#include "text/udiff.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool udiff_is_text(const char *data, size_t len)
{
	return memchr(data, 0, len < 8192 ? len : 8192) == NULL;
}

struct line {
	const char *p;
	size_t len; /* without its '\n' */
	bool nl;    /* ends with '\n' */
};

static struct line *split(const char *s, size_t len, size_t *n)
{
	size_t cap = 16, k = 0;
	struct line *v = malloc(cap * sizeof(*v));
	if (!v)
		return NULL;
	size_t i = 0;
	while (i < len) {
		const char *nl = memchr(s + i, '\n', len - i);
		size_t l = nl ? (size_t)(nl - (s + i)) : len - i;
		if (k == cap) {
			cap *= 2;
			struct line *nv = realloc(v, cap * sizeof(*nv));
			if (!nv) {
				free(v);
				return NULL;
			}
			v = nv;
		}
		v[k].p = s + i;
		v[k].len = l;
		v[k].nl = nl != NULL;
		k++;
		i += l + (nl ? 1 : 0);
	}
	*n = k;
	return v;
}

static bool same(const struct line *a, const struct line *b)
{
	return a->len == b->len && a->nl == b->nl && !memcmp(a->p, b->p, a->len);
}

struct out {
	char *p;
	size_t len, cap;
	bool oom;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->oom)
		return;
	if (o->len + n + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 256;
		while (cap < o->len + n + 1)
			cap *= 2;
		char *np = realloc(o->p, cap);
		if (!np) {
			o->oom = true;
			return;
		}
		o->p = np;
		o->cap = cap;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
	o->p[o->len] = 0;
}

static void put_line(struct out *o, char tag, const struct line *l)
{
	put(o, &tag, 1);
	put(o, l->p, l->len);
	put(o, "\n", 1);
	if (!l->nl)
		put(o, "\\ No newline at end of file\n", 28);
}

/* An edit script: for each step, ' ' (both advance), '-' (a), '+' (b). */
static char *script(const struct line *a, size_t na, const struct line *b, size_t nb, size_t *len)
{
	size_t head = 0, tail = 0;
	while (head < na && head < nb && same(&a[head], &b[head]))
		head++;
	while (tail < na - head && tail < nb - head && same(&a[na - 1 - tail], &b[nb - 1 - tail]))
		tail++;
	size_t ma = na - head - tail, mb = nb - head - tail;
	char *s = malloc(na + nb + 1);
	if (!s)
		return NULL;
	size_t k = 0;
	memset(s, ' ', head);
	k = head;
	if (ma && mb && (uint64_t)(ma + 1) * (mb + 1) <= UDIFF_MAX_CELLS) {
		/* LCS lengths from the end: t[i][j] for a[i..], b[j..]. */
		uint32_t *t = calloc((ma + 1) * (mb + 1), sizeof(uint32_t));
		if (!t) {
			free(s);
			return NULL;
		}
#define T(i, j) t[(size_t)(i) * (mb + 1) + (j)]
		for (size_t i = ma; i-- > 0;)
			for (size_t j = mb; j-- > 0;)
				T(i, j) = same(&a[head + i], &b[head + j])
						  ? T(i + 1, j + 1) + 1
						  : (T(i + 1, j) > T(i, j + 1) ? T(i + 1, j)
									       : T(i, j + 1));
		size_t i = 0, j = 0;
		while (i < ma && j < mb) {
			if (same(&a[head + i], &b[head + j])) {
				s[k++] = ' ';
				i++;
				j++;
			} else if (T(i + 1, j) >= T(i, j + 1)) {
				s[k++] = '-';
				i++;
			} else {
				s[k++] = '+';
				j++;
			}
		}
#undef T
		free(t);
		while (i++ < ma)
			s[k++] = '-';
		while (j++ < mb)
			s[k++] = '+';
	} else {
		memset(s + k, '-', ma);
		k += ma;
		memset(s + k, '+', mb);
		k += mb;
	}
	memset(s + k, ' ', tail);
	k += tail;
	*len = k;
	return s;
}

/* The hunk of the change at step k of script s (ns steps): UDIFF_CONTEXT lines around,
 * merged with the next changes while their contexts touch. at: the line numbers (a, b) at
 * step k, moved to the hunk's end. Returns the step after it. */
static size_t hunk(struct out *o, const char *s, size_t ns, size_t k, size_t at[2],
		   const struct line *la, const struct line *lb)
{
	size_t start = k >= UDIFF_CONTEXT ? k - UDIFF_CONTEXT : 0;
	/* Where the hunk ends: UDIFF_CONTEXT after the last change that is
	 * followed by fewer than 2*CONTEXT+1 unchanged steps. */
	size_t end = k, eq = 0;
	for (size_t x = k; x < ns; x++) {
		if (s[x] == ' ') {
			if (++eq > 2 * UDIFF_CONTEXT)
				break;
		} else {
			eq = 0;
			end = x;
		}
	}
	size_t stop = end + 1 + UDIFF_CONTEXT < ns ? end + 1 + UDIFF_CONTEXT : ns;
	size_t a0 = at[0] - (k - start), b0 = at[1] - (k - start);
	size_t ca = 0, cb = 0;
	for (size_t x = start; x < stop; x++) {
		ca += s[x] != '+';
		cb += s[x] != '-';
	}
	char h[96];
	int n = snprintf(h, sizeof(h), "@@ -%zu,%zu +%zu,%zu @@\n", ca ? a0 + 1 : a0, ca,
			 cb ? b0 + 1 : b0, cb);
	put(o, h, (size_t)n);
	size_t ia = a0, ib = b0;
	for (size_t x = start; x < stop; x++) {
		if (s[x] == ' ') {
			put_line(o, ' ', &la[ia++]);
			ib++;
		} else if (s[x] == '-') {
			put_line(o, '-', &la[ia++]);
		} else {
			put_line(o, '+', &lb[ib++]);
		}
	}
	for (size_t x = k; x < stop; x++) {
		at[0] += s[x] != '+';
		at[1] += s[x] != '-';
	}
	return stop;
}

char *udiff(const char *a, size_t alen, const char *b, size_t blen, const char *a_name,
	    const char *b_name, size_t *out_len)
{
	size_t na = 0, nb = 0, ns = 0;
	struct line *la = split(a, alen, &na), *lb = split(b, blen, &nb);
	char *s = la && lb ? script(la, na, lb, nb, &ns) : NULL;
	struct out o = {0};
	put(&o, "", 0);
	if (!s) {
		free(la);
		free(lb);
		free(o.p);
		return NULL;
	}
	bool any = memchr(s, '-', ns) || memchr(s, '+', ns);
	if (any) {
		char h[600];
		int n = snprintf(h, sizeof(h), "--- %.280s\n+++ %.280s\n", a_name, b_name);
		put(&o, h, (size_t)n);
	}
	/* Hunks: runs of changes with UDIFF_CONTEXT lines around, merged when
	 * their contexts touch. */
	size_t k = 0;
	size_t ai_at[2] = {0, 0}; /* line numbers at step k: a, b */
	while (any && k < ns) {
		if (s[k] == ' ') {
			ai_at[0]++;
			ai_at[1]++;
			k++;
			continue;
		}
		k = hunk(&o, s, ns, k, ai_at, la, lb);
	}
	free(s);
	free(la);
	free(lb);
	if (o.oom) {
		free(o.p);
		return NULL;
	}
	*out_len = o.len;
	return o.p;
}
