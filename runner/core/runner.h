/* The runner: the state shared by every part of the process, passed around
 * explicitly (no scattered globals). It sits in core/, the lowest folder
 * (mk/lint.mk's LAYERS): it includes core headers only, and what belongs to
 * a higher folder is a pointer to a type declared here incomplete. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "core/config.h"
#include "core/loop.h"
#include "core/reaper.h"
#include "core/signals.h"

struct confine_policy;
struct files_sched;
struct http_server;
struct task_table;
struct session_table;
struct gateway;
struct modelproxy;
struct ws_table;
struct pty_table;
struct profile;
struct checkpoints;
struct relay_table;
struct conversations;
struct mcp_table;
struct mcp_upstream;
struct watch_table;
struct audit;
struct otlp;
struct otlp_metrics;
struct code_table;
struct envd_state;

enum init_mode { INIT_PID1, INIT_SUBREAPER };

struct runner {
	struct runner_config cfg;
	struct loop loop;
	struct reaper reaper;
	struct confine_policy *policy; /* confine/confine.h */
	/* The Landlock roots tasks may write beneath (colon-separated), set once
	 * the policy is known; NULL: no bound (what acts for the task user reads
	 * this, not the policy: files/ sits beside confine/, not above it). */
	const char *task_write_roots;
	enum init_mode init_mode;
	pid_t self_pid;

	struct signals signals;      /* what each signal means: main.c's table */
	struct loop_hook exit_check; /* after every batch: may the loop end? */

	/* The box's main process (-- CMD), if any. */
	pid_t main_pid;
	bool main_running;
	int main_status; /* raw wait status once exited */
	/* A runtime init's entrypointPolicy restart (init/runtime.c): the main
	 * process is being stopped to start again with these variables added. */
	bool main_restarting;
	json_t *main_env;
	struct loop_timer main_kill_timer;

	/* Graceful shutdown. */
	bool shutting_down;
	bool shutdown_hard; /* grace over: SIGKILL sent */
	uint64_t shutdown_started_ms;
	struct loop_timer shutdown_timer;
	int exit_code;

	struct rlimit nofile_at_start; /* restored for the main child */
	int state_dir_fd;
	char state_dir[512]; /* its path: --state-dir, or a fallback (statedir.h) */
	bool state_dir_fallback;
	/* Non-root mode with a task-reachable state dir: none is used, spools
	 * and the reset snapshot are memfds (the reason in state_dir_why). */
	bool state_in_memory;
	char state_dir_why[480];
	struct loop_timer tick; /* 1 s housekeeping: keep-alives, record expiry */

	struct http_server *http;
	struct task_table *tasks;
	struct session_table *sessions;
	struct gateway *gateway;             /* NULL: no FORCEAI_GATEWAY_URL */
	struct modelproxy *modelproxy;       /* loopback model proxy for chat tasks */
	struct ws_table *ws;                 /* open WebSocket connections (http/ws.c) */
	struct pty_table *ptys;              /* execd PTY sessions (pty/session.c) */
	struct profile *profile;             /* one-shot and reset (profile/profile.h) */
	struct checkpoints *checkpoints;     /* workspace checkpoints (checkpoint/checkpoint.h) */
	struct files_sched *files_sched;     /* the files API's long scans, in slices */
	struct relay_table *proxies;         /* open /proxy/{port} requests (relay/portproxy.c) */
	struct mcp_table *mcp;               /* /mcp sessions and calls (mcp/session.c) */
	struct mcp_upstream *mcp_upstream;   /* --mcp-servers: stdio servers behind /mcp */
	struct conversations *conversations; /* of agent tasks (model/conversation.h) */
	struct watch_table *watches;         /* open watches (watch/watch.c) */
	struct runtime_init *runtime_init;   /* runtime init and lifecycle hooks (init/runtime.h) */

	/* Runtime init (init/runtime.c): the tasks' sandbox-level variables
	 * (NULL: none), and the API token's SHA-256 once bound: from then on a
	 * request's token is checked against it (http.c), never kept raw. */
	json_t *sandbox_env;
	bool auth_hash_set;
	unsigned char auth_hash[32];
	struct audit *audit;               /* the audit trail (audit/trail.h); NULL: off */
	struct otlp *otlp;                 /* its OTLP sink (audit/otlp.h), or NULL */
	struct otlp_metrics *otlp_metrics; /* OTLP metrics exporter (metrics/otlp.c) */
	struct code_table *code;           /* code contexts (code/code.h) */
	struct envd_state *envd;           /* E2B's envd face (envd/envd.h) */
};
