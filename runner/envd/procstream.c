/* The event stream of process.Process's Start and Connect: a task's output records as
 * Connect envelopes (start, data, end, keepalive), the stream's deadline and keep-alives
 * (docs/design/envd.md#processprocess-on-the-task-engine). */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/signame.h"
#include "envd/procstream.h"
#include "task/pty.h"

static void ps_env(struct envd_pstream *ps, const char *json)
{
	connect_env_append(&ps->hs.out, 0, json, strlen(json));
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

/* The next piece of the data record ps->cur into dst: stage 0 the envelope's prefix and
 * {"event":{"data":{"<kind>":", 1 its base64 (whole groups of 3 until the last), 2 the tail.
 * The envelope's length is known before its first byte (4/3 of the record, padded), so a
 * record of any size goes straight into the send buffer in as many pieces as it takes. */
static size_t data_piece(struct envd_pstream *ps, char *dst, size_t max)
{
	static char scratch[SPOOL_MAX_REC];
	struct task_rec_ref *c = &ps->cur;
	size_t n = 0;
	if (ps->stage == 0) {
		const char *kind = c->rec.type == SPOOL_STDERR ? "stderr"
				   : ps->tty                   ? "pty"
							       : "stdout";
		char head[48];
		int h = snprintf(head, sizeof(head), "{\"event\":{\"data\":{\"%s\":\"", kind);
		size_t total = (size_t)h + (c->rec.len + 2) / 3 * 4 + 4;
		if (max < 5 + (size_t)h + 4)
			return 0;
		unsigned char e[5] = {0, (unsigned char)(total >> 24), (unsigned char)(total >> 16),
				      (unsigned char)(total >> 8), (unsigned char)total};
		memcpy(dst, e, 5);
		memcpy(dst + 5, head, (size_t)h);
		n = 5 + (size_t)h;
		ps->stage = 1;
		ps->had_data = true;
	}
	if (ps->stage == 1) {
		const char *data;
		if (task_reader_rest(&ps->rd, c, scratch, &data) < 0) {
			/* No longer retained (a reader far behind): what was lost is lost. */
			envd_pstream_end(ps, CC_DATA_LOSS, "the process's output was lost");
			c->active = false;
			/* A prefix written in this call is dropped, so the end frame follows a
			 * whole envelope; one already sent cannot be. */
			return c->done == 0 && n > 0 ? 0 : n;
		}
		size_t left = c->rec.len - c->done, take = (max - n) / 4 * 3;
		if (take >= left)
			take = left;
		n += connect_b64_encode(dst + n, (const unsigned char *)data, take);
		c->done += (uint32_t)take;
		if (c->done < c->rec.len)
			return n;
		ps->stage = 2;
	}
	if (max - n < 4)
		return n;
	memcpy(dst + n, "\"}}}", 4);
	c->active = false;
	return n + 4;
}

static size_t ps_produce_into(struct http_stream *hs, char *dst, size_t max)
{
	static char rbuf[SPOOL_MAX_REC];
	struct envd_pstream *ps = (struct envd_pstream *)hs;
	struct task *t = ps->rd.task;
	size_t n = 0;
	for (;;) {
		n += buf_take(&hs->out, dst + n, max - n);
		if (buf_avail(&hs->out) || n == max || hs->done)
			break;
		if (ps->cur.active) {
			n += data_piece(ps, dst + n, max - n);
			if (ps->cur.active)
				break; /* dst is full */
			continue;
		}
		const char *data;
		int rc = t ? task_reader_next_rec(&ps->rd, &ps->cur, rbuf, &data) : 0;
		if (rc < 0) {
			log_errno("reading the task log failed", -rc, t->id);
			envd_pstream_end(ps, CC_DATA_LOSS,
					 "the process's output could not be read");
			continue;
		}
		if (rc == 0) {
			ps->cur.active = false;
			if (t && task_reader_at_end(&ps->rd))
				ps_finish(ps, t);
			else
				break;
			continue;
		}
		if (ps->cur.rec.type == SPOOL_EVENT) {
			/* The terminal record is the task's last: the end goes now. */
			ps->cur.active = false;
			ps_event(ps, &ps->cur.rec, data);
			if (ps->exit_seen)
				ps_finish(ps, t);
			continue;
		}
		ps->stage = 0;
	}
	return n;
}

static bool ps_more_soon(struct http_stream *hs)
{
	struct envd_pstream *ps = (struct envd_pstream *)hs;
	/* Never the start event: the SDK waits for it before it returns the handle. */
	return ps->had_data && ps->rd.task && task_reader_more_due(&ps->rd);
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
	.produce_into = ps_produce_into,
	.more_soon = ps_more_soon,
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
static void envd_nodelay(struct http_req *req)
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
	/* 64 KiB a send: a bulk writer's records go out whole, not in 16 KiB pieces. */
	struct MHD_Response *resp =
		http_stream_response(req, &ps->hs, &pstream_ops, UINT64_MAX, 64 * 1024);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "application/connect+json");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	return http_queue(req, 200, resp);
}
