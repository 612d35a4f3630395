/* JSON string literals, escaped as Go's encoder does (jsonesc.h). */
#include "core/jsonesc.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/utf8.h"

/* Bytes a JSON string cannot hold as they are: controls, '"', '\\', DEL
 * (escaped like Go does) and everything >= 0x80 (checked as UTF-8). */
static const unsigned char json_special[256] = {
	[0 ... 0x1f] = 1,
	['"'] = 1,
	['\\'] = 1,
	[0x7f ... 0xff] = 1,
};

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Non-zero when one of the 8 bytes of w needs a look (json_special): below
 * 0x20, '"', '\\', 0x7f or above. Exact for "none" (which is all the fast
 * path needs). */
static inline uint64_t word_special(uint64_t w)
{
	uint64_t ctl = (w - ONES * 0x20) & ~w;
	uint64_t q = w ^ (ONES * '"'), bs = w ^ (ONES * '\\');
	uint64_t quote = (q - ONES) & ~q, back = (bs - ONES) & ~bs;
	uint64_t high = w | (w + ONES); /* 0x7f + 1 and >= 0x80 set the top bit */
	return (ctl | quote | back | high) & HIGHS;
}

#if defined(__SSE2__)
/* Bit i set when byte i of v needs a look (json_special). */
static inline unsigned sse_special(__m128i v)
{
	/* Unsigned comparisons through the signed ones: flip the top bit. */
	__m128i x = _mm_xor_si128(v, _mm_set1_epi8((char)0x80));
	__m128i ctl = _mm_cmplt_epi8(x, _mm_set1_epi8((char)(0x20 ^ 0x80)));
	__m128i high = _mm_cmpgt_epi8(x, _mm_set1_epi8((char)(0x7e ^ 0x80)));
	__m128i q = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
	__m128i bs = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
	return (unsigned)_mm_movemask_epi8(
		_mm_or_si128(_mm_or_si128(ctl, high), _mm_or_si128(q, bs)));
}
#endif

/* One byte the fast loops stopped at (json_special): a UTF-8 sequence as it
 * is (U+FFFD for a byte that starts none, counted in *bad), or an escape.
 * The input consumed goes into *i; returns the end of the output. Inlined:
 * it is the escaper's slow path, split out only to be read on its own. */
static inline __attribute__((always_inline)) char *
escape_special(char *o, const unsigned char *s, size_t len, size_t *i, size_t *bad)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char c = s[*i];
	if (c >= 0x80) {
		size_t n = utf8_seq_len(s + *i, len - *i);
		if (n) {
			memcpy(o, s + *i, n);
			*i += n;
			return o + n;
		}
		memcpy(o, "\xef\xbf\xbd", 3); /* U+FFFD */
		(*i)++;
		(*bad)++;
		return o + 3;
	}
	(*i)++;
	*o++ = '\\';
	switch (c) {
	case '"':
	case '\\':
		*o++ = (char)c;
		break;
	case '\n':
		*o++ = 'n';
		break;
	case '\r':
		*o++ = 'r';
		break;
	case '\t':
		*o++ = 't';
		break;
	default: /* other controls and DEL */
		memcpy(o, "u00", 3);
		o[3] = hex[c >> 4];
		o[4] = hex[c & 15];
		o += 5;
	}
	return o;
}

/* The escaper without quotes: from s into o until the input ends or fewer
 * than 6 bytes of room are left before end (a character is never split).
 * *used gets the input consumed, *invalid the bytes that were not UTF-8.
 * Returns the end of the output. */
static char *json_escape_core(char *o, const char *end, const char *str, size_t len, size_t *used,
			      size_t *invalid)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t bad = 0;
	size_t i = 0;
	while (i < len) {
		/* Plain printable ASCII is copied 16 (SSE2) or 8 bytes at a time;
		 * in the block that holds a special byte, the lowest flagged byte
		 * is exactly the first special one (in the word test, borrows and
		 * carries only run upwards). */
#if defined(__SSE2__)
		while (i + 16 <= len && end - o >= 16) {
			__m128i v = _mm_loadu_si128((const __m128i *)(s + i));
			_mm_storeu_si128((__m128i *)o, v);
			unsigned m = sse_special(v);
			if (m) {
				size_t k = (size_t)__builtin_ctz(m);
				o += k;
				i += k;
				goto special;
			}
			o += 16;
			i += 16;
		}
#endif
		while (i + 8 <= len && end - o >= 8) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			memcpy(o, &w, 8);
			uint64_t m = word_special(w);
			if (m) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
				size_t k = (size_t)__builtin_ctzll(m) / 8;
#else
				size_t k = 0; /* the byte loop below finds it */
#endif
				o += k;
				i += k;
				break;
			}
			o += 8;
			i += 8;
		}
		while (i < len && o < end && !json_special[s[i]])
			*o++ = (char)s[i++];
#if defined(__SSE2__)
	special:
#endif
		if (i >= len || end - o < 6)
			break;
		unsigned char c = s[i];
		if (!json_special[c]) {
			/* Only when the room ended a fast loop: one byte, so every
			 * round makes progress whatever the block tests said. */
			*o++ = (char)c;
			i++;
			continue;
		}
		o = escape_special(o, s, len, &i, &bad);
	}
	*used = i;
	if (invalid)
		*invalid = bad;
	return o;
}

char *json_escape_to(char *o, const char *s, size_t len)
{
	size_t used;
	*o++ = '"';
	o = json_escape_core(o, o + len * 6, s, len, &used, NULL);
	*o++ = '"';
	return o;
}

size_t json_escape_part(char *o, size_t room, const char *s, size_t len, size_t *used,
			size_t *invalid)
{
	return (size_t)(json_escape_core(o, o + room, s, len, used, invalid) - o);
}

int buf_append_json_str(struct buf *b, const char *str, size_t len)
{
	if (buf_reserve(b, JSON_STR_MAX(len)) < 0)
		return -ENOMEM;
	b->len = (size_t)(json_escape_to(b->data + b->len, str, len) - b->data);
	return 0;
}
