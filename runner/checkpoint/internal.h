/* What the checkpoint feature's files share (checkpoint.c: the list and the operations;
 * roots.c: the paths opened; worker.c: the worker process and its answers; taskchanges.c: a
 * task's changes), and nobody else: see checkpoint.h. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "checkpoint/checkpoint.h"
#include "core/loop.h"
#include "files/ident.h"
#include "tree/tree.h"

struct runner;
struct error;

struct checkpoint {
	char id[20];
	char *label;
	uint64_t created_ms;
	json_t *paths; /* array of strings */
	json_t *info;  /* the worker's figures */
	struct checkpoint *next;
};

enum op { OP_NONE, OP_CREATE, OP_DIFF, OP_RESTORE, OP_DELETE };

/* An operation for a task's changes that found another running: it starts when that one
 * ends (a client's request is answered 409 instead: it can retry, a task's exit cannot). */
struct queued {
	enum checkpoint_op op;
	char id[20];
	json_t *args; /* a create's body (owned), or NULL */
	checkpoint_done_fn done;
	void *arg;
	struct queued *next;
};

struct checkpoints {
	struct runner *r;
	struct checkpoint *head; /* oldest first */
	unsigned n;
	uint64_t store_bytes;
	bool store_known; /* store_bytes measured (after a delete: by the worker) */
	const char *unavailable;
	/* the operation running */
	enum op op;
	enum checkpoint_actor actor; /* for whom it acts */
	bool follow; /* a task's exit diff: its path as the task user resolves it now */
	struct files_ident task_id;
	char *open_paths[TREE_MAX_ROOTS]; /* where a root was opened, when not its path */
	json_t *resolved;                 /* [{path, now}]: the paths followed */
	pid_t worker;
	bool worker_running;
	int out_fd;
	checkpoint_done_fn done; /* who waits for the answer (NULL: gone) */
	void *done_arg;
	struct checkpoint *pending; /* being created */
	struct checkpoint *target;  /* diff/restore: the checkpoint; delete: the one removed */
	struct checkpoint *to;      /* diff ?to= */
	bool patch;
	struct tree_root roots[TREE_MAX_ROOTS];
	char *root_paths[TREE_MAX_ROOTS];
	unsigned n_roots;
	uint64_t t0;
	struct loop_timer stop_timer; /* restore with stop_tasks: waits for them */
	bool timer_open;
	uint64_t stop_t0;
	struct queued *queue;         /* FIFO */
	struct tree_changes *changes; /* what changed since the last checkpoint (dirty.c) */
	struct loop_watch changes_w;
};

/* ---- the list and the operations (checkpoint.c) ---- */
/* An operation for a task's changes, queued behind the one running. */
int checkpoint_start_queued(struct runner *r, enum checkpoint_op op, const char *id, json_t *args,
			    checkpoint_done_fn done, void *arg, struct error *e);
/* ---- roots (roots.c) ---- */
void checkpoint_close_roots(struct checkpoints *c);
int checkpoint_open_roots(struct checkpoints *c, json_t *paths, bool may_be_missing,
			  struct error *e);
json_t *checkpoint_default_paths(struct runner *r);
bool checkpoint_in_a_root(struct runner *r, const char *path);
/* ---- the worker process (worker.c): does the operation c->op, writes its answer to
 * c->out_fd, exits. ---- */
_Noreturn void checkpoint_worker_main(struct checkpoints *c);
/* ---- the change tracker on the loop (dirty.c) ---- */
void checkpoint_dirty_init(struct checkpoints *c);
void checkpoint_dirty_free(struct checkpoints *c);
void checkpoint_dirty_before_fork(struct checkpoints *c);
void checkpoint_dirty_forked(struct checkpoints *c);
void checkpoint_dirty_drop(struct checkpoints *c);
void checkpoint_dirty_worker(struct checkpoints *c, struct tree_store *s, const char *prev_id);
void checkpoint_dirty_report(struct checkpoints *c, json_t *w);
void checkpoint_dirty_answer(struct checkpoints *c, json_t *w, bool ok);
