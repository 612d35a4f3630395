/* The tool layer (docs/design/mcp-tools.md): what an agent may do to the box, written once and
 * used by every door an agent comes through (/mcp, mcp/session.c; the built-in agent loop,
 * model/agent.c). Each tool has a name, a description and a JSON Schema of its arguments
 * (registry.c); commands run as confined tasks (command.c), file tools act as the task user
 * under the files API's rules (fileio.c: read, write, edit; listing.c: list, glob search,
 * content grep). A tool's failure (outside the writable roots, not found, binary file, a
 * non-zero exit) is a result with is_error set and a message, never an error of the caller. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "task/task.h"

struct runner;

/* Where and how a tool acts: the caller's context. */
struct tool_ctx {
	const char *cwd;           /* run_command's default directory (NULL: the task default) */
	json_t *env;               /* run_command's environment additions (borrowed; or NULL) */
	enum task_network network; /* run_command's network */
	uint64_t output_max;       /* output kept per stream, head and tail (0: agent-output-max) */
};

/* What a tool gives back. text is the content (UTF-8); structured, when not NULL, is the
 * structuredContent its outputSchema describes. run_command also fills the figures below
 * (ran false: the command could not be started, text says why). */
struct tool_result {
	bool is_error;
	struct buf text;
	json_t *structured;
	bool ran;
	int exit_code;
	const char *status; /* task_status_name() */
	uint64_t output_bytes;
	bool truncated;
	uint64_t duration_ms;
};
void tool_result_free(struct tool_result *res);
/* A JSON string of any bytes (invalid UTF-8 becomes U+FFFD); new reference. */
json_t *tool_json_text(const char *p, size_t n);
/* An is_error result with a formatted message; returns 0. */
int tool_result_fail(struct tool_result *res, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

struct tool_call;
struct tool_call_ops {
	/* run_command's output as it is written (stream 1 stdout, 2 stderr), or NULL. */
	void (*output)(void *arg, int stream, const char *data, size_t len);
	/* The call is over: res is the caller's to free (tool_result_free). The call handle is
	 * gone once this returns. */
	void (*done)(void *arg, struct tool_result *res);
	/* Optional: whether the caller takes more output now. When it says no, run_command's
	 * output waits in the command's spool, whose reader then lags, so the spool's
	 * backpressure pauses the command past --stream-window (design/tasks.md#backpressure)
	 * instead of the caller queueing it; the caller calls tool_call_resume once it has room
	 * again. */
	bool (*room)(void *arg);
};

/* The tools, as a JSON array of {name, description, inputSchema[, outputSchema]}
 */
json_t *tools_list(void); /* new reference */
/* One descriptor of tools_list (new reference), or NULL. */
json_t *tools_describe(const char *name);
bool tools_known(const char *name);

/* Call a tool with its arguments (a JSON object, borrowed). Returns 0 when it is done
 * already (res filled; ops not called), 1 when it goes on (*out is its handle; ops->done
 * is called later, never from inside this call). */
int tool_call_start(struct runner *r, const char *name, json_t *args, const struct tool_ctx *ctx,
		    const struct tool_call_ops *ops, void *arg, struct tool_call **out,
		    struct tool_result *res);
/* The caller has room again (ops->room): run_command hands on the output that waited, and
 * done is called from inside when that was all of it. Nothing for the other tools. */
void tool_call_resume(struct tool_call *c);
/* Stop a call that goes on (its command's tree is killed); done is not called. */
void tool_call_cancel(struct tool_call *c);
