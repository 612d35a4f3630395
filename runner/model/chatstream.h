/* A pure, incremental parser of one OpenAI Chat Completions response
 * (docs/design/model.md#the-chat-stream-parser): feed the HTTP status, then the body bytes in any
 * pieces, then EOF; get content deltas by callback and, at the end, the assembled message (text,
 * tool calls by index, usage) or a classified error. No I/O, no clock: the caller owns retries and
 * timing (see chatstream_retry_ms), so the whole contract is unit-tested and fuzzed. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

#define CS_MAX_TOOL_CALLS 64
#define CS_MAX_LINE (1u << 20)      /* one SSE line (a data: chunk) */
#define CS_MAX_ERR_BODY (64u << 10) /* error bodies kept for the message */
#define CS_MAX_TEXT (4u << 20)      /* assistant text / arguments kept */

enum cs_result {
	CS_RUNNING = 0,
	CS_OK,               /* [DONE] seen, message complete */
	CS_ERR_MALFORMED,    /* not SSE, bad JSON, EOF without [DONE], limits */
	CS_ERR_STREAM,       /* a mid-stream {"error": ...} */
	CS_ERR_BUDGET,       /* budget exhausted (LiteLLM budget_exceeded): never retried */
	CS_ERR_RATE_LIMITED, /* 429 throttling: retry after a delay */
	CS_ERR_UNAUTHORIZED, /* 401 */
	CS_ERR_FORBIDDEN,    /* 403 */
	CS_ERR_MODEL,        /* unknown model (404, or 400 naming the model) */
	CS_ERR_BAD_REQUEST,  /* other 4xx */
	CS_ERR_SERVER,       /* 5xx: retried a bounded number of times */
};
/* Stable snake_case code of a result, used as the `code` of error events. */
const char *cs_result_code(enum cs_result r);

struct cs_usage {
	int64_t prompt_tokens, completion_tokens, total_tokens;
};

struct cs_tool_call {
	bool used;
	struct buf id, name, args;
};

struct chatstream {
	/* Called for each non-empty content delta (may be NULL). */
	void (*on_text)(void *arg, const char *text, size_t len);
	void *arg;

	long http_status;
	enum cs_result result;
	char message[512]; /* the gateway's message on error */

	struct buf line; /* SSE line being assembled */
	bool after_cr;   /* the last byte fed was a \r terminator */
	struct buf data; /* data: lines of the current event */
	bool have_data;
	struct buf errbody; /* body of a non-200 response */
	bool got_done;
	bool got_chunk;

	struct buf text; /* assistant content */
	char finish_reason[32];
	char model[128];
	struct cs_tool_call tools[CS_MAX_TOOL_CALLS];
	unsigned n_tools; /* highest index + 1 */
	bool has_usage;
	struct cs_usage usage;
	uint64_t bytes;
};

void chatstream_init(struct chatstream *cs, void (*on_text)(void *, const char *, size_t),
		     void *arg);
void chatstream_free(struct chatstream *cs);
/* The response status; call before feeding the body. */
void chatstream_status(struct chatstream *cs, long http_status);
/* Body bytes. Returns cs->result (CS_RUNNING while more is expected; a
 * final result once decided — later bytes are ignored). */
enum cs_result chatstream_feed(struct chatstream *cs, const char *p, size_t n);
/* The body ended. Returns the final result. */
enum cs_result chatstream_eof(struct chatstream *cs);

/* Whether and when to retry a failed attempt (attempt = 1 for the first
 * retry): the delay in ms, or -1 for "do not retry". retry_after is the
 * Retry-After header (seconds) or NULL. */
int64_t chatstream_retry_ms(enum cs_result r, unsigned attempt, const char *retry_after);
