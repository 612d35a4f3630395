/* Connection admission for the HTTP daemons: see gate.h. */
#include "http/gate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "audit/trail.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/list.h"
#include "http/peer.h"

#define SWEEP_MS 250       /* deadline resolution */
#define LOG_EVERY_MS 10000 /* refusals are summed up, not logged one by one */

struct gate_client {
	char key[64]; /* "uid:N" inside the box, the address outside */
	unsigned n;
	struct gate_client *next;
};

struct gate_conn {
	struct gate *g;
	int fd;
	bool refused;
	uint64_t deadline; /* monotonic ms by which the head must be in; 0 = none */
	uid_t uid;         /* in-box owner, (uid_t)-1 outside */
	struct gate_client *client;
	struct gate_conn *next, *prev;
};

struct gate {
	struct runner *r;
	struct gate_policy pol;
	struct peer_diag diag;
	int diag_errno; /* the self-test at start: 0 = the lookup works */
	struct gate_conn *conns;
	unsigned n_conns;
	struct gate_client *clients;
	struct loop_timer sweep;
	/* Counters, logged at most every LOG_EVERY_MS. */
	uint64_t refused_task, refused_unknown, refused_limit, closed_slow, logged_total;
	uint64_t last_log_ms;
};

unsigned gate_connection_limit(unsigned want, unsigned share)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return want;
	/* Keep 256 fds for tasks' pipes, spools, timers and the gateway. */
	rlim_t room = rl.rlim_cur > 512 ? (rl.rlim_cur - 256) / share : 128 / share;
	return room < want ? (unsigned)room : want;
}

static void maybe_log(struct gate *g, bool force)
{
	uint64_t total = g->refused_task + g->refused_unknown + g->refused_limit + g->closed_slow;
	uint64_t now = monotonic_ms();
	if (total == g->logged_total || (!force && now - g->last_log_ms < LOG_EVERY_MS))
		return;
	log_warn("connections refused or closed", "{s:s,s:I,s:I,s:I,s:I}", "server", g->pol.name,
		 "from_tasks", (json_int_t)g->refused_task, "owner_unknown",
		 (json_int_t)g->refused_unknown, "over_client_limit", (json_int_t)g->refused_limit,
		 "head_too_slow", (json_int_t)g->closed_slow);
	g->logged_total = total;
	g->last_log_ms = now;
}

static void sweep_arm(struct gate *g)
{
	if (!g->sweep.armed)
		loop_timer_start(&g->r->loop, &g->sweep, SWEEP_MS, SWEEP_MS);
}

static void on_sweep(struct loop *loop, struct loop_timer *t)
{
	struct gate *g = t->arg;
	uint64_t now = monotonic_ms();
	bool pending = false;
	for (struct gate_conn *gc = g->conns; gc; gc = gc->next) {
		if (!gc->deadline)
			continue;
		if (now < gc->deadline) {
			pending = true;
			continue;
		}
		/* libmicrohttpd sees the end of the socket and closes it. */
		gc->deadline = 0;
		g->closed_slow++;
		if (shutdown(gc->fd, SHUT_RDWR) < 0 && errno != ENOTCONN)
			log_errno("shutdown(slow connection) failed", errno, g->pol.name);
	}
	if (!pending)
		loop_timer_stop(loop, t);
	maybe_log(g, false);
}

struct gate *gate_new(struct runner *r, const struct gate_policy *pol)
{
	/* Refusing tasks without knowing who they are would admit them all. */
	if (pol->refuse_tasks && (!pol->tasks || !pol->tasks->is_task_uid)) {
		log_error("no task identity policy for a door that refuses tasks", "{s:s}",
			  "server", pol->name);
		return NULL;
	}
	struct gate *g = calloc(1, sizeof(*g));
	if (!g) {
		log_error("out of memory", "{s:s}", "server", pol->name);
		return NULL;
	}
	g->r = r;
	g->pol = *pol;
	int rc = peer_diag_open(&g->diag);
	if (rc == 0)
		rc = peer_diag_selftest(&g->diag);
	g->diag_errno = -rc;
	if (rc < 0 && pol->refuse_tasks)
		log_warn("in-box peers cannot be identified (sock_diag): every connection from "
			 "inside the box is refused",
			 "{s:s,s:s}", "server", pol->name, "error", strerror(-rc));
	if (loop_timer_init(&r->loop, &g->sweep, on_sweep, g) < 0) {
		log_errno("timerfd_create failed", errno, pol->name);
		peer_diag_close(&g->diag);
		free(g);
		return NULL;
	}
	return g;
}

void gate_free(struct gate *g)
{
	if (!g)
		return;
	maybe_log(g, true);
	while (g->conns) {
		struct gate_conn *gc = g->conns;
		g->conns = gc->next;
		free(gc);
	}
	while (g->clients) {
		struct gate_client *c = g->clients;
		g->clients = c->next;
		free(c);
	}
	loop_timer_close(&g->r->loop, &g->sweep);
	peer_diag_close(&g->diag);
	free(g);
}

static struct gate_client *client_get(struct gate *g, const char *key)
{
	for (struct gate_client *c = g->clients; c; c = c->next)
		if (!strcmp(c->key, key))
			return c;
	struct gate_client *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	snprintf(c->key, sizeof(c->key), "%s", key);
	c->next = g->clients;
	g->clients = c;
	return c;
}

static void client_put(struct gate *g, struct gate_client *c)
{
	if (--c->n)
		return;
	for (struct gate_client **p = &g->clients; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	free(c);
}

/* The audit trail's door of this daemon (docs/design/audit.md): the model
 * proxy's, a port proxy's, or the API's. */
static const char *gate_door(const struct gate *g)
{
	if (!strcmp(g->pol.name, "model proxy"))
		return "model";
	return strstr(g->pol.name, "proxy") ? "proxy" : "native";
}

/* Is this new connection refused? Counts it against its client if not.
 * key: who it is, "uid:N" inside the box, "unknown:ADDR" inside with no
 * owner found, "addr:ADDR" outside (the per-client count's key and the
 * audit trail's source). */
static bool admit(struct gate *g, struct gate_conn *gc, struct peer *pp, const char **why,
		  char key[64])
{
	struct peer p;
	peer_identify(&g->diag, gc->fd, &p);
	*pp = p;
	gc->uid = (uid_t)-1;
	switch (p.kind) {
	case PEER_IN_BOX:
		gc->uid = p.uid;
		snprintf(key, 64, "uid:%u", (unsigned)p.uid);
		if (g->pol.refuse_tasks && g->pol.tasks->is_task_uid(g->r, p.uid)) {
			g->refused_task++;
			*why = "a task's connection";
			return false;
		}
		break;
	case PEER_UNKNOWN:
		snprintf(key, 64, "unknown:%s", p.addr);
		if (g->pol.refuse_tasks) {
			g->refused_unknown++;
			*why = "owner unknown (fail closed)";
			return false;
		}
		break;
	case PEER_OUTSIDE:
	default:
		snprintf(key, 64, "addr:%s", p.addr);
		break;
	}
	struct gate_client *c = client_get(g, key);
	if (!c || (g->pol.max_per_client && c->n >= g->pol.max_per_client)) {
		g->refused_limit++;
		*why = "over the per-client connection limit";
		return false;
	}
	c->n++;
	gc->client = c;
	return true;
}

void gate_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		 enum MHD_ConnectionNotificationCode code)
{
	struct gate *g = cls;
	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		struct gate_conn *gc = *socket_context;
		if (!gc)
			return;
		*socket_context = NULL;
		LIST_UNLINK(g->conns, gc);
		g->n_conns--;
		if (gc->client)
			client_put(g, gc->client);
		free(gc);
		return;
	}
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct gate_conn *gc = calloc(1, sizeof(*gc));
	if (!gc || !ci) {
		/* Without a record nothing here can vouch for it. */
		free(gc);
		if (ci && shutdown(ci->connect_fd, SHUT_RDWR) < 0 && errno != ENOTCONN)
			log_errno("shutdown(refused connection) failed", errno, g->pol.name);
		return;
	}
	gc->g = g;
	gc->fd = ci->connect_fd;
	LIST_PUSH(g->conns, gc);
	g->n_conns++;
	*socket_context = gc;
	struct peer p;
	const char *why = NULL;
	char key[64];
	if (!admit(g, gc, &p, &why, key)) {
		gc->refused = true;
		/* A refused connection proved nothing: its event is its source's,
		 * bound and coalesced apart from the client's
		 * (design/audit.md#bounds-tasks-cannot-read-write-suppress-flood-or-crowd-it). */
		audit_emit_from(g->r, key, gate_door(g), "connection refused",
				json_pack("{s:{s:s,s:i},s:s,s:s}", "who", "client", p.addr, "uid",
					  p.kind == PEER_IN_BOX ? (int)p.uid : -1, "outcome",
					  "refused", "reason", why ? why : "refused"));
		if (shutdown(gc->fd, SHUT_RDWR) < 0 && errno != ENOTCONN)
			log_errno("shutdown(refused connection) failed", errno, g->pol.name);
		maybe_log(g, false);
		return;
	}
	gc->deadline = monotonic_ms() + g->pol.first_head_ms;
	sweep_arm(g);
}

static struct gate_conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

bool gate_request_begins(struct MHD_Connection *c, uid_t *uid)
{
	struct gate_conn *gc = conn_of(c);
	if (!gc || gc->refused)
		return false;
	gc->deadline = 0;
	if (uid)
		*uid = gc->uid;
	return true;
}

void gate_request_ends(struct MHD_Connection *c)
{
	struct gate_conn *gc = conn_of(c);
	if (!gc || gc->refused)
		return;
	if (!gc->g->pol.next_head_ms)
		return; /* 0 = none */
	gc->deadline = monotonic_ms() + gc->g->pol.next_head_ms;
	sweep_arm(gc->g);
}

json_t *gate_report(const struct gate *g)
{
	json_t *o = json_object();
	if (g->pol.refuse_tasks) {
		char uids[160] = "";
		if (g->pol.tasks->describe)
			g->pol.tasks->describe(g->r, uids, sizeof(uids));
		const char *how = g->diag_errno
					  ? strerror(g->diag_errno)
					  : "sock_diag (inet_diag owner uid of the peer socket)";
		json_object_set_new(o, "in_box_connections",
				    json_pack("{s:s,s:s,s:s}", "refused_uids", uids,
					      "owner_unknown", "refused (fail closed)",
					      "identified_by", how));
	}
	json_object_set_new(o, "max_per_client", json_integer(g->pol.max_per_client));
	json_object_set_new(o, "head_deadline_ms", json_integer((json_int_t)g->pol.first_head_ms));
	json_object_set_new(o, "next_head_deadline_ms",
			    json_integer((json_int_t)g->pol.next_head_ms));
	return o;
}
