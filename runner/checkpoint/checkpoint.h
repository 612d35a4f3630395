/* Workspace checkpoints (POST /v1/checkpoints and the routes below it;
 * docs/design/checkpoints.md#checkpoints-undo-for-agents): the list kept by the runner, one
 * operation at a time done by a worker process (checkpoint/worker.c, on tree/tree.h), answers to
 * requests that wait suspended. Dropped by POST /v1/reset. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct runner;
struct error;
struct task_spec;

int checkpoint_init(struct runner *r, struct error *e);
void checkpoint_abort(struct runner *r); /* at exit: a waiting request is answered */
void checkpoint_free_all(struct runner *r);
/* Every checkpoint forgotten, the store moved aside (reset). */
void checkpoint_drop_all(struct runner *r);
/* A restore is running: no task starts. */
bool checkpoint_restoring(struct runner *r);

/* The long operations: 0 when started (done(arg, status, body) is called later, from the
 * loop, with the answer, the body the receiver's), or -1 with e set. args (borrowed; NULL:
 * {}): create {paths?, label?}; diff {to?, patch?}; restore {stop_tasks?}; delete none. One
 * operation at a time (409 CHECKPOINT_BUSY). */
enum checkpoint_op {
	CHECKPOINT_CREATE = 1,
	CHECKPOINT_DIFF,
	CHECKPOINT_RESTORE,
	CHECKPOINT_DELETE
};
/* For whom an operation acts (docs/design/checkpoints.md#checkpoints-undo-for-agents, "For whom"):
 * the control plane's own routes act as the runner; what an agent or a task reaches (the MCP tools,
 * run_command's and a task's "changes") acts with the task user's rights: it lists, shows and
 * writes back only what that user could see, read and write. */
enum checkpoint_actor { CHECKPOINT_FOR_GATEWAY = 0, CHECKPOINT_FOR_TASK };
typedef void (*checkpoint_done_fn)(void *arg, unsigned status, json_t *body);
int checkpoint_start(struct runner *r, enum checkpoint_op op, enum checkpoint_actor actor,
		     const char *id, json_t *args, checkpoint_done_fn done, void *arg,
		     struct error *e);
/* The receiver arg went away: done is not called (the operation still ends). */
void checkpoint_forget_waiter(struct runner *r, void *arg);
/* Answered at once: NULL with e set on failure. */
/* A diff answer's changes as three path lists (added, modified, deleted;
 * at most CHECKPOINT_CHANGES_LISTED paths each, new references): what a task's
 * exit event and the run_command tool show. */
#define CHECKPOINT_CHANGES_LISTED 100
void checkpoint_change_lists(json_t *diff, json_t *lists[3]);
json_t *checkpoint_list(struct runner *r, struct error *e);
json_t *checkpoint_get(struct runner *r, const char *id, struct error *e);

/* What a task changed (POST /v1/tasks "changes";
 * docs/design/checkpoints.md#checkpoints-undo-for-agents). The checkpoint before it, of its cwd
 * when that lies in a writable root (else of every root), queued behind a running operation (not
 * 409): done as for checkpoint_start. */
int checkpoint_task_before(struct runner *r, const char *cwd, checkpoint_done_fn done, void *arg,
			   struct error *e);
/* Before the task starts: spec gets the exit hold that puts exit.checkpoint (checkpoint_id) and
 * exit.changes (the diff, bounded; or checkpoint_id NULL: why there is none) into its exit event.
 * from_ms: when the checkpoint was asked for (the window other tasks are looked for in).
 * -ENOMEM. */
int checkpoint_task_watch(struct runner *r, struct task_spec *spec, const char *checkpoint_id,
			  const char *why, uint64_t from_ms);
/* The task did not start: the watch in spec is dropped. */
void checkpoint_task_unwatch(struct task_spec *spec);
