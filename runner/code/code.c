/* Code contexts: the interpreter task, its protocol, executions streamed to
 * a client (docs/design.md §11). */
#include "code/code.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/jsonesc.h"
#include "core/base64.h"
#include "core/randomid.h"
#include "core/signame.h"
#include "core/list.h"
#include "task/pty.h"

/* The drivers' sources (runner/code/driver.py, driver.js), embedded by
 * driver_blob.c. */
extern const char code_driver_py[], code_driver_py_end[];
extern const char code_driver_js[], code_driver_js_end[];
extern const char code_driver_sh[], code_driver_sh_end[];

/* The languages: what must exist for one to be offered, and the command
 * its context task runs (the driver comes in the environment, which the
 * driver removes before any user code runs). */
static const struct code_lang {
	const char *name;
	const char *program, *needs;
	const char *command;
	const char *src, *src_end;
	/* The cell's stdout is the task's own, the driver's messages found by
	 * a marker in it (bash: it cannot wrap a command's output in JSON). */
	bool raw;
} langs[] = {
	{"python", "/usr/bin/python3", "/usr/lib/python3/dist-packages/IPython",
	 "exec /usr/bin/python3 -I -c \"$FORCEAI_CODE_DRIVER\"", code_driver_py, code_driver_py_end,
	 false},
	{"javascript", "/usr/bin/node", "/usr/bin/node",
	 "exec /usr/bin/node -e \"$FORCEAI_CODE_DRIVER\"", code_driver_js, code_driver_js_end,
	 false},
	{"bash", "/bin/bash", "/usr/bin/base64", "exec /bin/bash -c \"$FORCEAI_CODE_DRIVER\"",
	 code_driver_sh, code_driver_sh_end, true},
};
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

static struct code_table *table(struct runner *r)
{
	return r->code;
}

static const struct code_lang *lang_of(const char *language)
{
	for (size_t i = 0; language && i < sizeof(langs) / sizeof(langs[0]); i++)
		if (!strcmp(language, langs[i].name))
			return access(langs[i].program, X_OK) == 0 &&
					       access(langs[i].needs, F_OK) == 0
				       ? &langs[i]
				       : NULL;
	return NULL;
}

bool code_language_ok(const char *language)
{
	return lang_of(language) != NULL;
}

json_t *code_languages(void)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < sizeof(langs) / sizeof(langs[0]); i++)
		if (lang_of(langs[i].name))
			json_array_append_new(a, json_string(langs[i].name));
	return a;
}

/* ---- events, in the client's flavor ---- */

static void ev_open(struct code_exec *x, const char *type)
{
	struct buf *o = &x->hs.out;
	buf_append_lit(o, "{\"type\":\"");
	buf_append_str(o, type);
	buf_append_lit(o, "\"");
}

static void ev_close(struct code_exec *x)
{
	struct buf *o = &x->hs.out;
	buf_append_lit(o, ",\"timestamp\":");
	buf_append_u64(o, now_ms());
	buf_append_str(o, x->flavor == CODE_EXECD ? "}\n\n" : "}\n");
	x->last_event_mono = monotonic_ms();
}

static void ev_key(struct code_exec *x, const char *key)
{
	buf_append_lit(&x->hs.out, ",\"");
	buf_append_str(&x->hs.out, key);
	buf_append_lit(&x->hs.out, "\":");
}

static void ev_json(struct code_exec *x, json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (s) {
		buf_append_str(&x->hs.out, s);
		free(s);
	} else {
		buf_append_lit(&x->hs.out, "null");
	}
}

static void ev_text(struct code_exec *x, const char *type, const char *s, size_t len)
{
	ev_open(x, type);
	ev_key(x, "text");
	buf_append_json_str(&x->hs.out, s, len);
	ev_close(x);
}

/* E2B's names for the MIME types (its SDK's Result fields). */
static const char *e2b_format(const char *mime)
{
	static const char *const map[][2] = {
		{"text/plain", "text"},        {"text/html", "html"},
		{"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
		{"image/png", "png"},          {"image/jpeg", "jpeg"},
		{"application/pdf", "pdf"},    {"text/latex", "latex"},
		{"application/json", "json"},  {"application/javascript", "javascript"},
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (!strcmp(mime, map[i][0]))
			return map[i][1];
	return mime;
}

static void ev_result(struct code_exec *x, json_t *data, bool main_result)
{
	ev_open(x, "result");
	if (x->flavor == CODE_EXECD) {
		ev_key(x, "results");
		ev_json(x, data);
	} else {
		ev_key(x, "is_main_result");
		buf_append_str(&x->hs.out, main_result ? "true" : "false");
		const char *mime;
		json_t *v;
		json_object_foreach(data, mime, v) {
			ev_key(x, e2b_format(mime));
			ev_json(x, v);
		}
	}
	ev_close(x);
}

static void ev_error(struct code_exec *x, const char *ename, const char *evalue, json_t *tb)
{
	ev_open(x, "error");
	struct buf *o = &x->hs.out;
	if (x->flavor == CODE_EXECD) {
		ev_key(x, "error");
		buf_append_lit(o, "{\"ename\":");
		buf_append_json_str(o, ename, strlen(ename));
		buf_append_lit(o, ",\"evalue\":");
		buf_append_json_str(o, evalue, strlen(evalue));
		buf_append_lit(o, ",\"traceback\":");
		if (tb)
			ev_json(x, tb);
		else
			buf_append_lit(o, "[]");
		buf_append_lit(o, "}");
	} else {
		ev_key(x, "name");
		buf_append_json_str(o, ename, strlen(ename));
		ev_key(x, "value");
		buf_append_json_str(o, evalue, strlen(evalue));
		/* E2B's traceback is one string. */
		cleanup_buf struct buf t = {0};
		size_t i;
		json_t *line;
		json_array_foreach(tb, i, line) {
			if (i)
				buf_append_lit(&t, "\n");
			if (json_is_string(line))
				buf_append(&t, json_string_value(line), json_string_length(line));
		}
		ev_key(x, "traceback");
		buf_append_json_str(o, t.data ? t.data : "", t.len);
	}
	ev_close(x);
}

static void ev_count(struct code_exec *x, json_int_t n)
{
	ev_open(x, x->flavor == CODE_EXECD ? "execution_count" : "number_of_executions");
	ev_key(x, "execution_count");
	buf_append_u64(&x->hs.out, (uint64_t)n);
	ev_close(x);
}

static void ev_complete(struct code_exec *x)
{
	if (x->flavor == CODE_EXECD) {
		ev_open(x, "execution_complete");
		ev_key(x, "execution_time");
		buf_append_u64(&x->hs.out, monotonic_ms() - x->start_mono);
	} else {
		ev_open(x, "end_of_execution");
	}
	ev_close(x);
	x->finished = true;
}

/* ---- the execution a context runs ---- */

/* The context may take the next execution: the first waiting one's stream
 * starts it when it next produces (x_produce). */
static void queue_wake(struct code_ctx *c)
{
	if (c->queue && !c->exec && !c->draining)
		http_stream_wake(&c->queue->hs);
}

static void exec_detach(struct code_ctx *c)
{
	struct code_exec *x = c->exec;
	c->exec = NULL;
	c->last_used_mono = monotonic_ms();
	if (x) {
		x->ctx = NULL;
		http_stream_wake(&x->hs);
	}
	queue_wake(c);
}

/* The execution ends here, not by the driver (the interpreter died, the
 * context was deleted or restarted). */
static void exec_abort(struct code_ctx *c, const char *ename, const char *evalue)
{
	struct code_exec *x = c->exec;
	if (x && !x->finished) {
		ev_error(x, ename, evalue, NULL);
		ev_complete(x);
	}
	exec_detach(c);
}

static void queue_unlink(struct code_ctx *c, struct code_exec *x)
{
	for (struct code_exec **p = &c->queue; *p; p = &(*p)->qnext)
		if (*p == x) {
			*p = x->qnext;
			c->n_queued--;
			break;
		}
	x->qnext = NULL;
	x->queued = false;
}

/* Every waiting execution ends unrun, with the reason. */
static void queue_abort(struct code_ctx *c, const char *ename, const char *evalue)
{
	while (c->queue) {
		struct code_exec *x = c->queue;
		queue_unlink(c, x);
		ev_error(x, ename, evalue, NULL);
		ev_complete(x);
		x->ctx = NULL;
		http_stream_wake(&x->hs);
	}
}

static void exec_output(struct code_ctx *c, bool err, const char *s, size_t len)
{
	struct code_exec *x = c->exec;
	if (!x || x->finished || x->out_capped)
		return;
	x->out_bytes += len;
	uint64_t max = c->r->cfg.code_output_max;
	if (x->out_bytes > max) {
		x->out_capped = true;
		char note[200];
		int n = snprintf(
			note, sizeof(note),
			"[forceai-runner: this execution printed more than %llu bytes "
			"(--code-output-max): the rest is dropped and it is interrupted]\n",
			(unsigned long long)max);
		ev_text(x, "stderr", note, (size_t)n);
		struct error e;
		if (c->t && task_signal(c->t, SIGINT, false, &e) < 0)
			log_warn("code: cannot interrupt", "{s:s,s:s}", "context", c->id, "error",
				 e.msg);
		return;
	}
	ev_text(x, err ? "stderr" : "stdout", s, len);
}

static void on_message(struct code_ctx *c, const char *line, size_t len)
{
	json_error_t je;
	cleanup_json json_t *m = json_loadb(line, len, 0, &je);
	const char *t = json_string_value(json_object_get(m, "t"));
	if (!t) {
		/* Not the driver's (it writes only JSON objects here). */
		exec_output(c, true, line, len);
		return;
	}
	struct code_exec *x = c->exec;
	if (!strcmp(t, "ready")) {
		c->ready = true;
		if (x && !x->ready_mono)
			x->ready_mono = monotonic_ms();
	} else if (!strcmp(t, "out") || !strcmp(t, "err")) {
		json_t *s = json_object_get(m, "s");
		if (json_is_string(s))
			exec_output(c, t[0] == 'e', json_string_value(s), json_string_length(s));
	} else if (!strcmp(t, "result")) {
		json_t *data = json_object_get(m, "data");
		if (x && !x->finished && json_is_object(data))
			ev_result(x, data, json_is_true(json_object_get(m, "main")));
	} else if (!strcmp(t, "count")) {
		c->executions++;
		if (x && !x->finished)
			ev_count(x, json_integer_value(json_object_get(m, "n")));
	} else if (!strcmp(t, "error")) {
		const char *en = json_string_value(json_object_get(m, "ename"));
		const char *ev = json_string_value(json_object_get(m, "evalue"));
		if (x && !x->finished)
			ev_error(x, en ? en : "Error", ev ? ev : "",
				 json_object_get(m, "traceback"));
	} else if (!strcmp(t, "done")) {
		if (x && !x->finished)
			ev_complete(x);
		c->draining = false;
		exec_detach(c);
	}
}

/* Moves the bytes up to the next newline into c->line; a line longer than
 * --code-result-max is dropped (line_overflow) rather than held. True when
 * the line is complete. */
static bool gather_line(struct code_ctx *c, const char **data, size_t *len)
{
	const char *nl = memchr(*data, '\n', *len);
	size_t n = nl ? (size_t)(nl - *data) : *len;
	if (!c->line_overflow && c->line.len + n > c->r->cfg.code_result_max) {
		c->line_overflow = true;
		buf_free(&c->line);
	}
	if (!c->line_overflow)
		buf_append(&c->line, *data, n);
	*data += n + (nl ? 1 : 0);
	*len -= n + (nl ? 1 : 0);
	return nl != NULL;
}

/* Protocol bytes from the driver: whole lines are messages. */
static void feed(struct code_ctx *c, const char *data, size_t len)
{
	uint64_t max = c->r->cfg.code_result_max;
	while (len) {
		if (!gather_line(c, &data, &len))
			break;
		if (c->line_overflow) {
			char note[200];
			int k = snprintf(note, sizeof(note),
					 "[forceai-runner: an output of more than %llu bytes was "
					 "dropped (--code-result-max)]\n",
					 (unsigned long long)max);
			exec_output(c, true, note, (size_t)k);
			c->line_overflow = false;
		} else {
			on_message(c, c->line.data ? c->line.data : "", c->line.len);
		}
		if (c->line.len > 65536)
			buf_free(&c->line); /* a large result's room is not kept */
		else
			buf_reset(&c->line);
	}
}

/* A raw context's stdout: output, except each marker and the JSON line after
 * it (a marker may be split across reads: its first bytes are held back). */
static void feed_raw(struct code_ctx *c, const char *data, size_t len)
{
	while (len) {
		if (c->in_msg) {
			if (!gather_line(c, &data, &len))
				break;
			if (!c->line_overflow)
				on_message(c, c->line.data ? c->line.data : "", c->line.len);
			c->line_overflow = false;
			c->in_msg = false;
			buf_reset(&c->line);
			continue;
		}
		if (c->mark_held) {
			size_t k = c->mark_len - c->mark_held;
			if (k > len)
				k = len;
			if (!memcmp(data, c->mark + c->mark_held, k)) {
				c->mark_held += k;
				data += k;
				len -= k;
				if (c->mark_held == c->mark_len) {
					c->mark_held = 0;
					c->in_msg = true;
				}
				continue;
			}
			exec_output(c, false, c->mark, c->mark_held);
			c->mark_held = 0;
		}
		const char *m = memmem(data, len, c->mark, c->mark_len);
		if (m) {
			if (m > data)
				exec_output(c, false, data, (size_t)(m - data));
			len -= (size_t)(m - data) + c->mark_len;
			data = m + c->mark_len;
			c->in_msg = true;
			continue;
		}
		/* The longest tail that begins the marker is held back. */
		size_t hold = 0;
		for (size_t h = c->mark_len - 1; h > 0 && !hold; h--)
			if (h <= len && !memcmp(data + len - h, c->mark, h))
				hold = h;
		if (len > hold)
			exec_output(c, false, data, len - hold);
		c->mark_held = hold;
		break;
	}
}

static void interp_forget(struct code_ctx *c)
{
	if (!c->t)
		return;
	task_reader_detach(&c->rd);
	c->t = NULL;
	c->ready = false;
	c->draining = false;
	c->line_overflow = false;
	c->in_msg = false;
	c->mark_held = 0;
	buf_free(&c->line);
}

/* The interpreter's task is over and all its output read. */
static void interp_gone(struct code_ctx *c)
{
	struct task *t = c->t;
	char why[96];
	if (t->term_signal)
		snprintf(why, sizeof(why), "killed by %s", signal_name(t->term_signal));
	else
		snprintf(why, sizeof(why), "exited with status %d", t->exit_code);
	log_info("code: interpreter ended", "{s:s,s:s,s:s,s:s}", "context", c->id, "task", t->id,
		 "why", why, "status", task_status_name(t->status));
	interp_forget(c);
	if (!c->exec) {
		/* The next execution is told its state is gone. */
		snprintf(c->lost_why, sizeof(c->lost_why), "%s", why);
		queue_wake(c);
	} else {
		char msg[300];
		snprintf(msg, sizeof(msg),
			 "the %s interpreter of this context %s during the execution: its state "
			 "is lost; the next execution starts a fresh interpreter",
			 c->language, why);
		exec_abort(c, "InterpreterDied", msg);
	}
}

static void pump(struct code_ctx *c)
{
	static char rbuf[SPOOL_MAX_REC];
	while (c->t && (!c->exec || buf_avail(&c->exec->hs.out) < CODE_PUMP_HIGH)) {
		struct spool_rec rec;
		const char *data;
		int rc = task_reader_next_ref(&c->rd, &rec, rbuf, &data);
		if (rc < 0) {
			/* Its output is lost: so is the protocol. The interpreter goes,
			 * and the execution ends with the reason. */
			log_errno("code: reading the interpreter's output failed", -rc, c->id);
			struct task *t = c->t;
			interp_forget(c);
			task_kill_now(t, TS_FAILED);
			exec_abort(c, "InterpreterLost",
				   "the runner could not read the interpreter's output: it was "
				   "stopped; the next execution starts a fresh interpreter");
			break;
		}
		if (rc == 0) {
			if (task_reader_at_end(&c->rd))
				interp_gone(c);
			break;
		}
		if (rec.type == SPOOL_STDOUT && c->raw)
			feed_raw(c, data, rec.len);
		else if (rec.type == SPOOL_STDOUT)
			feed(c, data, rec.len);
		else if (rec.type == SPOOL_STDERR)
			exec_output(c, true, data, rec.len);
	}
}

static void pump_idle(struct loop *loop, void *arg)
{
	(void)loop;
	struct runner *r = arg;
	struct code_table *ct = table(r);
	if (!ct)
		return;
	ct->pump_deferred = false;
	for (struct code_ctx *c = ct->head; c; c = c->next)
		if (!c->exec)
			pump(c);
}

static void ctx_wake(struct task_reader *rd)
{
	struct code_ctx *c = (struct code_ctx *)((char *)rd - offsetof(struct code_ctx, rd));
	if (c->exec) {
		http_stream_wake(&c->exec->hs);
		return;
	}
	/* Nobody streams: read it after this turn (never from inside the
	 * task engine's own call). */
	struct code_table *ct = table(c->r);
	if (!ct->pump_deferred && loop_defer(&c->r->loop, pump_idle, c->r) == 0)
		ct->pump_deferred = true;
}

/* A code context's interpreter: a task of its own capability, listed in GET /v1/tasks. */
static const struct task_capability code_cap = {
	.name = "code",
	.changes = TASK_CHANGES_NO,
	.start = task_start,
};

static int interp_start(struct code_ctx *c, struct error *err)
{
	const struct code_lang *l = lang_of(c->language);
	if (!l)
		return error_set(err, 0, "UNSUPPORTED_LANGUAGE",
				 "the %s interpreter is no longer in this image", c->language);
	cleanup_json json_t *env = json_object();
	if (!env || json_object_set_new(env, "FORCEAI_CODE_DRIVER",
					json_stringn(l->src, (size_t)(l->src_end - l->src))) < 0)
		return error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the interpreter");
	c->raw = l->raw;
	if (c->raw) {
		/* A fresh nonce per interpreter: its marker is not guessable from
		 * outside the context (its own cells see it, and may only confuse
		 * themselves). */
		char nonce[33];
		if (random_id(nonce) < 0)
			return error_set(err, EIO, "RUNTIME_ERROR", "cannot start the interpreter");
		c->mark[0] = 0x1e;
		memcpy(c->mark + 1, nonce, 32);
		c->mark_len = 33;
		json_object_set_new(env, "FORCEAI_CODE_MARK", json_string(nonce));
	}
	struct task_spec spec = {
		.api = TASK_API_CODE,
		.command = l->command,
		.cwd = c->cwd,
		.env = env,
		.cap = &code_cap,
		.keep_stdin = true,
		.state_in_fd = -1,
		.state_out_fd = -1,
	};
	struct task *t = task_start(c->r, &spec, err);
	if (!t)
		return error_wrap(err, "starting the %s interpreter", c->language);
	c->t = t;
	c->ready = false;
	memset(&c->rd, 0, sizeof(c->rd)); /* a fresh cursor: at the new log's start */
	c->rd.wake = ctx_wake;
	task_reader_attach(t, &c->rd, true);
	log_info("code: interpreter started", "{s:s,s:s,s:s}", "context", c->id, "task", t->id,
		 "language", c->language);
	return 0;
}

/* ---- contexts ---- */

struct code_ctx *code_ctx_find(struct runner *r, const char *id)
{
	if (!table(r) || !id)
		return NULL;
	for (struct code_ctx *c = table(r)->head; c; c = c->next)
		if (!strcmp(c->id, id))
			return c;
	return NULL;
}

static int language_check(const char *language, struct error *err)
{
	if (code_language_ok(language))
		return 0;
	cleanup_json json_t *langs = code_languages();
	cleanup_free char *list = json_dumps(langs, JSON_COMPACT);
	return error_set(err, 0, "UNSUPPORTED_LANGUAGE",
			 "language '%.32s' is not available in this image; the languages it has: "
			 "%s (GET /code/languages)",
			 language ? language : "", list ? list : "[]");
}

static void ctx_free(struct code_ctx *c)
{
	free(c->cwd);
	buf_free(&c->line);
	free(c);
}

struct code_ctx *code_ctx_create(struct runner *r, const char *language, const char *cwd,
				 struct error *err)
{
	struct code_table *ct = table(r);
	if (language_check(language, err) < 0)
		return NULL;
	if (ct->n >= r->cfg.code_max_contexts) {
		error_set(err, 0, "TOO_MANY_CONTEXTS",
			  "%u code contexts exist already (--code-max-contexts): delete one "
			  "(DELETE /code/contexts/{id})",
			  ct->n);
		return NULL;
	}
	struct code_ctx *c = calloc(1, sizeof(*c));
	if (!c || random_id(c->id) < 0 || (cwd && !(c->cwd = strdup(cwd)))) {
		if (c)
			ctx_free(c);
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot create a code context");
		return NULL;
	}
	c->r = r;
	snprintf(c->language, sizeof(c->language), "%s", language);
	c->last_used_mono = monotonic_ms();
	if (interp_start(c, err) < 0) {
		ctx_free(c);
		return NULL;
	}
	LIST_PUSH(ct->head, c);
	ct->n++;
	return c;
}

struct code_ctx *code_ctx_default(struct runner *r, const char *language, struct error *err)
{
	for (struct code_ctx *c = table(r)->head; c; c = c->next)
		if (c->is_default && !strcmp(c->language, language))
			return c;
	struct code_ctx *c = code_ctx_create(r, language, NULL, err);
	if (c)
		c->is_default = true;
	return c;
}

static void interp_kill(struct code_ctx *c)
{
	struct task *t = c->t;
	interp_forget(c);
	if (t)
		task_kill_now(t, TS_CANCELLED);
}

void code_ctx_delete(struct code_ctx *c)
{
	struct code_table *ct = table(c->r);
	exec_abort(c, "ContextDeleted", "the context was deleted during the execution");
	queue_abort(c, "ContextDeleted", "the context was deleted before the execution ran");
	interp_kill(c);
	LIST_UNLINK(ct->head, c);
	ct->n--;
	log_info("code: context deleted", "{s:s}", "context", c->id);
	ctx_free(c);
}

int code_ctx_restart(struct code_ctx *c, struct error *err)
{
	exec_abort(c, "ContextRestarted", "the context was restarted during the execution");
	queue_abort(c, "ContextRestarted", "the context was restarted before the execution ran");
	interp_kill(c);
	c->executions = 0;
	c->lost_why[0] = 0;
	return interp_start(c, err);
}

int code_ctx_interrupt(struct code_ctx *c, struct error *err)
{
	/* An abandoned execution still running counts: the executions waiting
	 * behind it are what the caller wants to free. */
	if ((!c->exec && !c->draining) || !c->t)
		return error_set(err, 0, "TASK_NOT_RUNNING",
				 "context %s is not running an execution", c->id);
	return task_signal(c->t, SIGINT, false, err);
}

json_t *code_ctx_json(const struct code_ctx *c)
{
	return json_pack("{s:s,s:s,s:s?,s:b,s:s?,s:I}", "id", c->id, "language", c->language, "cwd",
			 c->cwd ? c->cwd : "", "running", c->exec || c->draining || c->queue,
			 "task_id", c->t ? c->t->id : NULL, "executions",
			 (json_int_t)c->executions);
}

/* ---- the execution's stream ---- */

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
		pump(c); /* what is left of it, then it is forgotten */
	if (!c->t && interp_start(c, err) < 0)
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
		ev_text(x, "stderr", note, (size_t)n);
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
		ev_error(x, "RuntimeError", err.msg, NULL);
		ev_complete(x);
		x->ctx = NULL;
		queue_wake(c);
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
		pump(x->ctx);
	/* A keep-alive: execd's ping; E2B's client ignores a type it does not
	 * know. Either way a client that went away is noticed at the next
	 * write (a suspended connection is not watched), and its execution
	 * interrupted. */
	if (!x->finished && x->ping_due && !buf_avail(&hs->out))
		ev_text(x, "ping", "pong", 4);
	x->ping_due = false;
	hs->done = x->finished || !x->ctx;
}

static void x_close(struct http_stream *hs)
{
	struct code_exec *x = (struct code_exec *)hs;
	struct code_ctx *c = x->ctx;
	if (c && x->queued) {
		queue_unlink(c, x); /* never sent: nothing runs for it */
		queue_wake(c);      /* it may have been woken for its turn */
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
		ctx_wake(&c->rd);
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
		ev_text(x, "init", c->id, strlen(c->id));
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

/* ---- bounds over time ---- */

/* An abandoned execution (interrupted when its client left) keeps its
 * clock: one that does not stop goes with its interpreter once it is over
 * --code-exec-timeout-ms, so no context is held for ever. */
static void drain_tick(struct code_ctx *c, uint64_t now)
{
	uint64_t limit = c->r->cfg.code_exec_timeout_ms;
	if (!c->t || !limit || now - c->drain_ready_mono < limit ||
	    now - c->drain_int_mono < CODE_KILL_AFTER_MS)
		return;
	log_warn("code: an abandoned execution ran over --code-exec-timeout-ms: its interpreter is "
		 "killed",
		 "{s:s,s:I}", "context", c->id, "ms", (json_int_t)(now - c->drain_ready_mono));
	task_kill_now(c->t, TS_TIMEOUT);
}

static void on_tick(struct loop *loop, struct loop_timer *timer)
{
	(void)loop;
	struct runner *r = timer->arg;
	struct code_table *ct = table(r);
	uint64_t now = monotonic_ms();
	for (struct code_ctx *c = ct->head, *next; c; c = next) {
		next = c->next;
		struct code_exec *x = c->exec;
		if (!x && c->draining) {
			drain_tick(c, now);
			continue;
		}
		if (!x) {
			uint64_t idle = r->cfg.code_idle_timeout_ms;
			if (idle && !c->queue && now - c->last_used_mono >= idle) {
				log_info("code: idle context ends", "{s:s,s:I}", "context", c->id,
					 "idle_ms", (json_int_t)(now - c->last_used_mono));
				code_ctx_delete(c);
			}
			continue;
		}
		if (!x->ready_mono) {
			if (now - x->start_mono >= CODE_START_MAX_MS && c->t) {
				log_warn("code: interpreter did not start", "{s:s,s:I}", "context",
					 c->id, "waited_ms", (json_int_t)(now - x->start_mono));
				task_kill_now(c->t, TS_TIMEOUT);
			}
			continue;
		}
		uint64_t limit = r->cfg.code_exec_timeout_ms;
		if (!limit || now - x->ready_mono < limit)
			continue;
		if (!x->interrupted_mono) {
			x->interrupted_mono = now;
			char note[200];
			int n = snprintf(note, sizeof(note),
					 "[forceai-runner: the execution ran over %llu ms "
					 "(--code-exec-timeout-ms): interrupted]\n",
					 (unsigned long long)limit);
			if (!x->finished)
				ev_text(x, "stderr", note, (size_t)n);
			http_stream_wake(&x->hs);
			struct error e;
			if (c->t && task_signal(c->t, SIGINT, false, &e) < 0)
				log_warn("code: cannot interrupt", "{s:s,s:s}", "context", c->id,
					 "error", e.msg);
		} else if (now - x->interrupted_mono >= CODE_KILL_AFTER_MS && c->t) {
			/* It did not stop on SIGINT: its interpreter goes. */
			task_kill_now(c->t, TS_TIMEOUT);
		}
	}
}

int code_parse_listen(const char *s, char *host, size_t host_size, unsigned *port,
		      struct error *err)
{
	const char *colon = strrchr(s, ':');
	struct in_addr a;
	size_t n = colon ? (size_t)(colon - s) : 0;
	char *end;
	unsigned long p = colon ? strtoul(colon + 1, &end, 10) : 0;
	if (!colon || !n || n >= host_size || !colon[1] || *end || p > 65535)
		return error_set(err, 0, NULL, "'%.64s' is not ADDR:PORT", s);
	memcpy(host, s, n);
	host[n] = 0;
	if (inet_pton(AF_INET, host, &a) != 1)
		return error_set(err, 0, NULL, "'%.64s' is not a numeric IPv4 address", host);
	*port = (unsigned)p;
	return 0;
}

int code_init(struct runner *r, struct error *err)
{
	struct code_table *ct = calloc(1, sizeof(*ct));
	if (!ct)
		return error_set(err, ENOMEM, NULL, "code contexts");
	r->code = ct;
	if (loop_timer_init(&r->loop, &ct->tick, on_tick, r) < 0 ||
	    loop_timer_start(&r->loop, &ct->tick, 1000, 1000) < 0)
		return error_set(err, errno, NULL, "code contexts: timer");
	return 0;
}

unsigned code_end_all(struct runner *r)
{
	struct code_table *ct = table(r);
	unsigned n = 0;
	while (ct && ct->head) {
		code_ctx_delete(ct->head);
		n++;
	}
	return n;
}

void code_free_all(struct runner *r)
{
	struct code_table *ct = table(r);
	if (!ct)
		return;
	code_end_all(r);
	loop_timer_close(&r->loop, &ct->tick);
	free(ct);
	r->code = NULL;
}
