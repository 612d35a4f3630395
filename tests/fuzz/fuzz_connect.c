/* fuzz_connect: the envd face's Connect codec (runner/envd/connect.c): the envelopes of a
 * request body (a client's bytes: flags, a 32-bit length that may lie, JSON), the base64 of
 * a ProcessInput, the uint32 fields of protobuf's JSON mapping.
 *
 * Input: byte 0 = max message length seed, the rest = a request body. Checked beyond the
 * sanitizers: an envelope accepted lies inside the input (5 + its length bytes used, never
 * more than offered, never over max); a need for more bytes only when the input is shorter
 * than the envelope claims; the single-message check accepts exactly one envelope that fills
 * the body; envelopes written by connect_env_append parse back to the same message; base64
 * decoding of the payload never writes past its bound, and re-encoding a decoded buffer
 * decodes to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/base64.h"
#include "envd/connect.h"

static void check_b64(const char *s, size_t n)
{
	unsigned char *out = NULL;
	size_t len = 0;
	if (connect_b64_decode(s, n, &out, &len) != 0)
		return;
	if (len > n / 4 * 3 + 3 || out[len] != 0)
		abort();
	if (!len) {
		free(out);
		return;
	}
	struct buf b = {0};
	if (buf_append_base64(&b, out, len) < 0)
		abort();
	char *fast = malloc((len + 2) / 3 * 4 + 1);
	if (!fast || connect_b64_encode(fast, out, len) != b.len || memcmp(fast, b.data, b.len))
		abort(); /* the fast encoder writes what the plain one does */
	free(fast);
	unsigned char *again = NULL;
	size_t len2 = 0;
	if (connect_b64_decode(b.data, b.len, &again, &len2) != 0 || len2 != len ||
	    memcmp(again, out, len))
		abort();
	free(again);
	free(out);
	buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t max = (size_t)data[0] * 7 + 1;
	const char *body = (const char *)data + 1;
	size_t len = size - 1, off = 0;
	while (off < len) {
		uint8_t flags;
		const char *msg, *why = NULL;
		size_t mlen, used;
		int rc = connect_env_parse(body + off, len - off, max, &flags, &msg, &mlen, &used,
					   &why);
		if (rc < 0) {
			if (!why)
				abort();
			break;
		}
		if (rc == 0) {
			if (len - off >= 5 &&
			    len - off >= 5 + ((size_t)(uint8_t)body[off + 1] << 24 |
					      (size_t)(uint8_t)body[off + 2] << 16 |
					      (size_t)(uint8_t)body[off + 3] << 8 |
					      (uint8_t)body[off + 4]))
				abort();
			break;
		}
		if (used != 5 + mlen || used > len - off || mlen > max || msg != body + off + 5)
			abort();
		check_b64(msg, mlen);
		json_t *j = json_loadb(msg, mlen, 0, NULL);
		uint32_t v;
		connect_u32(j, "pid", "pid", &v);
		json_decref(j);
		off += used;
	}
	const char *m, *why = NULL;
	size_t mlen;
	if (connect_env_single(body, len, max, &m, &mlen, &why) == 0) {
		if (mlen + 5 != len)
			abort();
		struct buf b = {0};
		if (connect_env_append(&b, 0, m, mlen) < 0 || b.len != len ||
		    memcmp(b.data + 5, m, mlen))
			abort();
		buf_free(&b);
	} else if (!why) {
		abort();
	}
	return 0;
}
