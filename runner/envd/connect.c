/* The Connect protocol's framing and protobuf's JSON mapping, as far as the envd face needs
 * them (envd/connect.h). */
#include "envd/connect.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "core/base64.h"
#include "core/error.h"

static const char *const code_names[] = {
	[CC_OK] = "ok",
	[CC_CANCELED] = "canceled",
	[CC_UNKNOWN] = "unknown",
	[CC_INVALID_ARGUMENT] = "invalid_argument",
	[CC_DEADLINE_EXCEEDED] = "deadline_exceeded",
	[CC_NOT_FOUND] = "not_found",
	[CC_ALREADY_EXISTS] = "already_exists",
	[CC_PERMISSION_DENIED] = "permission_denied",
	[CC_RESOURCE_EXHAUSTED] = "resource_exhausted",
	[CC_FAILED_PRECONDITION] = "failed_precondition",
	[CC_ABORTED] = "aborted",
	[CC_OUT_OF_RANGE] = "out_of_range",
	[CC_UNIMPLEMENTED] = "unimplemented",
	[CC_INTERNAL] = "internal",
	[CC_UNAVAILABLE] = "unavailable",
	[CC_DATA_LOSS] = "data_loss",
	[CC_UNAUTHENTICATED] = "unauthenticated",
};

/* Connect's table of HTTP statuses for unary errors. */
static const unsigned short code_http[] = {
	[CC_OK] = 200,
	[CC_CANCELED] = 499,
	[CC_UNKNOWN] = 500,
	[CC_INVALID_ARGUMENT] = 400,
	[CC_DEADLINE_EXCEEDED] = 504,
	[CC_NOT_FOUND] = 404,
	[CC_ALREADY_EXISTS] = 409,
	[CC_PERMISSION_DENIED] = 403,
	[CC_RESOURCE_EXHAUSTED] = 429,
	[CC_FAILED_PRECONDITION] = 400,
	[CC_ABORTED] = 409,
	[CC_OUT_OF_RANGE] = 400,
	[CC_UNIMPLEMENTED] = 501,
	[CC_INTERNAL] = 500,
	[CC_UNAVAILABLE] = 503,
	[CC_DATA_LOSS] = 500,
	[CC_UNAUTHENTICATED] = 401,
};

const char *connect_code_name(enum connect_code c)
{
	return (unsigned)c <= CC_UNAUTHENTICATED ? code_names[c] : "unknown";
}

unsigned connect_code_http(enum connect_code c)
{
	return (unsigned)c <= CC_UNAUTHENTICATED ? code_http[c] : 500;
}

enum connect_code connect_code_of(const char *runner_code)
{
	if (!runner_code)
		return CC_INTERNAL;
	if (!strcmp(runner_code, "FILE_EXISTS"))
		return CC_ALREADY_EXISTS;
	if (!strcmp(runner_code, "UNAVAILABLE") || !strcmp(runner_code, "SERVICE_UNAVAILABLE"))
		return CC_UNAVAILABLE;
	struct error e = {.code = runner_code};
	switch (error_http_status(&e)) {
	case 400:
	case 413:
	case 416:
		return CC_INVALID_ARGUMENT;
	case 401:
		return CC_UNAUTHENTICATED;
	case 403:
		return CC_PERMISSION_DENIED;
	case 404:
		return CC_NOT_FOUND;
	case 409:
		return CC_FAILED_PRECONDITION;
	case 429:
	case 507:
		return CC_RESOURCE_EXHAUSTED;
	case 503:
		return CC_UNAVAILABLE;
	default:
		return CC_INTERNAL;
	}
}

int connect_env_parse(const char *data, size_t len, size_t max, uint8_t *flags, const char **msg,
		      size_t *msg_len, size_t *used, const char **why)
{
	if (len < 5)
		return 0;
	const unsigned char *p = (const unsigned char *)data;
	uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
	if (p[0] & ~(CONNECT_FLAG_COMPRESSED | CONNECT_FLAG_END)) {
		*why = "an envelope with unknown flags";
		return -1;
	}
	if (p[0] & CONNECT_FLAG_COMPRESSED) {
		*why = "a compressed envelope (no Connect-Content-Encoding is accepted)";
		return -1;
	}
	if (n > max) {
		*why = "an envelope longer than the largest message taken";
		return -1;
	}
	if (len - 5 < n)
		return 0;
	*flags = p[0];
	*msg = data + 5;
	*msg_len = n;
	*used = 5 + (size_t)n;
	return 1;
}

int connect_env_single(const char *data, size_t len, size_t max, const char **msg, size_t *msg_len,
		       const char **why)
{
	uint8_t flags;
	size_t used;
	int rc = connect_env_parse(data, len, max, &flags, msg, msg_len, &used, why);
	if (rc < 0)
		return -1;
	if (rc == 0) {
		/* The body ended inside the envelope: its length says more than was sent. */
		*why = len < 5 ? "a body shorter than an envelope's 5-byte prefix"
			       : "an envelope whose length is more than the body holds";
		return -1;
	}
	if (flags & CONNECT_FLAG_END) {
		*why = "an end-of-stream envelope where the request message belongs";
		return -1;
	}
	if (used != len) {
		*why = "bytes after the request's one envelope (its length is less than the body)";
		return -1;
	}
	return 0;
}

int connect_env_append(struct buf *b, uint8_t flags, const char *msg, size_t len)
{
	if (len > UINT32_MAX)
		return -EINVAL;
	unsigned char h[5] = {flags, (unsigned char)(len >> 24), (unsigned char)(len >> 16),
			      (unsigned char)(len >> 8), (unsigned char)len};
	if (buf_reserve(b, 5 + len) < 0)
		return -ENOMEM;
	buf_append(b, h, 5);
	return len ? buf_append(b, msg, len) : 0;
}

json_t *connect_error_body(enum connect_code c, const char *message)
{
	json_t *o = json_pack("{s:s}", "code", connect_code_name(c));
	if (o && message && *message)
		json_object_set_new(o, "message", json_string(message));
	return o;
}

int connect_end_append(struct buf *b, enum connect_code c, const char *message)
{
	if (c == CC_OK)
		return connect_env_append(b, CONNECT_FLAG_END, "{}", 2);
	json_t *o = json_pack("{s:o}", "error", connect_error_body(c, message));
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!s)
		return -ENOMEM;
	int rc = connect_env_append(b, CONNECT_FLAG_END, s, strlen(s));
	free(s);
	return rc;
}

json_t *connect_field(json_t *msg, const char *camel, const char *proto)
{
	if (!json_is_object(msg))
		return NULL;
	json_t *v = json_object_get(msg, camel);
	if ((!v || json_is_null(v)) && proto)
		v = json_object_get(msg, proto);
	return v && !json_is_null(v) ? v : NULL;
}

/* Two base64 characters per 12 bits: half the lookups and stores of a character at a time
 * (base64 was a fifth of the runner's CPU on a bulk envd stream). Built on first use. */
static uint16_t b64_pairs[4096];

static void b64_pairs_init(void)
{
	static const char tbl[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	for (unsigned i = 0; i < 4096; i++) {
		char two[2] = {tbl[i >> 6], tbl[i & 63]};
		memcpy(&b64_pairs[i], two, 2);
	}
}

#if defined(__x86_64__)
/* Twelve bytes to sixteen characters a step with SSSE3 (every x86-64 CPU since 2006 but the
 * first): the stream's data events are 4/3 base64, and the table walk below was the runner's
 * largest user of CPU on a 1 GiB stream (perf: 29 % of its samples). Per 32-bit lane, bytes
 * s0 s1 s2 are shuffled to s1 s0 s2 s1, so that its two 16-bit halves hold s0s1 and s1s2;
 * two masks and two multiplies move the four 6-bit indices to one byte each; one compare,
 * one saturating subtract and a 16-entry table lookup add each class's ASCII offset. */
__attribute__((target("ssse3"))) static size_t b64_ssse3(char *o, const unsigned char *s,
							 size_t len)
{
	const __m128i shuf = _mm_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
	const __m128i off =
		_mm_setr_epi8(71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 65, 0, 0);
	size_t i = 0;
	for (; i + 16 <= len; i += 12, o += 16) {
		__m128i in = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + i)), shuf);
		__m128i hi = _mm_mulhi_epu16(_mm_and_si128(in, _mm_set1_epi32(0x0fc0fc00)),
					     _mm_set1_epi32(0x04000040));
		__m128i lo = _mm_mullo_epi16(_mm_and_si128(in, _mm_set1_epi32(0x003f03f0)),
					     _mm_set1_epi32(0x01000010));
		__m128i idx = _mm_or_si128(hi, lo);
		__m128i cls = _mm_subs_epu8(idx, _mm_set1_epi8(51));
		__m128i upper = _mm_cmpgt_epi8(_mm_set1_epi8(26), idx);
		cls = _mm_or_si128(cls, _mm_and_si128(upper, _mm_set1_epi8(13)));
		_mm_storeu_si128((__m128i *)o, _mm_add_epi8(idx, _mm_shuffle_epi8(off, cls)));
	}
	return i;
}

static bool cpu_has_ssse3(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSSE3);
}
#endif

size_t connect_b64_encode(char *o, const unsigned char *s, size_t len)
{
	if (!b64_pairs[0])
		b64_pairs_init();
	char *start = o;
	size_t i = 0;
#if defined(__x86_64__)
	static int simd = -1; /* the loop thread's alone */
	if (simd < 0)
		simd = cpu_has_ssse3();
	if (simd) {
		i = b64_ssse3(o, s, len);
		o += i / 3 * 4;
	}
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	/* Six bytes to eight characters in one store (the pairs' bytes are in memory order). */
	for (; i + 6 <= len; i += 6, o += 8) {
		uint64_t v = (uint64_t)s[i] << 40 | (uint64_t)s[i + 1] << 32 |
			     (uint64_t)s[i + 2] << 24 | (uint64_t)s[i + 3] << 16 |
			     (uint64_t)s[i + 4] << 8 | s[i + 5];
		uint64_t w = (uint64_t)b64_pairs[v >> 36] |
			     (uint64_t)b64_pairs[(v >> 24) & 4095] << 16 |
			     (uint64_t)b64_pairs[(v >> 12) & 4095] << 32 |
			     (uint64_t)b64_pairs[v & 4095] << 48;
		memcpy(o, &w, 8);
	}
#endif
	for (; i + 2 < len; i += 3, o += 4) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		memcpy(o, &b64_pairs[v >> 12], 2);
		memcpy(o + 2, &b64_pairs[v & 4095], 2);
	}
	if (i < len)
		o += base64_encode_to(o, s + i, len - i);
	return (size_t)(o - start);
}

int connect_b64_decode(const char *s, size_t len, unsigned char **out, size_t *out_len)
{
	while (len && s[len - 1] == '=')
		len--;
	if (len % 4 == 1)
		return -1;
	unsigned char *o = malloc(len / 4 * 3 + 3);
	if (!o)
		return -ENOMEM;
	size_t n = 0;
	uint32_t acc = 0;
	for (size_t i = 0; i < len; i++) {
		int v = base64_value((unsigned char)s[i]);
		if (v < 0) {
			free(o);
			return -1;
		}
		acc = acc << 6 | (uint32_t)v;
		if (i % 4 == 3) {
			o[n++] = (unsigned char)(acc >> 16);
			o[n++] = (unsigned char)(acc >> 8);
			o[n++] = (unsigned char)acc;
			acc = 0;
		}
	}
	if (len % 4 == 2) {
		o[n++] = (unsigned char)(acc >> 4);
	} else if (len % 4 == 3) {
		o[n++] = (unsigned char)(acc >> 10);
		o[n++] = (unsigned char)(acc >> 2);
	}
	o[n] = 0;
	*out = o;
	*out_len = n;
	return 0;
}

int connect_u32(json_t *msg, const char *camel, const char *proto, uint32_t *v)
{
	json_t *f = connect_field(msg, camel, proto);
	if (!f)
		return 0;
	long long x;
	if (json_is_integer(f)) {
		x = json_integer_value(f);
	} else if (json_is_string(f)) {
		const char *s = json_string_value(f);
		char *end;
		errno = 0;
		x = strtoll(s, &end, 10);
		if (!*s || *end || errno)
			return -1;
	} else {
		return -1;
	}
	if (x < 0 || x > UINT32_MAX)
		return -1;
	*v = (uint32_t)x;
	return 1;
}
