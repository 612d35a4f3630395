/* Token usage of model calls, and the framing every usage scanner shares
 * (docs/design/model.md#wire-formats-one-module-per-format): a response body is either an SSE
 * stream (events of data: lines, ended by a blank line) or one JSON document (an object, or an
 * array of objects as Gemini streams without alt=sse). The framer is pure and incremental: the same
 * bytes fed in any pieces give the same calls, so a wire format's scanner is only "what one object
 * says". */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

#define MU_MAX_EVENT (1u << 20) /* one SSE event's data (larger: skipped) */
#define MU_MAX_DOC (4u << 20)   /* a whole JSON body (larger: not scanned) */

/* prompt_tokens counts every input token the model read, cached ones
 * included; cache_read / cache_creation say how many of them were. */
struct mu_usage {
	int64_t prompt_tokens, completion_tokens, total_tokens;
	int64_t cache_read_tokens, cache_creation_tokens;
};

void mu_usage_add(struct mu_usage *sum, const struct mu_usage *u);
/* {prompt_tokens, completion_tokens, total_tokens, cache_read_tokens,
 * cache_creation_tokens}: a new reference. */
json_t *mu_usage_json(const struct mu_usage *u);
/* {prompt_tokens, completion_tokens, total_tokens}: the agents' events'
 * counts. A new reference. */
json_t *mu_tokens_json(int64_t prompt, int64_t completion, int64_t total);
#define MU_TOKENS_JSON(u)                                                                          \
	mu_tokens_json((u)->prompt_tokens, (u)->completion_tokens, (u)->total_tokens)
/* A JSON member as a non-negative count: false when absent or not one. */
bool mu_count(json_t *obj, const char *key, int64_t *out);

/* One SSE line (no terminator, not empty, not a comment): its field name
 * (the bytes before the first ':', or the whole line) and value (after it,
 * one leading space dropped), as the SSE spec splits them. */
void mu_sse_field(const char *l, size_t n, size_t *flen, const char **v, size_t *vlen);

struct mu_frame {
	/* One JSON value: an SSE event's data (event: its "event:" field, ""
	 * when none) or the whole document (event NULL). Only events whose
	 * data contains `needle` are parsed (NULL: all). */
	void (*take)(void *arg, const char *event, json_t *j);
	void *arg;
	const char *needle;

	bool decided, sse;
	bool after_cr;    /* the last byte fed was a \r line end */
	bool line_over;   /* the current line went over the limit: skipped */
	bool doc_over;    /* the document went over MU_MAX_DOC */
	uint64_t skipped; /* events or documents too large to look at */
	struct buf line;  /* SSE line being assembled */
	struct buf data;  /* data: lines of the current event */
	bool have_data;
	char event[64];
	struct buf doc; /* a plain JSON body */
};

void mu_frame_init(struct mu_frame *f, void (*take)(void *, const char *, json_t *), void *arg,
		   const char *needle);
void mu_frame_feed(struct mu_frame *f, const char *p, size_t n);
void mu_frame_eof(struct mu_frame *f);
void mu_frame_free(struct mu_frame *f);
