/* text/udiff.c: unified diffs of the checkpoints' ?patch=1: identical texts, one change in the
 * middle with its context, additions at the end, a missing final newline, a file added from
 * nothing, two hunks apart and merged ones, the bound on the matching table. */
#include "text/udiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

static char *d(const char *a, const char *b)
{
	size_t n;
	char *p = udiff(a, strlen(a), b, strlen(b), "a/f", "b/f", &n);
	CHECK(p != NULL && strlen(p) == n);
	return p;
}

TEST(identical_is_empty)
{
	char *p = d("x\ny\n", "x\ny\n");
	CHECK_STR(p, "");
	free(p);
}

TEST(one_change_with_context)
{
	char *p = d("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nFIVE\n6\n7\n8\n9\n");
	CHECK_STR(p, "--- a/f\n+++ b/f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+FIVE\n 6\n 7\n 8\n");
	free(p);
}

TEST(added_at_end_and_no_newline)
{
	char *p = d("a\nb", "a\nb\nc\n");
	CHECK_STR(
		p,
		"--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n a\n-b\n\\ No newline at end of file\n+b\n+c\n");
	free(p);
}

TEST(from_nothing)
{
	char *p = d("", "new\nfile\n");
	CHECK_STR(p, "--- a/f\n+++ b/f\n@@ -0,0 +1,2 @@\n+new\n+file\n");
	free(p);
}

TEST(two_hunks)
{
	char a[400] = "", b[400] = "";
	for (int i = 1; i <= 20; i++) {
		char l[16];
		snprintf(l, sizeof(l), "%d\n", i);
		strcat(a, l);
		strcat(b, i == 2 ? "two\n" : i == 18 ? "eighteen\n" : l);
	}
	char *p = d(a, b);
	CHECK(strstr(p, "@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n") != NULL);
	CHECK(strstr(p, "@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n") != NULL);
	free(p);
	/* Changes 5 lines apart share one hunk. */
	strcpy(b, a);
	b[0] = 'X';
	char *q = strstr(b, "\n7\n");
	q[1] = 'Y';
	p = d(a, b);
	CHECK(strstr(p + 1, "@@") == strstr(p, "@@")); /* one hunk */
	free(p);
}

TEST(text_detection)
{
	CHECK(udiff_is_text("abc\n", 4));
	CHECK(!udiff_is_text("a\0c", 3));
}

TEST(big_middle_is_still_a_patch)
{
	/* 3000 x 3000 lines > UDIFF_MAX_CELLS: the middle is removed then added. */
	size_t n = 3000;
	char *a = malloc(n * 8 + 1), *b = malloc(n * 8 + 1);
	size_t la = 0, lb = 0;
	for (size_t i = 0; i < n; i++) {
		la += (size_t)sprintf(a + la, "a%05zu\n", i);
		lb += (size_t)sprintf(b + lb, "%s%05zu\n", i % 2 ? "a" : "b", i);
	}
	size_t len;
	char *p = udiff(a, la, b, lb, "x", "y", &len);
	CHECK(p && strstr(p, "@@ -1,3000 +1,3000 @@\n-a00000\n") != NULL);
	free(p);
	free(a);
	free(b);
}
