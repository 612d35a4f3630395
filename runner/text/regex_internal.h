/* The compiled program and its lazily built DFA, shared by regex_compile.c (the parser and
 * the emitter) and regex.c (the search). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/regex.h"

/* ---- program ---- */

enum { OP_SET, OP_SPLIT, OP_JMP, OP_ASSERT, OP_MATCH };
enum { AS_BOL, AS_EOL, AS_WORDB, AS_NWORDB, AS_WBEG, AS_WEND };
/* What the byte before (or after) a position is. */
enum { CTX_EDGE, CTX_WORD, CTX_OTHER };

struct inst {
	uint8_t op, as;
	uint16_t set;  /* OP_SET: index of its byte set */
	uint16_t x, y; /* OP_SPLIT: both; OP_JMP: x */
};

#define CACHE_TRANS (32u << 10) /* transitions (int32_t) */
#define CACHE_PCS (32u << 10)   /* program positions (uint16_t) of all states */
#define CACHE_STATES 1024u
#define T_UNKNOWN (-1)
#define T_MATCH (-2)

struct dstate {
	uint32_t pcs, npcs; /* in pcpool */
	uint32_t hash;
	int32_t chain; /* next state of the same hash bucket */
	uint8_t ctx;
	int8_t eol; /* a match at the line's end: -1 not known yet */
};

struct text_regex {
	struct inst *prog;
	uint32_t ninsts;
	uint8_t (*sets)[32];
	uint32_t nsets;
	uint8_t cls[256]; /* byte -> class: bytes no set (nor \w) tells apart share one */
	uint32_t ncls;
	bool word;     /* uses \b \B \< \>: the context tells word bytes from others */
	bool anchored; /* the start leads nowhere past the line's first byte (^...) */
	/* closure scratch */
	uint32_t *mark, gen;
	uint16_t *stack, *list, *next;
	/* DFA cache */
	struct dstate *st;
	uint32_t nst, maxst;
	int32_t *trans;
	uint16_t *pcpool;
	uint32_t npool;
	int32_t *bucket; /* CACHE_STATES * 2 heads */
	uint32_t flushes;
};

static inline bool bit_has(const uint8_t *b, unsigned c)
{
	return b[c >> 3] >> (c & 7) & 1;
}

static inline bool is_word(unsigned c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       c == '_';
}

/* The DFA's cache emptied (all states forgotten). */
void regex_flush(struct text_regex *re);
/* The closure of state s's positions and the start, between contexts prev and next: the byte
 * sets reached go to re->list (*nlist of them). True when it reaches the match. *cost counts
 * the positions visited. */
bool regex_closure(struct text_regex *re, const struct dstate *s, uint8_t next, uint32_t *nlist,
		   size_t *cost);
