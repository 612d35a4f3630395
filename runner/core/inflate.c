/* gzip and DEFLATE as RFC 1952 and RFC 1951 specify them; see inflate.h. Every step either
 * completes (its bits consumed) or leaves the state as it was and asks for more input, so the
 * input may end anywhere: a Huffman code is decoded by peeking, one input byte pulled at a
 * time, and consumed with its extra bits only once all of them are in. */
#include "core/inflate.h"

#include <string.h>

enum {
	P_HEADER,  /* the 10 fixed bytes */
	P_XLEN,    /* FEXTRA's length */
	P_EXTRA,   /* FEXTRA's bytes */
	P_NAME,    /* FNAME, up to its NUL */
	P_COMMENT, /* FCOMMENT, up to its NUL */
	P_HCRC,    /* FHCRC */
	P_BLOCK,   /* a block's 3 header bits */
	P_STORED_LEN,
	P_STORED,
	P_DYN_COUNTS,
	P_DYN_CLENS,
	P_DYN_LENS,
	P_CODES,
	P_DIST,
	P_COPY,
	P_TRAILER,
	P_FAILED,
};

#define FTEXT 1
#define FHCRC 2
#define FEXTRA 4
#define FNAME 8
#define FCOMMENT 16

static const uint16_t len_base[29] = {3,  4,  5,  6,   7,   8,   9,   10,  11, 13,
				      15, 17, 19, 23,  27,  31,  35,  43,  51, 59,
				      67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
				      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {1,    2,    3,    4,     5,     7,    9,    13,
				       17,   25,   33,   49,    65,    97,   129,  193,
				       257,  385,  513,  769,   1025,  1537, 2049, 3073,
				       4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
				       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
/* The order the code-length code's lengths are sent in (RFC 1951 §3.2.7). */
static const uint8_t clen_order[19] = {16, 17, 18, 0, 8,  7, 9,  6, 10, 5,
				       11, 4,  12, 3, 13, 2, 14, 1, 15};

struct io {
	const uint8_t *in;
	size_t in_len;
	uint8_t *out;
	size_t cap, n;
};

static int fail(struct inflate *z, const char *why)
{
	z->err = why;
	z->phase = P_FAILED;
	return -1;
}

void inflate_init(struct inflate *z)
{
	memset(z, 0, sizeof(*z));
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		z->crc_table[i] = c;
	}
}

static uint32_t crc_update(const struct inflate *z, uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	while (n--)
		crc = z->crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* At least n bits in hand (pulling whole input bytes), or false with nothing consumed. */
static bool need(struct inflate *z, struct io *io, unsigned n)
{
	while (z->nbits < n) {
		if (!io->in_len)
			return false;
		z->bits |= (uint64_t)*io->in++ << z->nbits;
		io->in_len--;
		z->nbits += 8;
	}
	return true;
}

static unsigned peek(const struct inflate *z, unsigned n)
{
	return (unsigned)(z->bits & ((1ull << n) - 1));
}

static void drop(struct inflate *z, unsigned n)
{
	z->bits >>= n;
	z->nbits -= n;
}

/* One whole byte (header, stored lengths, trailer): -1 when none is in hand yet. */
static int byte_in(struct inflate *z, struct io *io)
{
	if (!need(z, io, 8))
		return -1;
	int b = (int)peek(z, 8);
	drop(z, 8);
	return b;
}

/* A canonical Huffman code from its lengths: 0, or -1 over-subscribed, 1 incomplete. */
static int build(struct inflate_huff *h, const uint8_t *lens, unsigned n)
{
	uint16_t offs[16];
	memset(h->count, 0, sizeof(h->count));
	for (unsigned i = 0; i < n; i++)
		h->count[lens[i]]++;
	int left = 1;
	for (unsigned len = 1; len < 16; len++) {
		left = (left << 1) - h->count[len];
		if (left < 0)
			return -1;
	}
	offs[1] = 0;
	for (unsigned len = 1; len < 15; len++)
		offs[len + 1] = (uint16_t)(offs[len] + h->count[len]);
	for (unsigned i = 0; i < n; i++)
		if (lens[i])
			h->sym[offs[lens[i]]++] = (uint16_t)i;
	return left > 0;
}

/* Peek one symbol: its length in *len; -1 more input needed, -2 a code no symbol has. */
static int decode(struct inflate *z, struct io *io, const struct inflate_huff *h, unsigned *len)
{
	int code = 0, first = 0, index = 0;
	for (unsigned l = 1; l < 16; l++) {
		if (!need(z, io, l))
			return -1;
		code |= (int)((z->bits >> (l - 1)) & 1);
		int count = h->count[l];
		if (code - count < first) {
			*len = l;
			return h->sym[index + (code - first)];
		}
		index += count;
		first = (first + count) << 1;
		code <<= 1;
	}
	return -2;
}

static void emit(struct inflate *z, struct io *io, uint8_t b)
{
	z->win[z->wpos] = b;
	z->wpos = (z->wpos + 1) & (INFLATE_WINDOW - 1);
	io->out[io->n++] = b;
	z->total++;
}

/* ---- the gzip member's header and trailer ---- */

static int header_fixed(struct inflate *z, struct io *io)
{
	int b;
	while (z->hdr_pos < 10 && (b = byte_in(z, io)) >= 0) {
		uint8_t c = (uint8_t)b;
		if (z->hdr_pos == 0 && z->members && c != 0x1f)
			return fail(z, "data after the end of the gzip stream");
		if ((z->hdr_pos == 0 && c != 0x1f) || (z->hdr_pos == 1 && c != 0x8b))
			return fail(z, z->members
					       ? "data after the end of the gzip stream"
					       : "bad gzip header: not gzip (magic bytes 1f 8b)");
		if (z->hdr_pos == 2 && c != 8)
			return fail(z, "bad gzip header: compression method is not deflate (8)");
		if (z->hdr_pos == 3 && (c & 0xe0))
			return fail(z, "bad gzip header: reserved flag bits set");
		if (z->hdr_pos == 3)
			z->flags = c;
		z->hcrc = crc_update(z, z->hcrc, &c, 1);
		z->hdr_pos++;
	}
	if (z->hdr_pos < 10)
		return 0;
	z->phase = z->flags & FEXTRA ? P_XLEN : P_NAME;
	return 1;
}

/* The optional fields, each skipped (their bytes only in the header's CRC). */
static int header_fields(struct inflate *z, struct io *io)
{
	int b;
	uint8_t c;
	switch (z->phase) {
	case P_XLEN:
		while (z->tpos < 2 && (b = byte_in(z, io)) >= 0) {
			c = (uint8_t)b;
			z->hcrc = crc_update(z, z->hcrc, &c, 1);
			z->xlen |= (unsigned)c << (8 * z->tpos++);
		}
		if (z->tpos < 2)
			return 0;
		z->tpos = 0;
		z->phase = P_EXTRA;
		return 1;
	case P_EXTRA:
		while (z->xlen && (b = byte_in(z, io)) >= 0) {
			c = (uint8_t)b;
			z->hcrc = crc_update(z, z->hcrc, &c, 1);
			z->xlen--;
		}
		if (z->xlen)
			return 0;
		z->phase = P_NAME;
		return 1;
	case P_NAME:
	case P_COMMENT: {
		unsigned flag = z->phase == P_NAME ? FNAME : FCOMMENT;
		while ((z->flags & flag) && (b = byte_in(z, io)) >= 0) {
			c = (uint8_t)b;
			z->hcrc = crc_update(z, z->hcrc, &c, 1);
			if (!c)
				z->flags &= ~flag;
		}
		if (z->flags & flag)
			return 0;
		z->phase = z->phase == P_NAME ? P_COMMENT : P_HCRC;
		return 1;
	}
	}
	return fail(z, "bad gzip header");
}

static int header_crc(struct inflate *z, struct io *io)
{
	if (z->flags & FHCRC) {
		if (!need(z, io, 16))
			return 0;
		if (peek(z, 16) != (z->hcrc & 0xffff))
			return fail(z, "bad gzip header: header CRC mismatch");
		drop(z, 16);
	}
	z->phase = P_BLOCK;
	return 1;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int trailer(struct inflate *z, struct io *io)
{
	int b;
	while (z->tpos < 8 && (b = byte_in(z, io)) >= 0)
		z->trailer[z->tpos++] = (uint8_t)b;
	if (z->tpos < 8)
		return 0;
	if (le32(z->trailer) != z->crc)
		return fail(z, "CRC-32 mismatch: the data is corrupt");
	if (le32(z->trailer + 4) != (uint32_t)z->total)
		return fail(z, "ISIZE mismatch: the length is not what the trailer says");
	z->out_all += z->total;
	z->members++;
	z->phase = P_HEADER;
	z->hdr_pos = z->flags = z->xlen = z->tpos = 0;
	z->hcrc = z->crc = 0;
	z->total = 0;
	return 2; /* a member ended */
}

/* ---- blocks ---- */

static void fixed_tables(struct inflate *z)
{
	unsigned i = 0;
	for (; i < 144; i++)
		z->lens[i] = 8;
	for (; i < 256; i++)
		z->lens[i] = 9;
	for (; i < 280; i++)
		z->lens[i] = 7;
	for (; i < 288; i++)
		z->lens[i] = 8;
	build(&z->lit, z->lens, 288);
	memset(z->lens, 5, 30);
	build(&z->dist, z->lens, 30);
}

static int block_header(struct inflate *z, struct io *io)
{
	if (!need(z, io, 3))
		return 0;
	z->last = peek(z, 1);
	unsigned type = peek(z, 3) >> 1;
	drop(z, 3);
	if (type == 0) {
		drop(z, z->nbits & 7); /* to the byte */
		z->phase = P_STORED_LEN;
	} else if (type == 1) {
		fixed_tables(z);
		z->phase = P_CODES;
	} else if (type == 2) {
		z->phase = P_DYN_COUNTS;
	} else {
		return fail(z, "bad deflate block: reserved block type 3");
	}
	return 1;
}

static int stored(struct inflate *z, struct io *io)
{
	if (z->phase == P_STORED_LEN) {
		if (!need(z, io, 32))
			return 0;
		unsigned len = peek(z, 16), nlen = (unsigned)(z->bits >> 16) & 0xffff;
		if (len != (~nlen & 0xffff))
			return fail(
				z,
				"bad deflate block: stored length does not match its complement");
		drop(z, 32);
		z->stored_left = len;
		z->phase = P_STORED;
	}
	/* Whole bytes were pulled one at a time, so no input byte is left in z->bits here. */
	while (z->stored_left && io->in_len && io->n < io->cap) {
		emit(z, io, *io->in++);
		io->in_len--;
		z->stored_left--;
	}
	if (z->stored_left)
		return 0;
	z->phase = z->last ? P_TRAILER : P_BLOCK;
	if (z->last)
		drop(z, z->nbits & 7);
	return 1;
}

static int dyn_counts(struct inflate *z, struct io *io)
{
	if (z->phase == P_DYN_COUNTS) {
		if (!need(z, io, 14))
			return 0;
		z->hlit = peek(z, 5) + 257;
		z->hdist = ((unsigned)(z->bits >> 5) & 31) + 1;
		z->hclen = ((unsigned)(z->bits >> 10) & 15) + 4;
		drop(z, 14);
		if (z->hlit > 286 || z->hdist > 30)
			return fail(z, "bad deflate block: too many length or distance codes");
		memset(z->lens, 0, sizeof(z->lens));
		z->nlens = 0;
		z->phase = P_DYN_CLENS;
	}
	while (z->nlens < z->hclen) {
		if (!need(z, io, 3))
			return 0;
		z->lens[clen_order[z->nlens++]] = (uint8_t)peek(z, 3);
		drop(z, 3);
	}
	if (build(&z->clen, z->lens, 19) != 0)
		return fail(z, "bad deflate block: bad code-length code");
	memset(z->lens, 0, sizeof(z->lens));
	z->nlens = 0;
	z->phase = P_DYN_LENS;
	return 1;
}

/* A code a block may use: complete, or (as zlib allows) one symbol of one bit, or no symbol at
 * all (a distance code of a block of literals only; using it is then a bad code). */
static bool usable(const struct inflate_huff *h, int built, unsigned n)
{
	unsigned used = n - h->count[0];
	return built == 0 || (built > 0 && (used == 0 || (used == 1 && h->count[1] == 1)));
}

/* The literal/length and distance codes' lengths, then both codes. */
static int dyn_lens(struct inflate *z, struct io *io)
{
	unsigned n = z->hlit + z->hdist, len;
	while (z->nlens < n) {
		int sym = decode(z, io, &z->clen, &len);
		if (sym == -1)
			return 0;
		if (sym < 0)
			return fail(z, "bad deflate block: bad code-length code");
		if (sym < 16) {
			drop(z, len);
			z->lens[z->nlens++] = (uint8_t)sym;
			continue;
		}
		unsigned xb = sym == 16 ? 2 : sym == 17 ? 3 : 7;
		if (!need(z, io, len + xb))
			return 0;
		unsigned rep = (sym == 16   ? 3
				: sym == 17 ? 3
					    : 11) +
			       (unsigned)((z->bits >> len) & ((1u << xb) - 1));
		if (sym == 16 && !z->nlens)
			return fail(z, "bad deflate block: repeat with no previous length");
		if (z->nlens + rep > n)
			return fail(z, "bad deflate block: code lengths overrun");
		uint8_t v = sym == 16 ? z->lens[z->nlens - 1] : 0;
		drop(z, len + xb);
		while (rep--)
			z->lens[z->nlens++] = v;
	}
	if (!z->lens[256])
		return fail(z, "bad deflate block: no end-of-block code");
	if (!usable(&z->lit, build(&z->lit, z->lens, z->hlit), z->hlit))
		return fail(z, "bad deflate block: bad literal/length code");
	if (!usable(&z->dist, build(&z->dist, z->lens + z->hlit, z->hdist), z->hdist))
		return fail(z, "bad deflate block: bad distance code");
	z->phase = P_CODES;
	return 1;
}

static int block_end(struct inflate *z)
{
	if (!z->last) {
		z->phase = P_BLOCK;
		return 1;
	}
	drop(z, z->nbits & 7);
	z->phase = P_TRAILER;
	return 1;
}

/* Literals and lengths until the output is full, the input ends, or a match is read. */
static int codes(struct inflate *z, struct io *io)
{
	unsigned len;
	while (io->n < io->cap) {
		int sym = decode(z, io, &z->lit, &len);
		if (sym == -1)
			return 0;
		if (sym < 0 || sym > 285)
			return fail(z, "bad deflate block: bad literal/length code");
		if (sym < 256) {
			drop(z, len);
			emit(z, io, (uint8_t)sym);
			continue;
		}
		if (sym == 256) {
			drop(z, len);
			return block_end(z);
		}
		unsigned i = (unsigned)sym - 257, xb = len_extra[i];
		if (!need(z, io, len + xb))
			return 0;
		z->copy_len = len_base[i] + (unsigned)((z->bits >> len) & ((1u << xb) - 1));
		drop(z, len + xb);
		z->phase = P_DIST;
		return 1;
	}
	return 0;
}

static int distance(struct inflate *z, struct io *io)
{
	unsigned len;
	int sym = decode(z, io, &z->dist, &len);
	if (sym == -1)
		return 0;
	if (sym < 0 || sym > 29)
		return fail(z, "bad deflate block: bad distance code");
	unsigned xb = dist_extra[sym];
	if (!need(z, io, len + xb))
		return 0;
	z->copy_dist = dist_base[sym] + (unsigned)((z->bits >> len) & ((1u << xb) - 1));
	drop(z, len + xb);
	if (z->copy_dist > z->total)
		return fail(z, "bad deflate block: distance too far back");
	z->phase = P_COPY;
	return 1;
}

static int copy(struct inflate *z, struct io *io)
{
	while (z->copy_len && io->n < io->cap) {
		emit(z, io, z->win[(z->wpos - z->copy_dist) & (INFLATE_WINDOW - 1)]);
		z->copy_len--;
	}
	if (z->copy_len)
		return 0;
	z->phase = P_CODES;
	return 1;
}

/* One step: 1 progress, 2 a member ended, 0 more input or output room needed, -1 refused. */
static int step(struct inflate *z, struct io *io)
{
	switch (z->phase) {
	case P_HEADER:
		return header_fixed(z, io);
	case P_XLEN:
	case P_EXTRA:
	case P_NAME:
	case P_COMMENT:
		return header_fields(z, io);
	case P_HCRC:
		return header_crc(z, io);
	case P_BLOCK:
		return block_header(z, io);
	case P_STORED_LEN:
	case P_STORED:
		return stored(z, io);
	case P_DYN_COUNTS:
	case P_DYN_CLENS:
		return dyn_counts(z, io);
	case P_DYN_LENS:
		return dyn_lens(z, io);
	case P_CODES:
		return codes(z, io);
	case P_DIST:
		return distance(z, io);
	case P_COPY:
		return copy(z, io);
	case P_TRAILER:
		return trailer(z, io);
	}
	return -1;
}

enum inflate_rc inflate_gzip(struct inflate *z, const uint8_t **in, size_t *in_len, uint8_t *out,
			     size_t cap, size_t *out_len)
{
	struct io io = {*in, *in_len, out, cap, 0};
	int rc = z->phase == P_FAILED ? -1 : 1;
	while (rc == 1) {
		size_t before = io.n;
		rc = step(z, &io);
		z->crc = crc_update(z, z->crc, out + before, io.n - before);
		if (rc == 2 && io.in_len)
			rc = 1; /* the next member, or data after the stream */
	}
	*in = io.in;
	*in_len = io.in_len;
	*out_len = io.n;
	if (rc < 0)
		return INFLATE_ERROR;
	return rc == 2 ? INFLATE_DONE : INFLATE_MORE;
}

int inflate_finish(struct inflate *z)
{
	if (z->phase == P_FAILED)
		return -1;
	if (z->phase == P_HEADER && z->hdr_pos == 0 && z->members)
		return 0;
	z->err = z->members || z->hdr_pos || z->phase != P_HEADER
			 ? "truncated gzip stream: the body ended before the stream did"
			 : "empty body: no gzip stream";
	z->phase = P_FAILED;
	return -1;
}
