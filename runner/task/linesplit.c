#include "task/linesplit.h"

#include <string.h>

#include "core/memfind.h"

void linesplit_init(struct linesplit *ls, size_t max_line)
{
	memset(ls, 0, sizeof(*ls));
	ls->max_line = max_line ? max_line : 65536;
}

static int emit(struct linesplit *ls, const char *start, size_t len, linesplit_cb cb, void *arg)
{
	int rc;
	ls->line_end = start + len;
	if (buf_avail(&ls->partial)) {
		if (buf_append(&ls->partial, start, len) < 0)
			return -1;
		rc = cb(arg, ls->partial.data + ls->partial.off, buf_avail(&ls->partial));
		buf_reset(&ls->partial);
	} else {
		rc = cb(arg, start, len);
	}
	return rc;
}

int linesplit_feed(struct linesplit *ls, const char *data, size_t len, linesplit_cb cb, void *arg)
{
	if (len == 0)
		return 0; /* an empty read must not forget a pending '\r' */
	const char *p = data, *end = data + len;
	if (ls->last_cr && *p == '\n')
		p++; /* the second half of a "\r\n" */
	ls->last_cr = false;
	/* Terminators are found 16 bytes at a time, both kinds in one pass
	 * (mem_find2), not byte by byte. */
	while (p < end) {
		const char *t = mem_find2(p, '\n', '\r', (size_t)(end - p));
		size_t have = buf_avail(&ls->partial);
		size_t seg = (size_t)((t ? t : end) - p);
		if (have + seg > ls->max_line) {
			/* A piece of exactly max_line bytes, the rest goes on. */
			size_t take = ls->max_line > have ? ls->max_line - have : 0;
			int rc = emit(ls, p, take, cb, arg);
			if (rc)
				return rc;
			p += take;
			continue;
		}
		if (!t)
			break;
		int rc = emit(ls, p, seg, cb, arg);
		if (rc)
			return rc;
		if (*t == '\r') {
			if (t + 1 < end && t[1] == '\n')
				t++;
			else if (t + 1 == end)
				ls->last_cr = true;
		}
		p = t + 1;
	}
	if (p < end && buf_append(&ls->partial, p, (size_t)(end - p)) < 0)
		return -1;
	return 0;
}

int linesplit_flush(struct linesplit *ls, linesplit_cb cb, void *arg)
{
	ls->last_cr = false;
	ls->line_end = NULL;
	if (!buf_avail(&ls->partial))
		return 0;
	int rc = cb(arg, ls->partial.data + ls->partial.off, buf_avail(&ls->partial));
	buf_reset(&ls->partial);
	return rc;
}

void linesplit_free(struct linesplit *ls)
{
	buf_free(&ls->partial);
}
