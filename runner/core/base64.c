/* Base64 encoding and hex digits (base64.h). */
#include "core/base64.h"

#include <errno.h>
#include <stdint.h>

size_t base64_encode_to(char *o, const unsigned char *s, size_t len)
{
	static const char tbl[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *start = o;
	size_t i = 0;
	for (; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		*o++ = tbl[v >> 18];
		*o++ = tbl[(v >> 12) & 63];
		*o++ = tbl[(v >> 6) & 63];
		*o++ = tbl[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < len ? (uint32_t)s[i + 1] << 8 : 0);
		*o++ = tbl[v >> 18];
		*o++ = tbl[(v >> 12) & 63];
		*o++ = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	return (size_t)(o - start);
}

int buf_append_base64(struct buf *b, const unsigned char *s, size_t len)
{
	if (buf_reserve(b, (len + 2) / 3 * 4) < 0)
		return -ENOMEM;
	b->len += base64_encode_to(b->data + b->len, s, len);
	return 0;
}

int base64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

int hex_value(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}
