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

int ckpt_init(struct runner *r, struct error *e);
void ckpt_abort(struct runner *r); /* at exit: a waiting request is answered */
void ckpt_free_all(struct runner *r);
/* Every checkpoint forgotten, the store moved aside (reset). */
void ckpt_drop_all(struct runner *r);
/* A restore is running: no task starts. */
bool ckpt_restoring(struct runner *r);

/* The long operations: 0 when started (done(arg, status, body) is called later, from the
 * loop, with the answer, the body the receiver's), or -1 with e set. args (borrowed; NULL:
 * {}): create {paths?, label?}; diff {to?, patch?}; restore {stop_tasks?}; delete none. One
 * operation at a time (409 CHECKPOINT_BUSY). */
enum ckpt_op { CKPT_CREATE = 1, CKPT_DIFF, CKPT_RESTORE, CKPT_DELETE };
/* For whom an operation acts (docs/design/checkpoints.md#checkpoints-undo-for-agents, "For whom"):
 * the control plane's own routes act as the runner; what an agent or a task reaches (the MCP tools,
 * run_command's and a task's "changes") acts with the task user's rights: it lists, shows and
 * writes back only what that user could see, read and write. */
enum ckpt_actor { CKPT_FOR_GATEWAY = 0, CKPT_FOR_TASK };
typedef void (*ckpt_done_fn)(void *arg, unsigned status, json_t *body);
int ckpt_start(struct runner *r, enum ckpt_op op, enum ckpt_actor actor, const char *id,
	       json_t *args, ckpt_done_fn done, void *arg, struct error *e);
/* The receiver arg went away: done is not called (the operation still ends). */
void ckpt_forget_waiter(struct runner *r, void *arg);
/* Answered at once: NULL with e set on failure. */
/* A diff answer's changes as three path lists (added, modified, deleted;
 * at most CKPT_CHANGES_LISTED paths each, new references): what a task's
 * exit event and the run_command tool show. */
#define CKPT_CHANGES_LISTED 100
void ckpt_change_lists(json_t *diff, json_t *lists[3]);
json_t *ckpt_list(struct runner *r, struct error *e);
json_t *ckpt_get(struct runner *r, const char *id, struct error *e);

/* What a task changed (POST /v1/tasks "changes";
 * docs/design/checkpoints.md#checkpoints-undo-for-agents). The checkpoint before it, of its cwd
 * when that lies in a writable root (else of every root), queued behind a running operation (not
 * 409): done as for ckpt_start. */
int ckpt_task_before(struct runner *r, const char *cwd, ckpt_done_fn done, void *arg,
		     struct error *e);
/* Before the task starts: spec gets the exit hold that puts exit.checkpoint (ck_id) and
 * exit.changes (the diff, bounded; or ck_id NULL: why there is none) into its exit event.
 * from_ms: when the checkpoint was asked for (the window other tasks are looked for in).
 * -ENOMEM. */
int ckpt_task_watch(struct runner *r, struct task_spec *spec, const char *ck_id, const char *why,
		    uint64_t from_ms);
/* The task did not start: the watch in spec is dropped. */
void ckpt_task_unwatch(struct task_spec *spec);
