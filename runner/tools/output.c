/* Bounded output of the tools: see internal.h. */
#include <string.h>

#include "tools/internal.h"
#include "core/jsonesc.h"

void tool_outcap_init(struct tool_outcap *o, uint64_t max)
{
	memset(o, 0, sizeof(*o));
	o->half = (size_t)(max / 2);
}

void tool_outcap_add(struct tool_outcap *o, const char *p, size_t n)
{
	if (!n)
		return;
	o->total += n;
	if (o->head.len < o->half) {
		size_t k = o->half - o->head.len < n ? o->half - o->head.len : n;
		buf_append(&o->head, p, k);
		p += k;
		n -= k;
	}
	if (!n)
		return;
	buf_append(&o->tail, p, n);
	if (o->tail.len > 2 * o->half) {
		memmove(o->tail.data, o->tail.data + o->tail.len - o->half, o->half);
		o->tail.len = o->half;
	}
}

bool tool_outcap_truncated(const struct tool_outcap *o)
{
	return o->total > o->head.len + (o->tail.len > o->half ? o->half : o->tail.len);
}

void tool_outcap_render(const struct tool_outcap *o, struct buf *out)
{
	buf_append(out, o->head.data ? o->head.data : "", o->head.len);
	size_t tail = o->tail.len > o->half ? o->half : o->tail.len;
	uint64_t omitted = o->total - o->head.len - tail;
	if (omitted)
		buf_appendf(out, "\n[... %llu bytes of output omitted ...]\n",
			    (unsigned long long)omitted);
	if (tail)
		buf_append(out, o->tail.data + o->tail.len - tail, tail);
}

void tool_outcap_free(struct tool_outcap *o)
{
	buf_free(&o->head);
	buf_free(&o->tail);
}

json_t *tool_json_text(const char *p, size_t n)
{
	struct buf lit = {0};
	buf_append_json_str(&lit, p ? p : "", n);
	json_t *s = lit.data ? json_loadb(lit.data, lit.len, JSON_DECODE_ANY, NULL) : NULL;
	buf_free(&lit);
	return s ? s : json_string("(output unavailable)");
}
