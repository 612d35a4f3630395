/* Server-sent events (the text/event-stream format of the WHATWG HTML standard): the one
 * writer of every SSE stream the runner sends (the native task stream, the audit tail, the
 * directory watch, MCP's streams). Pure: appends to a buffer or writes into the caller's.
 *
 * The keep-alive policy is one as well: a stream that declares keepalive_ms in its
 * http_stream_ops gets SSE_KEEPALIVE (a comment, which every client ignores) after that long
 * without a byte sent, only while its producer has nothing and it is not done, so a client
 * that does not read gets no pile of them. The HTTP layer's 1 s tick is its one timer
 * (http/stream.c). The intervals are here, side by side. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

#define SSE_CONTENT_TYPE "text/event-stream"
#define SSE_KEEPALIVE ": keep-alive\n\n"
/* Streams that wait for events (the audit tail, the directory watch, MCP's GET stream). */
#define SSE_KEEPALIVE_MS 15000
/* A task's output: well inside the idle timeout of proxies and of our own server. */
#define SSE_KEEPALIVE_TASK_MS 5000
/* An MCP tool call's stream: a suspended connection notices its client gone only when it
 * sends, and that is a cancel (the command is killed), so it sends often. */
#define SSE_KEEPALIVE_CALL_MS 2000

/* An event without an id: field. */
#define SSE_NO_ID UINT64_MAX
/* What ends an event's one data line (sse_head_to's caller writes it). */
#define SSE_END "\n\n"
/* The most sse_head_to writes besides the event name. */
#define SSE_HEAD_MAX (4 + 20 + 1 + 7 + 1 + 6)

/* The head of an event whose data the caller writes as one line (no CR or LF: JSON is
 * escaped) followed by SSE_END: "id: ID\n" (SSE_NO_ID: none), "event: NAME\n" (name NULL:
 * none), "data: ". The bytes written into dst, 0 when max is too small (nothing written). */
size_t sse_head_to(char *dst, size_t max, uint64_t id, const char *name, size_t name_len);
/* The same appended to o: 0, or -ENOMEM. */
int sse_head(struct buf *o, uint64_t id, const char *name, size_t name_len);
/* After sse_head: data, each of its lines (ended by LF, CR LF or CR) in a data: field of its
 * own, so a client rebuilds it exactly (its lines joined by LF), and the event's end. 0, or
 * -ENOMEM. */
int sse_data(struct buf *o, const char *data, size_t len);
/* A whole event: sse_head, then sse_data. 0, or -ENOMEM. */
int sse_event(struct buf *o, uint64_t id, const char *name, const char *data, size_t len);
