/* --verify-audit FILE [--audit-head SEQ:HASH]: a saved trail's chain, and
 * that it reaches the head the runner published (trail.h, chain.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/trail.h"
#include "audit/chain.h"

static void print_break(const struct auditchain_verifier *v, unsigned long long lineno)
{
	if (lineno)
		printf("audit trail BROKEN at seq %llu (line %llu): %s\n",
		       (unsigned long long)v->break_seq, lineno, v->why);
	else
		printf("audit trail CUT: %s\n", v->why);
}

int audit_verify_file(const char *path, const char *head)
{
	struct auditchain_verifier v;
	auditchain_verify_init(&v);
	if (head) {
		uint64_t hs;
		char hh[AUDIT_HASH_HEX];
		if (auditchain_head_parse(head, &hs, hh) < 0) {
			fprintf(stderr,
				"forceai-runner: invalid --audit-head '%.100s': SEQ:HASH, the head "
				"the runner published (a seq from 1, 64 hex digits)\n",
				head);
			return 2;
		}
		auditchain_verify_head(&v, hs, hh);
	}
	FILE *f = strcmp(path, "-") ? fopen(path, "re") : stdin;
	if (!f) {
		fprintf(stderr, "forceai-runner: --verify-audit %s: %s\n", path, strerror(errno));
		return 2;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	unsigned long long lineno = 0;
	int rc = 0;
	while ((n = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if (auditchain_verify_line(&v, line, (size_t)n) < 0) {
			rc = 1;
			break;
		}
	}
	free(line);
	if (f != stdin)
		fclose(f);
	if (rc) {
		print_break(&v, lineno);
		return 1;
	}
	if (!v.events) {
		printf("audit trail: no audit events in %s\n", path);
		return 1;
	}
	/* The chain holds line to line; the head says where it must reach. */
	if (auditchain_verify_end(&v) < 0) {
		print_break(&v, 0);
		return 1;
	}
	printf("audit trail ok: %llu events, seq %llu..%llu, %llu trail(s), %llu other lines%s\n",
	       (unsigned long long)v.events, (unsigned long long)v.first_seq,
	       (unsigned long long)v.last_seq, (unsigned long long)v.trails,
	       (unsigned long long)v.skipped, head ? ", the head's event found" : "");
	return 0;
}
