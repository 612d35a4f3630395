/* execd's command output as server-sent events (execd_stream.c). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "http/http.h"

struct task;
/* Streams t's events on req. init_text: the init event's text (the command or session id);
 * NULL: a resume (no init event; the output from the start, events up to after_eid left
 * out). session_mode: stderr into stdout, empty lines dropped, like execd sessions. */
enum MHD_Result execd_stream_start(struct http_req *req, struct task *t, bool session_mode,
				   const char *init_text, uint64_t after_eid);
