/* The image's own stdio MCP servers behind /mcp
 * (docs/design/files.md#content-search-get-filesgrep): declared in
 * --mcp-servers FILE ({"mcpServers": {name: {command, args?, env?}}}), each started on first
 * use as a confined task of its own (TASK_API_TOOL: the task identity, network policy and
 * limits), spoken to over its stdin and stdout (newline-delimited JSON-RPC), its tools offered
 * as name__tool. A server that exits is restarted on next use and its exit reported; one that
 * floods (a line over MCP_UPSTREAM_LINE_MAX) is killed; one that does not answer its handshake
 * within MCP_UPSTREAM_START_MS is killed. Nothing here blocks the loop. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

struct runner;
struct error;

#define MCP_UPSTREAM_LINE_MAX (4u << 20)
#define MCP_UPSTREAM_START_MS 30000
#define MCP_UPSTREAM_MAX 16

/* Read and check FILE (at start; a bad file is a configuration error). 0 or -1 with err. */
int mcp_upstream_load(struct runner *r, const char *path, struct error *err);
/* Called when the set of tools changes (a server ready, one gone). */
void mcp_upstream_on_change(struct runner *r, void (*fn)(struct runner *r));
void mcp_upstream_free(struct runner *r);

/* Every configured server, for GET /v1/mcp/servers (new reference). */
json_t *mcp_upstream_report(struct runner *r);
/* The tools of the servers that are ready, named name__tool (new reference). */
json_t *mcp_upstream_tools(struct runner *r);
/* Start every server not running; true while any is starting (then wait for it). */
bool mcp_upstream_start_all(struct runner *r);
/* A waiter for "no server is starting any more" (tools/list). */
struct mcp_up_waiter {
	void (*ready)(struct mcp_up_waiter *w);
	struct mcp_up_waiter *next, *prev;
	bool linked;
};
void mcp_upstream_wait(struct runner *r, struct mcp_up_waiter *w);
void mcp_upstream_unwait(struct runner *r, struct mcp_up_waiter *w);

/* A tool call on a server: name is name__tool. done gets the server's result object (or
 * NULL and a message) and is never called from inside mcp_upstream_call. NULL with msg set
 * when there is no such server. */
struct mcp_up_call;
typedef void (*mcp_up_done_fn)(void *arg, json_t *result, const char *error);
bool mcp_upstream_has(struct runner *r, const char *name);
struct mcp_up_call *mcp_upstream_call(struct runner *r, const char *name, json_t *arguments,
				      mcp_up_done_fn done, void *arg, char *msg, size_t msglen);
/* The caller gives up: the server is told (notifications/cancelled); done is not called. */
void mcp_upstream_cancel(struct mcp_up_call *c);
