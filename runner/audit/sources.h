/* The audit trail's bound on what a party without the token can cause
 * (docs/design/audit.md#bounds-tasks-cannot-read-write-suppress-flood-or-crowd-it): one token
 * bucket per source — "uid:N" (an in-box uid: a task's), "unknown:ADDR" (an in-box peer whose owner
 * is unknown), "addr:ADDR" (a peer outside that did not prove the token) — so no source takes
 * another's share, and none takes the client's (the client's and the control plane's events are not
 * rate bound at all). What a source's bucket refuses is counted by door, for one "events dropped"
 * marker a second naming that source. Pure: no runner state, the clock given. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#define AUDIT_SOURCES 64            /* sources tracked; beyond, they share the last, "other" */
#define AUDIT_SRC_DOORS 12          /* doors counted apart per source; beyond: "other" */
#define AUDIT_SRC_KEY 64            /* a source's key, NUL included */
#define AUDIT_SRC_MARKER_US 1000000 /* a source's marker at most once a second */

struct audit_src {
	char key[AUDIT_SRC_KEY]; /* "" = a free slot */
	double tokens;
	uint64_t refill_us, last_us, marker_us;
	uint64_t pending; /* dropped since its last marker */
	struct {
		char door[16];
		uint64_t n;
	} by[AUDIT_SRC_DOORS];
	unsigned n_by;
	uint64_t by_other;
};

struct audit_srcs {
	struct audit_src src[AUDIT_SOURCES];
	uint64_t dropped; /* every event any source's bucket refused */
};

/* One event of source key (not NULL) at now_us, rate events a second per
 * source (bursts of as many): true = keep it; false = dropped, counted
 * against that source (or "other" when the table is full of sources
 * still active). */
bool audit_srcs_admit(struct audit_srcs *t, const char *key, const char *door, unsigned rate,
		      uint64_t now_us);
/* The next source with drops not yet in a marker whose last marker is at
 * least AUDIT_SRC_MARKER_US old (all = any with drops: a chain is being
 * closed), starting after *from (-1 = the first); NULL: none. */
struct audit_src *audit_srcs_due(struct audit_srcs *t, int *from, uint64_t now_us, bool all);
/* Its marker was written: its counts start again. */
void audit_src_marked(struct audit_src *s, uint64_t now_us);
