/* core/inflate: streams made by Debian's gzip (levels 1 and 9, with and without a file name),
 * stored blocks and header fields built here, fed whole and one byte at a time; and each
 * refusal with its words. */
#include "core/inflate.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"

struct buf {
	uint8_t *p;
	size_t n, cap;
};

static void put(struct buf *b, const void *d, size_t n)
{
	if (!n)
		return;
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
}

/* Decode in pieces of `chunk` input bytes into an output buffer of `ocap`; the result in out,
 * the refusal's words in *err (NULL: the stream was whole). */
static const char *decode_all(const uint8_t *in, size_t n, size_t chunk, size_t ocap,
			      struct buf *out)
{
	static struct inflate z;
	uint8_t *o = malloc(ocap);
	inflate_init(&z);
	const char *err = NULL;
	for (size_t off = 0; off < n && !err;) {
		size_t take = n - off < chunk ? n - off : chunk, left = take;
		const uint8_t *p = in + off;
		for (;;) {
			size_t got, before = left;
			enum inflate_rc rc = inflate_gzip(&z, &p, &left, o, ocap, &got);
			put(out, o, got);
			bool stuck = !got && left == before;
			if (rc == INFLATE_ERROR) {
				err = z.err;
				break;
			}
			if ((!left && got < ocap) || stuck)
				break;
		}
		off += take;
	}
	if (!err && inflate_finish(&z) < 0)
		err = z.err;
	free(o);
	return err;
}

/* data through `gzip args`, as the harness's shell runs it. */
static struct buf gzip_of(const uint8_t *data, size_t n, const char *args, bool named)
{
	char in[] = "/tmp/forceai-unit-inflate-XXXXXX", cmd[256];
	struct buf out = {0};
	int fd = mkstemp(in);
	if (fd < 0 || write(fd, data, n) != (ssize_t)n)
		return out;
	close(fd);
	snprintf(cmd, sizeof(cmd), named ? "gzip -c %s %s" : "gzip -c %s < %s", args, in);
	FILE *f = popen(cmd, "r");
	uint8_t b[65536];
	size_t k;
	while (f && (k = fread(b, 1, sizeof(b), f)) > 0)
		put(&out, b, k);
	if (f)
		pclose(f);
	unlink(in);
	return out;
}

static uint8_t *sample(int kind, size_t n)
{
	uint8_t *d = malloc(n + 1);
	uint32_t x = 2463534242u;
	static const char words[] = "the quick brown fox jumps over the lazy dog; ";
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		d[i] = kind == 0 ? (uint8_t)x
		       : kind == 1
			       ? (uint8_t)
					 words[(i + (x % 7 == 0 ? x % 5 : 0)) % (sizeof(words) - 1)]
			       : 0;
	}
	return d;
}

static bool round_trip(const uint8_t *d, size_t n, const char *args, bool named, size_t chunk,
		       size_t ocap)
{
	struct buf gz = gzip_of(d, n, args, named), out = {0};
	if (!CHECKF(gz.n >= 18, "gzip %s made no stream", args))
		return false;
	const char *err = decode_all(gz.p, gz.n, chunk, ocap, &out);
	bool ok =
		CHECKF(!err, "gzip %s, %zu bytes, chunk %zu: %s", args, n, chunk, err ? err : "") &&
		CHECKF(out.n == n && (!n || !memcmp(out.p, d, n)), "gzip %s, %zu bytes: %zu out",
		       args, n, out.n);
	free(gz.p);
	free(out.p);
	return ok;
}

TEST(inflate_gzip_levels_whole_and_chunked)
{
	static const size_t sizes[] = {0, 1, 1000, 70000, 300000};
	for (int kind = 0; kind < 3; kind++)
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			uint8_t *d = sample(kind, sizes[s]);
			round_trip(d, sizes[s], "-1 -n", false, 1 << 20, 65536);
			round_trip(d, sizes[s], "-9 -n", false, 4093, 1000);
			round_trip(d, sizes[s], "-9", true, 1 << 20, 7);
			free(d);
		}
}

TEST(inflate_one_byte_at_a_time)
{
	uint8_t *d = sample(1, 40000);
	round_trip(d, 40000, "-9", true, 1, 1);
	round_trip(d, 40000, "-1 -n", false, 1, 3);
	free(d);
	d = sample(0, 20000); /* incompressible: gzip sends stored blocks */
	round_trip(d, 20000, "-9 -n", false, 1, 1);
	free(d);
}

/* ---- streams built here ---- */

static uint32_t crc32_slow(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & -(c & 1));
	}
	return ~c;
}

static void le32_put(struct buf *b, uint32_t v)
{
	uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
	put(b, x, 4);
}

/* A member with every header field (FEXTRA, FNAME, FCOMMENT, FHCRC) and data in stored blocks
 * of at most `blk` bytes, as `gzip -0` would send it. */
static void stored_member(struct buf *b, const uint8_t *d, size_t n, size_t blk)
{
	size_t h0 = b->n;
	static const uint8_t hdr[] = {0x1f, 0x8b, 8,   2 | 4 | 8 | 16,
				      0,    0,    0,   0,
				      0,    3,    3,   0,
				      'a',  'b',  'c', 'f',
				      '.',  't',  'x', 't',
				      0,    'h',  'i', 0};
	put(b, hdr, sizeof(hdr));
	uint32_t hc = crc32_slow(b->p + h0, b->n - h0);
	uint8_t hcrc[2] = {(uint8_t)hc, (uint8_t)(hc >> 8)};
	put(b, hcrc, 2);
	size_t off = 0;
	do {
		size_t len = n - off < blk ? n - off : blk;
		uint8_t bh[5] = {off + len == n, (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)~len,
				 (uint8_t)(~len >> 8)};
		put(b, bh, 5);
		put(b, d + off, len);
		off += len;
	} while (off < n);
	le32_put(b, crc32_slow(d, n));
	le32_put(b, (uint32_t)n);
}

TEST(inflate_stored_blocks_header_fields_two_members)
{
	uint8_t *d = sample(0, 150000);
	struct buf gz = {0}, out = {0};
	stored_member(&gz, d, 150000, 65535);
	stored_member(&gz, d, 1000, 300);
	const char *err = decode_all(gz.p, gz.n, 1, 5, &out);
	CHECKF(!err, "%s", err ? err : "");
	CHECK(out.n == 151000 && !memcmp(out.p, d, 150000) && !memcmp(out.p + 150000, d, 1000));
	free(out.p);
	out = (struct buf){0};
	CHECK(!decode_all(gz.p, gz.n, 1 << 20, 1 << 16, &out) && out.n == 151000);
	free(out.p);
	free(gz.p);
	free(d);
}

/* ---- refusals ---- */

static void expect_refused(const uint8_t *p, size_t n, const char *words)
{
	for (size_t chunk = 1; chunk <= n + 1; chunk = chunk * 3 + 1) {
		struct buf out = {0};
		const char *err = decode_all(p, n, chunk, 64, &out);
		CHECKF(err && strstr(err, words), "chunk %zu: want '%s', got '%s'", chunk, words,
		       err ? err : "(accepted)");
		free(out.p);
	}
}

/* A gzip stream whose deflate data is the given bits (LSB first), then a trailer. */
static struct buf crafted(const char *bits, uint32_t crc, uint32_t isize)
{
	struct buf b = {0};
	static const uint8_t hdr[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
	put(&b, hdr, sizeof(hdr));
	uint8_t cur = 0;
	int nb = 0;
	for (const char *c = bits; *c; c++) {
		if (*c == ' ')
			continue;
		cur |= (uint8_t)((*c == '1') << nb);
		if (++nb == 8) {
			put(&b, &cur, 1);
			cur = 0;
			nb = 0;
		}
	}
	if (nb)
		put(&b, &cur, 1);
	le32_put(&b, crc);
	le32_put(&b, isize);
	return b;
}

TEST(inflate_refusals)
{
	uint8_t *d = sample(1, 5000);
	struct buf gz = gzip_of(d, 5000, "-9 -n", false), bad = {0};
	if (!CHECK(gz.n > 20))
		return;
#define MUTATE(at, val, words)                                                                     \
	do {                                                                                       \
		bad.n = 0;                                                                         \
		put(&bad, gz.p, gz.n);                                                             \
		bad.p[(at) < 0 ? (long)gz.n + (at) : (at)] = (val);                                \
		expect_refused(bad.p, bad.n, words);                                               \
	} while (0)
	MUTATE(0, 0x1e, "not gzip");
	MUTATE(1, 0x8c, "not gzip");
	MUTATE(2, 7, "not deflate");
	MUTATE(3, 0x20, "reserved flag");
	MUTATE(-8, gz.p[gz.n - 8] ^ 1, "CRC-32 mismatch");
	MUTATE(-4, gz.p[gz.n - 4] ^ 1, "ISIZE mismatch");
	MUTATE(10, 0x07, "reserved block type");
	/* trailing data, whether or not it looks like gzip */
	bad.n = 0;
	put(&bad, gz.p, gz.n);
	put(&bad, "x", 1);
	expect_refused(bad.p, bad.n, "data after the end");
	bad.n = gz.n;
	put(&bad, "\x1f\x8c", 2);
	expect_refused(bad.p, bad.n, "data after the end");
	/* every truncation */
	for (size_t n = 0; n < gz.n; n++) {
		struct buf out = {0};
		const char *err = decode_all(gz.p, n, 1 << 20, 4096, &out);
		CHECKF(err && (strstr(err, "truncated") || strstr(err, "empty body")),
		       "cut at %zu: %s", n, err ? err : "(accepted)");
		free(out.p);
	}
	free(gz.p);
	free(d);
	/* a header CRC that does not match */
	uint8_t one = 'z';
	gz = (struct buf){0};
	stored_member(&gz, &one, 1, 10);
	gz.p[24] ^= 1;
	expect_refused(gz.p, gz.n, "header CRC mismatch");
	free(gz.p);
	/* stored length and its complement disagree */
	static const uint8_t st[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 1, 0, 0xfe, 0xfe, 'z'};
	expect_refused(st, sizeof(st), "complement");
	free(bad.p);
	/* fixed block: a length with distance 1 before any output */
	bad = crafted("1 10 0000001 00000 0000000", 0, 0);
	expect_refused(bad.p, bad.n, "distance too far back");
	free(bad.p);
	/* fixed block: literal/length symbol 286 (no such length) */
	bad = crafted("1 10 11000110", 0, 0);
	expect_refused(bad.p, bad.n, "bad literal/length code");
	free(bad.p);
	/* dynamic block: a code-length code with every length 0 (not a code) */
	bad = crafted("1 01 00000 00000 0000 000 000 000 000", 0, 0);
	expect_refused(bad.p, bad.n, "code-length code");
	free(bad.p);
	/* dynamic block: more than 286 literal/length codes (HLIT 30) */
	bad = crafted("1 01 01111 00000 0000", 0, 0);
	expect_refused(bad.p, bad.n, "too many");
	free(bad.p);
	/* an empty body */
	struct buf out = {0};
	const char *err = decode_all((const uint8_t *)"", 0, 1, 1, &out);
	CHECKF(err && strstr(err, "empty body"), "%s", err ? err : "(accepted)");
	free(out.p);
	/* a refused stream stays refused */
	static struct inflate z;
	inflate_init(&z);
	const uint8_t *p = (const uint8_t *)"nope", *q;
	size_t left = 4, got;
	uint8_t o[8];
	CHECK(inflate_gzip(&z, &p, &left, o, sizeof(o), &got) == INFLATE_ERROR);
	q = st;
	left = sizeof(st);
	CHECK(inflate_gzip(&z, &q, &left, o, sizeof(o), &got) == INFLATE_ERROR);
	CHECK(inflate_finish(&z) < 0);
}

/* A dynamic block of literals only whose distance code has no symbol at all (zlib takes it):
 * literal/length code {0: "0", 256: "1"}, code-length code {18: "0", 0: "10", 1: "11"}. */
TEST(inflate_dynamic_block_without_distance_codes)
{
	static const uint8_t two[2] = {0, 0};
	struct buf
		gz = crafted(
			"1 01 00000 00000 0111"
			" 000 000 100 010 000 000 000 000 000 000 000 000 000 000 000 000 000 010"
			" 11 0 1111111 0 0101011 11 10"
			" 0 0 1",
			crc32_slow(two, 2), 2),
		out = {0};
	const char *err = decode_all(gz.p, gz.n, 1, 1, &out);
	CHECKF(!err, "%s", err ? err : "");
	CHECK(out.n == 2 && !memcmp(out.p, two, 2));
	free(out.p);
	free(gz.p);
}

/* A fixed-Huffman stream of one literal and a long match: what a gzip bomb is made of, each
 * length symbol 258 bytes; the output comes in pieces of the caller's size. */
TEST(inflate_bomb_in_pieces)
{
	size_t n = 10 * 1000 * 1000;
	uint8_t *d = calloc(1, n);
	struct buf gz = gzip_of(d, n, "-9 -n", false);
	CHECKF(gz.n < n / 500, "10 MB of zeros: %zu bytes of gzip", gz.n);
	static struct inflate z;
	inflate_init(&z);
	const uint8_t *p = gz.p;
	size_t left = gz.n, got, total = 0, calls = 0;
	uint8_t o[65536];
	enum inflate_rc rc;
	do {
		rc = inflate_gzip(&z, &p, &left, o, sizeof(o), &got);
		total += got;
		calls++;
		CHECK(got <= sizeof(o));
	} while (rc == INFLATE_MORE && (left || got == sizeof(o)));
	CHECKF(rc == INFLATE_DONE && total == n && inflate_finish(&z) == 0, "rc %d, %zu of %zu: %s",
	       rc, total, n, z.err ? z.err : "");
	CHECKF(calls >= n / sizeof(o), "%zu calls", calls);
	free(gz.p);
	free(d);
}
