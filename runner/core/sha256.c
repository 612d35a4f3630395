/* SHA-256 as FIPS 180-4 specifies it; see sha256.h. */
#include "core/sha256.h"

#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static uint32_t ror(uint32_t x, int n)
{
	return (x >> n) | (x << (32 - n));
}

static void block(struct sha256 *c, const unsigned char *p)
{
	uint32_t w[64];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3];
	uint32_t e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) +
			      K[i] + w[i];
		uint32_t t2 =
			(ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
		h = g;
		g = f;
		f = e;
		e = d + t1;
		d = cc;
		cc = b;
		b = a;
		a = t1 + t2;
	}
	c->h[0] += a;
	c->h[1] += b;
	c->h[2] += cc;
	c->h[3] += d;
	c->h[4] += e;
	c->h[5] += f;
	c->h[6] += g;
	c->h[7] += h;
}

#if defined(__x86_64__)
/* The x86 SHA extensions: the audit trail hashes every event it keeps, and
 * the portable rounds were an event's largest cost (3,400 instructions a
 * 64-byte block). The instructions keep the state as ABEF and CDGH; the
 * message schedule is four W words a register. */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_x86(uint32_t h[8],
								   const unsigned char *p, size_t n)
{
	const __m128i bswap = _mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
	__m128i abcd = _mm_loadu_si128((const __m128i *)&h[0]);
	__m128i efgh = _mm_loadu_si128((const __m128i *)&h[4]);
	__m128i badc = _mm_shuffle_epi32(abcd, 0xB1);
	__m128i hgfe = _mm_shuffle_epi32(efgh, 0x1B);
	__m128i abef = _mm_alignr_epi8(badc, hgfe, 8);
	__m128i cdgh = _mm_blend_epi16(hgfe, badc, 0xF0);
	for (; n; n--, p += 64) {
		__m128i abef0 = abef, cdgh0 = cdgh, m[4];
		for (int i = 0; i < 4; i++)
			m[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)),
						bswap);
		for (int i = 0; i < 16; i++) {
			__m128i w = m[i & 3];
			if (i >= 4) {
				/* W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a
				 * time. */
				__m128i t = _mm_sha256msg1_epu32(m[i & 3], m[(i + 1) & 3]);
				t = _mm_add_epi32(t, _mm_alignr_epi8(m[(i + 3) & 3], m[(i + 2) & 3],
								     4));
				w = m[i & 3] = _mm_sha256msg2_epu32(t, m[(i + 3) & 3]);
			}
			__m128i k = _mm_add_epi32(w, _mm_loadu_si128((const __m128i *)&K[4 * i]));
			cdgh = _mm_sha256rnds2_epu32(cdgh, abef, k);
			abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(k, 0x0E));
		}
		abef = _mm_add_epi32(abef, abef0);
		cdgh = _mm_add_epi32(cdgh, cdgh0);
	}
	__m128i feba = _mm_shuffle_epi32(abef, 0x1B);
	__m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
	_mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xF0));
	_mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));
}

static bool cpu_has_sha(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3))
		return false;
	return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
}
#endif

/* -1: not yet known; 0: the portable rounds; 1: the CPU's. Relaxed atomics:
 * any thread may hash (a checkpoint's), and every one finds the same answer. */
static int accel = -1;

static int accel_get(void)
{
	int a = __atomic_load_n(&accel, __ATOMIC_RELAXED);
	if (a < 0) {
#if defined(__x86_64__)
		a = cpu_has_sha();
#else
		a = 0;
#endif
		__atomic_store_n(&accel, a, __ATOMIC_RELAXED);
	}
	return a;
}

bool sha256_accelerated(void)
{
	return accel_get() == 1;
}

bool sha256_set_accelerated(bool on)
{
	__atomic_store_n(&accel, on ? -1 : 0, __ATOMIC_RELAXED);
	return on && sha256_accelerated();
}

static void blocks(struct sha256 *c, const unsigned char *p, size_t n)
{
#if defined(__x86_64__)
	if (accel_get() == 1) {
		blocks_x86(c->h, p, n);
		return;
	}
#endif
	for (; n; n--, p += 64)
		block(c, p);
}

void sha256_init(struct sha256 *c)
{
	static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
				       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
	memcpy(c->h, iv, sizeof(iv));
	c->len = 0;
	c->n = 0;
}

void sha256_update(struct sha256 *c, const void *data, size_t len)
{
	const unsigned char *p = data;
	c->len += len;
	if (c->n) {
		size_t k = 64 - c->n < len ? 64 - c->n : len;
		memcpy(c->blk + c->n, p, k);
		c->n += k;
		p += k;
		len -= k;
		if (c->n < 64)
			return;
		blocks(c, c->blk, 1);
		c->n = 0;
	}
	if (len >= 64) {
		blocks(c, p, len / 64);
		p += len / 64 * 64;
		len %= 64;
	}
	memcpy(c->blk, p, len);
	c->n = len;
}

void sha256_final(struct sha256 *c, unsigned char out[32])
{
	uint64_t bits = c->len * 8;
	unsigned char pad[72] = {0x80};
	size_t padlen = (c->n < 56 ? 56 : 120) - c->n;
	for (int i = 0; i < 8; i++)
		pad[padlen + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
	sha256_update(c, pad, padlen + 8);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (unsigned char)(c->h[i] >> 24);
		out[4 * i + 1] = (unsigned char)(c->h[i] >> 16);
		out[4 * i + 2] = (unsigned char)(c->h[i] >> 8);
		out[4 * i + 3] = (unsigned char)c->h[i];
	}
}
