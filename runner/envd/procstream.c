/* The event stream of process.Process's Start and Connect: a task's output records as
 * Connect envelopes (start, data, end, keepalive), the stream's deadline and keep-alives
 * (docs/design.md §18.2). */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "core/runner.h"
#include "core/util.h"
#include "envd/procstream.h"
#include "task/pty.h"

/* A stream holds at most this much ready to send before it stops reading the task: the
 * reader is live, so a slow client holds the task's pipe back (§4.4). */
#define PS_OUT_HIGH (256u * 1024)

static void ps_env(struct envd_pstream *ps, const char *json)
{
	connect_env_append(&ps->hs.out, 0, json, strlen(json));
}

/* {"event":{"data":{"<kind>":"<base64>"}}} written straight into the buffer. */
static int ps_data(struct envd_pstream *ps, const char *kind, const char *data, size_t len)
{
	char head[48];
	int h = snprintf(head, sizeof(head), "{\"event\":{\"data\":{\"%s\":\"", kind);
	size_t b64 = (len + 2) / 3 * 4, total = (size_t)h + b64 + 4;
	struct buf *o = &ps->hs.out;
	if (buf_reserve(o, 5 + total) < 0)
		return -1;
	unsigned char e[5] = {0, (unsigned char)(total >> 24), (unsigned char)(total >> 16),
			      (unsigned char)(total >> 8), (unsigned char)total};
	buf_append(o, e, 5);
	buf_append(o, head, (size_t)h);
	o->len += base64_encode_to(o->data + o->len, (const unsigned char *)data, len);
	buf_append(o, "\"}}}", 4);
	return 0;
}

/* Go's names of the signals envd's status says ("signal: killed"). */
static const char *sig_word(int sig)
{
	switch (sig) {
	case SIGKILL:
		return "killed";
	case SIGTERM:
		return "terminated";
	case SIGINT:
		return "interrupt";
	case SIGHUP:
		return "hangup";
	case SIGSEGV:
		return "segmentation fault";
	case SIGABRT:
		return "aborted";
	case SIGPIPE:
		return "broken pipe";
	case SIGQUIT:
		return "quit";
	default:
		return signal_name(sig);
	}
}

void envd_pstream_end(struct envd_pstream *ps, enum connect_code c, const char *why)
{
	if (ps->hs.done)
		return;
	connect_end_append(&ps->hs.out, c, why);
	ps->hs.done = true;
}

/* The process ended: envd's end event, or the deadline's error when the engine ended it at
 * the request's timeout (envd's Start ends with the context's deadline_exceeded). */
static void ps_finish(struct envd_pstream *ps, struct task *t)
{
	if (t->status == TS_TIMEOUT) {
		envd_pstream_end(ps, CC_DEADLINE_EXCEEDED,
				 "the process ran past the request's timeout (Connect-Timeout-Ms) "
				 "and was killed");
		return;
	}
	char ev[256];
	if (t->term_signal)
		snprintf(ev, sizeof(ev),
			 "{\"event\":{\"end\":{\"exitCode\":-1,\"status\":\"signal: %s\"}}}",
			 sig_word(t->term_signal));
	else
		snprintf(ev, sizeof(ev),
			 "{\"event\":{\"end\":{\"exitCode\":%d,\"exited\":true,\"status\":\"exit "
			 "status %d\"}}}",
			 t->exit_code, t->exit_code);
	ps_env(ps, ev);
	envd_pstream_end(ps, CC_OK, NULL);
}

static void ps_event(struct envd_pstream *ps, const struct spool_rec *rec, const char *data)
{
	const char *nl = memchr(data, '\n', rec->len);
	size_t n = nl ? (size_t)(nl - data) : 0;
	if ((n == 4 && !memcmp(data, "exit", 4)) || (n == 5 && !memcmp(data, "error", 5)))
		ps->exit_seen = true; /* finished once the reader is at the end */
}

static void ps_produce(struct http_stream *hs)
{
	static char rbuf[SPOOL_MAX_REC];
	struct envd_pstream *ps = (struct envd_pstream *)hs;
	struct task *t = ps->rd.task;
	while (!hs->done && buf_avail(&hs->out) < PS_OUT_HIGH) {
		struct spool_rec rec;
		const char *data;
		int rc = t ? task_reader_next_ref(&ps->rd, &rec, rbuf, &data) : 0;
		if (rc < 0) {
			log_errno("reading the task log failed", -rc, t->id);
			envd_pstream_end(ps, CC_DATA_LOSS,
					 "the process's output could not be read");
			break;
		}
		if (rc == 0) {
			if (t && task_reader_at_end(&ps->rd))
				ps_finish(ps, t);
			break;
		}
		if (rec.type == SPOOL_EVENT) {
			/* The terminal record is the task's last: the end goes now, as the
			 * native stream's does, not at the reader's next wake. */
			ps_event(ps, &rec, data);
			if (ps->exit_seen)
				ps_finish(ps, t);
		} else if (ps_data(ps,
				   rec.type == SPOOL_STDERR ? "stderr"
				   : ps->tty                ? "pty"
							    : "stdout",
				   data, rec.len) < 0)
			break;
	}
}

static void ps_close(struct http_stream *hs)
{
	struct envd_pstream *ps = (struct envd_pstream *)hs;
	if (ps->rd.task)
		task_reader_detach(&ps->rd);
	free(ps);
}

void envd_pstream_tick(struct http_stream *hs, uint64_t now)
{
	struct envd_pstream *ps = (struct envd_pstream *)hs;
	if (hs->done)
		return;
	if (ps->deadline_ms && now >= ps->deadline_ms) {
		/* Connect's deadline: the stream ends; the process is the engine's (Start's
		 * timeout_ms ends it at the same time). */
		envd_pstream_end(ps, CC_DEADLINE_EXCEEDED, "the request's deadline passed");
		http_stream_wake(hs);
		return;
	}
	if (!buf_avail(&hs->out) && now - hs->last_send_ms >= ps->keepalive_ms) {
		ps_env(ps,
		       ps->keepalive_msg ? ps->keepalive_msg : "{\"event\":{\"keepalive\":{}}}");
		hs->last_send_ms = now;
		http_stream_wake(hs);
	}
}

static void ps_wake(struct task_reader *rd)
{
	struct envd_pstream *ps =
		(struct envd_pstream *)((char *)rd - offsetof(struct envd_pstream, rd));
	http_stream_wake(&ps->hs);
}

static const struct http_stream_ops pstream_ops = {
	.produce = ps_produce,
	.close = ps_close,
	.tick = envd_pstream_tick,
};

/* Keepalive-Ping-Interval (seconds; envd's default 90 s), Connect-Timeout-Ms. */
void envd_pstream_headers(struct envd_pstream *ps, struct http_req *req)
{
	const char *ka = http_header(req, "Keepalive-Ping-Interval");
	long s = ka ? strtol(ka, NULL, 10) : 0;
	ps->keepalive_ms = (uint32_t)((s >= 1 && s <= 3600 ? s : 90) * 1000);
	uint64_t to = envd_timeout_ms(req);
	ps->deadline_ms = to ? monotonic_ms() + to : 0;
}

uint64_t envd_timeout_ms(struct http_req *req)
{
	const char *h = http_header(req, "Connect-Timeout-Ms");
	if (!h || !*h)
		return 0;
	char *end;
	unsigned long long v = strtoull(h, &end, 10);
	if (*end || *h == '-' || v > 7ULL * 24 * 3600 * 1000)
		return 7ULL * 24 * 3600 * 1000;
	return v;
}

/* The start event goes out alone, before the process has said anything; the end follows
 * as a small write while it may be unacknowledged: without TCP_NODELAY, Nagle holds it for
 * the client's delayed ACK (measured: 8-9 ms added to the round trip of `true`). */
void envd_nodelay(struct http_req *req)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	int one = 1;
	if (ci)
		(void)setsockopt(ci->connect_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

enum MHD_Result envd_pstream_start(struct http_req *req, struct task *t, bool from_now)
{
	envd_nodelay(req);
	struct envd_pstream *ps = calloc(1, sizeof(*ps));
	if (!ps)
		return MHD_NO;
	ps->tty = t->input && t->input->tty;
	envd_pstream_headers(ps, req);
	char ev[96];
	snprintf(ev, sizeof(ev), "{\"event\":{\"start\":{\"pid\":%u}}}", (unsigned)t->shim_pid);
	ps_env(ps, ev);
	ps->rd.wake = ps_wake;
	if (from_now)
		spool_seek_seq(&t->spool, &ps->rd.cur, t->spool.next_seq);
	task_reader_attach(t, &ps->rd, true);
	return http_stream_start(req, &ps->hs, &pstream_ops, "application/connect+json");
}
