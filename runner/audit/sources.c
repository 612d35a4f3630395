/* Per-source bounds of the audit trail: see sources.h. */
#include "audit/sources.h"

#include <stdio.h>
#include <string.h>

#define OTHER (AUDIT_SOURCES - 1)

static void refill(struct audit_src *s, unsigned rate, uint64_t now)
{
	if (now > s->refill_us)
		s->tokens += (double)(now - s->refill_us) * rate / 1e6;
	s->refill_us = now;
	if (s->tokens > rate)
		s->tokens = rate;
}

/* A slot may take a new source when free, or when its source neither has
 * drops awaiting a marker nor used it for a second (its bucket is full
 * again: forgetting it changes nothing). */
static bool reusable(const struct audit_src *s, uint64_t now)
{
	return !s->key[0] || (!s->pending && now - s->last_us >= 1000000);
}

static struct audit_src *lookup(struct audit_srcs *t, const char *key, unsigned rate, uint64_t now)
{
	struct audit_src *spare = NULL;
	for (int i = 0; i < OTHER; i++) {
		struct audit_src *s = &t->src[i];
		if (s->key[0] && !strcmp(s->key, key))
			return s;
		if (!spare && reusable(s, now))
			spare = s;
	}
	/* A key too long to keep whole is not told apart from others: "other". */
	if (!spare || strlen(key) >= AUDIT_SRC_KEY)
		spare = &t->src[OTHER];
	if (spare == &t->src[OTHER] && !strcmp(spare->key, "other"))
		return spare;
	memset(spare, 0, sizeof(*spare));
	snprintf(spare->key, sizeof(spare->key), "%s", spare == &t->src[OTHER] ? "other" : key);
	spare->tokens = rate;
	spare->refill_us = now;
	return spare;
}

static void count(struct audit_src *s, const char *door)
{
	s->pending++;
	unsigned i = 0;
	while (i < s->n_by && strcmp(s->by[i].door, door))
		i++;
	if (i == s->n_by) {
		if (i == AUDIT_SRC_DOORS || strlen(door) >= sizeof(s->by[i].door)) {
			s->by_other++;
			return;
		}
		strcpy(s->by[i].door, door);
		s->by[i].n = 0;
		s->n_by++;
	}
	s->by[i].n++;
}

bool audit_srcs_admit(struct audit_srcs *t, const char *key, const char *door, unsigned rate,
		      uint64_t now_us)
{
	struct audit_src *s = lookup(t, key, rate, now_us);
	s->last_us = now_us;
	refill(s, rate, now_us);
	if (s->tokens >= 1) {
		s->tokens -= 1;
		return true;
	}
	count(s, door);
	t->dropped++;
	return false;
}

struct audit_src *audit_srcs_due(struct audit_srcs *t, int *from, uint64_t now_us, bool all)
{
	for (int i = *from + 1; i < AUDIT_SOURCES; i++) {
		struct audit_src *s = &t->src[i];
		if (s->pending && (all || now_us - s->marker_us >= AUDIT_SRC_MARKER_US)) {
			*from = i;
			return s;
		}
	}
	*from = AUDIT_SOURCES;
	return NULL;
}

void audit_src_marked(struct audit_src *s, uint64_t now_us)
{
	s->pending = 0;
	s->n_by = 0;
	s->by_other = 0;
	s->marker_us = now_us;
}
