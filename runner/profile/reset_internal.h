/* What the reset's files share (reset.c: the state machine, the answer, the worker;
 * reset_sweep.c: the /proc sweep), and nobody else: see reset.c. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/loop.h"
#include "tree/snapshot.h"

struct runner;
struct http_req;

#define STEP_MS 10
#define KILL_DEADLINE_MS 10000
#define DRAIN_DEADLINE_MS 5000
#define STREAM_GRACE_MS 1000 /* to take the terminal event */
#define STREAM_DEADLINE_MS 3000
#define FILES_DEADLINE_MS 600000

enum phase { R_IDLE, R_PROCESSES, R_DRAIN, R_STREAMS, R_FILES };

struct reset {
	struct runner *r;
	struct snapshot snap;
	char *skipped_roots;
	enum phase phase;
	char failed[256]; /* the last reset's failure; "" = none */
	struct http_req *waiter;
	struct loop_timer timer;
	uint64_t t0, phase_t0;
	uint64_t ms_processes, ms_streams, ms_files;
	bool streams_forced;
	uint64_t longest_step_ms; /* the loop's longest stretch in the reset's own code */

	unsigned tasks, sessions, ptys, tokens, proxy_requests, streams, records;
	unsigned conversations; /* of agent tasks, forgotten */
	uint64_t log_bytes;
	pid_t *killed; /* task processes signalled (the shims not counted) */
	size_t n_killed, cap_killed;
	pid_t *shims; /* sorted */
	size_t n_shims;

	pid_t worker;
	bool worker_running;
	int worker_fd;
	int worker_status;

	/* The EXECD_ENVS file as it was at start: tasks may write it (the
	 * SDK's set_env), and it may lie outside every snapshotted root. */
	struct {
		bool had;
		char *data;
		size_t len;
		uid_t uid;
		gid_t gid;
		mode_t mode;
	} envs;
};

#define ENVS_MAX (1u << 20)

/* ---- the /proc sweep (reset_sweep.c) ---- */
/* SIGSTOP then SIGKILL to every process a reset ends; how many are left. */
int reset_sweep(struct reset *rs);
/* The task processes signalled, each counted once. */
unsigned reset_distinct_killed(struct reset *rs);
int reset_cmp_pid(const void *a, const void *b);
/* A small /proc file into buf (NUL-terminated); 0 or -errno. */
int reset_read_small(const char *path, char *buf, size_t len);
