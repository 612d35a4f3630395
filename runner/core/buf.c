/* Growable byte buffers (buf.h). */
#include "core/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int buf_reserve(struct buf *b, size_t extra)
{
	if (b->off && b->off == b->len) {
		b->off = b->len = 0;
	}
	if (b->len + extra <= b->cap)
		return 0;
	if (b->off) {
		/* Reuse the consumed prefix before growing. */
		memmove(b->data, b->data + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->len + extra <= b->cap)
			return 0;
	}
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra)
		cap *= 2;
	char *d = realloc(b->data, cap);
	if (!d)
		return -ENOMEM;
	b->data = d;
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
	if (!len)
		return 0; /* an empty buffer may have no storage yet */
	if (buf_reserve(b, len) < 0)
		return -ENOMEM;
	memcpy(b->data + b->len, data, len);
	b->len += len;
	return 0;
}

int buf_append_str(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int buf_append_sh_quoted(struct buf *b, const char *s)
{
	buf_append_lit(b, "'");
	for (; *s; s++) {
		if (*s == '\'')
			buf_append_lit(b, "'\\''");
		else
			buf_append(b, s, 1);
	}
	return buf_append_lit(b, "'");
}

int buf_appendf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || buf_reserve(b, (size_t)n + 1) < 0)
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void buf_reset(struct buf *b)
{
	b->len = b->off = 0;
}

size_t buf_take(struct buf *b, char *dst, size_t max)
{
	size_t n = buf_avail(b);
	if (n > max)
		n = max;
	if (n == 0)
		return 0; /* data may be NULL: no memcpy from it */
	memcpy(dst, b->data + b->off, n);
	b->off += n;
	return n;
}

void buf_free(struct buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

int buf_append_u64(struct buf *b, uint64_t v)
{
	char tmp[20];
	size_t n = 0;
	do
		tmp[sizeof(tmp) - ++n] = (char)('0' + v % 10);
	while ((v /= 10));
	return buf_append(b, tmp + sizeof(tmp) - n, n);
}
