/* POSIX extended regular expressions for grep, the search (see regex.h; the compiler:
 * regex_compile.c).
 *
 * A search runs the program as a DFA built on demand: a DFA state is the
 * set of program positions waiting for their closure (the threads that just consumed a byte)
 * and what the previous byte was (none, a word byte, another); its transition on a byte class
 * is the closure, seeing that byte as the next one (for $ \b \< \>), then the byte consumed.
 * The start is added at every position (an unanchored search). States live in a fixed cache
 * which is emptied when full: memory stays bounded and every byte still costs at most one
 * closure, O(program). */
#include "text/regex.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/regex_internal.h"

void text_regex_free(struct text_regex *re)
{
	if (!re)
		return;
	free(re->prog);
	free(re->sets);
	free(re->mark);
	free(re->stack);
	free(re->list);
	free(re->next);
	free(re->st);
	free(re->trans);
	free(re->pcpool);
	free(re->bucket);
	free(re);
}

size_t text_regex_size(const struct text_regex *re)
{
	return re->ninsts;
}

void regex_flush(struct text_regex *re)
{
	re->nst = 0;
	re->npool = 0;
	re->flushes++;
	for (uint32_t b = 0; b < CACHE_STATES * 2; b++)
		re->bucket[b] = -1;
}

/* ---- search ---- */

static uint8_t ctx_of(const struct text_regex *re, unsigned c)
{
	return re->word && is_word(c) ? CTX_WORD : CTX_OTHER;
}

static bool holds(uint8_t as, uint8_t prev, uint8_t next)
{
	bool wp = prev == CTX_WORD, wn = next == CTX_WORD;
	switch (as) {
	case AS_BOL:
		return prev == CTX_EDGE;
	case AS_EOL:
		return next == CTX_EDGE;
	case AS_WORDB:
		return wp != wn;
	case AS_NWORDB:
		return wp == wn;
	case AS_WBEG:
		return !wp && wn;
	case AS_WEND:
		return wp && !wn;
	}
	return false;
}

static void next_gen(struct text_regex *re)
{
	if (++re->gen == 0) {
		memset(re->mark, 0, re->ninsts * sizeof(*re->mark));
		re->gen = 1;
	}
}

bool regex_closure(struct text_regex *re, const struct dstate *s, uint8_t next, uint32_t *nlist,
		   size_t *cost)
{
	next_gen(re);
	uint32_t sp = 0, nl = 0, g = re->gen;
	re->stack[sp++] = 0;
	re->mark[0] = g;
	for (uint32_t k = 0; k < s->npcs; k++) {
		uint16_t pc = re->pcpool[s->pcs + k];
		if (re->mark[pc] != g) {
			re->mark[pc] = g;
			re->stack[sp++] = pc;
		}
	}
	bool matched = false;
	size_t visits = 1;
	while (sp) {
		visits++;
		uint16_t pc = re->stack[--sp];
		const struct inst *in = &re->prog[pc];
		uint16_t to[2];
		int nto = 0;
		switch (in->op) {
		case OP_SET:
			re->list[nl++] = pc;
			break;
		case OP_MATCH:
			matched = true;
			break;
		case OP_JMP:
			to[nto++] = in->x;
			break;
		case OP_SPLIT:
			to[nto++] = in->x;
			to[nto++] = in->y;
			break;
		case OP_ASSERT:
			if (holds(in->as, s->ctx, next))
				to[nto++] = (uint16_t)(pc + 1);
			break;
		}
		for (int t = 0; t < nto; t++)
			if (re->mark[to[t]] != g) {
				re->mark[to[t]] = g;
				re->stack[sp++] = to[t];
			}
	}
	*nlist = nl;
	*cost += visits + s->npcs;
	return matched;
}

static uint32_t hash_pcs(const uint16_t *pcs, uint32_t n, uint8_t ctx)
{
	/* Order-free: the same set hashes alike whatever order its positions were found in. */
	uint32_t h = 0x9e3779b9u * (ctx + 1u);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t x = pcs[k] * 0x85ebca6bu;
		x ^= x >> 13;
		h += x * 0xc2b2ae35u;
	}
	return h;
}

/* The state of positions re->next[0..n) (marked with the current generation) after a byte of
 * context ctx: found in the cache, or added (the cache is emptied first when full). */
static int32_t intern(struct text_regex *re, uint32_t n, uint8_t ctx)
{
	uint32_t h = hash_pcs(re->next, n, ctx), b = h & (CACHE_STATES * 2 - 1);
	for (int32_t k = re->bucket[b]; k >= 0; k = re->st[k].chain) {
		const struct dstate *s = &re->st[k];
		if (s->hash != h || s->npcs != n || s->ctx != ctx)
			continue;
		uint32_t j = 0;
		while (j < n && re->mark[re->pcpool[s->pcs + j]] == re->gen)
			j++;
		if (j == n)
			return k;
	}
	if (re->nst == re->maxst || re->npool + n > CACHE_PCS)
		regex_flush(re);
	int32_t k = (int32_t)re->nst++;
	struct dstate *s = &re->st[k];
	s->pcs = re->npool;
	s->npcs = n;
	memcpy(re->pcpool + re->npool, re->next, n * sizeof(*re->next));
	re->npool += n;
	s->hash = h;
	s->ctx = ctx;
	s->eol = -1;
	s->chain = re->bucket[b];
	re->bucket[b] = k;
	int32_t *t = re->trans + (size_t)k * re->ncls;
	for (uint32_t c = 0; c < re->ncls; c++)
		t[c] = T_UNKNOWN;
	return k;
}

/* The transition of state k on byte c: a state, or T_MATCH. */
static int32_t step(struct text_regex *re, int32_t k, unsigned c, size_t *cost)
{
	uint32_t nl, flushes = re->flushes;
	uint8_t ctx = ctx_of(re, c);
	if (regex_closure(re, &re->st[k], ctx, &nl, cost)) {
		re->trans[(size_t)k * re->ncls + re->cls[c]] = T_MATCH;
		return T_MATCH;
	}
	next_gen(re);
	uint32_t n = 0;
	for (uint32_t j = 0; j < nl; j++) {
		const struct inst *in = &re->prog[re->list[j]];
		uint16_t to = (uint16_t)(re->list[j] + 1);
		if (bit_has(re->sets[in->set], c) && re->mark[to] != re->gen) {
			re->mark[to] = re->gen;
			re->next[n++] = to;
		}
	}
	*cost += n;
	int32_t t = intern(re, n, ctx);
	if (re->flushes == flushes) /* else state k is gone */
		re->trans[(size_t)k * re->ncls + re->cls[c]] = t;
	return t;
}

int text_regex_search(struct text_regex *re, const char *s, size_t n, struct text_regex_cursor *cur,
		      size_t *work)
{
	size_t spent = 0, budget = *work;
	if (!cur->started) {
		next_gen(re);
		cur->state = intern(re, 0, CTX_EDGE);
		cur->pos = 0;
		cur->started = true;
		spent++;
	}
	int32_t k = cur->state;
	size_t pos = cur->pos;
	int rc = TEXT_REGEX_MORE;
	const unsigned char *u = (const unsigned char *)s;
	while (pos < n) {
		if (spent >= budget)
			goto out;
		int32_t t = re->trans[(size_t)k * re->ncls + re->cls[u[pos]]];
		if (t == T_UNKNOWN)
			t = step(re, k, u[pos], &spent);
		else
			spent++;
		if (t == T_MATCH) {
			rc = TEXT_REGEX_MATCH;
			goto out;
		}
		k = t;
		pos++;
		if (re->anchored && !re->st[k].npcs) {
			rc = TEXT_REGEX_NOMATCH; /* no thread left, and none can start */
			goto out;
		}
	}
	struct dstate *st = &re->st[k];
	if (st->eol < 0) {
		uint32_t nl;
		st->eol = regex_closure(re, st, CTX_EDGE, &nl, &spent);
	}
	rc = st->eol ? TEXT_REGEX_MATCH : TEXT_REGEX_NOMATCH;
out:
	cur->state = k;
	cur->pos = pos;
	*work = spent >= budget ? 0 : budget - spent;
	return rc;
}
