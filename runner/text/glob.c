/* Glob matching: see glob.h. Pure: no I/O, no global state. */
#include "text/glob.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_LIT, T_ANY, T_CLASS, T_STAR, T_GSLASH, T_GEND, T_SGEND };

struct gtok {
	unsigned char kind;
	bool neg;        /* T_CLASS: [!...] */
	uint32_t c;      /* T_LIT */
	uint32_t r0, rn; /* T_CLASS: ranges[r0 .. r0+rn) */
};

struct galt {
	struct gtok *t;
	size_t n;
	uint32_t *ranges; /* lo, hi pairs */
};

struct text_glob {
	struct galt alts[TEXT_GLOB_ALTS];
	size_t nalts;
	enum text_glob_subject subject;
};

/* One UTF-8 sequence; an invalid byte counts as itself. */
static size_t utf8_dec(const unsigned char *s, size_t n, uint32_t *c)
{
	unsigned char b = s[0];
	size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
	if (len <= 1 || len > n) {
		*c = b;
		return 1;
	}
	uint32_t v = b & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*c = b;
			return 1;
		}
		v = (v << 6) | (s[i] & 0x3f);
	}
	*c = v;
	return len;
}

/* Index just past the ']' closing a class that starts at p[i] == '[', or 0. */
static size_t class_end(const char *p, size_t n, size_t i)
{
	i++;
	if (i < n && (p[i] == '!' || p[i] == '^'))
		i++;
	if (i >= n || p[i] == ']')
		return 0; /* empty or unterminated */
	for (; i < n; i++) {
		if (p[i] == '\\') {
			i++;
			continue;
		}
		if (p[i] == ']')
			return i + 1;
	}
	return 0;
}

struct expand {
	char **out;
	size_t n;
	int err; /* 1 bad pattern, 2 too many */
};

static void expand_add(struct expand *e, const char *s, size_t n)
{
	if (e->n >= TEXT_GLOB_ALTS) {
		e->err = 2;
		return;
	}
	char *c = strndup(s, n);
	if (!c) {
		e->err = 2;
		return;
	}
	e->out[e->n++] = c;
}

/* The first {...} group of s: 1 with *open and *close set, 0 when there is none, -1 when a
 * bracket expression before its end or the group itself is not closed. */
static int brace_group(const char *s, size_t n, size_t *open, size_t *close)
{
	size_t level = 0;
	for (size_t j = 0; j < n; j++) {
		if (s[j] == '\\') {
			j++;
			continue;
		}
		if (s[j] == '[') {
			size_t end = class_end(s, n, j);
			if (!end)
				return -1;
			j = end - 1;
			continue;
		}
		if (s[j] == '{' && level++ == 0) {
			*open = j;
		} else if (s[j] == '}' && level && --level == 0) {
			*close = j;
			return 1;
		}
	}
	return level ? -1 : 0;
}

/* Expand the first {a,b} group of s and recurse on each result. */
static void expand(struct expand *e, const char *s, size_t n, unsigned depth)
{
	if (e->err)
		return;
	if (depth > 32) {
		e->err = 2;
		return;
	}
	size_t open = 0, close = 0, level = 0;
	int g = brace_group(s, n, &open, &close);
	if (g < 0)
		e->err = 1;
	if (g == 0)
		expand_add(e, s, n);
	if (g <= 0)
		return;
	size_t start = open + 1;
	char *tmp = malloc(n);
	if (!tmp) {
		e->err = 2;
		return;
	}
	for (size_t j = open + 1; j <= close && !e->err; j++) {
		if (j < close && s[j] == '\\') {
			j++;
			continue;
		}
		if (j < close && s[j] == '[') {
			j = class_end(s, n, j) - 1;
			continue;
		}
		if (j < close && s[j] == '{')
			level++;
		else if (j < close && s[j] == '}')
			level--;
		if (j == close || (s[j] == ',' && level == 0)) {
			size_t k = 0;
			memcpy(tmp + k, s, open);
			k += open;
			memcpy(tmp + k, s + start, j - start);
			k += j - start;
			memcpy(tmp + k, s + close + 1, n - close - 1);
			k += n - close - 1;
			expand(e, tmp, k, depth + 1);
			start = j + 1;
		}
	}
	free(tmp);
}

/* A run of stars at p[i]: one token (or a double star after a slash turned into T_SGEND);
 * returns where the next token begins. */
static size_t tok_star(struct galt *a, const char *p, size_t n, size_t i)
{
	struct gtok *t = &a->t[a->n];
	size_t j = i;
	while (j < n && p[j] == '*')
		j++;
	bool seg_start = i == 0 || p[i - 1] == '/';
	if (j - i >= 2 && seg_start && j == n) {
		/* A double star ending the pattern; after a slash it
		 * also matches the directory itself ("a" for a/ + it). */
		if (a->n && a->t[a->n - 1].kind == T_LIT && a->t[a->n - 1].c == '/') {
			a->t[a->n - 1].kind = T_SGEND;
			return j;
		}
		t->kind = T_GEND;
	} else if (j - i >= 2 && seg_start && p[j] == '/') {
		t->kind = T_GSLASH;
		j++; /* the '/' belongs to it: zero or more whole segments */
	} else {
		t->kind = T_STAR;
	}
	a->n++;
	return j;
}

/* A bracket expression at p[*i] (its ranges appended at a->ranges[*nr]): 0, or -EINVAL. */
static int tok_class(struct galt *a, const char *p, size_t n, size_t *i, size_t *nr)
{
	struct gtok *t = &a->t[a->n];
	size_t end = class_end(p, n, *i), k = *i + 1;
	if (!end)
		return -EINVAL;
	t->kind = T_CLASS;
	if (p[k] == '!' || p[k] == '^') {
		t->neg = true;
		k++;
	}
	t->r0 = (uint32_t)*nr;
	while (k < end - 1) {
		uint32_t lo, hi;
		if (p[k] == '\\')
			k++;
		k += utf8_dec((const unsigned char *)p + k, end - 1 - k, &lo);
		hi = lo;
		if (k + 1 < end - 1 && p[k] == '-') {
			k++;
			if (p[k] == '\\')
				k++;
			if (k >= end - 1)
				return -EINVAL;
			k += utf8_dec((const unsigned char *)p + k, end - 1 - k, &hi);
		}
		a->ranges[(*nr)++] = lo;
		a->ranges[(*nr)++] = hi;
		t->rn++;
	}
	*i = end;
	a->n++;
	return 0;
}

static int tokenize(struct galt *a, const char *p, size_t n)
{
	a->t = calloc(n + 1, sizeof(*a->t));
	a->ranges = calloc(2 * n + 2, sizeof(*a->ranges));
	if (!a->t || !a->ranges)
		return -ENOMEM;
	size_t nr = 0;
	for (size_t i = 0; i < n;) {
		struct gtok *t = &a->t[a->n];
		memset(t, 0, sizeof(*t));
		if (p[i] == '*') {
			i = tok_star(a, p, n, i);
			continue;
		}
		if (p[i] == '?') {
			t->kind = T_ANY;
			i++;
			a->n++;
			continue;
		}
		if (p[i] == '[') {
			if (tok_class(a, p, n, &i, &nr) < 0)
				return -EINVAL;
			continue;
		}
		if (p[i] == '\\' && ++i >= n)
			return -EINVAL; /* trailing backslash */
		t->kind = T_LIT;
		i += utf8_dec((const unsigned char *)p + i, n - i, &t->c);
		a->n++;
	}
	return 0;
}

int text_glob_compile(struct text_glob **out, const char *pattern, char *err, size_t errlen)
{
	*out = NULL;
	size_t n = strlen(pattern);
	if (n > TEXT_GLOB_MAX) {
		snprintf(err, errlen, "pattern longer than %d bytes", TEXT_GLOB_MAX);
		return -EINVAL;
	}
	struct text_glob *g = calloc(1, sizeof(*g));
	char *alts[TEXT_GLOB_ALTS];
	struct expand e = {.out = alts};
	if (!g)
		return -ENOMEM;
	expand(&e, pattern, n, 0);
	int rc = 0;
	if (e.err) {
		snprintf(err, errlen,
			 e.err == 1 ? "malformed pattern (unclosed [ or {)"
				    : "pattern expands to more than %d alternatives",
			 TEXT_GLOB_ALTS);
		rc = -EINVAL;
	}
	g->subject = pattern[0] == '/' ? GLOB_ABS : GLOB_NAME;
	for (size_t i = 0; i < e.n; i++) {
		if (!rc && strchr(alts[i], '/') && g->subject == GLOB_NAME)
			g->subject = GLOB_REL;
		if (!rc) {
			rc = tokenize(&g->alts[g->nalts++], alts[i], strlen(alts[i]));
			if (rc < 0)
				snprintf(err, errlen, "malformed pattern");
		}
		free(alts[i]);
	}
	if (rc < 0) {
		text_glob_free(g);
		return rc;
	}
	*out = g;
	return 0;
}

enum text_glob_subject text_glob_subject(const struct text_glob *g)
{
	return g->subject;
}

void text_glob_free(struct text_glob *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->nalts; i++) {
		free(g->alts[i].t);
		free(g->alts[i].ranges);
	}
	free(g);
}

static bool tok_match(const struct galt *a, const struct gtok *t, uint32_t c)
{
	if (t->kind == T_LIT)
		return t->c == c;
	if (c == '/')
		return false; /* ? and classes stay inside one segment */
	if (t->kind == T_ANY)
		return true;
	bool in = false;
	for (uint32_t k = 0; k < t->rn && !in; k++)
		in = c >= a->ranges[2 * (t->r0 + k)] && c <= a->ranges[2 * (t->r0 + k) + 1];
	return in != t->neg;
}

/* Backtracking with two resume points (the last star, and the last
 * double star followed by a slash), as doublestar does: polynomial, never
 * exponential. */
static bool match_alt(const struct galt *a, const unsigned char *s, size_t n)
{
	size_t ti = 0, si = 0;
	size_t st_t = 0, st_s = 0, gs_t = 0, gs_s = 0;
	bool star = false, gstar = false;
	for (;;) {
		if (ti < a->n) {
			const struct gtok *t = &a->t[ti];
			if (t->kind == T_STAR) {
				star = true;
				st_t = ++ti;
				st_s = si;
				continue;
			}
			if (t->kind == T_GSLASH) {
				gstar = true;
				star = false;
				gs_t = ++ti;
				gs_s = si;
				continue;
			}
			if (t->kind == T_GEND)
				return true;
			if (t->kind == T_SGEND) {
				if (si == n || s[si] == '/')
					return true;
			} else if (si < n) {
				uint32_t c;
				size_t cl = utf8_dec(s + si, n - si, &c);
				if (tok_match(a, t, c)) {
					ti++;
					si += cl;
					continue;
				}
			}
		} else if (si == n) {
			return true;
		}
		if (star && st_s < n && s[st_s] != '/') {
			uint32_t c;
			st_s += utf8_dec(s + st_s, n - st_s, &c);
			ti = st_t;
			si = st_s;
			continue;
		}
		if (gstar) {
			const unsigned char *sl = gs_s < n ? memchr(s + gs_s, '/', n - gs_s) : NULL;
			if (sl) {
				gs_s = (size_t)(sl - s) + 1;
				ti = gs_t;
				si = gs_s;
				star = false;
				continue;
			}
		}
		return false;
	}
}

bool text_glob_match(const struct text_glob *g, const char *name, size_t len)
{
	for (size_t i = 0; i < g->nalts; i++)
		if (match_alt(&g->alts[i], (const unsigned char *)name, len))
			return true;
	return false;
}
