/* SHA-256 (FIPS 180-4): cache keys and checksums (seccomp_cache.c). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sha256 {
	uint32_t h[8];
	uint64_t len; /* bytes hashed so far */
	unsigned char blk[64];
	size_t n; /* bytes waiting in blk */
};

void sha256_init(struct sha256 *c);
void sha256_update(struct sha256 *c, const void *data, size_t len);
void sha256_final(struct sha256 *c, unsigned char out[32]);
/* Does this process hash with the CPU's SHA instructions (x86 SHA
 * extensions, detected once)? */
bool sha256_accelerated(void);
/* Tests: false = the portable rounds from now on; true = the CPU's if it has
 * them. Returns whether the CPU's rounds are used now. */
bool sha256_set_accelerated(bool on);
