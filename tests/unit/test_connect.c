/* envd/connect.c: the data events' base64 encoder writes exactly what the plain one in
 * core/base64.c writes, for every length around its SIMD step (12 bytes in, 16 out) and
 * every byte value in every position of a step. */
#include "envd/connect.h"

#include <stdlib.h>
#include <string.h>

#include "core/base64.h"
#include "core/buf.h"
#include "unit.h"

static int same_as_plain(const unsigned char *in, size_t len)
{
	struct buf b = {0};
	char *fast = malloc((len + 2) / 3 * 4 + 1);
	int ok = fast && buf_append_base64(&b, in, len) == 0 &&
		 connect_b64_encode(fast, in, len) == b.len &&
		 (!len || !memcmp(fast, b.data, b.len));
	free(fast);
	buf_free(&b);
	return ok;
}

TEST(b64_every_length_and_byte)
{
	unsigned char in[4096];
	unsigned seed = 12345;
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (unsigned char)((seed = seed * 1103515245 + 12345) >> 16);
	for (size_t len = 0; len <= 200; len++)
		CHECK(same_as_plain(in, len));
	CHECK(same_as_plain(in, sizeof(in)));
	/* Each byte value at each offset of a 12-byte step (the classes A-Z, a-z, 0-9, + and /
	 * land in every lane). */
	for (unsigned v = 0; v < 256; v++)
		for (size_t off = 0; off < 16; off++) {
			unsigned char s[40] = {0};
			s[off] = (unsigned char)v;
			s[off + 12] = (unsigned char)~v;
			CHECK(same_as_plain(s, sizeof(s)));
		}
	/* Unaligned starts. */
	for (size_t off = 1; off < 16; off++)
		CHECK(same_as_plain(in + off, 1000));
}
