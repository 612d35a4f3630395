/* A streaming gzip (RFC 1952) and DEFLATE (RFC 1951) decoder: input in any pieces, output in
 * pieces of the caller's size, every state in the caller's struct (a 32 KiB window, no
 * allocation, no I/O), so an upload is inflated as it arrives. Each refusal has its words in
 * z->err: a bad header, a bad block, a distance too far back, a CRC-32 or ISIZE mismatch,
 * data after the stream, a stream that ends early. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INFLATE_WINDOW 32768

enum inflate_rc {
	INFLATE_MORE = 0,  /* the input is used up or the output is full: call again */
	INFLATE_DONE = 1,  /* a member ended with its trailer checked (more may follow) */
	INFLATE_ERROR = -1 /* refused: z->err says why; every later call refuses too */
};

struct inflate_huff {
	uint16_t count[16]; /* codes of each length */
	uint16_t sym[288];  /* symbols in canonical order */
};

struct inflate {
	int phase;
	const char *err;
	uint64_t bits; /* input bits not used yet, the oldest lowest */
	unsigned nbits;
	/* the member's header */
	unsigned hdr_pos, flags, xlen;
	uint32_t hcrc;
	/* blocks */
	bool last;
	unsigned stored_left;
	unsigned hlit, hdist, hclen, nlens;
	uint8_t lens[320];
	struct inflate_huff lit, dist, clen;
	unsigned copy_len, copy_dist;
	/* output */
	uint8_t win[INFLATE_WINDOW];
	unsigned wpos;
	uint64_t total;   /* bytes out of this member */
	uint64_t out_all; /* bytes out of every member */
	uint32_t crc;
	unsigned members; /* members ended */
	uint8_t trailer[8];
	unsigned tpos;
	uint32_t crc_table[256];
};

void inflate_init(struct inflate *z);
/* Decode from *in (advanced past what was used; *in_len lowered) into out (cap bytes, *out_len
 * written). A call returns when the input is used up or the output is full; INFLATE_DONE when
 * the input ended exactly at a member's end (members may follow one another, as gzip allows;
 * anything else after one is refused). */
enum inflate_rc inflate_gzip(struct inflate *z, const uint8_t **in, size_t *in_len, uint8_t *out,
			     size_t cap, size_t *out_len);
/* The input ended: 0 if the stream is whole (at least one member, none begun after it), else
 * -1 with z->err (a truncated stream). */
int inflate_finish(struct inflate *z);
