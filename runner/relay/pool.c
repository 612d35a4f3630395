/* Upstream connections and the pool of idle ones: see pool.h. */
#include "relay/pool.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"

#define POOL_PER_PORT 32   /* idle upstream connections kept per port */
#define POOL_MAX 256       /* ... and in all */
#define POOL_IDLE_MS 15000 /* an idle upstream connection is closed after this */
#define POOL_CHECK_MS 1000 /* idle connections are checked for expiry this often */

static void conn_free_cb(struct loop *loop, void *arg)
{
	(void)loop;
	free(arg);
}

void relay_conn_close(struct relay_pool *pool, struct relay_conn *c)
{
	loop_watch_del(pool->loop, &c->w);
	close(c->w.fd);
	/* A watch of this batch may still point at c. */
	if (pool->final || loop_defer(pool->loop, conn_free_cb, c) < 0)
		free(c);
}

/* A server that listens on ::1 only (Node resolves "localhost" to ::1)
 * is as much the box's as one on 127.0.0.1: both are tried, IPv4 first. */
static int dial(unsigned port, int family, int *fd_out)
{
	int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	int rc;
	if (family == AF_INET6) {
		struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
					  .sin6_port = htons((uint16_t)port),
					  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	} else {
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	}
	if (rc < 0 && errno != EINPROGRESS) {
		int e = errno;
		close(fd);
		return -e;
	}
	*fd_out = fd;
	return rc < 0 ? 1 : 0; /* 1: still connecting */
}

struct relay_conn *relay_conn_open(struct relay_pool *pool, unsigned port, int family,
				   loop_fd_cb cb, void *arg, bool *connecting, struct error *err)
{
	int fd = -1;
	int rc = dial(port, family, &fd);
	if (rc == -ECONNREFUSED && family == AF_INET)
		rc = dial(port, family = AF_INET6, &fd);
	if (rc < 0) {
		/* No IPv6 in the box: the refusal on 127.0.0.1 is the answer. */
		if (rc == -EAFNOSUPPORT || rc == -EADDRNOTAVAIL)
			rc = -ECONNREFUSED;
		bool ours = rc == -EMFILE || rc == -ENFILE || rc == -ENOBUFS || rc == -ENOMEM;
		error_set(err, -rc, ours ? "RUNTIME_ERROR" : "BAD_GATEWAY",
			  "port %u: cannot connect", port);
		return NULL;
	}
	struct relay_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		error_set(err, ENOMEM, "RUNTIME_ERROR", "out of memory");
		return NULL;
	}
	c->pool = pool;
	c->port = port;
	c->family = family;
	int wrc = loop_watch_add(pool->loop, &c->w, fd, 0, cb, arg);
	if (wrc < 0) {
		close(fd);
		free(c);
		error_set(err, -wrc, "RUNTIME_ERROR", "epoll_ctl");
		return NULL;
	}
	*connecting = rc == 1;
	return c;
}

static void idle_unlink(struct relay_pool *pool, struct relay_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		pool->idle = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
	pool->n_idle--;
}

static void idle_drop(struct relay_pool *pool, struct relay_conn *c)
{
	idle_unlink(pool, c);
	relay_conn_close(pool, c);
}

void relay_pool_flush(struct relay_pool *pool)
{
	while (pool->idle)
		idle_drop(pool, pool->idle);
}

void relay_pool_tenant(struct relay_pool *pool, uint64_t gen)
{
	if (gen == pool->gen)
		return;
	relay_pool_flush(pool);
	pool->gen = gen;
}

/* An idle server has nothing to say: whatever wakes an idle connection (its
 * close, or bytes that answer no request of ours) ends it. */
static void on_idle_event(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	struct relay_conn *c = w->arg;
	idle_drop(c->pool, c);
}

struct relay_conn *relay_pool_take(struct relay_pool *pool, unsigned port)
{
	for (struct relay_conn *c = pool->idle; c; c = c->next) {
		if (c->port != port)
			continue;
		idle_unlink(pool, c);
		return c;
	}
	return NULL;
}

bool relay_pool_put(struct relay_pool *pool, struct relay_conn *c)
{
	unsigned same = 0;
	struct relay_conn *last = NULL, *last_same = NULL;
	for (struct relay_conn *i = pool->idle; i; i = i->next) {
		last = i;
		if (i->port == c->port)
			same++, last_same = i;
	}
	if (same >= POOL_PER_PORT)
		idle_drop(pool, last_same);
	else if (pool->n_idle >= POOL_MAX)
		idle_drop(pool, last);
	c->w.cb = on_idle_event;
	c->w.arg = c;
	if (loop_watch_set(pool->loop, &c->w, EPOLLIN) < 0) {
		relay_conn_close(pool, c);
		return false;
	}
	c->since_ms = monotonic_ms();
	c->prev = NULL;
	c->next = pool->idle;
	if (pool->idle)
		pool->idle->prev = c;
	pool->idle = c;
	pool->n_idle++;
	return true;
}

/* Each idle connection holds an fd, and a server's worker perhaps. */
void relay_pool_check(struct relay_pool *pool, uint64_t now)
{
	if (now - pool->last_check_ms < POOL_CHECK_MS)
		return;
	pool->last_check_ms = now;
	for (struct relay_conn *c = pool->idle, *next; c; c = next) {
		next = c->next;
		if (now - c->since_ms >= POOL_IDLE_MS)
			idle_drop(pool, c);
	}
}
