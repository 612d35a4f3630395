/* Raw bytes between two sockets: see splice.h. */
#include "relay/splice.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define SPLICE_CAP (64 * 1024) /* each direction */

static size_t pending(const struct relay_pipe *b)
{
	return b->len - b->off + b->in_pipe;
}

static void pipe_free(struct relay_pipe *b)
{
	free(b->data);
	b->data = NULL;
	for (int i = 0; i < 2; i++)
		if (b->pipe[i] >= 0)
			close(b->pipe[i]);
	b->pipe[0] = b->pipe[1] = -1;
	b->in_pipe = 0;
}

void relay_splice_init(struct relay_splice *s)
{
	memset(s, 0, sizeof(*s));
	s->c2u.pipe[0] = s->c2u.pipe[1] = s->u2c.pipe[0] = s->u2c.pipe[1] = -1;
}

void relay_splice_free(struct relay_splice *s)
{
	pipe_free(&s->c2u);
	pipe_free(&s->u2c);
}

static int pipe_open(struct relay_pipe *b, const char *first, size_t len)
{
	b->data = malloc(SPLICE_CAP);
	/* Without a pipe (out of fds) the bytes are copied through data. */
	if (pipe2(b->pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		b->pipe[0] = b->pipe[1] = -1;
	if (!b->data)
		return -1;
	b->len = len < SPLICE_CAP ? len : SPLICE_CAP;
	memcpy(b->data, first, b->len);
	return 0;
}

int relay_splice_open(struct relay_splice *s, const char *to_up, size_t to_up_len,
		      const char *to_client, size_t to_client_len)
{
	int a = pipe_open(&s->c2u, to_up, to_up_len);
	int b = pipe_open(&s->u2c, to_client, to_client_len);
	return a < 0 || b < 0 ? -1 : 0;
}

/* Move bytes src -> b -> dst; -1 when the connection is broken. Each pass
 * makes the first transfer that has work: send what b holds, splice the
 * pipe's bytes out to dst, else read more from src (into the pipe when there
 * is one, else into b). Their results are read alike below. */
static int move(int src, struct relay_pipe *b, int dst)
{
	enum { SEND, PIPE_OUT, PIPE_IN, RECV } step;
	for (;;) {
		ssize_t n;
		if (b->len <= b->off)
			b->len = b->off = 0; /* all sent: refill from the start */
		if (b->len > b->off) {
			step = SEND;
			n = send(dst, b->data + b->off, b->len - b->off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		} else if (b->in_pipe) {
			step = PIPE_OUT;
			n = splice(b->pipe[0], NULL, dst, NULL, b->in_pipe,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		} else if (b->eof) {
			break;
		} else if (b->pipe[0] >= 0) {
			/* The pipe is empty here: EAGAIN is the socket's. */
			step = PIPE_IN;
			n = splice(src, NULL, b->pipe[1], NULL, SPLICE_CAP,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		} else {
			step = RECV;
			n = recv(src, b->data + b->len, SPLICE_CAP - b->len, MSG_DONTWAIT);
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		/* A pipe that holds bytes and gives none out is broken too. */
		if (n < 0 || (n == 0 && step == PIPE_OUT))
			return -1;
		if (n == 0 && step != SEND) {
			b->eof = true; /* src's end */
			break;
		}
		switch (step) {
		case SEND:
			b->off += (size_t)n;
			break;
		case PIPE_OUT:
			b->in_pipe -= (size_t)n;
			break;
		case PIPE_IN:
			b->in_pipe += (size_t)n;
			break;
		case RECV:
			b->len += (size_t)n;
			break;
		}
	}
	if (b->eof && b->len == b->off && !b->shut) {
		b->shut = true;
		if (shutdown(dst, SHUT_WR) < 0 && errno != ENOTCONN)
			return -1;
	}
	return 0;
}

int relay_splice_pump(struct relay_splice *s, int client_fd, int up_fd)
{
	if (move(client_fd, &s->c2u, up_fd) < 0 || move(up_fd, &s->u2c, client_fd) < 0)
		return -1;
	return s->c2u.shut && s->u2c.shut ? 0 : 1;
}

uint32_t relay_splice_client_events(const struct relay_splice *s)
{
	uint32_t ev = 0;
	if (!s->c2u.eof && !pending(&s->c2u))
		ev |= EPOLLIN;
	if (pending(&s->u2c))
		ev |= EPOLLOUT;
	return ev;
}

uint32_t relay_splice_up_events(const struct relay_splice *s)
{
	uint32_t ev = 0;
	if (!s->u2c.eof && !pending(&s->u2c))
		ev |= EPOLLIN;
	if (pending(&s->c2u))
		ev |= EPOLLOUT;
	return ev;
}
