/* fuzz_regex: grep's regular expressions (runner/text/regex.c).
 *
 * Input layout: the pattern up to the first NUL (at most 1024 bytes, as grep takes), then lines
 * separated by '\n'. Byte 0 of the rest also picks the work slice of the searches (1..256 units),
 * so every search is cut and resumed many times.
 *
 * Checked: compiling never crashes and an accepted pattern's program stays within
 * TEXT_REGEX_INSTS_MAX; a refusal always has a reason; a search always ends, spends at most
 * (bytes + 2) * (3 * program + 2) units (linear in the line); resuming gives the answer of a
 * whole search; and the answer is glibc's regexec (REG_EXTENDED | REG_NOSUB | REG_NEWLINE, C
 * locale) for patterns both accept, outside the differences regex.h documents (musl's escapes,
 * counts over 255, glibc's "{\0}", and assertions in repeated groups, which glibc gets wrong). */
#include <errno.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/regex.h"

static int search(struct text_regex *re, const char *s, size_t n, size_t slice, size_t *spent)
{
	struct text_regex_cursor cur = {0};
	int m;
	*spent = 0;
	do {
		size_t w = slice;
		m = text_regex_search(re, s, n, &cur, &w);
		*spent += slice - w;
	} while (m == TEXT_REGEX_MORE);
	return m;
}

/* Does glibc read this pattern as we do? */
static int comparable(const char *p, size_t n)
{
	if (n > 64)
		return 0; /* glibc's compiler is exponential in places: the fuzzer's timeout */
	int group = 0, asserts = 0, brace = 0, dups = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c == '(')
			group = 1;
		if (c == '{')
			brace = 1;
		/* glibc copies a repeated group per repetition: a+++... or ((a*)*)* outgrows the
		 * fuzzer's 2 GiB (the bomb of issue 33, seen from glibc's side) */
		if ((c == '*' || c == '+' || c == '?' || c == '{') && ++dups > 3)
			return 0;
		if (c == '^' || c == '$')
			asserts = 1;
		if (c >= 0x80)
			continue;
		if (c == '\\' && i + 1 < n) {
			char e = p[++i];
			if (strchr("dDtnrfe", e) || (brace && e >= '0' && e <= '9') ||
			    (e >= '1' && e <= '9'))
				return 0;
			if (strchr("bB<>`'", e))
				asserts = 1;
		}
		if (c >= '0' && c <= '9' && brace) {
			/* a count over 255: refused here, taken by glibc */
			size_t j = i, v = 0;
			while (j < n && p[j] >= '0' && p[j] <= '9' && v < 1000)
				v = v * 10 + (size_t)(p[j++] - '0');
			if (v > 16)
				return 0; /* over 255 we refuse; glibc copies the group v times */
		}
	}
	return !(group && asserts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	const char *nul = memchr(in, 0, size);
	size_t plen = nul ? (size_t)(nul - in) : size;
	if (!plen || plen > 1024)
		return 0;
	char *pat = malloc(plen + 1);
	if (!pat)
		abort();
	memcpy(pat, in, plen);
	pat[plen] = 0;
	const char *rest = nul ? nul + 1 : in + size;
	size_t rlen = (size_t)(in + size - rest);
	size_t slice = rlen ? 1 + (unsigned char)rest[0] : 7;

	struct text_regex *re;
	char err[160] = "";
	int rc = text_regex_compile(&re, pat, plen, err, sizeof(err));
	if (rc < 0) {
		if (rc != -EINVAL && rc != -ENOMEM)
			abort();
		if (rc == -EINVAL && !err[0])
			abort(); /* a refusal without a reason */
		free(pat);
		return 0;
	}
	size_t insts = text_regex_size(re);
	if (!insts || insts > TEXT_REGEX_INSTS_MAX)
		abort();
	/* glibc copies a repeated group per repetition: only small programs are compared */
	int cmp = insts <= 100 && comparable(pat, plen);
	regex_t gre;
	if (cmp && regcomp(&gre, pat, REG_EXTENDED | REG_NOSUB | REG_NEWLINE))
		cmp = 0;
	const char *line = rest;
	while (line <= in + size) {
		const char *end = memchr(line, '\n', (size_t)(in + size - line));
		size_t n = end ? (size_t)(end - line) : (size_t)(in + size - line);
		size_t spent, whole_spent;
		int m = search(re, line, n, slice, &spent);
		if (spent > (n + 2) * (3 * insts + 2)) {
			fprintf(stderr, "%zu units for %zu bytes, program %zu\n", spent, n, insts);
			abort();
		}
		int whole = search(re, line, n, (size_t)-1, &whole_spent);
		if (m != whole)
			abort();
		if (cmp && !memchr(line, 0, n)) {
			char *z = strndup(line, n);
			if (!z)
				abort();
			int g = regexec(&gre, z, 0, NULL, 0) == 0;
			if (g != (m == TEXT_REGEX_MATCH)) {
				fprintf(stderr, "/%s/ on '%s': ours %d, glibc %d\n", pat, z, m, g);
				abort();
			}
			free(z);
		}
		if (!end)
			break;
		line = end + 1;
	}
	if (cmp)
		regfree(&gre);
	text_regex_free(re);
	free(pat);
	return 0;
}
