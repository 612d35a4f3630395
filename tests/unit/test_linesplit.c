#include "task/linesplit.h"

#include <stdlib.h>

#include "unit.h"

struct collect {
	char lines[64][64];
	int n;
};

static int cb(void *arg, const char *line, size_t len)
{
	struct collect *c = arg;
	if (c->n < 64) {
		snprintf(c->lines[c->n], 64, "%.*s", (int)len, line);
		c->n++;
	}
	return 0;
}

/* Feed `in` split at every possible position pair; the lines must not
 * depend on how reads were cut. */
static void check_all_splits(const char *in, const char *const *want, int nwant)
{
	size_t len = strlen(in);
	for (size_t a = 0; a <= len; a++) {
		for (size_t b = a; b <= len; b++) {
			struct linesplit ls;
			struct collect c = {.n = 0};
			linesplit_init(&ls, 16);
			linesplit_feed(&ls, in, a, cb, &c);
			linesplit_feed(&ls, in + a, b - a, cb, &c);
			linesplit_feed(&ls, in + b, len - b, cb, &c);
			linesplit_flush(&ls, cb, &c);
			linesplit_free(&ls);
			int ok = c.n == nwant;
			for (int i = 0; ok && i < nwant; i++)
				ok = strcmp(c.lines[i], want[i]) == 0;
			CHECK(ok);
			if (!ok) {
				unit_diag("input %s split %zu/%zu gave %d lines", in, a, b, c.n);
				return;
			}
		}
	}
}

TEST(cr_lf_and_crlf_end_lines)
{
	const char *w1[] = {"a", "b", "c", "", "d", "", "e"};
	check_all_splits("a\r\nb\rc\n\nd\r\r\ne", w1, 7);
}

TEST(empty_lines)
{
	const char *w2[] = {"", "", ""};
	check_all_splits("\n\r\n\r", w2, 3);
}

TEST(partial_line_at_flush)
{
	const char *w3[] = {"no newline"};
	check_all_splits("no newline", w3, 1);
}

TEST(long_line_cut_at_max)
{
	/* max_line 16: a long line is cut into 16-byte pieces */
	const char *w4[] = {"0123456789abcdef", "0123456789abcdef", "xy"};
	check_all_splits("0123456789abcdef0123456789abcdefxy\n", w4, 3);
}

/* "\r" then "\n" in a later feed counts once */
TEST(cr_then_lf_in_next_feed)
{
	struct linesplit ls;
	struct collect c = {.n = 0};
	linesplit_init(&ls, 0);
	linesplit_feed(&ls, "x\r", 2, cb, &c);
	linesplit_feed(&ls, "\ny\n", 3, cb, &c);
	linesplit_flush(&ls, cb, &c);
	linesplit_free(&ls);
	CHECK(c.n == 2);
	CHECK_STR(c.lines[0], "x");
	CHECK_STR(c.lines[1], "y");
}

/* line_end: where each line's bytes end in the whole input, whatever the reads (the execd
 * stream's event ids are built from it, docs/design/wire.md#opensandbox-execd-compatible-api); NULL
 * for a flushed line. */
struct ends {
	struct linesplit *ls;
	const char *base; /* the read being fed */
	size_t base_off;  /* its offset in the input */
	long end[64];
	int n;
};

static int end_cb(void *arg, const char *line, size_t len)
{
	(void)line;
	(void)len;
	struct ends *e = arg;
	if (e->n < 64)
		e->end[e->n++] = e->ls->line_end
					 ? (long)(e->base_off + (size_t)(e->ls->line_end - e->base))
					 : -1;
	return 0;
}

TEST(line_end_is_the_position_in_the_input)
{
	/* "ab\r\n" ends at 2; "" (\r\n pair: the \n is swallowed) ... */
	const char *in = "ab\r\ncd\n\nxxxxxxxxxxxxxxxxxxxxyz\rtail";
	const long want[] = {2, 6, 7, 24, 30, -1};
	size_t len = strlen(in);
	for (size_t a = 0; a <= len; a++) {
		struct linesplit ls;
		struct ends e = {.ls = &ls};
		linesplit_init(&ls, 16);
		e.base = in;
		e.base_off = 0;
		linesplit_feed(&ls, in, a, end_cb, &e);
		e.base = in + a;
		e.base_off = a;
		linesplit_feed(&ls, in + a, len - a, end_cb, &e);
		linesplit_flush(&ls, end_cb, &e);
		linesplit_free(&ls);
		int ok = e.n == 6;
		for (int i = 0; ok && i < 6; i++)
			ok = e.end[i] == want[i];
		CHECK(ok);
		if (!ok) {
			unit_diag("split %zu: %d lines, ends %ld %ld %ld %ld %ld", a, e.n, e.end[0],
				  e.end[1], e.end[2], e.end[3], e.end[4]);
			return;
		}
	}
}
