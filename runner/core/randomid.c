/* Random ids and the comparison of secrets (randomid.h). */
#include "core/randomid.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>

int random_id(char out[33])
{
	unsigned char raw[16];
	size_t got = 0;
	while (got < sizeof(raw)) {
		ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
	}
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < 16; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[32] = 0;
	return 0;
}

bool secret_equal(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char diff = (unsigned char)(la != lb);
	/* Walk the expected secret's length whatever the input. */
	for (size_t i = 0; i < lb; i++)
		diff |= (unsigned char)((i < la ? a[i] : 0) ^ b[i]);
	return diff == 0;
}

bool is_hex_id(const char *s)
{
	size_t n = 0;
	for (; s[n]; n++)
		if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
			return false;
	return n == 32;
}
