/* Connections to upstream ports inside the box, and the pool of idle ones
 * kept for the next request to the same port (docs/design/interactive.md). A
 * connection is registered with the loop once, for its whole life: a
 * request that takes it from the pool, or gives it back, changes only the
 * watch's callback (no epoll_ctl per request). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "core/loop.h"

/* A connection to an upstream port: a request's, or idle in the pool. */
struct relay_conn {
	struct relay_pool *pool;
	struct relay_conn *next, *prev; /* in the idle list */
	struct loop_watch w;            /* the socket; its callback says whose it is */
	unsigned port;
	int family;        /* AF_INET (127.0.0.1) or AF_INET6 (::1) */
	uint64_t since_ms; /* idle since */
};

struct relay_pool {
	struct loop *loop;
	struct relay_conn *idle; /* most recently used first */
	unsigned n_idle;
	uint64_t gen;           /* the tenant (reset generation) the idle ones belong to */
	uint64_t last_check_ms; /* of the idle connections */
	bool final;             /* the loop has ended: connections are freed at once */
};

/* A new non-blocking connection to 127.0.0.1:port (family AF_INET) or
 * [::1]:port (AF_INET6), watched (no events yet) with cb/arg; *connecting
 * when the connect is still in progress. A refusal on 127.0.0.1 known at
 * once is tried again on ::1 here; one that comes later is the caller's to
 * retry (relay_conn_retry_v6). NULL with err set (BAD_GATEWAY when
 * refused). */
struct relay_conn *relay_conn_open(struct relay_pool *pool, unsigned port, int family,
				   loop_fd_cb cb, void *arg, bool *connecting, struct error *err);
/* Closed, and freed after the loop's batch (a watch may point at it). */
void relay_conn_close(struct relay_pool *pool, struct relay_conn *c);

/* An idle connection to port (unlinked, still watched), or NULL. */
struct relay_conn *relay_pool_take(struct relay_pool *pool, unsigned port);
/* c, that can carry another request, kept idle; false when it was closed
 * instead. Full: the least recently used one of the port, else of all,
 * makes room. */
bool relay_pool_put(struct relay_pool *pool, struct relay_conn *c);
/* Idle connections past their time are closed (checked once a second at
 * most, whatever now's rate). */
void relay_pool_check(struct relay_pool *pool, uint64_t now_ms);
/* Every idle connection closed (a new tenant, or the end). */
void relay_pool_flush(struct relay_pool *pool);
/* A request of tenant gen: the idle connections of another are closed (a
 * pool holds connections to the servers of one tenant only). */
void relay_pool_tenant(struct relay_pool *pool, uint64_t gen);
