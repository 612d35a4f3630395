/* The event stream of Start and Connect (envd/procstream.c). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "envd/connect.h"
#include "http/http.h"
#include "task/task.h"

struct envd_pstream {
	struct http_stream hs; /* first */
	struct task_reader rd;
	struct task_rec_ref cur; /* the data record going out in pieces */
	int stage;               /* of cur: 0 prefix, 1 base64, 2 tail */
	bool tty;                /* its output is "pty" data */
	bool exit_seen;          /* the terminal record was read */
	bool had_data;           /* a data event went out (the start event is never held back) */
	uint32_t keepalive_ms;
	const char *keepalive_msg; /* NULL: a ProcessEvent's */
	uint64_t deadline_ms;      /* monotonic; 0: none */
};

/* Stream t's events to req: start, then its output (from_now: only what comes from now on,
 * as envd's Connect; else from its first byte), then its end. */
enum MHD_Result envd_pstream_start(struct http_req *req, struct task *t, bool from_now);
/* End the stream with Connect's end-of-stream message (c == CC_OK: no error). */
void envd_pstream_end(struct envd_pstream *ps, enum connect_code c, const char *why);
/* For other streams of the face (WatchDir): the keep-alive interval and deadline from the
 * request's headers, and the tick that sends keep-alives ({"keepalive":{}} for a process
 * stream; a WatchDir's keepalive message is the same field name, one level up) and ends the
 * stream at its deadline. */
void envd_pstream_headers(struct envd_pstream *ps, struct http_req *req);
void envd_pstream_tick(struct http_stream *hs, uint64_t now);
/* Connect-Timeout-Ms in ms (0: none; an unreadable one: a week, the engine's bound). */
uint64_t envd_timeout_ms(struct http_req *req);
