/* The door of an HTTP daemon (docs/design/security.md#no-api-from-tasks,
 * docs/design/security.md#bounded-connections): every connection libmicrohttpd accepts passes
 * here first (MHD_OPTION_NOTIFY_CONNECTION), refused when it comes from a task (the task
 * engine's policy, handed in as struct gate_tasks: this layer does not know it; fail closed when
 * the owner is unknown: peer.h), beyond max_per_client, or without a complete head in time.
 * Refusing = shutdown(2) of the socket at once; gate_request_begins() refuses a request that was
 * already buffered, before any handler runs. */
#pragma once
#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct runner;
struct gate;

/* Who is a task: what the layer that runs them decides (task/task_uids.h). */
struct gate_tasks {
	/* Is uid one a task can have (and not the runner's own)? */
	bool (*is_task_uid)(const struct runner *r, uid_t uid);
	/* Those uids in words, for the report (GET /v1/hardening). */
	void (*describe)(const struct runner *r, char *buf, size_t len);
};

struct gate_policy {
	const char *name; /* for logs: "http", "model proxy" */
	bool refuse_tasks;
	const struct gate_tasks *tasks; /* refuse_tasks: required (gate_new fails without) */
	unsigned max_per_client;        /* 0: no limit */
	uint64_t first_head_ms;
	uint64_t next_head_ms;
};

/* NULL on failure (out of memory, or refuse_tasks without tasks; logged). */
struct gate *gate_new(struct runner *r, const struct gate_policy *pol);
/* After MHD_stop_daemon (which still reports closed connections). */
void gate_free(struct gate *g);
/* MHD_OPTION_NOTIFY_CONNECTION, with the gate as its closure. */
void gate_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		 enum MHD_ConnectionNotificationCode code);
/* First call of the access handler (the head is complete): false = the
 * connection is refused, answer MHD_NO. *uid is the in-box owner, or
 * (uid_t)-1 for a client outside the box. */
bool gate_request_begins(struct MHD_Connection *c, uid_t *uid);
/* MHD_OPTION_NOTIFY_COMPLETED: the next head's deadline starts. */
void gate_request_ends(struct MHD_Connection *c);
/* What is in force, for GET /v1/hardening. New reference. */
json_t *gate_report(const struct gate *g);
/* The connection limit of a daemon that wants `want`, given RLIMIT_NOFILE
 * (the fds of tasks, spools and the other daemon must still fit). */
unsigned gate_connection_limit(unsigned want, unsigned share);
