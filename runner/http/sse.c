/* Server-sent events framing: see sse.h. */
#include "http/sse.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

size_t sse_head_to(char *dst, size_t max, uint64_t id, const char *name, size_t name_len)
{
	size_t need = SSE_HEAD_MAX + (name ? name_len : 0);
	if (max < need)
		return 0;
	char *p = dst;
	if (id != SSE_NO_ID)
		p += snprintf(p, max, "id: %llu\n", (unsigned long long)id);
	if (name) {
		memcpy(p, "event: ", 7);
		memcpy(p + 7, name, name_len);
		p += 7 + name_len;
		*p++ = '\n';
	}
	memcpy(p, "data: ", 6);
	return (size_t)(p + 6 - dst);
}

int sse_head(struct buf *o, uint64_t id, const char *name, size_t name_len)
{
	if (buf_reserve(o, SSE_HEAD_MAX + (name ? name_len : 0)) < 0)
		return -ENOMEM;
	o->len += sse_head_to(o->data + o->len, o->cap - o->len, id, name, name_len);
	return 0;
}

int sse_data(struct buf *o, const char *data, size_t len)
{
	const char *p = data, *end = data + len;
	while (len) {
		const char *cr = memchr(p, '\r', (size_t)(end - p));
		const char *lf = memchr(p, '\n', (size_t)(end - p));
		const char *eol = !cr ? lf : !lf ? cr : cr < lf ? cr : lf;
		if (!eol)
			break;
		if (buf_append(o, p, (size_t)(eol - p)) < 0 || buf_append_lit(o, "\ndata: ") < 0)
			return -ENOMEM;
		p = eol + (eol[0] == '\r' && eol + 1 < end && eol[1] == '\n' ? 2 : 1);
	}
	if ((len && buf_append(o, p, (size_t)(end - p)) < 0) || buf_append_lit(o, SSE_END) < 0)
		return -ENOMEM;
	return 0;
}

int sse_event(struct buf *o, uint64_t id, const char *name, const char *data, size_t len)
{
	if (sse_head(o, id, name, name ? strlen(name) : 0) < 0)
		return -ENOMEM;
	return sse_data(o, data, len);
}
