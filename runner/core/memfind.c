/* Line-end search, 16 bytes at a time (memfind.h). */
#include "core/memfind.h"

#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

const char *mem_find2(const char *s, char c1, char c2, size_t n)
{
#if defined(__SSE2__)
	const __m128i n1 = _mm_set1_epi8(c1), n2 = _mm_set1_epi8(c2);
	while (n >= 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)s);
		unsigned m = (unsigned)_mm_movemask_epi8(
			_mm_or_si128(_mm_cmpeq_epi8(v, n1), _mm_cmpeq_epi8(v, n2)));
		if (m)
			return s + __builtin_ctz(m);
		s += 16;
		n -= 16;
	}
#endif
	for (; n; s++, n--)
		if (*s == c1 || *s == c2)
			return s;
	return NULL;
}
