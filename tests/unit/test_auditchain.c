/* audit/chain.c: the audit trail's hash chain, secret masking and verifier
 * (docs/design/audit.md): an unbroken chain passes, mixed with other log
 * lines and a collector's prefix; a changed field, a removed line and a
 * reordered pair are each named at the first break. */
#include "audit/chain.h"

#include <stdio.h>
#include <stdlib.h>

#include "unit.h"

#define N 5

/* A chain of N events (seq 1..N) as the runner writes them. */
static void make_chain(char lines[N][256])
{
	char prev[AUDIT_HASH_HEX] = AUDIT_HASH_ZERO;
	for (int i = 0; i < N; i++) {
		snprintf(lines[i], 256,
			 "{\"audit\":true,\"seq\":%d,\"ts\":1,\"chain\":1,\"prev\":\"%s\","
			 "\"door\":\"execd\",\"what\":\"%s\",\"outcome\":\"ok\"}",
			 i + 1, prev, i ? "task started" : "chain started");
		auditchain_hash(lines[i], strlen(lines[i]), prev);
	}
}

static int verify(char lines[][256], int n, struct auditchain_verifier *v)
{
	auditchain_verify_init(v);
	for (int i = 0; i < n; i++)
		if (auditchain_verify_line(v, lines[i], strlen(lines[i])) < 0)
			return -1;
	return 0;
}

TEST(hash_known_vector)
{
	char h[AUDIT_HASH_HEX];
	auditchain_hash("abc", 3, h);
	CHECK_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(chain_unbroken_among_log_lines)
{
	char l[N + 2][256];
	make_chain(l);
	/* A collector's timestamp prefix, and other log lines between. */
	char pre[300];
	snprintf(pre, sizeof(pre), "2026-12-03T10:00:00Z stderr F %s\n", l[2]);
	snprintf(l[2], 256, "%.255s", pre);
	snprintf(l[N], 256, "{\"ts\":1,\"level\":\"info\",\"msg\":\"task started\"}");
	snprintf(l[N + 1], 256, "not json at all");
	struct auditchain_verifier v;
	CHECK(verify(l, N + 2, &v) == 0);
	CHECK(v.events == N);
	CHECK(v.skipped == 2);
	CHECK(v.first_seq == 1 && v.last_seq == N);
}

TEST(changed_field_names_the_line)
{
	char l[N][256];
	make_chain(l);
	char *p = strstr(l[2], "task started");
	memcpy(p, "task stopped", 12);
	struct auditchain_verifier v;
	CHECK(verify(l, N, &v) < 0);
	CHECKF(v.break_seq == 3, "break at %llu: %s", (unsigned long long)v.break_seq, v.why);
	CHECK(strstr(v.why, "changed") != NULL);
}

TEST(removed_line_names_the_gap)
{
	char l[N][256];
	make_chain(l);
	memmove(l[2], l[3], sizeof(l[0]) * 2); /* seq 3 removed */
	struct auditchain_verifier v;
	CHECK(verify(l, N - 1, &v) < 0);
	CHECKF(v.break_seq == 3, "break at %llu: %s", (unsigned long long)v.break_seq, v.why);
	CHECK(strstr(v.why, "removed") != NULL);
}

TEST(reordered_pair)
{
	char l[N][256], t[256];
	make_chain(l);
	memcpy(t, l[1], sizeof(t));
	memcpy(l[1], l[2], sizeof(t));
	memcpy(l[2], t, sizeof(t));
	struct auditchain_verifier v;
	CHECK(verify(l, N, &v) < 0);
	CHECKF(v.break_seq == 2, "break at %llu: %s", (unsigned long long)v.break_seq, v.why);
}

TEST(audit_line_cut_is_a_break)
{
	char l[N][256];
	make_chain(l);
	l[3][40] = 0; /* truncated: still says it is an audit event */
	struct auditchain_verifier v;
	CHECK(verify(l, N, &v) < 0);
	CHECK(v.break_seq == 4);
}

TEST(mask_every_occurrence)
{
	const char *secrets[] = {"tok-SECRET-1", "short", "gw-key-ABCDEF"};
	const char *line = "{\"command\":\"curl -H tok-SECRET-1 x gw-key-ABCDEF tok-SECRET-1\"}";
	size_t n = 0;
	bool failed;
	char *m = auditchain_mask(line, strlen(line), secrets, 3, &n, &failed);
	if (!CHECK(m))
		return;
	CHECK_STR(m, "{\"command\":\"curl -H *** x *** ***\"}");
	CHECK(n == strlen(m));
	CHECK(!failed);
	free(m);
	/* Nothing to mask: NULL, the line is used as is; a short value is no
	 * secret the runner registers (it would mask ordinary words). */
	CHECK(!auditchain_mask("short text", 10, secrets, 3, &n, &failed) && !failed);
}

/* A mask that joins its neighbours into the secret again is masked again:
 * a secret of stars in a run of stars (fuzz_auditchain's finding), and one
 * secret's mask completing another. */
TEST(mask_never_rebuilds_a_secret)
{
	size_t n = 0;
	bool failed;
	const char *stars[] = {"******"};
	const char *run = "x*************************y";
	char *m = auditchain_mask(run, strlen(run), stars, 1, &n, &failed);
	if (CHECK(m)) {
		CHECK(!memmem(m, n, stars[0], 6));
		CHECK(n <= strlen(run));
		free(m);
	}
	const char *two[] = {"a***b-tail", "MIDDLE-SECRET"};
	const char *line = "a"
			   "MIDDLE-SECRET"
			   "b-tail";
	m = auditchain_mask(line, strlen(line), two, 2, &n, &failed);
	if (CHECK(m)) {
		CHECK_STR(m, "***");
		free(m);
	}
}

/* A seq below 1 is no event the runner wrote (fuzz_auditchain's finding: a
 * trail "accepted" at seq -3 could not be continued). */
TEST(seq_below_one_is_a_break)
{
	const char *lines[] = {"{\"audit\":true,\"seq\":-3,\"ts\":1,\"prev\":\"ok\"}",
			       "{\"audit\":true,\"seq\":0,\"ts\":1,\"prev\":\"ok\"}"};
	for (int i = 0; i < 2; i++) {
		struct auditchain_verifier v;
		auditchain_verify_init(&v);
		CHECK(auditchain_verify_line(&v, lines[i], strlen(lines[i])) < 0);
		CHECK(v.broken && v.events == 0);
	}
}

/* The head (issue 44): "SEQ:HASH" parsed strictly; a trail given its head
 * must hold the head's event, so a trail cut at its end (which the chain
 * alone cannot see: every line left still follows the one before) is a
 * break, said as a cut; events after the head are accepted. */
static int verify_with_head(char lines[][256], int n, const char *head,
			    struct auditchain_verifier *v)
{
	uint64_t seq;
	char hash[AUDIT_HASH_HEX];
	auditchain_verify_init(v);
	if (auditchain_head_parse(head, &seq, hash) < 0)
		return -2;
	auditchain_verify_head(v, seq, hash);
	for (int i = 0; i < n; i++)
		if (auditchain_verify_line(v, lines[i], strlen(lines[i])) < 0)
			return -1;
	return auditchain_verify_end(v);
}

static void head_of(char lines[][256], int i, char out[AUDIT_HEAD_MAX])
{
	char h[AUDIT_HASH_HEX];
	auditchain_hash(lines[i], strlen(lines[i]), h);
	auditchain_head_format((uint64_t)i + 1, h, out);
}

TEST(head_parse_is_strict)
{
	uint64_t seq = 0;
	char h[AUDIT_HASH_HEX];
	char ok[100];
	snprintf(ok, sizeof(ok), "42:%s",
		 "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789");
	CHECK(auditchain_head_parse(ok, &seq, h) == 0);
	CHECK(seq == 42);
	CHECK_STR(h, "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789");
	const char *bad[] = {"",
			     "42",
			     "42:",
			     ":" AUDIT_HASH_ZERO,
			     "0:" AUDIT_HASH_ZERO,
			     "-1:" AUDIT_HASH_ZERO,
			     "4x:" AUDIT_HASH_ZERO,
			     "42:" AUDIT_HASH_ZERO "0",
			     "42:000000000000000000000000000000000000000000000000000000000000000g",
			     "99999999999999999999:" AUDIT_HASH_ZERO,
			     "42:abc"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECKF(auditchain_head_parse(bad[i], &seq, h) < 0, "accepted %s", bad[i]);
	char fmt[AUDIT_HEAD_MAX];
	auditchain_head_format(7, AUDIT_HASH_ZERO, fmt);
	CHECK_STR(fmt, "7:" AUDIT_HASH_ZERO);
}

TEST(head_intact_trail_passes)
{
	char l[N][256], head[AUDIT_HEAD_MAX];
	make_chain(l);
	head_of(l, N - 1, head);
	struct auditchain_verifier v;
	CHECKF(verify_with_head(l, N, head, &v) == 0, "%s", v.why);
	CHECK(v.head_found);
	/* A head read before the last events were written: they are accepted. */
	head_of(l, 2, head);
	CHECKF(verify_with_head(l, N, head, &v) == 0, "%s", v.why);
}

TEST(head_finds_a_cut_end)
{
	char l[N][256], head[AUDIT_HEAD_MAX];
	make_chain(l);
	head_of(l, N - 1, head);
	struct auditchain_verifier v;
	/* Without the head the cut passes: the weakness the head closes. */
	CHECK(verify(l, N - 2, &v) == 0);
	CHECK(verify_with_head(l, N - 2, head, &v) < 0);
	CHECKF(strstr(v.why, "cut off") && strstr(v.why, "seq 3") && strstr(v.why, "seq 5"), "%s",
	       v.why);
	CHECK(v.break_seq == N - 1);
}

TEST(head_with_another_hash_is_named)
{
	char l[N][256], head[AUDIT_HEAD_MAX];
	make_chain(l);
	auditchain_head_format(N, AUDIT_HASH_ZERO, head);
	struct auditchain_verifier v;
	CHECK(verify_with_head(l, N, head, &v) < 0);
	CHECKF(strstr(v.why, "hash differs") != NULL, "%s", v.why);
	/* A head beyond a trail that starts later (the collector began late)
	 * or that is another runner's: not in this trail. */
	auditchain_head_format(1, AUDIT_HASH_ZERO, head);
	CHECK(verify_with_head(l + 2, N - 2, head, &v) < 0);
	CHECKF(strstr(v.why, "not in this trail") != NULL, "%s", v.why);
}
