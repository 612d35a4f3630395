/* fuzz_inflate: the gzip decoder of envd's POST /files with Content-Encoding gzip
 * (runner/core/inflate.c), whose input anyone with the token sends.
 *
 * Input: byte 0 seeds the piece sizes (input pieces of 1..64 bytes, output room of 1..4096), the
 * rest is the gzip stream. Checked beyond the sanitizers: fed whole or in pieces, the decoder
 * gives the same bytes and the same verdict with the same words; no call writes past its output
 * room or takes input it was not given; a refusal always has words; an accepted stream's output
 * matches its ISIZE (one member); and the rest wrapped here in stored blocks (gzip -0's form, with
 * a CRC-32 computed here) decodes back to itself. At most 16 MiB is decoded per input (a bomb is
 * cut). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/inflate.h"

#define OUT_MAX (16u << 20)

struct result {
	uint8_t *out;
	size_t n;
	const char *err;
	bool cut; /* stopped at OUT_MAX */
	unsigned members;
};

static struct inflate z;
static uint8_t out_a[OUT_MAX], out_b[OUT_MAX];

static void feed(const uint8_t *in, size_t len, size_t piece, size_t room, struct result *r,
		 uint8_t *out)
{
	uint8_t buf[4096];
	inflate_init(&z);
	memset(r, 0, sizeof(*r));
	r->out = out;
	for (size_t off = 0; off < len && !r->err && !r->cut;) {
		size_t take = len - off < piece ? len - off : piece, left = take;
		const uint8_t *p = in + off;
		for (;;) {
			size_t got = 12345, before = left;
			enum inflate_rc rc = inflate_gzip(&z, &p, &left, buf, room, &got);
			if (got > room || left > before || p != in + off + (take - left))
				abort();
			if (r->n + got > OUT_MAX) {
				r->cut = true;
				break;
			}
			memcpy(r->out + r->n, buf, got);
			r->n += got;
			if (rc == INFLATE_ERROR) {
				if (!z.err || !*z.err)
					abort();
				r->err = z.err;
				break;
			}
			if ((!left && got < room) || (!got && left == before))
				break;
		}
		off += take;
	}
	if (!r->err && !r->cut && inflate_finish(&z) < 0) {
		if (!z.err)
			abort();
		r->err = z.err;
	}
	r->members = z.members;
}

static uint32_t crc32_bits(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & -(c & 1));
	}
	return ~c;
}

/* data as one gzip member of stored blocks of at most blk bytes. */
static uint8_t *stored(const uint8_t *d, size_t n, size_t blk, size_t *len)
{
	uint8_t *g = malloc(18 + n + 5 * (n / blk + 1)), *q = g;
	static const uint8_t hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
	memcpy(q, hdr, 10);
	q += 10;
	size_t off = 0;
	do {
		size_t k = n - off < blk ? n - off : blk;
		*q++ = off + k == n;
		*q++ = (uint8_t)k, *q++ = (uint8_t)(k >> 8);
		*q++ = (uint8_t)~k, *q++ = (uint8_t)(~k >> 8);
		memcpy(q, d + off, k);
		q += k, off += k;
	} while (off < n);
	uint32_t c = crc32_bits(d, n);
	for (int i = 0; i < 4; i++)
		*q++ = (uint8_t)(c >> (8 * i));
	for (int i = 0; i < 4; i++)
		*q++ = (uint8_t)((uint32_t)n >> (8 * i));
	*len = (size_t)(q - g);
	return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t piece = 1 + data[0] % 64, room = 1 + (size_t)data[0] * 16;
	const uint8_t *in = data + 1;
	size_t len = size - 1;
	struct result whole, pieces;
	feed(in, len, len ? len : 1, 4096, &whole, out_a);
	feed(in, len, piece, room, &pieces, out_b);
	if (!whole.cut && !pieces.cut) {
		if (whole.n != pieces.n || memcmp(whole.out, pieces.out, whole.n))
			abort(); /* the pieces changed the output */
		if (!whole.err != !pieces.err || (whole.err && strcmp(whole.err, pieces.err)))
			abort(); /* or the verdict */
		if (!whole.err && whole.members == 1 &&
		    (uint32_t)whole.n !=
			    (uint32_t)(in[len - 4] | in[len - 3] << 8 | in[len - 2] << 16 |
				       (uint32_t)in[len - 1] << 24))
			abort(); /* accepted, yet not the length its trailer says */
	}
	size_t glen;
	uint8_t *g = stored(in, len, 1 + data[0] * 97u % 65535, &glen);
	feed(g, glen, piece, room, &whole, out_a);
	if (whole.err || whole.n != len || (len && memcmp(whole.out, in, len)))
		abort(); /* a stored stream did not decode back */
	free(g);
	return 0;
}
