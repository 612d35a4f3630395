/* POSIX extended regular expressions for grep, the compiler (see regex.h, and regex.c for
 * the search).
 *
 * The pattern is parsed into a tree whose size in instructions (repetitions expanded) is known
 * at every node, so a pattern over TEXT_REGEX_INSTS_MAX is refused before anything is
 * expanded; the tree is then emitted as a Thompson program (byte sets, split, jump,
 * assertions, match). */
#include "text/regex.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/regex_internal.h"

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
	return v > TEXT_REGEX_INSTS_MAX ? TEXT_REGEX_INSTS_MAX + 1 : (uint32_t)v;
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

/* A decimal count of {m,n}: -1 when none, -2 past TEXT_REGEX_DUP_MAX. */
static int count(struct parser *p)
{
	int v = -1;
	while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
		v = (v < 0 ? 0 : v) * 10 + (p->s[p->i++] - '0');
		if (v > TEXT_REGEX_DUP_MAX)
			v = TEXT_REGEX_DUP_MAX + 1;
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
		if (min > TEXT_REGEX_DUP_MAX || (max != REP_INF && max > TEXT_REGEX_DUP_MAX)) {
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
		if (depth + 1 > TEXT_REGEX_DEPTH_MAX) {
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
		if (depth + ++reps > TEXT_REGEX_DEPTH_MAX) {
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

static uint32_t emit_inst(struct text_regex *re, uint8_t op)
{
	struct inst *in = &re->prog[re->ninsts];
	memset(in, 0, sizeof(*in));
	in->op = op;
	return re->ninsts++;
}

static void emit(struct text_regex *re, const struct node *nodes, int32_t x);

/* split L1, next; L1: a; jmp end; next: split L2, next2; ... last; end: the jumps to end
 * are chained through their x until end is known (no array per frame). */
static void emit_alt(struct text_regex *re, const struct node *nodes, const struct node *n)
{
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
}

static void emit_rep(struct text_regex *re, const struct node *nodes, const struct node *n)
{
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
	/* (max - min) times: split next, end; x; ... end: (chained like emit_alt's jumps) */
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

/* Emit node x. The sizes were checked: re->prog has room. */
static void emit(struct text_regex *re, const struct node *nodes, int32_t x)
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
	case N_ALT:
		emit_alt(re, nodes, n);
		return;
	case N_REP:
		emit_rep(re, nodes, n);
		return;
	}
}

/* ---- compile ---- */

/* Classes of bytes no set tells apart (nor \w, when the context matters): the DFA's alphabet. */
static void byte_classes(struct text_regex *re)
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

int text_regex_compile(struct text_regex **out, const char *pattern, size_t len, char *err,
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
	if (p.nodes[root].size + 1 > TEXT_REGEX_INSTS_MAX) {
		/* Say why: repetitions multiply what they repeat. */
		snprintf(err, errlen,
			 "the expression is too big: over %d instructions once its repetitions "
			 "are expanded",
			 TEXT_REGEX_INSTS_MAX);
		rc = -EINVAL;
		goto out;
	}
	struct text_regex *re = calloc(1, sizeof(*re));
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
		text_regex_free(re);
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
	regex_flush(re);
	re->flushes = 0;
	/* Anchored: from the start, after any byte, before any, the closure reaches no byte set
	 * and no match. A search then ends as soon as no thread is left (^#include). */
	re->anchored = true;
	for (uint8_t prev = CTX_WORD; prev <= CTX_OTHER; prev++)
		for (uint8_t next = CTX_EDGE; next <= CTX_OTHER; next++) {
			struct dstate none = {.ctx = prev};
			uint32_t nl;
			size_t cost = 0;
			if (regex_closure(re, &none, next, &nl, &cost) || nl)
				re->anchored = false;
		}
	*out = re;
out:
	free(p.nodes);
	free(p.sets);
	return rc;
}
