/* fuzz_auditchain: the audit trail's verifier and masking
 * (runner/audit/chain.c). The verifier reads trails from outside the
 * runner (--verify-audit FILE: a log collector's copy anyone may have
 * edited); the masking runs on every event line.
 *
 * Input: bytes split into lines, fed to the verifier; then the first line
 * as a secret, masked out of the rest. Checked beyond the sanitizers: the
 * verifier never counts more events than lines, stops at its first break
 * and names a reason; a trail it accepted, extended with a line chained to
 * its last hash and the next seq, is still accepted; a masked line holds no
 * occurrence of the secret and is never longer than the input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/chain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data, *end = s + size;
	struct auditchain_verifier v;
	auditchain_verify_init(&v);
	uint64_t lines = 0;
	int rc = 0;
	for (const char *p = s; p < end && rc == 0;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		lines++;
		rc = auditchain_verify_line(&v, p, n);
		p += n + 1;
	}
	if (v.events > lines)
		abort();
	if (rc < 0 && (!v.broken || !v.why[0]))
		abort();
	if (rc == 0 && v.events) {
		char next[512];
		snprintf(next, sizeof(next),
			 "{\"audit\":true,\"seq\":%llu,\"prev\":\"%s\",\"what\":\"x\"}",
			 (unsigned long long)v.last_seq + 1, v.prev_hash);
		if (auditchain_verify_line(&v, next, strlen(next)) < 0)
			abort();
	}
	/* Masking: the first line is the secret, the rest the text. */
	const char *nl = memchr(s, '\n', size);
	if (nl && nl > s) {
		char secret[256];
		size_t sl = (size_t)(nl - s) < sizeof(secret) - 1 ? (size_t)(nl - s)
								  : sizeof(secret) - 1;
		memcpy(secret, s, sl);
		secret[sl] = 0;
		if (strlen(secret) != sl)
			return 0; /* a NUL inside: not a secret the runner registers */
		const char *secrets[] = {secret};
		const char *text = nl + 1;
		size_t tl = (size_t)(end - text), out_len = 0;
		bool failed;
		char *m = auditchain_mask(text, tl, secrets, 1, &out_len, &failed);
		if (m) {
			if (out_len > tl || memmem(m, out_len, secret, sl))
				abort();
			free(m);
		} else if (!failed && sl >= AUDIT_SECRET_MIN && memmem(text, tl, secret, sl)) {
			abort();
		}
	}
	return 0;
}
