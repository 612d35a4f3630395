#include "audit/chain.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"

void auditchain_hex(const unsigned char d[32], char out[AUDIT_HASH_HEX])
{
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hex[d[i] >> 4];
		out[2 * i + 1] = hex[d[i] & 15];
	}
	out[64] = 0;
}

void auditchain_hash(const char *line, size_t len, char out[AUDIT_HASH_HEX])
{
	struct sha256 c;
	unsigned char d[32];
	sha256_init(&c);
	sha256_update(&c, line, len);
	sha256_final(&c, d);
	auditchain_hex(d, out);
}

char *auditchain_mask(const char *line, size_t len, const char *const *secrets, size_t n,
		      size_t *out_len, bool *failed)
{
	*failed = false;
	char *cur = NULL; /* the line so far, once a secret was found */
	size_t cur_len = len;
	/* A replacement can join its neighbours into a secret again (a secret
	 * of stars, or one secret's mask completing another's prefix), so the
	 * passes repeat until one finds nothing. Each hit shortens the line
	 * by at least AUDIT_SECRET_MIN - 3 bytes: the loop ends. */
	for (bool again = true; again;) {
		again = false;
		for (size_t i = 0; i < n; i++) {
			const char *s = secrets[i];
			size_t sl = s ? strlen(s) : 0;
			if (sl < AUDIT_SECRET_MIN)
				continue;
			const char *src = cur ? cur : line;
			if (!memmem(src, cur_len, s, sl))
				continue;
			/* "***" is never longer than the secret: the result fits in cur_len. */
			char *o = malloc(cur_len + 1), *w = o;
			if (!o) {
				free(cur);
				*failed = true;
				return NULL;
			}
			const char *p = src, *end = src + cur_len, *hit;
			while ((hit = memmem(p, (size_t)(end - p), s, sl))) {
				memcpy(w, p, (size_t)(hit - p));
				w += hit - p;
				memcpy(w, "***", 3);
				w += 3;
				p = hit + sl;
			}
			memcpy(w, p, (size_t)(end - p));
			w += end - p;
			*w = 0;
			free(cur);
			cur = o;
			cur_len = (size_t)(w - o);
			again = true;
		}
	}
	if (cur)
		*out_len = cur_len;
	return cur;
}

void auditchain_verify_init(struct auditchain_verifier *v)
{
	memset(v, 0, sizeof(*v));
}

static int brk(struct auditchain_verifier *v, uint64_t seq, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int brk(struct auditchain_verifier *v, uint64_t seq, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v->why, sizeof(v->why), fmt, ap);
	va_end(ap);
	v->broken = true;
	v->break_seq = seq;
	return -1;
}

int auditchain_verify_line(struct auditchain_verifier *v, const char *line, size_t len)
{
	if (v->broken)
		return -1;
	const char *open = memchr(line, '{', len);
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		len--;
	if (!open || open >= line + len) {
		v->skipped++;
		return 0;
	}
	len -= (size_t)(open - line);
	line = open;
	/* Cheap filter first: most log lines are not audit events. */
	if (!memmem(line, len, "\"audit\":true", 12)) {
		v->skipped++;
		return 0;
	}
	json_error_t jerr;
	json_t *o = json_loadb(line, len, 0, &jerr);
	json_t *seqj = o ? json_object_get(o, "seq") : NULL;
	const char *prev = o ? json_string_value(json_object_get(o, "prev")) : NULL;
	/* The runner numbers from 1: a seq below that is no event it wrote. */
	if (!o || !json_is_true(json_object_get(o, "audit")) || !json_is_integer(seqj) ||
	    json_integer_value(seqj) < 1 || !prev) {
		uint64_t after = v->have_prev ? v->prev_seq + 1 : 0;
		json_decref(o);
		return brk(v, after,
			   "a line marked as an audit event is not one (no JSON object with seq "
			   "and prev): changed or cut; expected seq %llu",
			   (unsigned long long)after);
	}
	uint64_t seq = (uint64_t)json_integer_value(seqj);
	const char *what = json_string_value(json_object_get(o, "what"));
	/* A runner that started again begins a new trail at seq 1 from zero. */
	bool restart = seq == 1 && !strcmp(prev, AUDIT_HASH_ZERO) && what &&
		       !strcmp(what, "chain started");
	int rc = 0;
	if (v->have_prev && !restart) {
		if (seq != v->prev_seq + 1)
			rc = brk(v, v->prev_seq + 1,
				 "seq %llu expected after seq %llu, found seq %llu: %s",
				 (unsigned long long)v->prev_seq + 1,
				 (unsigned long long)v->prev_seq, (unsigned long long)seq,
				 seq <= v->prev_seq ? "lines reordered or repeated"
						    : "removed, or moved later");
		else if (strcmp(prev, v->prev_hash))
			rc = brk(v, v->prev_seq,
				 "seq %llu was changed: its hash is not the prev that seq %llu "
				 "recorded",
				 (unsigned long long)v->prev_seq, (unsigned long long)seq);
	}
	if (!rc) {
		if (!v->have_prev || restart)
			v->trails++;
		if (!v->events)
			v->first_seq = seq;
		v->events++;
		v->last_seq = seq;
		v->prev_seq = seq;
		v->have_prev = true;
		auditchain_hash(line, len, v->prev_hash);
		if (v->have_head && seq == v->head_seq) {
			v->head_seq_seen = true;
			if (!strcmp(v->prev_hash, v->head_hash))
				v->head_found = true;
		}
	}
	json_decref(o);
	return rc;
}

int auditchain_head_parse(const char *s, uint64_t *seq, char hash[AUDIT_HASH_HEX])
{
	size_t nd = strspn(s, "0123456789");
	if (!nd || nd > 19 || s[nd] != ':' || strlen(s + nd + 1) != AUDIT_HASH_HEX - 1)
		return -1;
	uint64_t n = strtoull(s, NULL, 10);
	if (!n)
		return -1; /* the runner numbers from 1 */
	const char *h = s + nd + 1;
	for (int i = 0; i < AUDIT_HASH_HEX - 1; i++) {
		char c = h[i];
		if (c >= 'A' && c <= 'F')
			c = (char)(c - 'A' + 'a');
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return -1;
		hash[i] = c;
	}
	hash[AUDIT_HASH_HEX - 1] = 0;
	*seq = n;
	return 0;
}

void auditchain_head_format(uint64_t seq, const char hash[AUDIT_HASH_HEX], char out[AUDIT_HEAD_MAX])
{
	snprintf(out, AUDIT_HEAD_MAX, "%llu:%.64s", (unsigned long long)seq, hash);
}

void auditchain_verify_head(struct auditchain_verifier *v, uint64_t seq,
			    const char hash[AUDIT_HASH_HEX])
{
	v->have_head = true;
	v->head_seq = seq;
	memcpy(v->head_hash, hash, AUDIT_HASH_HEX);
	v->head_hash[AUDIT_HASH_HEX - 1] = 0;
}

int auditchain_verify_end(struct auditchain_verifier *v)
{
	if (v->broken)
		return -1;
	if (!v->have_head || v->head_found)
		return 0;
	unsigned long long hs = (unsigned long long)v->head_seq;
	if (v->head_seq_seen)
		return brk(v, v->head_seq,
			   "seq %llu is not the head's event: its line's hash differs from the "
			   "head's (changed, or another runner's trail)",
			   hs);
	if (v->events && v->last_seq < v->head_seq)
		return brk(v, v->last_seq + 1,
			   "the trail ends at seq %llu but its head is seq %llu: the last %llu "
			   "event(s) were cut off",
			   (unsigned long long)v->last_seq, hs,
			   hs - (unsigned long long)v->last_seq);
	return brk(v, v->head_seq,
		   "the head's event, seq %llu, is not in this trail (seq %llu..%llu)", hs,
		   (unsigned long long)v->first_seq, (unsigned long long)v->last_seq);
}
