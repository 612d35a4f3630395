/* Two sockets relayed as raw bytes (runner/relay/splice.c): the bytes that
 * came with the heads go first, then both directions through the pipes,
 * a half-close passed on, and the events asked for. Socket pairs stand in
 * for the client and the upstream. */
#include "relay/splice.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "unit.h"

struct ends {
	int client, relay_c; /* the client's end, the relay's end of it */
	int up, relay_u;     /* the upstream's end, the relay's end of it */
};

static bool open_ends(struct ends *e)
{
	int a[2], b[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) < 0)
		return false;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b) < 0) {
		close(a[0]);
		close(a[1]);
		return false;
	}
	*e = (struct ends){a[0], a[1], b[0], b[1]};
	fcntl(e->relay_c, F_SETFL, O_NONBLOCK);
	fcntl(e->relay_u, F_SETFL, O_NONBLOCK);
	return true;
}

static void close_ends(struct ends *e)
{
	close(e->client);
	close(e->relay_c);
	close(e->up);
	close(e->relay_u);
}

/* What fd has now (non-blocking), NUL-terminated; "" when nothing. */
static const char *got(int fd)
{
	static char b[256];
	ssize_t n = recv(fd, b, sizeof(b) - 1, MSG_DONTWAIT);
	b[n > 0 ? n : 0] = 0;
	return b;
}

TEST(both_ways_first_bytes_first)
{
	struct ends e;
	if (!CHECK(open_ends(&e)))
		return;
	struct relay_splice s;
	relay_splice_init(&s);
	if (!CHECK(relay_splice_open(&s, "to-up:", 6, "to-client:", 10) == 0))
		return;
	/* Bytes on their way: nothing more is read from either side. */
	CHECK(relay_splice_client_events(&s) == EPOLLOUT);
	CHECK(relay_splice_up_events(&s) == EPOLLOUT);
	CHECK(send(e.client, "abc", 3, 0) == 3);
	CHECK(relay_splice_pump(&s, e.relay_c, e.relay_u) == 1);
	CHECK_STR(got(e.up), "to-up:abc");
	CHECK_STR(got(e.client), "to-client:");
	CHECK(send(e.up, "xyz", 3, 0) == 3);
	CHECK(relay_splice_pump(&s, e.relay_c, e.relay_u) == 1);
	CHECK_STR(got(e.client), "xyz");
	/* All sent: both sides are read again. */
	CHECK(relay_splice_client_events(&s) == EPOLLIN);
	CHECK(relay_splice_up_events(&s) == EPOLLIN);
	relay_splice_free(&s);
	close_ends(&e);
}

TEST(half_close_passed_on)
{
	struct ends e;
	if (!CHECK(open_ends(&e)))
		return;
	struct relay_splice s;
	relay_splice_init(&s);
	if (!CHECK(relay_splice_open(&s, "", 0, "", 0) == 0))
		return;
	CHECK(send(e.client, "last", 4, 0) == 4);
	CHECK(shutdown(e.client, SHUT_WR) == 0);
	/* The client is done: the upstream gets the rest, then its end. */
	CHECK(relay_splice_pump(&s, e.relay_c, e.relay_u) == 1);
	CHECK_STR(got(e.up), "last");
	char c;
	CHECK(recv(e.up, &c, 1, MSG_DONTWAIT) == 0);
	CHECK(!(relay_splice_client_events(&s) & EPOLLIN));
	/* The upstream answers and ends too: the relay is over. */
	CHECK(send(e.up, "bye", 3, 0) == 3);
	CHECK(shutdown(e.up, SHUT_WR) == 0);
	CHECK(relay_splice_pump(&s, e.relay_c, e.relay_u) == 0);
	CHECK_STR(got(e.client), "bye");
	relay_splice_free(&s);
	close_ends(&e);
}

TEST(broken_side_is_an_error)
{
	struct ends e;
	if (!CHECK(open_ends(&e)))
		return;
	struct relay_splice s;
	relay_splice_init(&s);
	if (!CHECK(relay_splice_open(&s, "x", 1, "", 0) == 0))
		return;
	/* The upstream is gone: what is on its way cannot be sent. */
	close(e.up);
	e.up = -1;
	CHECK(relay_splice_pump(&s, e.relay_c, e.relay_u) == -1);
	relay_splice_free(&s);
	relay_splice_free(&s); /* freeing twice is harmless */
	close_ends(&e);
}
