/* The audit trail's hash chain, secret masking and verifier: no I/O, no
 * runner state (docs/design/audit.md). Each event is one JSON line whose
 * "prev" is the SHA-256 (hex) of the previous event's line, byte for byte
 * as written; the verifier recomputes it over lines as a log collector
 * saved them, mixed with other log lines. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUDIT_HASH_HEX 65 /* 64 hex digits + NUL */
/* The "prev" of a trail's first event: no event before it. */
#define AUDIT_HASH_ZERO "0000000000000000000000000000000000000000000000000000000000000000"

void auditchain_hash(const char *line, size_t len, char out[AUDIT_HASH_HEX]);
/* A SHA-256 digest in hex (content hashes of written files). */
void auditchain_hex(const unsigned char digest[32], char out[AUDIT_HASH_HEX]);

/* The line with every occurrence of each secret (those of at least
 * AUDIT_SECRET_MIN bytes) replaced by "***": a new string (malloc'd, its
 * length in *out_len), or NULL when none occurs (or out of memory: the
 * caller then drops the line rather than risk a secret). *failed tells
 * the two apart. */
#define AUDIT_SECRET_MIN 6
char *auditchain_mask(const char *line, size_t len, const char *const *secrets, size_t n,
		      size_t *out_len, bool *failed);

/* The verifier: fed the lines of a saved trail in order. */
struct auditchain_verifier {
	bool have_prev;
	char prev_hash[AUDIT_HASH_HEX];
	uint64_t prev_seq;
	uint64_t events, trails, first_seq, last_seq;
	uint64_t skipped; /* lines that are not audit events */
	/* The head the trail must reach (auditchain_verify_head): its seq and
	 * the hash of its line. */
	bool have_head, head_found, head_seq_seen;
	uint64_t head_seq;
	char head_hash[AUDIT_HASH_HEX];
	/* The first break: its seq (0 when the line has none) and why. */
	bool broken;
	uint64_t break_seq;
	char why[256];
};

void auditchain_verify_init(struct auditchain_verifier *v);
/* One line (no newline needed; a prefix before the first '{', as a
 * collector adds, is ignored). Returns 0, or -1 at the first break (v->why
 * set; later lines are not judged). */
int auditchain_verify_line(struct auditchain_verifier *v, const char *line, size_t len);

/* A trail's head as the runner publishes it (GET /v1/audit, the reset's
 * answer, its last log line, OTLP): "SEQ:HASH", the last event's seq and
 * the SHA-256 (hex) of its line. 0, or -1 when s is not one (hex taken in
 * either case, kept lower). */
#define AUDIT_HEAD_MAX (20 + 1 + AUDIT_HASH_HEX) /* "SEQ:HASH" and its NUL */
int auditchain_head_parse(const char *s, uint64_t *seq, char hash[AUDIT_HASH_HEX]);
void auditchain_head_format(uint64_t seq, const char hash[AUDIT_HASH_HEX],
			    char out[AUDIT_HEAD_MAX]);
/* The verifier must find the event seq whose line hashes to hash: a trail
 * whose end was cut off (or whose head's line was changed) is then broken
 * at auditchain_verify_end. Events after the head (written since it was
 * read) are accepted. */
void auditchain_verify_head(struct auditchain_verifier *v, uint64_t seq,
			    const char hash[AUDIT_HASH_HEX]);
/* After the last line: 0, or -1 (v->why set) when a head was given and the
 * trail does not hold it. */
int auditchain_verify_end(struct auditchain_verifier *v);
