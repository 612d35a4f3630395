/* POSIX extended regular expressions for grep: see regex.h.
 *
 * The pattern is parsed into a tree whose size in instructions (repetitions expanded) is known
 * at every node, so a pattern over FILES_REGEX_INSTS_MAX is refused before anything is
 * expanded; the tree is then emitted as a Thompson program (byte sets, split, jump,
 * assertions, match). A search runs the program as a DFA built on demand: a DFA state is the
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

struct files_regex {
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

static bool is_word(unsigned c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       c == '_';
}

/* ---- parser ---- */

enum { N_EMPTY, N_SET, N_ASSERT, N_CAT, N_ALT, N_REP };
#define REP_INF 0xffff

struct node {
	uint8_t type, as;
	uint16_t set;
	uint16_t min, max; /* N_REP */
	int32_t kid, sib;  /* first child; next sibling (children of N_CAT, N_ALT) */
	uint32_t size;     /* instructions it emits, at most INSTS_MAX + 1 */
};

struct parser {
	const char *s;
	size_t n, i;
	struct node *nodes;
	uint32_t nnodes, cap;
	uint8_t (*sets)[32];
	uint32_t nsets;
	bool word;
	const char *err; /* the first error */
};

static const char E_BADRPT[] = "Invalid preceding regular expression";
static const char E_EPAREN[] = "Unmatched ( or \\(";
static const char E_EBRACK[] = "Unmatched [, [^, [:, [., or [=";
static const char E_ERANGE[] = "Invalid range end";
static const char E_ECTYPE[] = "Invalid character class name";
static const char E_ECOLL[] = "Invalid collation character";
static const char E_EESCAPE[] = "Trailing backslash";
static const char E_EBRACE[] = "Unmatched \\{";
static const char E_BADBR[] = "Invalid content of \\{\\}";
static const char E_ESUBREG[] = "Invalid back reference";
static const char E_NOMEM[] = "";

static uint32_t sat(uint64_t v)
{
	return v > FILES_REGEX_INSTS_MAX ? FILES_REGEX_INSTS_MAX + 1 : (uint32_t)v;
}

static int32_t new_node(struct parser *p, uint8_t type)
{
	if (p->nnodes == p->cap) {
		/* Every node consumes pattern bytes or wraps ones that did: the pattern's length
		 * bounds their number, and so this growth. */
		uint32_t cap = p->cap ? p->cap * 2 : 64;
		struct node *nn = realloc(p->nodes, cap * sizeof(*nn));
		if (!nn) {
			p->err = E_NOMEM;
			return -1;
		}
		p->nodes = nn;
		p->cap = cap;
	}
	struct node *x = &p->nodes[p->nnodes];
	memset(x, 0, sizeof(*x));
	x->type = type;
	x->kid = x->sib = -1;
	x->size = type == N_EMPTY ? 1 : type == N_SET || type == N_ASSERT ? 1 : 0;
	return (int32_t)p->nnodes++;
}

static int32_t new_set(struct parser *p, const uint8_t bits[32])
{
	if (p->nsets % 64 == 0) {
		uint8_t(*ns)[32] = realloc(p->sets, (p->nsets + 64) * sizeof(*ns));
		if (!ns) {
			p->err = E_NOMEM;
			return -1;
		}
		p->sets = ns;
	}
	if (p->nsets >= 0xffff) {
		p->err = E_NOMEM;
		return -1;
	}
	memcpy(p->sets[p->nsets], bits, 32);
	int32_t x = new_node(p, N_SET);
	if (x >= 0)
		p->nodes[x].set = (uint16_t)p->nsets++;
	return x;
}

static void bit_set(uint8_t *b, unsigned c)
{
	b[c >> 3] |= (uint8_t)(1u << (c & 7));
}

static bool bit_has(const uint8_t *b, unsigned c)
{
	return b[c >> 3] >> (c & 7) & 1;
}

static int32_t byte_node(struct parser *p, unsigned c)
{
	uint8_t b[32] = {0};
	bit_set(b, c);
	return new_set(p, b);
}

/* The C locale's classes. */
static bool in_class(int k, unsigned c)
{
	switch (k) {
	case 0: /* alpha */
		return (c | 32) >= 'a' && (c | 32) <= 'z';
	case 1: /* digit */
		return c >= '0' && c <= '9';
	case 2: /* alnum */
		return in_class(0, c) || in_class(1, c);
	case 3: /* upper */
		return c >= 'A' && c <= 'Z';
	case 4: /* lower */
		return c >= 'a' && c <= 'z';
	case 5: /* space */
		return c == ' ' || (c >= '\t' && c <= '\r');
	case 6: /* blank */
		return c == ' ' || c == '\t';
	case 7: /* punct */
		return c > ' ' && c < 127 && !in_class(2, c);
	case 8: /* print */
		return c >= ' ' && c < 127;
	case 9: /* graph */
		return c > ' ' && c < 127;
	case 10: /* cntrl */
		return c < ' ' || c == 127;
	case 11: /* xdigit */
		return in_class(1, c) || ((c | 32) >= 'a' && (c | 32) <= 'f');
	}
	return false;
}

static const char *const class_names[] = {"alpha", "digit", "alnum", "upper", "lower", "space",
					  "blank", "punct", "print", "graph", "cntrl", "xdigit"};

static void add_class(uint8_t *b, int k, bool neg)
{
	for (unsigned c = 0; c < 256; c++)
		if (in_class(k, c) != neg && c != '\n')
			bit_set(b, c);
}

/* [:name:], [.c.] or [=c=] at p->i (just after the '['): the class in *k, or the byte in *c. */
static bool bracket_symbol(struct parser *p, int *k, unsigned *c)
{
	char kind = p->s[p->i + 1];
	size_t start = p->i + 2, j = start;
	while (j + 1 < p->n && !(p->s[j] == kind && p->s[j + 1] == ']'))
		j++;
	if (j + 1 >= p->n) {
		p->err = E_EBRACK;
		return false;
	}
	size_t len = j - start;
	p->i = j + 2;
	*k = -1;
	if (kind == ':') {
		for (int x = 0; x < (int)(sizeof(class_names) / sizeof(class_names[0])); x++)
			if (strlen(class_names[x]) == len &&
			    !memcmp(class_names[x], p->s + start, len))
				*k = x;
		if (*k < 0)
			p->err = E_ECTYPE;
		return *k >= 0;
	}
	if (len != 1) {
		p->err = E_ECOLL;
		return false;
	}
	*c = (unsigned char)p->s[start];
	return true;
}

/* A bracket expression, p->i just after its '['. */
static int32_t bracket(struct parser *p)
{
	uint8_t b[32] = {0};
	bool neg = false, first = true;
	if (p->i < p->n && p->s[p->i] == '^')
		neg = true, p->i++;
	for (;;) {
		if (p->i >= p->n) {
			p->err = E_EBRACK;
			return -1;
		}
		unsigned lo = (unsigned char)p->s[p->i];
		if (lo == ']' && !first) {
			p->i++;
			break;
		}
		bool was_first = first;
		first = false;
		int k = -1;
		if (lo == '[' && p->i + 1 < p->n &&
		    (p->s[p->i + 1] == ':' || p->s[p->i + 1] == '.' || p->s[p->i + 1] == '=')) {
			if (!bracket_symbol(p, &k, &lo))
				return -1;
		} else {
			p->i++;
			/* As glibc: a '-' that neither comes first nor last, nor ends a range. */
			if (lo == '-' && !was_first && p->i < p->n && p->s[p->i] != ']') {
				p->err = E_ERANGE;
				return -1;
			}
		}
		if (k >= 0) {
			add_class(b, k, false);
			if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
				p->err = E_ERANGE; /* a class cannot start a range */
				return -1;
			}
			continue;
		}
		unsigned hi = lo;
		if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
			p->i++;
			hi = (unsigned char)p->s[p->i];
			if (hi == '[' && p->i + 1 < p->n &&
			    (p->s[p->i + 1] == '.' || p->s[p->i + 1] == '=')) {
				if (!bracket_symbol(p, &k, &hi))
					return -1;
			} else if (hi == '[' && p->i + 1 < p->n && p->s[p->i + 1] == ':') {
				p->err = E_ERANGE;
				return -1;
			} else {
				p->i++;
			}
			if (hi < lo) {
				p->err = E_ERANGE;
				return -1;
			}
		}
		for (unsigned c = lo; c <= hi; c++)
			bit_set(b, c);
	}
	if (neg)
		for (unsigned c = 0; c < 32; c++)
			b[c] = (uint8_t)~b[c];
	/* REG_NEWLINE: no bracket matches a newline (a line never holds one anyway). */
	b['\n' >> 3] &= (uint8_t) ~(1u << ('\n' & 7));
	return new_set(p, b);
}

static int32_t assert_node(struct parser *p, uint8_t as)
{
	int32_t x = new_node(p, N_ASSERT);
	if (x >= 0)
		p->nodes[x].as = as;
	if (as >= AS_WORDB)
		p->word = true;
	return x;
}

/* A set of \w \W \s \S \d \D: class k, perhaps negated. */
static int32_t class_node(struct parser *p, int k, bool neg)
{
	uint8_t b[32] = {0};
	add_class(b, k, neg);
	if (k == 2) /* \w: alnum and _ */
		neg ? (void)(b['_' >> 3] &= (uint8_t) ~(1u << ('_' & 7))) : bit_set(b, '_');
	return new_set(p, b);
}

static int32_t escape(struct parser *p)
{
	if (p->i >= p->n) {
		p->err = E_EESCAPE;
		return -1;
	}
	unsigned c = (unsigned char)p->s[p->i++];
	switch (c) {
	case 'w':
	case 'W':
		return class_node(p, 2, c == 'W');
	case 's':
	case 'S':
		return class_node(p, 5, c == 'S');
	case 'd':
	case 'D':
		return class_node(p, 1, c == 'D');
	case 'b':
		return assert_node(p, AS_WORDB);
	case 'B':
		return assert_node(p, AS_NWORDB);
	case '<':
		return assert_node(p, AS_WBEG);
	case '>':
		return assert_node(p, AS_WEND);
	case '`':
		return assert_node(p, AS_BOL);
	case '\'':
		return assert_node(p, AS_EOL);
	case 't':
		return byte_node(p, '\t');
	case 'n':
		return byte_node(p, '\n');
	case 'r':
		return byte_node(p, '\r');
	case 'f':
		return byte_node(p, '\f');
	case 'e':
		return byte_node(p, 033);
	}
	if (c >= '1' && c <= '9') {
		p->err = E_ESUBREG;
		return -1;
	}
	return byte_node(p, c);
}

static int32_t alt(struct parser *p, unsigned depth);

/* A decimal count of {m,n}: -1 when none, -2 past FILES_REGEX_DUP_MAX. */
static int count(struct parser *p)
{
	int v = -1;
	while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
		v = (v < 0 ? 0 : v) * 10 + (p->s[p->i++] - '0');
		if (v > FILES_REGEX_DUP_MAX)
			v = FILES_REGEX_DUP_MAX + 1;
	}
	return v;
}

static const char E_DUPMAX[] = "a repetition count is over 255";
static const char E_DEPTH[] = "groups and repetitions nest deeper than 100";

/* Wrap x in the repetition at p->i (one of * + ? {). */
static int32_t dup(struct parser *p, int32_t x)
{
	char c = p->s[p->i++];
	int min = 0, max = REP_INF;
	if (c == '+')
		min = 1;
	else if (c == '?')
		max = 1;
	else if (c == '{') {
		min = count(p);
		max = min;
		if (p->i < p->n && p->s[p->i] == ',') {
			p->i++;
			max = count(p);
			if (min < 0)
				min = 0;
			if (max < 0)
				max = REP_INF;
		}
		if (p->i >= p->n) {
			p->err = E_EBRACE;
			return -1;
		}
		if (p->s[p->i] != '}' || min < 0) {
			p->err = E_BADBR;
			return -1;
		}
		p->i++;
		if (min > FILES_REGEX_DUP_MAX || (max != REP_INF && max > FILES_REGEX_DUP_MAX)) {
			p->err = E_DUPMAX;
			return -1;
		}
		if (max != REP_INF && max < min) {
			p->err = E_BADBR;
			return -1;
		}
	}
	int32_t r = new_node(p, N_REP);
	if (r < 0)
		return -1;
	struct node *n = &p->nodes[r];
	n->kid = x;
	n->min = (uint16_t)min;
	n->max = (uint16_t)max;
	uint64_t sx = p->nodes[x].size;
	uint64_t size;
	if (max == 0)
		size = 1;
	else if (max == REP_INF)
		size = min ? (uint64_t)min * sx + 1 : sx + 2;
	else
		size = (uint64_t)min * sx + (uint64_t)(max - min) * (sx + 1);
	n->size = sat(size);
	return r;
}

static bool is_dup(struct parser *p)
{
	char c = p->s[p->i];
	return c == '*' || c == '+' || c == '?' || c == '{';
}

/* An atom and its repetitions. */
static int32_t piece(struct parser *p, unsigned depth)
{
	if (is_dup(p)) {
		p->err = E_BADRPT; /* nothing to repeat */
		return -1;
	}
	unsigned char c = (unsigned char)p->s[p->i++];
	int32_t x;
	switch (c) {
	case '.': {
		uint8_t b[32];
		memset(b, 0xff, sizeof(b));
		b['\n' >> 3] &= (uint8_t) ~(1u << ('\n' & 7));
		x = new_set(p, b);
		break;
	}
	case '[':
		x = bracket(p);
		break;
	case '(':
		if (depth + 1 > FILES_REGEX_DEPTH_MAX) {
			p->err = E_DEPTH;
			return -1;
		}
		x = alt(p, depth + 1);
		if (x < 0)
			return -1;
		if (p->i >= p->n || p->s[p->i] != ')') {
			p->err = E_EPAREN;
			return -1;
		}
		p->i++;
		break;
	case '^':
		return assert_node(p, AS_BOL); /* an anchor takes no repetition */
	case '$':
		return assert_node(p, AS_EOL);
	case '\\':
		x = escape(p);
		if (x >= 0 && p->nodes[x].type == N_ASSERT)
			return x;
		break;
	default:
		x = byte_node(p, c);
	}
	unsigned reps = 0;
	while (x >= 0 && p->i < p->n && is_dup(p)) {
		if (depth + ++reps > FILES_REGEX_DEPTH_MAX) {
			p->err = E_DEPTH;
			return -1;
		}
		x = dup(p, x);
	}
	return x;
}

/* Concatenated pieces up to '|', a closing ')' (inside a group) or the end. */
static int32_t branch(struct parser *p, unsigned depth)
{
	int32_t cat = new_node(p, N_CAT), last = -1;
	if (cat < 0)
		return -1;
	uint64_t size = 0;
	while (p->i < p->n && p->s[p->i] != '|' && !(p->s[p->i] == ')' && depth > 0)) {
		int32_t x = piece(p, depth);
		if (x < 0)
			return -1;
		size += p->nodes[x].size;
		if (last < 0)
			p->nodes[cat].kid = x;
		else
			p->nodes[last].sib = x;
		last = x;
	}
	if (last < 0) {
		p->nodes[cat].type = N_EMPTY;
		p->nodes[cat].size = 1;
		return cat;
	}
	p->nodes[cat].size = sat(size);
	return cat;
}

static int32_t alt(struct parser *p, unsigned depth)
{
	int32_t first = branch(p, depth);
	if (first < 0 || p->i >= p->n || p->s[p->i] != '|')
		return first;
	int32_t a = new_node(p, N_ALT), last = first;
	if (a < 0)
		return -1;
	p->nodes[a].kid = first;
	uint64_t size = p->nodes[first].size;
	while (p->i < p->n && p->s[p->i] == '|') {
		p->i++;
		int32_t x = branch(p, depth);
		if (x < 0)
			return -1;
		p->nodes[last].sib = x;
		last = x;
		size += p->nodes[x].size + 2;
	}
	p->nodes[a].size = sat(size);
	return a;
}

/* ---- emitter ---- */

static uint32_t emit_inst(struct files_regex *re, uint8_t op)
{
	struct inst *in = &re->prog[re->ninsts];
	memset(in, 0, sizeof(*in));
	in->op = op;
	return re->ninsts++;
}

/* Emit node x. The sizes were checked: re->prog has room. */
static void emit(struct files_regex *re, const struct node *nodes, int32_t x)
{
	const struct node *n = &nodes[x];
	switch (n->type) {
	case N_EMPTY:
		return;
	case N_SET:
		re->prog[emit_inst(re, OP_SET)].set = n->set;
		return;
	case N_ASSERT:
		re->prog[emit_inst(re, OP_ASSERT)].as = n->as;
		return;
	case N_CAT:
		for (int32_t k = n->kid; k >= 0; k = nodes[k].sib)
			emit(re, nodes, k);
		return;
	case N_ALT: {
		/* split L1, next; L1: a; jmp end; next: split L2, next2; ... last; end: the jumps
		 * to end are chained through their x until end is known (no array per frame). */
		uint32_t chain = 0;
		for (int32_t k = n->kid; k >= 0; k = nodes[k].sib) {
			if (nodes[k].sib < 0) {
				emit(re, nodes, k);
				break;
			}
			uint32_t sp = emit_inst(re, OP_SPLIT);
			re->prog[sp].x = (uint16_t)(sp + 1);
			emit(re, nodes, k);
			uint32_t j = emit_inst(re, OP_JMP);
			re->prog[j].x = (uint16_t)chain;
			chain = j + 1;
			re->prog[sp].y = (uint16_t)re->ninsts;
		}
		while (chain) {
			uint32_t j = chain - 1;
			chain = re->prog[j].x;
			re->prog[j].x = (uint16_t)re->ninsts;
		}
		return;
	}
	case N_REP:
		break;
	}
	if (n->max == 0)
		return;
	if (n->max == REP_INF && n->min == 0) {
		/* L: split L+1, out; x; jmp L; out: */
		uint32_t l = emit_inst(re, OP_SPLIT);
		re->prog[l].x = (uint16_t)(l + 1);
		emit(re, nodes, n->kid);
		re->prog[emit_inst(re, OP_JMP)].x = (uint16_t)l;
		re->prog[l].y = (uint16_t)re->ninsts;
		return;
	}
	unsigned fixed = n->max == REP_INF ? n->min - 1u : n->min;
	for (unsigned k = 0; k < fixed; k++)
		emit(re, nodes, n->kid);
	if (n->max == REP_INF) {
		/* L: x; split L, out; out: */
		uint32_t l = re->ninsts;
		emit(re, nodes, n->kid);
		uint32_t sp = emit_inst(re, OP_SPLIT);
		re->prog[sp].x = (uint16_t)l;
		re->prog[sp].y = (uint16_t)(sp + 1);
		return;
	}
	/* (max - min) times: split next, end; x; ... end: (chained like the jumps above) */
	uint32_t chain = 0;
	for (unsigned k = n->min; k < n->max; k++) {
		uint32_t sp = emit_inst(re, OP_SPLIT);
		re->prog[sp].x = (uint16_t)(sp + 1);
		re->prog[sp].y = (uint16_t)chain;
		chain = sp + 1;
		emit(re, nodes, n->kid);
	}
	while (chain) {
		uint32_t sp = chain - 1;
		chain = re->prog[sp].y;
		re->prog[sp].y = (uint16_t)re->ninsts;
	}
}

/* ---- compile ---- */

static bool closure(struct files_regex *re, const struct dstate *s, uint8_t next, uint32_t *nlist,
		    size_t *cost);

/* Classes of bytes no set tells apart (nor \w, when the context matters): the DFA's alphabet. */
static void byte_classes(struct files_regex *re)
{
	memset(re->cls, 0, sizeof(re->cls));
	uint32_t n = 1;
	uint8_t word[32] = {0};
	for (unsigned c = 0; c < 256; c++)
		if (is_word(c))
			bit_set(word, c);
	for (uint32_t s = 0; s <= re->nsets; s++) {
		const uint8_t *b = s < re->nsets ? re->sets[s] : word;
		if (s == re->nsets && !re->word)
			break;
		int16_t map[256][2];
		memset(map, 0xff, sizeof(map));
		uint32_t m = 0;
		for (unsigned c = 0; c < 256; c++) {
			int in = bit_has(b, c);
			if (map[re->cls[c]][in] < 0)
				map[re->cls[c]][in] = (int16_t)m++;
			re->cls[c] = (uint8_t)map[re->cls[c]][in];
		}
		n = m;
		if (n == 256)
			break;
	}
	re->ncls = n;
}

void files_regex_free(struct files_regex *re)
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

size_t files_regex_size(const struct files_regex *re)
{
	return re->ninsts;
}

static void flush(struct files_regex *re)
{
	re->nst = 0;
	re->npool = 0;
	re->flushes++;
	for (uint32_t b = 0; b < CACHE_STATES * 2; b++)
		re->bucket[b] = -1;
}

int files_regex_compile(struct files_regex **out, const char *pattern, size_t len, char *err,
			size_t errlen)
{
	*out = NULL;
	struct parser p = {.s = pattern, .n = len};
	int32_t root = alt(&p, 0);
	if (root >= 0 && p.i < p.n)
		p.err = E_EPAREN; /* never: a ')' at the top level is a literal */
	int rc = 0;
	if (root < 0 || p.err) {
		rc = p.err == E_NOMEM ? -ENOMEM : -EINVAL;
		if (rc == -EINVAL)
			snprintf(err, errlen, "%s", p.err);
		goto out;
	}
	if (p.nodes[root].size + 1 > FILES_REGEX_INSTS_MAX) {
		/* Say why: repetitions multiply what they repeat. */
		snprintf(err, errlen,
			 "the expression is too big: over %d instructions once its repetitions "
			 "are expanded",
			 FILES_REGEX_INSTS_MAX);
		rc = -EINVAL;
		goto out;
	}
	struct files_regex *re = calloc(1, sizeof(*re));
	if (!re) {
		rc = -ENOMEM;
		goto out;
	}
	uint32_t cap = p.nodes[root].size + 1;
	re->prog = calloc(cap, sizeof(*re->prog));
	re->mark = calloc(cap, sizeof(*re->mark));
	re->stack = calloc(cap, sizeof(*re->stack));
	re->list = calloc(cap, sizeof(*re->list));
	re->next = calloc(cap, sizeof(*re->next));
	re->st = calloc(CACHE_STATES, sizeof(*re->st));
	re->trans = malloc(CACHE_TRANS * sizeof(*re->trans));
	re->pcpool = malloc(CACHE_PCS * sizeof(*re->pcpool));
	re->bucket = malloc(CACHE_STATES * 2 * sizeof(*re->bucket));
	if (!re->prog || !re->mark || !re->stack || !re->list || !re->next || !re->st ||
	    !re->trans || !re->pcpool || !re->bucket) {
		files_regex_free(re);
		rc = -ENOMEM;
		goto out;
	}
	emit(re, p.nodes, root);
	emit_inst(re, OP_MATCH);
	re->sets = p.sets;
	re->nsets = p.nsets;
	p.sets = NULL;
	re->word = p.word;
	byte_classes(re);
	re->maxst = CACHE_TRANS / re->ncls;
	if (re->maxst > CACHE_STATES)
		re->maxst = CACHE_STATES;
	flush(re);
	re->flushes = 0;
	/* Anchored: from the start, after any byte, before any, the closure reaches no byte set
	 * and no match. A search then ends as soon as no thread is left (^#include). */
	re->anchored = true;
	for (uint8_t prev = CTX_WORD; prev <= CTX_OTHER; prev++)
		for (uint8_t next = CTX_EDGE; next <= CTX_OTHER; next++) {
			struct dstate none = {.ctx = prev};
			uint32_t nl;
			size_t cost = 0;
			if (closure(re, &none, next, &nl, &cost) || nl)
				re->anchored = false;
		}
	*out = re;
out:
	free(p.nodes);
	free(p.sets);
	return rc;
}

/* ---- search ---- */

static uint8_t ctx_of(const struct files_regex *re, unsigned c)
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

static void next_gen(struct files_regex *re)
{
	if (++re->gen == 0) {
		memset(re->mark, 0, re->ninsts * sizeof(*re->mark));
		re->gen = 1;
	}
}

/* The closure of state s's positions and the start, between contexts prev and next: the byte
 * sets reached go to re->list (*nlist of them). True when it reaches the match. *cost counts
 * the positions visited. */
static bool closure(struct files_regex *re, const struct dstate *s, uint8_t next, uint32_t *nlist,
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
static int32_t intern(struct files_regex *re, uint32_t n, uint8_t ctx)
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
		flush(re);
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
static int32_t step(struct files_regex *re, int32_t k, unsigned c, size_t *cost)
{
	uint32_t nl, flushes = re->flushes;
	uint8_t ctx = ctx_of(re, c);
	if (closure(re, &re->st[k], ctx, &nl, cost)) {
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

int files_regex_search(struct files_regex *re, const char *s, size_t n,
		       struct files_regex_cursor *cur, size_t *work)
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
	int rc = FILES_REGEX_MORE;
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
			rc = FILES_REGEX_MATCH;
			goto out;
		}
		k = t;
		pos++;
		if (re->anchored && !re->st[k].npcs) {
			rc = FILES_REGEX_NOMATCH; /* no thread left, and none can start */
			goto out;
		}
	}
	struct dstate *st = &re->st[k];
	if (st->eol < 0) {
		uint32_t nl;
		st->eol = closure(re, st, CTX_EDGE, &nl, &spent);
	}
	rc = st->eol ? FILES_REGEX_MATCH : FILES_REGEX_NOMATCH;
out:
	cur->state = k;
	cur->pos = pos;
	*work = spent >= budget ? 0 : budget - spent;
	return rc;
}
