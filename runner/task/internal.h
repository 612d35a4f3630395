/* What the task engine's files share among themselves, not with the rest of the runner
 * (task/task.h is that). The files use each other in this order only, so the module graph
 * keeps no cycle: start.c, records.c, task.c (the lifecycle), output.c. */
#pragma once
#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/loop.h"

struct task;
struct task_spec;

/* A mapped writer that has read nothing for this long (a server after its burst, with nothing
 * more to say) gives its map slot back at the next tick (records.c, tasks_tick). */
#define TASK_QUIET_UNMAP_MS 1000
/* A writer held back by its reader keeps its slot while the reader catches up, but a reader
 * that stopped for this long keeps no slot from the other bulk writers: the task maps again at
 * its next wrap. */
#define TASK_PAUSED_UNMAP_MS 5000

/* output.c: the pipes into the spool, and the readers. */
/* 0, or -errno with fds {-1, -1}: no drain pipe, bulk output is read. */
int task_drain_open(int fds[2]);
void task_drain_close(int fds[2]);
void task_on_rest_over(struct loop *loop, struct loop_timer *timer);
void task_on_output(struct loop *loop, struct loop_watch *w, uint32_t events);
void task_wake_readers(struct task *t);
/* Out of the resting list (the record goes). */
void task_rest_forget(struct task *t);
void task_log_mapping(struct task *t, const char *why_unmapped);
void task_append_event(struct task *t, const char *name, json_t *data);
/* which: 0 stdout, 1 stderr. */
void task_close_pipe(struct task *t, int which);
/* Everything in the pipes now into the spool, whatever backpressure says (the main process
 * has exited: its output is complete and goes before its exit event). */
void task_output_drain(struct task *t);
/* From now on the pipes are read and their bytes dropped (t->linger_dropped): the output of
 * left-behind processes after the exit event
 * (docs/design/tasks.md#left-behind-processes-kept-supervised). */
void task_output_discard(struct task *t);

/* task.c: the lifecycle. */
/* Finalize a process task once its process is gone and its pipes are closed. */
void task_maybe_finalize(struct task *t);
void task_on_timer(struct loop *loop, struct loop_timer *timer);
void task_on_exit(void *arg, pid_t pid, int status);
/* The shim's status pipe (task/spawn.h): the main process's status, or EOF. */
void task_on_linger(struct loop *loop, struct loop_watch *w, uint32_t events);
void task_linger_close(struct task *t);
void task_audit_started(struct task *t, const struct task_spec *spec);
void task_audit_ended(struct task *t, json_t *exit_ev);

/* records.c: the table. */
/* Into the table (the hooks' started runs). */
void task_link(struct task *t);
/* The one teardown, whatever state the record is in. */
void task_free(struct task *t);
