#include "core/sha256.h"

#include <stdio.h>
#include <string.h>

#include "unit.h"

static void hex_of(const void *data, size_t len, char out[65])
{
	struct sha256 c;
	unsigned char h[32];
	sha256_init(&c);
	sha256_update(&c, data, len);
	sha256_final(&c, h);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* FIPS 180-4's examples and the empty input, through whichever rounds this CPU has, then through
 * the portable ones. */
TEST(sha256_known_answers)
{
	static const struct {
		const char *in, *want;
	} v[] = {
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
		{"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
		 "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
	};
	for (int pass = 0; pass < 2; pass++) {
		sha256_set_accelerated(pass == 0);
		for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
			char got[65];
			hex_of(v[i].in, strlen(v[i].in), got);
			CHECK_STR(got, v[i].want);
		}
	}
	/* A million 'a's: many whole blocks at once. */
	static char mil[1000000];
	memset(mil, 'a', sizeof(mil));
	char got[65];
	sha256_set_accelerated(true);
	hex_of(mil, sizeof(mil), got);
	CHECK_STR(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	fprintf(stderr, "  sha256: this CPU %s the SHA instructions\n",
		sha256_accelerated() ? "has" : "does not have");
}

/* The CPU's rounds and the portable ones agree on every length up to 300 bytes, fed whole and in
 * uneven pieces (the partial-block path). */
TEST(sha256_paths_agree)
{
	unsigned char in[300];
	unsigned seed = 99;
	int bad = 0;
	for (size_t len = 0; len <= sizeof(in) && bad < 5; len++) {
		for (size_t i = 0; i < len; i++) {
			seed = seed * 1103515245u + 12345u;
			in[i] = (unsigned char)(seed >> 16);
		}
		unsigned char h[3][32];
		for (int k = 0; k < 3; k++) {
			sha256_set_accelerated(k != 1);
			struct sha256 c;
			sha256_init(&c);
			if (k < 2) {
				sha256_update(&c, in, len);
			} else {
				for (size_t off = 0, step = 1; off < len;
				     off += step, step = step * 3 % 71 + 1)
					sha256_update(&c, in + off,
						      step < len - off ? step : len - off);
			}
			sha256_final(&c, h[k]);
		}
		if (memcmp(h[0], h[1], 32) || memcmp(h[1], h[2], 32)) {
			bad++;
			fprintf(stderr, "  sha256: length %zu differs between the paths\n", len);
		}
	}
	sha256_set_accelerated(true);
	CHECK(bad == 0);
}
