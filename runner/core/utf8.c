/* UTF-8 validity (utf8.h). */
#include "core/utf8.h"

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if invalid. */
size_t utf8_seq_len(const unsigned char *s, size_t len)
{
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	size_t n;
	uint32_t cp;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (len < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

bool utf8_valid(const unsigned char *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
#if defined(__SSE2__)
		/* Sixteen ASCII bytes at a time. */
		if (i + 16 <= len &&
		    !_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(s + i)))) {
			i += 16;
			continue;
		}
#endif
		/* Eight ASCII bytes at a time. */
		if (i + 8 <= len) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (!(w & 0x8080808080808080ULL)) {
				i += 8;
				continue;
			}
		}
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		size_t n = utf8_seq_len(s + i, len - i);
		if (!n)
			return false;
		i += n;
	}
	return true;
}

size_t utf8_incomplete_tail(const unsigned char *s, size_t len)
{
	/* Look back at most 3 bytes for a lead byte whose sequence is cut. */
	for (size_t k = 1; k <= 3 && k <= len; k++) {
		unsigned char c = s[len - k];
		if ((c & 0xc0) == 0x80)
			continue; /* continuation: keep looking for the lead */
		size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
		if (need > k && c >= 0xc2 && c <= 0xf4)
			return k;
		return 0;
	}
	return 0;
}
