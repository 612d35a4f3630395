/* An execution's stream: its request sent to the context's interpreter (queued behind a
 * busy one), its events to the client, its end when the client leaves. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "code/internal.h"
#include "core/base64.h"
#include "core/buf.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "task/pty.h"

static void exec_free(struct code_exec *x)
{
	free(x->request);
	free(x);
}

/* Sends the execution's request to the interpreter (started first when
 * there is none) and makes it the context's running one. */
static int exec_begin(struct code_ctx *c, struct code_exec *x, const char *line, size_t len,
		      struct error *err)
{
	if (c->t && c->t->finished)
		code_pump(c); /* what is left of it, then it is forgotten */
	if (!c->t && code_interp_start(c, err) < 0)
		return -1;
	if (task_input_write(c->t, line, len, err) < 0)
		return -1;
	x->start_mono = x->last_event_mono = monotonic_ms();
	x->ready_mono = c->ready ? x->start_mono : 0;
	c->exec = x;
	c->last_used_mono = x->start_mono;
	if (c->lost_why[0]) {
		char note[300];
		int n = snprintf(
			note, sizeof(note),
			"[forceai-runner: the %s interpreter of this context %s while no "
			"execution was streaming: its state is lost; this execution runs in "
			"a fresh interpreter]\n",
			c->language, c->lost_why);
		code_ev_text(x, "stderr", note, (size_t)n);
		c->lost_why[0] = 0;
	}
	return 0;
}

/* The first waiting execution's turn (the context is free). */
static void queue_start(struct code_ctx *c)
{
	struct code_exec *x = c->queue;
	c->queue = x->qnext;
	c->n_queued--;
	x->qnext = NULL;
	x->queued = false;
	struct error err;
	if (exec_begin(c, x, x->request, x->request_len, &err) < 0) {
		code_ev_error(x, "RuntimeError", err.msg, NULL);
		code_ev_complete(x);
		x->ctx = NULL;
		code_queue_wake(c);
	}
	free(x->request);
	x->request = NULL;
}

static void x_produce(struct http_stream *hs)
{
	struct code_exec *x = (struct code_exec *)hs;
	struct code_ctx *c = x->ctx;
	if (c && x->queued && c->queue == x && !c->exec && !c->draining)
		queue_start(c);
	if (x->ctx && !x->queued)
		code_pump(x->ctx);
	/* A keep-alive: execd's ping; E2B's client ignores a type it does not
	 * know. Either way a client that went away is noticed at the next
	 * write (a suspended connection is not watched), and its execution
	 * interrupted. */
	if (!x->finished && x->ping_due && !buf_avail(&hs->out))
		code_ev_text(x, "ping", "pong", 4);
	x->ping_due = false;
	hs->done = x->finished || !x->ctx;
}

static void x_close(struct http_stream *hs)
{
	struct code_exec *x = (struct code_exec *)hs;
	struct code_ctx *c = x->ctx;
	if (c && x->queued) {
		code_queue_unlink(c, x); /* never sent: nothing runs for it */
		code_queue_wake(c);      /* it may have been woken for its turn */
	} else if (c) {
		/* The client went away mid-execution: it is interrupted (nobody
		 * would see the rest), and what it still prints is read and
		 * dropped until its end; executions waiting go on after it. */
		struct error e;
		if (c->t && task_signal(c->t, SIGINT, false, &e) < 0)
			log_warn("code: cannot interrupt", "{s:s,s:s}", "context", c->id, "error",
				 e.msg);
		c->exec = NULL;
		c->draining = true;
		c->drain_int_mono = monotonic_ms();
		c->drain_ready_mono = x->ready_mono ? x->ready_mono : c->drain_int_mono;
		x->ctx = NULL;
		code_ctx_wake(&c->rd);
	}
	exec_free(x);
}

static void x_tick(struct http_stream *hs, uint64_t now)
{
	struct code_exec *x = (struct code_exec *)hs;
	if (!x->finished && now - x->last_event_mono >= CODE_PING_MS) {
		x->ping_due = true;
		http_stream_wake(hs);
	}
}

static const struct http_stream_ops exec_ops = {
	.produce = x_produce,
	.close = x_close,
	.tick = x_tick,
};

/* The interpreter's request line for one execution. -1 when out of memory. */
static int request_line(const struct code_ctx *c, const char *code, json_t *env, struct buf *out)
{
	if (c->raw) {
		/* bash: the code and each NAME=value in base64, space-separated. */
		buf_append_base64(out, (const unsigned char *)code, strlen(code));
		if (!*code)
			buf_append_lit(out, "Cg=="); /* an empty line */
		const char *k;
		json_t *v;
		json_object_foreach(env, k, v) {
			cleanup_buf struct buf kv = {0};
			buf_appendf(&kv, "%s=%s", k, json_string_value(v));
			buf_append_lit(out, " ");
			buf_append_base64(out, (const unsigned char *)kv.data, kv.len);
		}
	} else {
		cleanup_json json_t *msg = json_pack("{s:s,s:O?}", "code", code, "env", env);
		cleanup_free char *js = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
		if (js)
			buf_append_str(out, js);
	}
	return !out->len || buf_append_lit(out, "\n") < 0 ? -1 : 0;
}

enum MHD_Result code_exec_start(struct http_req *req, struct code_ctx *c, const char *code,
				json_t *env, enum code_flavor flavor)
{
	struct error err;
	bool busy = c->exec || c->draining || c->queue;
	if (busy && c->n_queued >= CODE_QUEUE_MAX)
		return http_failf(req, "CONTEXT_BUSY",
				  "context %s is running an execution and %u more wait: wait for "
				  "them or interrupt the running one (DELETE /code?id=%s)",
				  c->id, c->n_queued, c->id);
	cleanup_buf struct buf line = {0};
	if (request_line(c, code, env, &line) < 0)
		return http_failf(req, "RUNTIME_ERROR", "out of memory");
	struct code_exec *x = calloc(1, sizeof(*x));
	if (!x)
		return MHD_NO;
	x->flavor = flavor;
	x->ctx = c;
	snprintf(x->ctx_id, sizeof(x->ctx_id), "%s", c->id);
	x->start_mono = x->last_event_mono = monotonic_ms();
	if (flavor == CODE_EXECD) /* first, before a note exec_begin may add */
		code_ev_text(x, "init", c->id, strlen(c->id));
	if (busy) {
		/* As a kernel does: it runs once those before it are over. */
		x->queued = true;
		x->request_len = line.len;
		x->request = line.data; /* taken from the buffer */
		line = (struct buf){0};
		struct code_exec **p = &c->queue;
		while (*p)
			p = &(*p)->qnext;
		*p = x;
		c->n_queued++;
		c->last_used_mono = x->start_mono;
	} else if (exec_begin(c, x, line.data, line.len, &err) < 0) {
		exec_free(x);
		return http_fail(req, &err);
	}
	return http_stream_start(req, &x->hs, &exec_ops,
				 flavor == CODE_EXECD ? "text/event-stream"
						      : "application/x-ndjson");
}
