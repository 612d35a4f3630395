/* The execd event stream's line splitter: '\n', '\r' and "\r\n" each end a
 * line (a "\r\n" split across two reads still counts once); a line longer
 * than max_line is cut into pieces of max_line bytes. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"

typedef int (*linesplit_cb)(void *arg, const char *line, size_t len);

struct linesplit {
	struct buf partial;
	bool last_cr;
	size_t max_line;
	/* While cb runs: where the line's bytes end in the data being fed (its terminator,
	 * or the cut), so the caller can tell the line's position; NULL for a flushed one. */
	const char *line_end;
};

void linesplit_init(struct linesplit *ls, size_t max_line);
/* Calls cb for each complete line (terminator stripped). A non-zero return
 * from cb stops and is returned. */
int linesplit_feed(struct linesplit *ls, const char *data, size_t len, linesplit_cb cb, void *arg);
/* Emits a trailing partial line, if any. */
int linesplit_flush(struct linesplit *ls, linesplit_cb cb, void *arg);
void linesplit_free(struct linesplit *ls);
