#include "task/linesplit.h"

#include <string.h>

void linesplit_init(struct linesplit *ls, size_t max_line)
{
	memset(ls, 0, sizeof(*ls));
	ls->max_line = max_line ? max_line : 65536;
}

static int emit(struct linesplit *ls, const char *start, size_t len, linesplit_cb cb, void *arg)
{
	int rc;
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
	size_t i = 0;
	if (ls->last_cr && data[0] == '\n')
		i = 1; /* the second half of a "\r\n" */
	ls->last_cr = false;
	size_t start = i;
	for (; i < len; i++) {
		char c = data[i];
		if (c != '\n' && c != '\r') {
			if (buf_avail(&ls->partial) + (i - start) + 1 > ls->max_line) {
				int rc = emit(ls, data + start, i - start, cb, arg);
				if (rc)
					return rc;
				start = i;
			}
			continue;
		}
		int rc = emit(ls, data + start, i - start, cb, arg);
		if (rc)
			return rc;
		if (c == '\r') {
			if (i + 1 < len && data[i + 1] == '\n')
				i++;
			else if (i + 1 == len)
				ls->last_cr = true;
		}
		start = i + 1;
	}
	if (start < len && buf_append(&ls->partial, data + start, len - start) < 0)
		return -1;
	return 0;
}

int linesplit_flush(struct linesplit *ls, linesplit_cb cb, void *arg)
{
	ls->last_cr = false;
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
