/* Code contexts (docs/design/code.md): a stateful interpreter per context,
 * each a confined task of its own (task_start, TASK_API_CODE) running an
 * embedded driver that speaks line-delimited JSON on its stdin/stdout. One
 * layer serves both client APIs: OpenSandbox execd's /code (api/code.c)
 * and E2B's code-interpreter protocol on its own port. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/loop.h"
#include "http/http.h"
#include "task/task.h"

struct runner;
struct error;

/* How an execution's events are written to its client. */
enum code_flavor {
	CODE_EXECD, /* execd: raw JSON objects each followed by a blank line */
	CODE_E2B,   /* E2B: one JSON object per line */
};

struct code_exec;

struct code_ctx {
	struct runner *r;
	char id[33];
	char language[16];
	char *cwd; /* NULL: the tasks' default */
	bool is_default;
	struct task *t; /* the interpreter (NULL: none yet, or it died) */
	struct task_reader rd;
	struct buf line;            /* a protocol line being assembled */
	bool line_overflow;         /* the line is over --code-result-max: dropped to its end */
	bool ready;                 /* the driver said so */
	bool raw;                   /* bash: output raw, messages after a marker (code.c) */
	bool in_msg;                /* raw: reading a message (after a marker) */
	char mark[40];              /* raw: RS + this interpreter's nonce */
	size_t mark_len, mark_held; /* raw: marker bytes held back at a read's end */
	struct code_exec *exec;
	/* An execution whose client went away still runs (interrupted): the
	 * context is busy until its `done`, so its last messages are not taken
	 * for the next execution's. */
	bool draining;
	uint64_t drain_ready_mono, drain_int_mono; /* its clock, and its SIGINT */
	/* Executions accepted while the context was busy, first first: each is
	 * sent to the interpreter once the one before is over (docs/design.md
	 * design/code.md#an-abandoned-execution-does-not-block-its-context), as a kernel queues
	 * them. */
	struct code_exec *queue;
	unsigned n_queued;
	/* The interpreter ended while no client streamed: why, for the next
	 * execution's note ("" none). */
	char lost_why[96];
	uint64_t last_used_mono;
	uint64_t executions;
	struct code_ctx *next, *prev;
};

struct code_table {
	struct code_ctx *head;
	unsigned n;
	struct loop_timer tick; /* idle contexts end, executions time out */
	bool pump_deferred;
};

int code_init(struct runner *r, struct error *err);
/* --code-interpreter-listen's ADDR:PORT (a numeric IPv4 address): 0, or -1
 * with err set. */
int code_parse_listen(const char *s, char *host, size_t host_size, unsigned *port,
		      struct error *err);
void code_free_all(struct runner *r);
/* POST /v1/reset (a profile hook): every context ends. Returns how many. */
unsigned code_end_all(struct runner *r);

/* The languages this image has, as a JSON array (new reference). */
json_t *code_languages(void);

struct code_ctx *code_ctx_find(struct runner *r, const char *id);
/* A new context (its interpreter starts now). NULL with err set:
 * UNSUPPORTED_LANGUAGE, TOO_MANY_CONTEXTS, or the task's start error. */
struct code_ctx *code_ctx_create(struct runner *r, const char *language, const char *cwd,
				 struct error *err);
/* The language's default context, created on first use. */
struct code_ctx *code_ctx_default(struct runner *r, const char *language, struct error *err);
void code_ctx_delete(struct code_ctx *c);
/* Restart: a fresh interpreter, same id; a running execution ends with an error. */
int code_ctx_restart(struct code_ctx *c, struct error *err);
/* SIGINT to the interpreter while an execution runs (0), else -1 with err. */
int code_ctx_interrupt(struct code_ctx *c, struct error *err);
json_t *code_ctx_json(const struct code_ctx *c);

/* Run code in c as the response to req: a streamed response of flavor's
 * events. env: an object of strings (borrowed), or NULL. */
enum MHD_Result code_exec_start(struct http_req *req, struct code_ctx *c, const char *code,
				json_t *env, enum code_flavor flavor);
