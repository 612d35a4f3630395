/* OpenSandbox execd-compatible command API (docs/design.md §3.2): events are raw
 * JSON objects each followed by a blank line, every one with a timestamp. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "api/schema.h"
#include "task/linesplit.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "task/session.h"
#include "task/task.h"
#include "core/buf.h"
#include "core/jsonesc.h"
#include "core/randomid.h"
#include "core/signame.h"
#include "core/version.h"
#include "profile/profile.h"

#define PING_INTERVAL_MS 2000 /* the contract says at least every 3 s */
#define LOGS_MAX (4u << 20)

struct execd_stream {
	struct http_stream hs; /* hs.out: the events to send */
	struct task_reader rd;
	struct linesplit ls[2];
	enum { ES_INIT, ES_BODY, ES_DONE } state;
	bool session_mode; /* stderr into stdout, empty lines dropped, like execd sessions */
	bool ping_due;
	bool background;
	uint64_t last_event_ms;
	char init_text[33];
	uint64_t cur_ts; /* timestamp of the record being split */
	int cur_type;
	struct task_rec_ref cur; /* the output record being fed in pieces */
	uint64_t now_ms;         /* monotonic, once per produce() */
	/* ",\"timestamp\":TS}\n\n" of cur_ts: output lines of one record
	 * share it, so it is formatted once. */
	char tail[48];
	size_t tail_len;
	uint64_t tail_ts;
	/* Event ids (docs/design.md §3.2): an output line's is 1 + the output offset where its
	 * bytes end, so the same line gets the same id in every stream of the command, and a
	 * resumed stream (GET /command/{id}/resume?after_eid=N) sends only those above N. */
	struct linesplit *cur_ls; /* the splitter being fed */
	const char *piece;        /* the piece being fed, at output offset piece_off */
	uint64_t piece_off;
	uint64_t flush_eid; /* the id of a line flushed at the end */
	uint64_t after_eid; /* events up to this id are not sent (a resume) */
	/* While produce_into runs: libmicrohttpd's send buffer, where output
	 * lines go straight (no copy through hs.out) while they fit and
	 * nothing waits in hs.out before them. */
	char *dst;
	size_t dst_len, dst_cap;
};

/* Two digits per division: an event id has ten or so, and this runs for
 * every line a task prints. p must have room for 20 bytes: they are all
 * written (one fixed-size copy the compiler inlines; musl's memcpy of a
 * variable ten bytes was 6% of a /command stream's CPU), the return value
 * says where the number ends. */
static char *u64_to(char *p, uint64_t v)
{
	static const char d2[] =
		"0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849"
		"5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";
	char tmp[40]; /* the digits end at tmp + 20, the copy reads 20 from q */
	char *end = tmp + 20, *q = end;
	/* An id is an output offset, below 4 GiB but for a huge output: 32-bit
	 * divisions there, a shorter chain of cheaper multiplies (ev_line's
	 * cost was mostly this loop in 64 bits). */
	while (v > UINT32_MAX) {
		unsigned r = (unsigned)(v % 100);
		v /= 100;
		q -= 2;
		memcpy(q, d2 + 2 * r, 2);
	}
	uint32_t w = (uint32_t)v;
	while (w >= 100) {
		unsigned r = w % 100;
		w /= 100;
		q -= 2;
		memcpy(q, d2 + 2 * r, 2);
	}
	if (w >= 10) {
		q -= 2;
		memcpy(q, d2 + 2 * w, 2);
	} else {
		*--q = (char)('0' + w);
	}
	memcpy(p, q, 20);
	return p + (end - q);
}

/* Events are built with plain appends: one per output line, so no
 * printf on this path. */
static void ev_begin(struct execd_stream *es, const char *type, uint64_t ts)
{
	struct buf *o = &es->hs.out;
	buf_append_lit(o, "{\"type\":\"");
	buf_append_str(o, type);
	buf_append_lit(o, "\",");
	(void)ts;
}

static void ev_end(struct execd_stream *es, uint64_t ts)
{
	struct buf *o = &es->hs.out;
	buf_append_lit(o, "\"timestamp\":");
	buf_append_u64(o, ts);
	buf_append_lit(o, "}\n\n");
	es->last_event_ms = es->now_ms;
}

static void ev_text(struct execd_stream *es, const char *type, const char *text, size_t len,
		    uint64_t ts)
{
	ev_begin(es, type, ts);
	buf_append_lit(&es->hs.out, "\"text\":");
	buf_append_json_str(&es->hs.out, text, len);
	buf_append_lit(&es->hs.out, ",");
	ev_end(es, ts);
}

/* One output line as an event: reserved once, written in place (this runs
 * for every line a task prints). */
static void ev_line(struct execd_stream *es, bool err, const char *text, size_t len, uint64_t eid)
{
	static const char out_pre[] = "{\"type\":\"stdout\",\"text\":";
	static const char err_pre[] = "{\"type\":\"stderr\",\"text\":";
	if (es->tail_ts != es->cur_ts || !es->tail_len) {
		es->tail_ts = es->cur_ts;
		es->tail_len =
			(size_t)snprintf(es->tail, sizeof(es->tail), ",\"timestamp\":%llu}\n\n",
					 (unsigned long long)es->cur_ts);
	}
	struct buf *o = &es->hs.out;
	/* The tail is copied whole (a fixed size the compiler inlines, not a
	 * call per line); only tail_len of it counts. */
	size_t need = sizeof(out_pre) - 1 + JSON_STR_MAX(len) + 8 + 20 + sizeof(es->tail);
	/* Straight into the send buffer while it has room and nothing is
	 * queued in out before this event (the order of the events). */
	bool direct = es->dst && !buf_avail(o) && es->dst_cap - es->dst_len >= need;
	if (!direct && buf_reserve(o, need) < 0)
		return;
	char *start = direct ? es->dst + es->dst_len : o->data + o->len;
	char *p = start;
	memcpy(p, err ? err_pre : out_pre, sizeof(out_pre) - 1);
	p = json_escape_to(p + sizeof(out_pre) - 1, text, len);
	memcpy(p, ",\"eid\":", 7);
	p = u64_to(p + 7, eid);
	memcpy(p, es->tail, sizeof(es->tail));
	size_t n = (size_t)(p + es->tail_len - start);
	if (direct)
		es->dst_len += n;
	else
		o->len += n;
	es->last_event_ms = es->now_ms;
}

static int on_line(void *arg, const char *line, size_t len)
{
	struct execd_stream *es = arg;
	bool err = es->cur_type == SPOOL_STDERR && !es->session_mode;
	const char *end = es->cur_ls->line_end;
	uint64_t eid = end ? es->piece_off + (uint64_t)(end - es->piece) + 1 : es->flush_eid;
	if (eid <= es->after_eid)
		return 0; /* the client has it (a resume) */
	if (len == 0) {
		if (es->session_mode)
			return 0;
		ev_line(es, err, "\n", 1, eid);
	} else {
		ev_line(es, err, line, len, eid);
	}
	return 0;
}

/* What the seccomp policy refused the command (docs/api.md "Refusals"), when anything:
 * "denied":{"ptrace":3}, in its terminal event. */
static void ev_denied(struct execd_stream *es, const struct task *t)
{
	if (!t->denied)
		return;
	char *d = json_dumps(t->denied, JSON_COMPACT | JSON_SORT_KEYS);
	if (!d)
		return;
	buf_append_lit(&es->hs.out, "\"denied\":");
	buf_append_str(&es->hs.out, d);
	buf_append_lit(&es->hs.out, ",");
	free(d);
}

static void ev_terminal(struct execd_stream *es, struct task *t)
{
	uint64_t ts = now_ms();
	/* After every output byte: the partial lines flushed, then the terminal event. */
	uint64_t end = t->spool.next_off;
	for (int i = 0; i < 2; i++) {
		es->cur_type = i == 0 ? SPOOL_STDOUT : SPOOL_STDERR;
		es->cur_ts = ts;
		es->cur_ls = &es->ls[i];
		es->flush_eid = end + 1 + (uint64_t)i;
		linesplit_flush(&es->ls[i], on_line, es);
	}
	uint64_t eid = end + 3;
	if (eid <= es->after_eid)
		return;
	/* A command that ended cleanly (even on our request) succeeded; a
	 * timeout never does, whatever the exit code. */
	if (t->exit_code == 0 && t->status != TS_TIMEOUT) {
		ev_begin(es, "execution_complete", ts);
		buf_appendf(&es->hs.out, "\"execution_time\":%llu,\"eid\":%llu,",
			    (unsigned long long)(t->finished_ms - t->started_ms),
			    (unsigned long long)eid);
		ev_denied(es, t);
		ev_end(es, ts);
		return;
	}
	char trace[128];
	if (t->term_signal) {
		snprintf(trace, sizeof(trace), "signal: %s%s", signal_name(t->term_signal),
			 t->status == TS_TIMEOUT ? " (timeout)" : "");
	} else {
		snprintf(trace, sizeof(trace), "exit status %d%s", t->exit_code,
			 t->status == TS_TIMEOUT ? " (timeout)" : "");
	}
	ev_begin(es, "error", ts);
	buf_appendf(&es->hs.out,
		    "\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"%d\",\"traceback\":[",
		    t->exit_code ? t->exit_code : 124);
	buf_append_json_str(&es->hs.out, trace, strlen(trace));
	buf_appendf(&es->hs.out, "]},\"eid\":%llu,", (unsigned long long)eid);
	ev_denied(es, t);
	ev_end(es, ts);
}

/* The next piece (up to 8 KiB) of the output record es->cur, whose
 * unconsumed payload is at data, through the line splitter. */
static void feed_piece(struct execd_stream *es, const char *data)
{
	struct task_rec_ref *c = &es->cur;
	uint32_t piece = c->rec.len - c->done;
	if (piece > 8192)
		piece = 8192;
	int i = c->rec.type == SPOOL_STDOUT || es->session_mode ? 0 : 1;
	es->cur_type = c->rec.type;
	es->cur_ts = c->rec.ts_ms;
	es->cur_ls = &es->ls[i];
	es->piece = data;
	es->piece_off = c->rec.off + c->done;
	linesplit_feed(&es->ls[i], data, piece, on_line, es);
	c->done += piece;
	c->active = c->done < c->rec.len;
}

/* Produce more events into es->hs.out. */
static void produce(struct execd_stream *es)
{
	static char rbuf[SPOOL_MAX_REC];
	es->now_ms = monotonic_ms();
	if (es->state == ES_INIT) {
		ev_text(es, "init", es->init_text, strlen(es->init_text), now_ms());
		es->state = ES_BODY;
		if (es->background) {
			ev_begin(es, "execution_complete", now_ms());
			buf_append_str(&es->hs.out, "\"execution_time\":0,");
			ev_end(es, now_ms());
			es->state = ES_DONE;
		}
		return;
	}
	if (es->state != ES_BODY)
		return;
	struct task *t = es->rd.task;
	size_t dst_start = es->dst_len;
	/* Bound one batch so a fast task cannot grow the buffer without end:
	 * a record is split in pieces of 8 KiB (a cut is like a cut between
	 * two reads: the splitter keeps the partial line). Writing straight
	 * into the send buffer, the batch ends when it is full (what did not
	 * fit went to out). */
	while (es->dst ? !buf_avail(&es->hs.out) && es->dst_len < es->dst_cap
		       : buf_avail(&es->hs.out) < 16 * 1024) {
		struct task_rec_ref *c = &es->cur;
		const char *data;
		if (c->active) {
			int rc = task_reader_rest(&es->rd, c, rbuf, &data);
			if (rc < 0) {
				log_errno("reading the task log failed", -rc, t->id);
				c->active = false;
				continue;
			}
			feed_piece(es, data);
			continue;
		}
		int rc = task_reader_next_rec(&es->rd, c, rbuf, &data);
		if (rc < 0) {
			log_errno("reading the task log failed", -rc, t->id);
			break;
		}
		if (rc == 0) {
			c->active = false;
			if (t->finished && task_reader_at_end(&es->rd)) {
				ev_terminal(es, t);
				es->state = ES_DONE;
			}
			break;
		}
		if (c->rec.type == SPOOL_EVENT) {
			c->active = false;
			if (c->rec.len >= 5 && !memcmp(data, "exit\n", 5)) {
				ev_terminal(es, t);
				es->state = ES_DONE;
				break;
			}
			continue;
		}
		feed_piece(es, data); /* its first piece from what was just read */
	}
	if (es->state == ES_BODY && es->ping_due && !buf_avail(&es->hs.out) &&
	    es->dst_len == dst_start) {
		ev_text(es, "ping", "pong", 4, now_ms());
	}
	es->ping_due = false;
}

/* The events straight into libmicrohttpd's buffer (dst, max): what out
 * held first, then output lines written in place; an event that does not
 * fit (and every one after it) goes to out, and what fits of it is moved
 * here. */
static size_t es_produce_into(struct http_stream *hs, char *dst, size_t max)
{
	struct execd_stream *es = (struct execd_stream *)hs;
	size_t n = buf_take(&hs->out, dst, max);
	if (buf_avail(&hs->out) || n == max || hs->done)
		return n;
	es->dst = dst;
	es->dst_len = n;
	es->dst_cap = max;
	produce(es);
	n = es->dst_len;
	es->dst = NULL;
	es->dst_len = es->dst_cap = 0;
	hs->done = es->state == ES_DONE;
	return n + buf_take(&hs->out, dst + n, max - n);
}

static void es_close(struct http_stream *hs)
{
	struct execd_stream *es = (struct execd_stream *)hs;
	task_reader_detach(&es->rd);
	linesplit_free(&es->ls[0]);
	linesplit_free(&es->ls[1]);
	free(es);
}

static void es_tick(struct http_stream *hs, uint64_t now)
{
	struct execd_stream *es = (struct execd_stream *)hs;
	if (es->state == ES_BODY && now - es->last_event_ms >= PING_INTERVAL_MS) {
		es->ping_due = true;
		http_stream_wake(hs);
	}
}

static void es_wake(struct task_reader *rd)
{
	struct execd_stream *es =
		(struct execd_stream *)((char *)rd - offsetof(struct execd_stream, rd));
	http_stream_wake(&es->hs);
}

static const struct http_stream_ops execd_ops = {.close = es_close,
						 .tick = es_tick,
						 .produce_into = es_produce_into};

/* init_text NULL: a resume (no init event; the output from the start, events up to
 * after_eid left out). */
static enum MHD_Result start_stream(struct http_req *req, struct task *t, bool session_mode,
				    const char *init_text, uint64_t after_eid)
{
	struct execd_stream *es = calloc(1, sizeof(*es));
	if (!es)
		return MHD_NO;
	es->session_mode = session_mode;
	es->background = t->background && init_text;
	es->after_eid = after_eid;
	if (!init_text)
		es->state = ES_BODY;
	es->last_event_ms = monotonic_ms();
	linesplit_init(&es->ls[0], 64 * 1024);
	linesplit_init(&es->ls[1], 64 * 1024);
	snprintf(es->init_text, sizeof(es->init_text), "%s", init_text ? init_text : "");
	es->rd.wake = es_wake;
	task_reader_attach(t, &es->rd, !t->background);
	return http_stream_start(req, &es->hs, &execd_ops, "text/event-stream");
}

/* cmd_key NULL: the command comes another way (argv). */
static int read_spec(json_t *body, const char *cmd_key, struct task_spec *spec, struct error *err)
{
	memset(spec, 0, sizeof(*spec));
	spec->state_in_fd = spec->state_out_fd = -1;
	spec->command = "";
	if (cmd_key && body_str(body, cmd_key, true, &spec->command, err) < 0)
		return -1;
	if (cmd_key && !*spec->command)
		return error_set(err, 0, "INVALID_REQUEST_BODY", "field '%s' must not be empty",
				 cmd_key);
	if (body_str(body, "cwd", false, &spec->cwd, err) < 0)
		return -1;
	if (spec->cwd && !*spec->cwd)
		spec->cwd = NULL;
	const char *net;
	if (body_str(body, "network", false, &net, err) < 0)
		return -1;
	if (net && !strcmp(net, "none"))
		spec->network = TASK_NET_NONE;
	else if (net && !strcmp(net, "full"))
		spec->network = TASK_NET_FULL;
	else if (net)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "field 'network' must be \"none\" or \"full\"");
	/* The same field on every route that starts a command (docs/design.md §4.11). */
	bool has_kill;
	if (body_bool(body, "kill_tree_on_exit", &has_kill, &spec->kill_tree_on_exit, err) < 0)
		return -1;
	return 0;
}

int api_read_spec(json_t *body, const char *cmd_key, struct task_spec *spec, struct error *err)
{
	return read_spec(body, cmd_key, spec, err);
}

/* execd 1.2: argv, an array of literal arguments run with no shell. */
static int get_argv(json_t *body, json_t **out, struct error *err)
{
	json_t *a = json_object_get(body, "argv");
	*out = NULL;
	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a) || !json_array_size(a))
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "field 'argv' must be a non-empty array of strings");
	if (json_array_size(a) > 65536)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "field 'argv' has more than 65536 arguments");
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v) {
		if (!json_is_string(v))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "argv[%zu] must be a string", i);
		if (strlen(json_string_value(v)) != json_string_length(v))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "argv[%zu] contains a NUL byte", i);
	}
	if (!json_string_length(json_array_get(a, 0)))
		return error_set(err, 0, "INVALID_REQUEST_BODY", "argv[0] must not be empty");
	*out = a;
	return 0;
}

int api_parse_command(json_t *body, struct task_spec *spec, struct error *err)
{
	bool has;
	uint64_t v;
	if (schema_check(&schema_command, body, err) < 0)
		return -1;
	json_t *argv;
	if (get_argv(body, &argv, err) < 0)
		return -1;
	json_t *cmd = json_object_get(body, "command");
	bool has_cmd = cmd && !json_is_null(cmd);
	if (argv && has_cmd)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "give exactly one of 'command' and 'argv', not both");
	if (!argv && !has_cmd)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "one of 'command' (a shell command line) and 'argv' (an array) is "
				 "required");
	if (read_spec(body, argv ? NULL : "command", spec, err) < 0)
		return -1;
	spec->argv = argv;
	spec->api = TASK_API_EXECD;
	bool bg = false;
	if (body_bool(body, "background", &has, &bg, err) < 0)
		return -1;
	spec->background = bg;
	if (body_uint(body, "timeout", 7ULL * 24 * 3600 * 1000, &has, &v, err) < 0)
		return -1;
	spec->timeout_ms = has ? v : 0;
	if (body_uint(body, "uid", 0xfffffffe, &has, &v, err) < 0)
		return -1;
	spec->has_uid = has;
	spec->uid = (uid_t)v;
	if (body_uint(body, "gid", 0xfffffffe, &has, &v, err) < 0)
		return -1;
	spec->has_gid = has;
	spec->gid = (gid_t)v;
	spec->env = json_object_get(body, "envs");
	return 0;
}

int api_parse_session_create(json_t *body, const char **cwd, struct error *err)
{
	*cwd = NULL;
	if (schema_check(&schema_session, body, err) < 0)
		return -1;
	if (body_str(body, "cwd", false, cwd, err) < 0)
		return -1;
	if (*cwd && **cwd && (*cwd)[0] != '/')
		return error_set(err, 0, "INVALID_REQUEST_BODY", "cwd must be an absolute path");
	if (*cwd && !**cwd)
		*cwd = NULL;
	return 0;
}

int api_parse_session_run(json_t *body, struct task_spec *spec, struct error *err)
{
	bool has;
	uint64_t v;
	if (schema_check(&schema_session_run, body, err) < 0)
		return -1;
	if (api_read_spec(body, "command", spec, err) < 0)
		return -1;
	if (body_uint(body, "timeout", 7ULL * 24 * 3600 * 1000, &has, &v, err) < 0)
		return -1;
	spec->timeout_ms = has ? v : 0;
	return 0;
}

enum MHD_Result api_ping(struct http_req *req)
{
	return http_empty(req, 200);
}

/* Ready once the loop serves requests; a box whose tasks are refused (a
 * reset that failed: profile/profile.h) is not ready, and says why. */
enum MHD_Result api_ready(struct http_req *req)
{
	struct error e;
	unsigned status;
	json_t *o = rtinit_ready(req->r, &status);
	if (!o)
		return MHD_NO;
	json_object_set_new(o, "version", json_string(FORCEAI_RUNNER_VERSION));
	/* A reset (running or failed) refuses tasks too. */
	if (status == 200 && profile_request_blocked(req->r, "POST", "/command", &e)) {
		status = 503;
		json_object_set_new(o, "initialized", json_false());
		json_object_set_new(o, "status", json_string("not_ready"));
		json_object_set_new(o, "code", json_string(e.code));
		json_object_set_new(o, "message", json_string(e.msg));
	}
	return http_json(req, status, o);
}

enum MHD_Result api_session_list(struct http_req *req)
{
	json_t *list = json_array();
	if (!list)
		return MHD_NO;
	for (struct session *s = req->r->sessions ? req->r->sessions->head : NULL; s; s = s->next)
		json_array_append_new(list, json_pack("{s:s,s:s?,s:b}", "session_id", s->id, "cwd",
						      s->cwd, "running", s->running != NULL));
	return http_json(req, 200, json_pack("{s:o}", "sessions", list));
}

/* execd's runtime init (docs/design.md §12.1): served without the API
 * token, as execd does (control-plane trust: the caller delivers the
 * token's hash), but with the startup token when the box has one; tasks
 * never reach it (the connection gate, §14.1). */
enum MHD_Result api_runtime_init(struct http_req *req)
{
	struct runner *r = req->r;
	if (!r->cfg.runtime_init)
		return http_failf(req, "NOT_FOUND",
				  "runtime init (POST /internal/init) is not offered: this runner "
				  "runs without --runtime-init (EXECD_RUNTIME_INIT)");
	if (strcmp(req->method, "POST") != 0)
		return http_failf(req, "METHOD_NOT_ALLOWED",
				  "method %.16s is not allowed on /internal/init", req->method);
	struct error e;
	unsigned status;
	/* A second call is 409 whoever makes it: the slot is used. */
	if (rtinit_bound(r, &e))
		return http_fail(req, &e);
	const char *got = http_header(req, "X-EXECD-ACCESS-TOKEN");
	if (r->cfg.token && !(got && secret_equal(got, r->cfg.token)))
		return http_failf(req, "UNAUTHORIZED",
				  "this box was started with an access token: POST /internal/init "
				  "needs it in X-EXECD-ACCESS-TOKEN");
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	json_t *o = rtinit_apply(r, body, &status, &e);
	if (!o)
		return http_fail(req, &e);
	return http_json(req, status, o);
}

enum MHD_Result api_isolated(struct http_req *req)
{
	return http_error(
		req, 501, "NOT_IMPLEMENTED",
		"isolated sessions (/v1/isolated/*) are not implemented by "
		"forceai-runner: every command already runs confined (GET /v1/hardening)");
}

enum MHD_Result api_command_run(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct task_spec spec;
	struct error err;
	if (api_parse_command(body, &spec, &err) < 0)
		return http_fail(req, &err);
	struct task *t = task_start(req->r, &spec, &err);
	if (!t)
		return http_fail(req, &err);
	return start_stream(req, t, false, t->id, 0);
}

enum MHD_Result api_command_stream(struct http_req *req, struct task_spec *spec)
{
	struct error err;
	struct task *t = task_start(req->r, spec, &err);
	if (!t)
		return http_fail(req, &err);
	return start_stream(req, t, false, t->id, 0);
}

static struct task *find_command(struct http_req *req, const char *id)
{
	struct task *t = (id && is_hex_id(id)) ? task_find(req->r, id) : NULL;
	if (t && (t->api == TASK_API_NATIVE || t->api == TASK_API_TOOL || t->api == TASK_API_PTY ||
		  t->api == TASK_API_HOOK))
		t = NULL;
	return t;
}

enum MHD_Result api_command_interrupt(struct http_req *req)
{
	const char *id = http_query(req, "id");
	if (!id || !*id)
		return http_failf(req, "MISSING_QUERY", "missing query parameter 'id'");
	struct task *t = find_command(req, id);
	if (!t) {
		struct session *s = is_hex_id(id) ? session_find(req->r, id) : NULL;
		if (s) {
			session_delete(req->r, s);
			return http_empty(req, 200);
		}
		return http_failf(req, "NOT_FOUND", "command not found: %.64s", id);
	}
	task_kill(t, TS_CANCELLED);
	return http_empty(req, 200);
}

enum MHD_Result api_command_status(struct http_req *req)
{
	struct task *t = find_command(req, req->param);
	if (!t)
		return http_failf(req, "NOT_FOUND", "command not found: %.64s", req->param);
	char started[40], finished[40];
	iso_time_ms(started, sizeof(started), t->started_ms);
	json_t *o = json_pack("{s:s,s:s,s:b,s:s}", "id", t->id, "content", t->command, "running",
			      !t->finished, "started_at", started);
	if (t->finished) {
		iso_time_ms(finished, sizeof(finished), t->finished_ms);
		json_object_set_new(o, "exit_code", json_integer(t->exit_code));
		json_object_set_new(o, "finished_at", json_string(finished));
		if (t->denied)
			json_object_set(o, "denied", t->denied);
		if (t->exit_code != 0) {
			char e[64];
			if (t->term_signal)
				snprintf(e, sizeof(e), "signal: %s", signal_name(t->term_signal));
			else
				snprintf(e, sizeof(e), "exit status %d", t->exit_code);
			json_object_set_new(o, "error", json_string(e));
		}
	}
	json_t *left = task_left_behind_json(t);
	if (left)
		json_object_set_new(o, "left_behind", left);
	return http_json(req, 200, o);
}

/* PR #583's GET /command/{id}/resume?after_eid=N: the command's events after N, replayed from
 * its log, then live until the terminal event. Any number of streams may read one command
 * (execd answers 409 while its first stream is open; here each reads the log on its own). */
enum MHD_Result api_command_resume(struct http_req *req)
{
	struct task *t = find_command(req, req->param);
	if (!t)
		return http_failf(req, "NOT_FOUND", "command not found: %.64s", req->param);
	uint64_t after = 0;
	const char *a = http_query(req, "after_eid");
	if (a && *a) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(a, &end, 10);
		if (*a == '-' || *end || errno)
			return http_failf(req, "INVALID_QUERY",
					  "invalid query parameter 'after_eid': must be a "
					  "non-negative event id");
		after = v;
	}
	return start_stream(req, t, t->api == TASK_API_SESSION, NULL, after);
}

/* ---- caller-bound creation: execd's operations (OpenSandbox PR #1771, docs/design.md §3.2) ----
 */

/* The recovery window: execd keeps 24 h; here a command's record is what remembers its id,
 * and records are kept --retain-ms after they finish, so the window is that long from the id's
 * issued_at, and a keyed record stays at least that long (task.key_until_mono). */
static uint64_t op_retention_s(struct runner *r)
{
	uint64_t s = r->cfg.retain_ms / 1000;
	return s ? s : 1;
}

/* No cache may keep an answer that names an execution. */
static enum MHD_Result op_json(struct http_req *req, unsigned status, json_t *body)
{
	struct MHD_Response *resp = http_json_response(body);
	if (resp)
		MHD_add_response_header(resp, "Cache-Control", "no-store");
	return http_queue(req, status, resp);
}

static enum MHD_Result op_fail(struct http_req *req, const struct error *e)
{
	return op_json(req, error_http_status(e), http_error_body(e));
}

/* execd's operation id: "<instance_id>.<issued_at>.<token>", the first two from GET
 * /execution/instance, the token 8-128 of [A-Za-z0-9_-]. The instance must be this one's
 * (it changes at start and at every reset, which forget the ids). */
static int check_operation_id(struct runner *r, const char *id, uint64_t *expires_s,
			      struct error *err)
{
	const char *d1 = strchr(id, '.'), *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
	const char *tok = d2 ? d2 + 1 : NULL;
	size_t tlen = tok ? strlen(tok) : 0;
	bool ok = d2 && d1 - id == 32 && tlen >= 8 && tlen <= 128 &&
		  strspn(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") ==
			  tlen;
	size_t ilen = ok ? (size_t)(d2 - d1 - 1) : 0;
	ok = ok && ilen >= 1 && ilen <= 19 && strspn(d1 + 1, "0123456789") == ilen &&
	     (ilen == 1 || d1[1] != '0');
	if (!ok)
		return error_set(err, 0, "invalid_operation_id",
				 "operation_id must be <instance_id>.<issued_at>.<token>: the "
				 "instance id and time from GET /execution/instance, then 8-128 of "
				 "A-Z a-z 0-9 _ -");
	if (memcmp(id, r->tasks->key_instance, 32))
		return error_set(
			err, 0, "operation_instance_mismatch",
			"this execd instance did not issue operation_id (it restarted or "
			"was reset, or the id is another sandbox's): the earlier request's "
			"outcome is unknown, do not retry it under a new id");
	uint64_t issued = strtoull(d1 + 1, NULL, 10);
	if (issued > now_ms() / 1000)
		return error_set(err, 0, "invalid_operation_id",
				 "operation_id's time is in the future: use the issued_at of GET "
				 "/execution/instance");
	*expires_s = issued + op_retention_s(r);
	return 0;
}

static json_t *operation_body(const struct task *t, uint64_t expires_s)
{
	char exp[40];
	iso_time_ms(exp, sizeof(exp), expires_s * 1000);
	/* The process is started before the answer: never "creating". */
	return json_pack("{s:s,s:s,s:s,s:s}", "id", t->id, "kind", "command", "state", "created",
			 "expires_at", exp);
}

enum MHD_Result api_operation_instance(struct http_req *req)
{
	struct runner *r = req->r;
	return op_json(req, 200,
		       json_pack("{s:s,s:I,s:I,s:I}", "instance_id", r->tasks->key_instance,
				 "issued_at", (json_int_t)(now_ms() / 1000), "retention_seconds",
				 (json_int_t)op_retention_s(r), "capacity",
				 (json_int_t)r->cfg.retain_count));
}

enum MHD_Result api_command_operation(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct error err;
	const char *op_id;
	uint64_t expires;
	if (schema_check(&schema_command_operation, body, &err) < 0 ||
	    body_str(body, "operation_id", true, &op_id, &err) < 0 ||
	    check_operation_id(req->r, op_id, &expires, &err) < 0)
		return op_fail(req, &err);
	unsigned char hash[32];
	if (api_request_hash(body, "operation_id", hash) < 0)
		return MHD_NO;
	struct task *t = task_find_key(req->r, TASK_API_EXECD, op_id);
	if (t) {
		if (memcmp(t->op_hash, hash, 32)) {
			error_set(&err, 0, "operation_conflict",
				  "operation_id was used with another request (command %s)", t->id);
			return op_fail(req, &err);
		}
		return op_json(req, 200, operation_body(t, expires));
	}
	if (now_ms() / 1000 >= expires) {
		error_set(&err, 0, "operation_expired",
			  "operation_id is past its recovery window: creation refused");
		return op_fail(req, &err);
	}
	if (tasks_pinned(req->r) >= req->r->cfg.retain_count) {
		error_set(&err, 0, "operation_capacity_exceeded",
			  "%u commands are kept for their operation ids: creation refused until "
			  "one's window ends",
			  req->r->cfg.retain_count);
		return op_fail(req, &err);
	}
	struct task_spec spec;
	if (api_parse_command(body, &spec, &err) < 0)
		return op_fail(req, &err);
	t = task_start(req->r, &spec, &err);
	if (!t)
		return op_fail(req, &err); /* nothing ran: the id is not used up */
	if (task_set_key(t, op_id, hash) < 0) {
		/* It runs, but a retry would not find it: the client must not retry blindly. */
		log_errno("cannot keep the command's operation_id", ENOMEM, t->id);
		task_kill(t, TS_CANCELLED);
		return http_failf(req, "RUNTIME_ERROR", "out of memory: command %s cancelled",
				  t->id);
	}
	t->key_until_mono = monotonic_ms() + (expires * 1000 - now_ms());
	return op_json(req, 200, operation_body(t, expires));
}

enum MHD_Result api_operation_get(struct http_req *req)
{
	struct error err;
	const char *kind = http_query(req, "kind");
	if (!kind || (strcmp(kind, "command") && strcmp(kind, "pty"))) {
		error_set(&err, 0, "invalid_operation_kind",
			  "query parameter kind must be command "
			  "or pty");
		return op_fail(req, &err);
	}
	const char *op_id = http_header(req, "X-EXECD-OPERATION-ID");
	uint64_t expires;
	if (!op_id || !*op_id) {
		error_set(&err, 0, "invalid_operation_id",
			  "header X-EXECD-OPERATION-ID is required");
		return op_fail(req, &err);
	}
	if (check_operation_id(req->r, op_id, &expires, &err) < 0)
		return op_fail(req, &err);
	/* PTY sessions are never created through operations here (no POST /pty/operations). */
	struct task *t = strcmp(kind, "command") ? NULL
						 : task_find_key(req->r, TASK_API_EXECD, op_id);
	if (t)
		return op_json(req, 200, operation_body(t, expires));
	if (now_ms() / 1000 >= expires)
		error_set(&err, 0, "operation_expired",
			  "operation_id is past its recovery window: the outcome is unknown");
	else
		error_set(&err, 0, "operation_not_found",
			  "no %s was created under this operation_id in this instance", kind);
	return op_fail(req, &err);
}

enum MHD_Result api_command_logs(struct http_req *req)
{
	struct task *t = find_command(req, req->param);
	if (!t)
		return http_failf(req, "NOT_FOUND", "command not found: %.64s", req->param);
	uint64_t cursor = 0;
	const char *c = http_query(req, "cursor");
	if (c && *c) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(c, &end, 10);
		if (*c == '-' || *end || errno)
			return http_failf(
				req, "INVALID_QUERY",
				"invalid query parameter 'cursor': must be a non-negative byte "
				"offset");
		cursor = v;
	}
	if (cursor > t->spool.next_off)
		cursor = t->spool.next_off;
	if (cursor < spool_first_off(&t->spool))
		cursor = spool_first_off(&t->spool); /* older output was not retained */
	struct spool_cursor cur;
	uint32_t skip;
	spool_seek_off(&t->spool, &cur, cursor, &skip);
	cleanup_buf struct buf out = {0};
	static char rbuf[SPOOL_MAX_REC];
	uint64_t next = cursor;
	while (out.len < LOGS_MAX) {
		struct spool_rec rec;
		int rc = spool_next(&t->spool, &cur, &rec, rbuf, NULL);
		if (rc <= 0)
			break;
		if (rec.type == SPOOL_EVENT)
			continue;
		buf_append(&out, rbuf + skip, rec.len - skip);
		next = rec.off + rec.len;
		skip = 0;
	}
	char hv[32];
	snprintf(hv, sizeof(hv), "%llu", (unsigned long long)next);
	return http_text(req, 200, "text/plain; charset=utf-8", out.data ? out.data : "", out.len,
			 "EXECD-COMMANDS-TAIL-CURSOR", hv);
}

enum MHD_Result api_session_create(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, true);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	const char *cwd = NULL;
	struct error err;
	if (api_parse_session_create(body, &cwd, &err) < 0)
		return http_fail(req, &err);
	struct session *s = session_create(req->r, cwd, &err);
	if (!s)
		return http_fail(req, &err);
	return http_json(req, 200, json_pack("{s:s}", "session_id", s->id));
}

enum MHD_Result api_session_run(struct http_req *req)
{
	struct session *s = is_hex_id(req->param) ? session_find(req->r, req->param) : NULL;
	if (!s)
		return http_failf(req, "SESSION_NOT_FOUND", "session %.64s not found", req->param);
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct task_spec spec;
	struct error err;
	if (api_parse_session_run(body, &spec, &err) < 0)
		return http_fail(req, &err);
	if (s->running)
		return http_failf(req, "SESSION_BUSY", "session %s is already running a command",
				  s->id);
	bool explicit_cwd = spec.cwd != NULL;
	if (!spec.cwd)
		spec.cwd = s->cwd;
	cleanup_free char *wrapped = session_wrap_command(spec.command, explicit_cwd);
	cleanup_close int in_fd = s->state_fd >= 0 ? dup(s->state_fd)
						   : session_memfd("session-state");
	/* The run reads the state through this descriptor (shared offset). */
	if (in_fd >= 0 && lseek(in_fd, 0, SEEK_SET) < 0)
		close(take_fd(in_fd));
	cleanup_close int out_fd = session_memfd("session-state-out");
	if (!wrapped || in_fd < 0 || out_fd < 0)
		return http_failf(req, "RUNTIME_ERROR", "cannot prepare the session run");
	spec.command = wrapped;
	spec.api = TASK_API_SESSION;
	spec.state_in_fd = in_fd;
	spec.state_out_fd = out_fd;
	struct task *t = task_start(req->r, &spec, &err);
	if (!t)
		return http_fail(req, &err);
	session_run_attach(s, t, take_fd(out_fd));
	return start_stream(req, t, true, s->id, 0);
}

enum MHD_Result api_session_delete(struct http_req *req)
{
	struct session *s = is_hex_id(req->param) ? session_find(req->r, req->param) : NULL;
	if (!s)
		return http_failf(req, "CONTEXT_NOT_FOUND", "session %.64s not found", req->param);
	session_delete(req->r, s);
	return http_empty(req, 200);
}
