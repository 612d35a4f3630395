/* Interactive tasks: a terminal (PTY) or a stdin pipe kept open, input
 * written with backpressure, window size, and signals to the task's process
 * group. The task engine (task.c) calls the task_io_* hooks; the APIs use
 * the task_input_* / task_resize / task_signal calls. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/loop.h"
#include "core/buf.h"

struct task;
struct task_spec;
struct error;

/* Input waiting in the runner for the task beyond this: writers must
 * wait (task_input_wait) before giving more. */
#define TASK_INPUT_HIGH (64u * 1024)

/* A writer waiting for room (or for the input to end). */
struct task_input_waiter {
	void (*ready)(struct task_input_waiter *w);
	struct task_input_waiter *next, *prev;
	bool linked;
};

struct task_input {
	struct task *t;
	int fd; /* pipe write end, or the PTY master (a dup); -1 once closed */
	bool tty;
	int master;          /* PTY master for ioctls (a dup), or -1 */
	struct loop_watch w; /* EPOLLOUT while bytes are pending */
	struct buf pending;
	bool eof_requested;
	bool mid_line; /* the last byte written was not a newline */
	unsigned short cols, rows;
	struct task_input_waiter *waiters;
};

/* Set up before spawning. On success *child_in (and for a PTY also the
 * task's stdout/stderr: *child_out) are the fds the task gets, -1 where the
 * caller keeps its defaults; *parent_out is the PTY master to read output
 * from (-1 without a PTY). Everything is closed on failure. */
struct task_io_prep {
	int child_in, child_out;
	int parent_in, parent_out;
	bool tty;
	unsigned short cols, rows;
};
#define TASK_IO_PREP_INIT                                                                          \
	{                                                                                          \
		-1, -1, -1, -1, false, 0, 0                                                        \
	}
int task_io_prepare(const struct task_spec *spec, struct task_io_prep *p, struct error *err);
/* After the spawn: the child's ends are closed here, the input attached
 * to t. -errno (the task runs on, without input) or 0. */
int task_io_attach(struct task *t, struct task_io_prep *p);
void task_io_abort(struct task_io_prep *p);
#define cleanup_task_io __attribute__((cleanup(task_io_abort)))
/* The task is finished: input closed, waiters told. */
void task_io_finish(struct task *t);
/* The record is freed. */
void task_io_free(struct task *t);

/* Whether the task takes input at the moment. */
bool task_input_open(struct task *t);
/* Queue bytes for the task (they are written as it reads). 0, or -1 with
 * err when the task has no (more) input. Callers keep to the high mark:
 * once task_input_busy(), wait before writing more. */
int task_input_write(struct task *t, const void *data, size_t len, struct error *err);
bool task_input_busy(struct task *t);
/* Bytes queued that the task has not taken yet (0 without input). */
size_t task_input_queued(struct task *t);
/* ready() once input is under half the high mark, or closed. */
void task_input_wait(struct task *t, struct task_input_waiter *w);
void task_input_unwait(struct task *t, struct task_input_waiter *w);
/* End of input once what is queued is written (a PTY gets ^D, its EOF
 * character, at the start of a line: the terminal's own way). */
int task_input_eof(struct task *t, struct error *err);

/* Terminal size of a PTY task (SIGWINCH follows from the kernel). */
int task_resize(struct task *t, unsigned cols, unsigned rows, struct error *err);
/* Deliver sig to the task's process group (foreground: the terminal's
 * foreground process group instead, as a key typed there would). */
int task_signal(struct task *t, int sig, bool foreground, struct error *err);
/* The signals a client may send, by name ("SIGINT" or "INT"); 0 if not. */
int task_signal_parse(const char *name);
