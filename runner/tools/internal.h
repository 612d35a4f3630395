/* What the tools of the tool layer share (tools.h is the interface). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "files/userjob.h"
#include "tools/tools.h"

/* Output kept of a long stream: its head and its tail, with what was left out counted. */
struct tool_outcap {
	struct buf head, tail;
	uint64_t total;
	size_t half;
};
void tool_outcap_init(struct tool_outcap *o, uint64_t max);
void tool_outcap_add(struct tool_outcap *o, const char *p, size_t n);
/* head, a marker naming the bytes left out, tail (raw bytes). */
void tool_outcap_render(const struct tool_outcap *o, struct buf *out);
bool tool_outcap_truncated(const struct tool_outcap *o);
void tool_outcap_free(struct tool_outcap *o);

struct tool_call {
	struct runner *r;
	const struct tool_call_ops *ops;
	void *arg;
	struct tool_ctx ctx; /* ctx.env referenced */
	struct tool_result res;
	bool cancelled;
	/* A files job (fileio.c, listing.c): slices as the task user (files/userjob.h), whose
	 * uj.id is the task user. */
	struct files_userjob uj;
	int (*step)(struct tool_call *c, uint64_t deadline_ms); /* 1 more, 0 done (res set) */
	void (*release)(struct tool_call *c);                   /* frees state, stops a command */
	void *state;
	bool as_user; /* a files job: release runs as the task user */
	/* A command (command.c). */
	struct task *child;
	struct task_reader rd;
	bool rd_attached;
	struct tool_outcap all, out, err;
	uint64_t started_ms;
	/* run_command with changes: a checkpoint before (its id), a diff after. */
	bool changes;
	bool checkpoint_waiting; /* a checkpoint operation will call back */
	json_t *cmd_args;        /* kept until the command starts */
	char checkpoint_id[24];
};

/* Each tool: 0 when done (c->res set), 1 when it goes on (tool_call_finish later). */
typedef int (*tool_start_fn)(struct tool_call *c, json_t *args);
int tool_run_command(struct tool_call *c, json_t *args);
int tool_read_file(struct tool_call *c, json_t *args);
int tool_write_file(struct tool_call *c, json_t *args);
int tool_edit_file(struct tool_call *c, json_t *args);
int tool_list_directory(struct tool_call *c, json_t *args);
int tool_search_files(struct tool_call *c, json_t *args);
int tool_grep(struct tool_call *c, json_t *args);
int tool_checkpoint_create(struct tool_call *c, json_t *args);
int tool_checkpoint_diff(struct tool_call *c, json_t *args);
int tool_checkpoint_restore(struct tool_call *c, json_t *args);

struct tool_call *tool_call_new(struct runner *r, const struct tool_ctx *ctx,
				const struct tool_call_ops *ops, void *arg);
/* Its release hook (as the task user for a files job), its context. */
void tool_call_free(struct tool_call *c);
/* An async call is over: done() gets the result, then the call is freed. */
void tool_call_finish(struct tool_call *c);
/* Run c->step as a files job: its first slice now; 0 when that was all, 1 when it goes on
 * in the loop's slices (files/sched.h), or 0 with an error result. */
int tool_files_run(struct tool_call *c);

/* Arguments. Each returns 0, or -1 with an error result set. */
int tool_arg_path(struct tool_call *c, json_t *args, const char *key, char *out, size_t outsz);
int tool_arg_str(struct tool_call *c, json_t *args, const char *key, bool required,
		 const char **out, size_t *len);
int tool_arg_uint(struct tool_call *c, json_t *args, const char *key, uint64_t max, uint64_t *out);
int tool_arg_bool(struct tool_call *c, json_t *args, const char *key, bool *out);
/* A -errno of the files layer as an error result naming op and path, in the files API's
 * words (files/fserror.h). Returns 0. */
int tool_fs_error(struct tool_call *c, int rc, const char *op, const char *path);
