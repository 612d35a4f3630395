/* What the reset's files share (reset.c: the state machine, the answer, the worker;
 * reset_sweep.c: the /proc sweep; reset_snapshot.c: the writable roots as they were, on the
 * file-tree engine), and nobody else: see reset.c. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/loop.h"
#include "tree/tree.h"

struct runner;
struct http_req;
struct error;

#define STEP_MS 10
#define KILL_DEADLINE_MS 10000
#define DRAIN_DEADLINE_MS 5000
#define STREAM_GRACE_MS 1000 /* to take the terminal event */
#define STREAM_DEADLINE_MS 3000
#define FILES_DEADLINE_MS 600000

/* The writable roots at start: a manifest of the file-tree engine (tree/tree.h) in shared
 * memory, the content in a pack store (one unnamed file), the roots held open. */
struct reset_snapshot {
	struct tree_root roots[TREE_MAX_ROOTS];
	uint64_t ino[TREE_MAX_ROOTS]; /* each root's directory, held open in roots[].fd */
	unsigned n_roots;
	struct tree_store store;
	struct tree_manifest m;
};

enum phase { R_IDLE, R_PROCESSES, R_DRAIN, R_STREAMS, R_FILES };

struct reset {
	struct runner *r;
	struct reset_snapshot snap;
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

/* ---- the snapshot (reset_snapshot.c) ---- */
void reset_snapshot_init(struct reset_snapshot *s);
/* Walk the roots (missing ones skipped and named in *skipped, a malloc'd colon-separated list
 * or NULL) into the manifest and the pack; the state dir and the roots inside another one
 * are left out of its walk. 0, or -1 with e set. */
int reset_snapshot_take(struct reset_snapshot *s, const char *const *roots, unsigned n_roots,
			int state_fd, uint64_t max_bytes, char **skipped, struct error *e);
/* In the worker: every root made the snapshot again (tree_restore, strict). 0, or -1 with e
 * set (st holds what was done). */
int reset_snapshot_restore(struct reset_snapshot *s, struct tree_restore_stats *st,
			   struct error *e);
/* The descriptors a restore needs, for a worker that closes every other one. */
unsigned reset_snapshot_fds(const struct reset_snapshot *s, int *fds, unsigned max);
void reset_snapshot_free(struct reset_snapshot *s);

/* ---- the /proc sweep (reset_sweep.c) ---- */
/* SIGSTOP then SIGKILL to every process a reset ends; how many are left. */
int reset_sweep(struct reset *rs);
/* The task processes signalled, each counted once. */
unsigned reset_distinct_killed(struct reset *rs);
int reset_cmp_pid(const void *a, const void *b);
/* A small /proc file into buf (NUL-terminated); 0 or -errno. */
int reset_read_small(const char *path, char *buf, size_t len);
