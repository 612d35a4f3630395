/* execd's command output as server-sent events (POST /command, GET /command/{id}/resume,
 * the session's run): init, stdout/stderr lines with their event ids, pings, the end. */
#include "api/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/jsonesc.h"
#include "core/log.h"
#include "core/signame.h"
#include "task/linesplit.h"
#include "task/task.h"

/* The contract says at least every 3 s. The runner's tick is once a second, so a ping goes
 * 1.5-2.5 s after the last event (2000 gave 2-3 s, and 3,001 ms under valgrind). */
#define PING_INTERVAL_MS 1500

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
	/* Event ids (docs/design/wire.md#opensandbox-execd-compatible-api): an output line's is 1 +
	 * the output offset where its bytes end, so the same line gets the same id in every stream
	 * of the command, and a resumed stream (GET /command/{id}/resume?after_eid=N) sends only
	 * those above N. */
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

enum MHD_Result execd_stream_start(struct http_req *req, struct task *t, bool session_mode,
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
