/* audit/sources.c: the audit trail's bound per source (issue 44, finding 5): a
 * source's flood is dropped and counted against it alone, another source
 * keeps its own share, the counts say whose and by door, and a table full
 * of sources still bounds the newcomers (they share "other"). */
#include "audit/sources.h"

#include <stdio.h>
#include <stdlib.h>

#include "unit.h"

static unsigned admitted(struct audit_srcs *t, const char *key, const char *door, unsigned n,
			 uint64_t now)
{
	unsigned k = 0;
	for (unsigned i = 0; i < n; i++)
		k += audit_srcs_admit(t, key, door, 100, now);
	return k;
}

TEST(a_flood_is_its_sources_alone)
{
	struct audit_srcs *t = calloc(1, sizeof(*t));
	if (!CHECK(t))
		return;
	uint64_t now = 5000000;
	CHECK(admitted(t, "uid:1000", "native", 10000, now) == 100); /* its burst */
	/* Another source's share is whole. */
	CHECK(admitted(t, "addr:10.0.0.9", "native", 50, now) == 50);
	CHECK(t->dropped == 9900);
	/* A second later its bucket is full again: exactly the rate more. */
	CHECK(admitted(t, "uid:1000", "model", 1000, now + 1000000) == 100);
	int i = -1;
	struct audit_src *s = audit_srcs_due(t, &i, now + 1000000, false);
	if (!CHECK(s))
		return;
	CHECK_STR(s->key, "uid:1000");
	CHECK(s->pending == 10800);
	CHECK(s->n_by == 2);
	CHECK(s->by[0].n == 9900 && s->by[1].n == 900);
	CHECK(audit_srcs_due(t, &i, now + 1000000, false) == NULL); /* none else dropped */
	audit_src_marked(s, now + 1000000);
	/* 0.2 s later: 20 tokens back; a flood of 100 keeps 20, drops 80. */
	CHECK(admitted(t, "uid:1000", "native", 100, now + 1200000) == 20);
	/* At most one marker a second per source, unless all are asked for
	 * (a chain being closed says everything it dropped). */
	i = -1;
	CHECK(audit_srcs_due(t, &i, now + 1200000, false) == NULL);
	i = -1;
	CHECK(audit_srcs_due(t, &i, now + 1200000, true) == s && s->pending == 80);
	i = -1;
	CHECK(audit_srcs_due(t, &i, now + 2000000, false) == s);
	free(t);
}

TEST(a_full_table_shares_other)
{
	struct audit_srcs *t = calloc(1, sizeof(*t));
	if (!CHECK(t))
		return;
	uint64_t now = 5000000;
	char key[32];
	/* Every slot taken by a source that keeps flooding. */
	for (int i = 0; i < AUDIT_SOURCES - 1; i++) {
		snprintf(key, sizeof(key), "addr:10.0.%d.%d", i / 250, i % 250);
		CHECK(admitted(t, key, "native", 200, now) == 100);
	}
	/* Newcomers share one bucket, not one each: rotating addresses buys nothing. */
	unsigned k = 0;
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "addr:192.168.%d.%d", i / 250, i % 250);
		k += audit_srcs_admit(t, key, "native", 100, now);
	}
	CHECK(k == 100);
	int i = -1;
	struct audit_src *s = NULL, *x;
	while ((x = audit_srcs_due(t, &i, now, true)))
		s = x;
	if (CHECK(s))
		CHECK_STR(s->key, "other");
	/* A source idle for a second with nothing pending gives its slot up. */
	i = -1;
	while ((x = audit_srcs_due(t, &i, now, true)))
		audit_src_marked(x, now);
	CHECK(admitted(t, "uid:2000", "model", 10, now + 2000000) == 10);
	i = -1;
	CHECK(audit_srcs_due(t, &i, now + 2000000, true) == NULL);
	free(t);
}
