/* What code.c (contexts, their interpreter), events.c (an execution's events in the client's
 * flavor) and exec.c (an execution's stream) share. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "code/code.h"
#include "http/http.h"

#define CODE_PING_MS 1000
/* Events a client has not taken yet beyond this: the interpreter's output
 * is left in its pipe (and the spool's backpressure holds the writer). */
#define CODE_PUMP_HIGH (256u * 1024)
/* After SIGINT for the execution timeout, this long before the interpreter
 * is killed. */
#define CODE_KILL_AFTER_MS 5000
/* An execution's clock (--code-exec-timeout-ms) starts when its interpreter is
 * ready: a SIGINT during the interpreter's own start-up (importing IPython
 * takes seconds in a busy box) finds no handler and kills it. The start-up
 * has this bound of its own. */
#define CODE_START_MAX_MS 60000
/* Executions that may wait behind a busy context. */
#define CODE_QUEUE_MAX 4

struct code_exec {
	struct http_stream hs; /* first: the stream ops get it */
	struct code_ctx *ctx;  /* NULL once the execution is over */
	enum code_flavor flavor;
	char ctx_id[33];
	bool finished; /* its terminal event is written */
	uint64_t start_mono, last_event_mono;
	uint64_t out_bytes;
	bool out_capped;
	bool ping_due;
	uint64_t interrupted_mono; /* the execution timeout's SIGINT (0: none) */
	uint64_t ready_mono;       /* its interpreter was ready (0: not yet) */
	/* Waiting in its context's queue: the request line not yet sent. */
	bool queued;
	char *request;
	size_t request_len;
	struct code_exec *qnext;
};

/* events.c: one event each, appended to x's stream in the client's flavor (execd's SSE,
 * E2B's NDJSON); code_ev_complete marks x finished. */
void code_ev_text(struct code_exec *x, const char *type, const char *s, size_t len);
void code_ev_result(struct code_exec *x, json_t *data, bool main_result);
void code_ev_error(struct code_exec *x, const char *ename, const char *evalue, json_t *tb);
void code_ev_count(struct code_exec *x, json_int_t n);
void code_ev_complete(struct code_exec *x);

/* code.c, for exec.c: the context's queue and its interpreter task. */
struct task_reader;
void code_queue_wake(struct code_ctx *c);
void code_queue_unlink(struct code_ctx *c, struct code_exec *x);
void code_pump(struct code_ctx *c);
void code_ctx_wake(struct task_reader *rd);
int code_interp_start(struct code_ctx *c, struct error *err);
