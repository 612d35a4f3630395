/* Streamed response bodies of the API server: see struct http_stream. */
#include "http/http.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/list.h"
#include "http/internal.h"

/* The one fill function of every stream: what the producer buffered, then
 * more from the producer, then the end; or a suspended connection until
 * the producer wakes it. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct http_stream *s = cls;
	/* Fill MHD's buffer: what is left of the last batch, then more from
	 * the producer, so each send is a full buffer rather than an event's
	 * tail on its own (an event is often just larger than the buffer). */
	size_t n = buf_take(&s->out, buf, max);
	while (n < max && !s->done) {
		size_t got;
		if (s->ops->produce_into) {
			got = s->ops->produce_into(s, buf + n, max - n);
		} else {
			s->ops->produce(s);
			got = buf_take(&s->out, buf + n, max - n);
		}
		if (!got)
			break;
		n += got;
	}
	/* A producer that wrote straight into buf may end with its last
	 * bytes still in out (done is set with them). */
	if (n < max && s->ops->produce_into)
		n += buf_take(&s->out, buf + n, max - n);
	/* Here out is empty unless buf is full. A short tail while more is due
	 * waits for it: one full send instead of a full one and a scrap, each
	 * a packet and a wake-up of the client. */
	/* Nothing from the producer and silent too long: the keep-alive (http/sse.h). */
	if (n == 0 && s->keepalive_due && !s->done && !s->ending && !s->failed) {
		size_t k = strlen(s->ops->keepalive);
		if (k <= max) {
			memcpy(buf, s->ops->keepalive, k);
			n = k;
		}
	}
	if (n > 0)
		s->keepalive_due = false;
	if (n > 0 && n < max / 2 && !s->done && !s->ending && s->ops->more_soon &&
	    s->ops->more_soon(s) && buf_append(&s->out, buf, n) == 0) {
		MHD_suspend_connection(s->conn);
		s->suspended = true;
		return 0;
	}
	if (n > 0) {
		s->last_send_ms = monotonic_ms();
		return (ssize_t)n;
	}
	if (s->failed)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	if ((s->done && !buf_avail(&s->out)) || s->ending)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* Stopping: MHD_stop_daemon() aborts the process if a connection is
	 * still suspended, so a stream with nothing more to send now ends. */
	if (s->r->http->stopping)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	/* Nothing to send: sleep until the producer wakes us (no polling). */
	MHD_suspend_connection(s->conn);
	s->suspended = true;
	return 0;
}

static void stream_unlink(struct http_server *h, struct http_stream *s)
{
	LIST_UNLINK(h->streams, s);
	h->n_streams--;
}

/* The one close: the stream's buffer, then the owner's state. */
static void stream_close(struct http_stream *s)
{
	buf_free(&s->out);
	s->ops->close(s);
}

static void stream_free_cb(void *cls)
{
	struct http_stream *s = cls;
	s->closed = true;
	stream_unlink(s->r->http, s);
	stream_close(s);
}

/* The daemon (listener) whose connection conn is. */
static struct http_daemon *daemon_of(struct http_server *h, struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
	for (unsigned i = 0; ci && i < h->n_extra; i++)
		if (h->extra[i].daemon.d == ci->daemon)
			return &h->extra[i].daemon;
	return &h->daemon;
}

struct MHD_Response *http_stream_response(struct http_req *req, struct http_stream *s,
					  const struct http_stream_ops *ops, uint64_t size,
					  size_t block)
{
	struct http_server *h = req->r->http;
	s->ops = ops;
	s->r = req->r;
	s->conn = req->conn;
	s->daemon = daemon_of(h, req->conn);
	s->suspended = false;
	s->closed = false;
	s->last_send_ms = monotonic_ms();
	struct MHD_Response *resp =
		MHD_create_response_from_callback(size == UINT64_MAX ? MHD_SIZE_UNKNOWN : size,
						  block, stream_reader, s, stream_free_cb);
	if (!resp) {
		stream_close(s);
		return NULL;
	}
	LIST_PUSH(h->streams, s);
	h->n_streams++;
	return resp;
}

enum MHD_Result http_stream_start(struct http_req *req, struct http_stream *s,
				  const struct http_stream_ops *ops, const char *content_type)
{
	struct MHD_Response *resp = http_stream_response(req, s, ops, UINT64_MAX, 16 * 1024);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", content_type);
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	return http_queue(req, 200, resp);
}

unsigned http_streams_end(struct runner *r, bool force)
{
	struct http_server *h = r->http;
	if (!h)
		return 0;
	for (struct http_stream *s = h->streams; s; s = s->next) {
		s->ending = true;
		if (force) {
			const union MHD_ConnectionInfo *ci =
				MHD_get_connection_info(s->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
			/* MHD sees the dead socket on its next turn and closes it. */
			if (ci && shutdown(ci->connect_fd, SHUT_RDWR) < 0 && errno != ENOTCONN)
				log_errno("shutdown of a stream's connection failed", errno, NULL);
		}
		http_stream_wake(s);
	}
	return h->n_streams;
}

unsigned http_stream_count(struct runner *r)
{
	return r->http ? r->http->n_streams : 0;
}

void http_wake_all(struct http_server *h)
{
	http_daemon_wake(&h->daemon);
	for (unsigned i = 0; i < h->n_extra; i++)
		if (h->extra[i].daemon.d)
			http_daemon_wake(&h->extra[i].daemon);
}

void http_stream_wake(struct http_stream *s)
{
	if (!s->suspended || s->closed)
		return;
	s->suspended = false;
	MHD_resume_connection(s->conn);
	/* Its own daemon only: another's turn would be an epoll_wait and a pass over its
	 * connections for nothing, once per record of a fast stream. */
	http_daemon_wake(s->daemon);
}
