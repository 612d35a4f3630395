/* Code contexts: the interpreter task, its protocol, executions streamed to
 * a client (docs/design/code.md). */
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
#include "core/randomid.h"
#include "core/signame.h"
#include "core/list.h"
#include "task/pty.h"
#include "code/internal.h"

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

json_t *code_languages(void)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < sizeof(langs) / sizeof(langs[0]); i++)
		if (lang_of(langs[i].name))
			json_array_append_new(a, json_string(langs[i].name));
	return a;
}

/* ---- the execution a context runs ---- */

/* The context may take the next execution: the first waiting one's stream
 * starts it when it next produces (x_produce). */
void code_queue_wake(struct code_ctx *c)
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
	code_queue_wake(c);
}

/* The execution ends here, not by the driver (the interpreter died, the
 * context was deleted or restarted). */
static void exec_abort(struct code_ctx *c, const char *ename, const char *evalue)
{
	struct code_exec *x = c->exec;
	if (x && !x->finished) {
		code_ev_error(x, ename, evalue, NULL);
		code_ev_complete(x);
	}
	exec_detach(c);
}

void code_queue_unlink(struct code_ctx *c, struct code_exec *x)
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
		code_queue_unlink(c, x);
		code_ev_error(x, ename, evalue, NULL);
		code_ev_complete(x);
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
		code_ev_text(x, "stderr", note, (size_t)n);
		struct error e;
		if (c->t && task_signal(c->t, SIGINT, false, &e) < 0)
			log_warn("code: cannot interrupt", "{s:s,s:s}", "context", c->id, "error",
				 e.msg);
		return;
	}
	code_ev_text(x, err ? "stderr" : "stdout", s, len);
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
			code_ev_result(x, data, json_is_true(json_object_get(m, "main")));
	} else if (!strcmp(t, "count")) {
		c->executions++;
		if (x && !x->finished)
			code_ev_count(x, json_integer_value(json_object_get(m, "n")));
	} else if (!strcmp(t, "error")) {
		const char *en = json_string_value(json_object_get(m, "ename"));
		const char *ev = json_string_value(json_object_get(m, "evalue"));
		if (x && !x->finished)
			code_ev_error(x, en ? en : "Error", ev ? ev : "",
				      json_object_get(m, "traceback"));
	} else if (!strcmp(t, "done")) {
		if (x && !x->finished)
			code_ev_complete(x);
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
		code_queue_wake(c);
	} else {
		char msg[300];
		snprintf(msg, sizeof(msg),
			 "the %s interpreter of this context %s during the execution: its state "
			 "is lost; the next execution starts a fresh interpreter",
			 c->language, why);
		exec_abort(c, "InterpreterDied", msg);
	}
}

void code_pump(struct code_ctx *c)
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
			code_pump(c);
}

void code_ctx_wake(struct task_reader *rd)
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

int code_interp_start(struct code_ctx *c, struct error *err)
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
	c->rd.wake = code_ctx_wake;
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
	if (lang_of(language))
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
	if (code_interp_start(c, err) < 0) {
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
	return code_interp_start(c, err);
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
				code_ev_text(x, "stderr", note, (size_t)n);
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
