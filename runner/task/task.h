/* The task engine shared by every API: one place that spawns, one that
 * streams (readers over the task's spool), one that kills. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/loop.h"
#include "task/prefork.h"
#include "task/spawn.h"
#include "task/spool.h"

struct runner;
struct error;
struct task;
struct task_spec;

enum task_api {
	TASK_API_EXECD,
	TASK_API_NATIVE,
	TASK_API_SESSION,
	TASK_API_TOOL, /* a command run by an agent task: not visible in any API */
	TASK_API_PTY,  /* the shell of an execd PTY session (pty/session.c) */
	/* A lifecycle hook (init/runtime.c): confined like any task, listed in
	 * GET /v1/tasks, never given the EXECD_ENVS file's variables. */
	TASK_API_HOOK,
	TASK_API_CODE, /* the interpreter of a code context (code/code.h) */
	TASK_API_ENVD, /* a process of E2B's envd face (envd/envd.h) */
};

enum task_status {
	TS_RUNNING,
	TS_SUCCEEDED,
	TS_FAILED,
	TS_TIMEOUT,
	TS_KILLED,    /* runner shutdown */
	TS_CANCELLED, /* DELETE by a client */
	TS_ERROR,     /* driven: ended with a terminal `error` event */
	/* driven: ended at a limit of its capability's own, which task.end_reason names and the
	 * APIs show as its status (the model layer's max_steps, max_tokens...: model/limits.h) */
	TS_LIMIT,
};
const char *task_status_name(enum task_status s);
/* The status of t as the APIs show it: task_status_name's, or the limit it ended at. */
const char *task_status_str(const struct task *t);

/* The network a task gets: the default is the runner's (--exec-network), or full for a task
 * that needs it (task_spec.net_required: a chat task talks to the model proxy). */
enum task_network {
	TASK_NET_DEFAULT = 0,
	TASK_NET_NONE, /* no IP sockets: socket(AF_INET/AF_INET6) fails with EACCES */
	TASK_NET_FULL,
};

/* A kind of task a client asks for by name: the native API's "capability" (exec, chat, agent)
 * and a code context's interpreter ("code"). Each is defined by the layer that owns it
 * (task/start.c, model/chattask.c, model/engine.c, code/code.c); the API resolves the request's
 * name to one once (api/tasks.c) and hands it over in task_spec.cap. The engine only shows its
 * name and door: what a capability needs of the engine comes as data in the spec (net_required,
 * audit_fields, started_fields), what it asks of its own layer as cap_args. */
struct task_capability {
	const char *name;
	const char *audit_door; /* the audit trail's door of its native tasks; NULL: "native" */
	/* What the API checks and fills in before it starts one (api/tasks.c). */
	bool needs_gateway;       /* refused with CAPABILITY_UNAVAILABLE without a model gateway */
	const char *net_required; /* copied to task_spec.net_required */
	bool agent_fields;        /* takes the request fields "engine" and "conversation" */
	/* Its command is a goal a model pursues with commands of its own (TASK_API_TOOL tasks):
	 * GET /v1/tasks shows it as "goal", a checkpoint's diff counts them as its own. */
	bool goal;
	bool no_input; /* takes no stdin and no terminal */
	/* What its main process leaves behind keeps running, supervised
	 * (design/tasks.md#left-behind-processes-kept-supervised). */
	bool may_linger;
	enum { TASK_CHANGES_NO, TASK_CHANGES_OFF, TASK_CHANGES_ON } changes; /* field "changes" */
	/* What start would refuse, found without starting anything (NULL: nothing to check):
	 * the API asks before it spends anything on the request, e.g. the checkpoint of
	 * "changes". -1 with err set. */
	int (*check)(struct runner *r, const struct task_spec *spec, struct error *err);
	/* Starts one (NULL with err set). */
	struct task *(*start)(struct runner *r, const struct task_spec *spec, struct error *err);
};
/* exec: a command, task_start. */
extern const struct task_capability task_cap_exec;

struct task_spec {
	enum task_api api;
	const char *command;
	/* execd 1.2 argv instead of command: a JSON array of strings, run with
	 * no shell (argv[0] resolved against cwd when it has a '/', else PATH). */
	json_t *argv;
	const char *cwd;     /* NULL = default (/workspace if present, else /) */
	json_t *env;         /* object of strings, or NULL */
	uint64_t timeout_ms; /* 0 = none */
	bool has_uid, has_gid;
	uid_t uid;
	gid_t gid;
	bool background;
	const struct task_capability *cap; /* NULL: none (execd, sessions, hooks: shown as exec) */
	/* The capability's own request fields (model/args.h for chat and agent), opaque here. */
	const void *cap_args;
	bool has_timeout; /* timeout_ms was given (agent: 0 = none) */
	/* Fields of the capability's own, borrowed (NULL: none): added to the audit trail's "task
	 * started" (e.g. engine, model) and to a driven task's `started` event (e.g. engine,
	 * conversation). */
	json_t *audit_fields;
	json_t *started_fields;
	enum task_network network; /* request field "network" */
	/* NULL, or why the task cannot run without IP sockets: network "none" is then refused
	 * with it (INVALID_REQUEST_BODY) and the default is full. */
	const char *net_required;
	/* Handed to the child as fds 3 and 4 when both are >= 0 (a session
	 * run: the saved shell state in, the new state out). */
	int state_in_fd;
	int state_out_fd;
	bool keep_stdin;           /* stdin is a pipe the APIs write to (task/pty.h) */
	bool tty;                  /* run under a terminal (stdin, stdout, stderr) */
	unsigned short cols, rows; /* its size (0: 80x24) */
	/* The owner holds the terminal event back (see struct task: exit_hold). NULL: none. */
	void (*exit_hold)(struct task *t, void *arg, bool gone);
	void *exit_hold_arg;
	/* Request field "kill_tree_on_exit": what the main process leaves behind is killed when
	 * it exits, as before issue 46. Otherwise an exec command's left-behind processes keep
	 * running, supervised (docs/design/tasks.md#left-behind-processes-kept-supervised;
	 * task_may_linger says which tasks). */
	bool kill_tree_on_exit;
	/* TASK_API_TOOL: a run_command (MCP, the built-in agent) rather than an MCP server or a
	 * CLI engine: its left-behind processes are kept like an exec command's. */
	bool tool_command;
};

struct task_reader {
	struct task *task;
	struct spool_cursor cur;
	uint64_t off_read; /* output bytes this reader has been given */
	bool live;         /* a connected client: it holds the pipe back when slow */
	void (*wake)(struct task_reader *rd);
	struct task_reader *next, *prev;
};

struct task;
struct task_spec;
/* A task without a process of its own (an agent): its events are produced
 * by a driver, which finishes it with task_driven_finish/_fail. */
struct task_driver_ops {
	/* Stop now (DELETE, timeout, shutdown); the driver finishes the task
	 * with this status soon after. */
	void (*cancel)(struct task *t, enum task_status why);
	/* The record is freed while the driver is still attached. */
	void (*release)(struct task *t);
};

struct task {
	struct runner *r;
	char id[33];
	enum task_api api;
	char *command;
	char *cwd;
	const struct task_capability *cap; /* NULL: none */
	bool background;
	uid_t uid;
	gid_t gid;
	bool net_none; /* no IP sockets (network policy "none") */

	pid_t shim_pid;
	bool proc_running; /* the shim is alive (while lingering too) */
	/* Left-behind processes (docs/design/tasks.md#left-behind-processes-kept-supervised): the
	 * read end of the shim's status pipe while the main process runs (-1: none), and whether
	 * the main process has exited with part of its tree still running under the shim (the
	 * record is finished, its exit event written; the shim lives on until the last of them ends
	 * or is stopped). */
	int linger_fd;
	struct loop_watch linger_w;
	/* An execd session's run: its session (task/session.c), whose deletion ends what the run
	 * left behind. Compared, never dereferenced here. NULL: none. */
	const void *owner;
	bool lingering;
	uint64_t linger_dropped; /* their output after the exit event: read and dropped */
	int wait_status;
	int out_fd, err_fd;
	struct loop_watch out_w, err_w;
	unsigned char carry[2][4];
	size_t carry_len[2];
	bool paused;          /* backpressure: a live reader lags (design/tasks.md#backpressure) */
	uint64_t paused_mono; /* since when (monotonic ms), while paused */
	bool resting; /* coalescing: a bulk writer's pipes wait (design/performance.md#decisions) */
	struct task *rest_next; /* in task_table.resting */
	/* The last pipe read (monotonic µs): tells a bulk writer (design/performance.md#decisions),
	 * and a paused or busy pipe is never cut off (tasks_tick). */
	uint64_t last_read_us;
	/* Reads under TASK_BULK_MIN in a row: a mapped writer gives its map
	 * slot back after TASK_SHORT_READS of them (task.c). */
	unsigned short_reads;
	/* The last read of this pipe (stdout, stderr) was a bulk one: the next
	 * is taken off through the drain pipe (task.c, read_output). */
	bool drain_next[2];
	bool drain_off;      /* its output is no pipe (a terminal): never spliced */
	bool log_mapped;     /* what the log says of spool.mapped (log_mapping) */
	unsigned map_logged; /* map slot changes logged so far (at most TASK_MAP_LOGS) */
	bool cgroup;         /* has a cgroup v2 leaf named after its id */

	struct spool spool;
	struct task_reader *readers;
	unsigned n_readers;

	uint64_t started_ms, started_mono, finished_ms, finished_mono;
	uint64_t pipes_closed_mono;
	uint64_t timeout_ms;
	struct loop_timer timer; /* timeout, then the grace before SIGKILL */
	int kill_phase;          /* 0 none, 1 SIGTERM sent, 2 SIGKILL sent */
	enum task_status kill_reason;

	bool finished;
	enum task_status status;
	const char *end_reason; /* TS_LIMIT: the limit's name (a static string of the driver) */
	int exit_code;          /* -1 while running */
	int term_signal;

	struct task_input *input; /* stdin pipe or terminal (task/pty.c), or NULL */

	const struct task_driver_ops *driver; /* NULL for process tasks */
	void *driver_arg;
	/* Process tasks: the owner's hook, run once just before the terminal
	 * exit event is written (it may add fields to it), or from the
	 * teardown with an empty object when the task never finished. The
	 * model proxy's chat tasks and the session runs use it. */
	void (*on_finish)(struct task *t, json_t *exit_ev);
	void *finish_arg;
	/* An owner that adds to the terminal event after the task ended, from the loop, later
	 * (docs/design/checkpoints.md#checkpoints-undo-for-agents: what it changed): called with
	 * gone=false when the event is due, which is then kept in held_ev (readers wait for it)
	 * until task_exit_release; with gone=true when the record is freed first (the owner forgets
	 * it). The engine knows nothing of what the owner adds. */
	void (*exit_hold)(struct task *t, void *arg, bool gone);
	void *exit_hold_arg;
	json_t *held_ev;
	const char *held_name; /* "exit" or "error" */

	/* A client-chosen id of the request that started it (native Idempotency-Key, execd
	 * operation_id; docs/design/wire.md#opensandbox-execd-compatible-api,
	 * design/wire.md#native-task-api) and the hash of that request, so a retry attaches to this
	 * record instead of starting another. Kept as long as the record; a reset forgets it. NULL:
	 * none. */
	char *op_key;
	unsigned char op_hash[32];
	/* Until then (monotonic ms) the record is kept whatever --retain-count says, so a retry
	 * inside its key's window finds it (execd operations); 0: none. */
	uint64_t key_until_mono;

	struct task *next, *prev; /* in the table */
	bool linked;
	/* What the seccomp policy refused it, {"syscall": count} from its shim's report
	 * (docs/design/confinement.md#every-refusal-recorded); NULL when nothing was refused. In
	 * its exit event, the audit trail's "task ended" and the APIs' views of it. */
	json_t *denied;
	const char *audit_door; /* its door in the audit trail (static string) */
	uint64_t audit_seq;     /* the seq of its "task started" event (0: none) */
};

/* What the layer above decides about every task of every API (main registers the runtime
 * profiles', profile/profile.h): admit runs before anything is allocated (-1 with e set: refused),
 * started once the task is in the table, finished once it has written its terminal event. Any
 * may be NULL. The engine calls up only through these. */
struct task_hooks {
	int (*admit)(struct runner *r, const struct task_spec *spec, struct error *e);
	void (*started)(struct task *t);
	void (*finished)(struct task *t);
};

struct task_table {
	struct task *head;
	/* Names this table's set of client-chosen keys (execd's operation instance, docs/design.md
	 * design/wire.md#opensandbox-execd-compatible-api): a new one at start and at every reset,
	 * which forgets the keys. */
	char key_instance[33];
	unsigned running;
	unsigned finished;
	const struct task_hooks *hooks; /* NULL: none */
	/* Every pipe read lands here; the record it makes stays hot in its
	 * task's spool (readers that caught up take it from here) until the
	 * next read, of whichever task, reuses the buffer. */
	struct task *rbuf_owner;
	unsigned char rbuf[SPOOL_MAX_REC];
	/* Bulk writers read straight into their mapped spool (spool_window):
	 * at most TASK_SPOOL_MAPS of them at once. */
	struct spool_maps spool_maps;
	/* Tasks whose pipes rest until rest_timer fires (one timer for all:
	 * the rest is the same length for every task). */
	struct task *resting;
	struct loop_timer rest_timer; /* its fd is -1 when it could not be made */
	/* A bulk writer's bytes are spliced off its pipe into this one, then
	 * read out of it in the same turn: always empty between turns, so one
	 * serves every task. {-1, -1} when it could not be made. */
	int drain[2];
	struct spawn_shim shim; /* the exec'd shim (task/spawn.h) */
	struct prefork prefork; /* the spare shim (task/prefork.h) */
	/* A process task's pipes closed: the lifecycle finalizes it if its process is gone too.
	 * Called through here so the output's hot path (task/output.c) uses no file above it. */
	void (*pipes_done)(struct task *t);
};

int tasks_init(struct runner *r);
/* hooks outlives the table. */
void tasks_set_hooks(struct runner *r, const struct task_hooks *hooks);
void tasks_free_all(struct runner *r);
unsigned tasks_running(struct runner *r);
/* hard=false: SIGTERM every tree (grace timer follows); hard=true: SIGKILL. */
void tasks_kill_all(struct runner *r, bool hard);
void tasks_tick(struct runner *r);
/* Reset: unlink every finished record nobody reads (freed after this loop
 * turn), counting them and the bytes of their logs; the records left forget their
 * client-chosen keys (the next tenant may reuse them). */
void tasks_drop_finished(struct runner *r, unsigned *records, uint64_t *log_bytes);

/* Spawn; on failure returns NULL with err set (SERVICE_UNAVAILABLE,
 * TOO_MANY_TASKS, INVALID_REQUEST_BODY, FORBIDDEN, RUNTIME_ERROR). */
struct task *task_start(struct runner *r, const struct task_spec *spec, struct error *err);
struct task *task_find(struct runner *r, const char *id);
/* The record of api started under the client-chosen key (task.op_key), or NULL. */
struct task *task_find_key(struct runner *r, enum task_api api, const char *key);
/* Give t the key and request hash (a copy); -ENOMEM. */
int task_set_key(struct task *t, const char *key, const unsigned char hash[32]);
/* Records kept for their keys now (key_until_mono in the future). */
unsigned tasks_pinned(struct runner *r);

/* A driven task (see struct task_driver_ops): a record, a spool, a timer
 * (spec->timeout_ms calls cancel(TS_TIMEOUT)), the `started` event. */
struct task *task_start_driven(struct runner *r, const struct task_spec *spec,
			       const struct task_driver_ops *ops, void *arg, struct error *err);
/* Append an event (name + JSON object, borrowed) and wake readers. */
void task_emit(struct task *t, const char *name, json_t *data);
/* Terminal `exit` {exit_code, status, duration_ms} + the fields of extra. limit: with
 * st == TS_LIMIT, the name of the limit reached (static), shown as the status. */
void task_driven_finish(struct task *t, enum task_status st, const char *limit, int exit_code,
			json_t *extra);
/* The name of t's capability (NULL: none). */
static inline const char *task_cap_name(const struct task *t)
{
	return t->cap ? t->cap->name : NULL;
}
/* Terminal `error` {code, message} + the fields of extra. */
void task_driven_fail(struct task *t, const char *code, const char *message, json_t *extra);
/* Write the terminal event held for the owner (struct task: exit_hold; it may have added
 * fields to t->held_ev), wake the readers. */
void task_exit_release(struct task *t);
/* SIGTERM the tree now, SIGKILL after the grace period. Also stops what a finished task left
 * behind (t->lingering): the record keeps its status. */
void task_kill(struct task *t, enum task_status why);
/* Whether processes the main process of this spec leaves behind may keep running: exec
 * commands of execd, the native API and execd sessions, without a terminal, unless the request
 * says kill_tree_on_exit (docs/design/tasks.md#left-behind-processes-kept-supervised). */
bool task_may_linger(const struct task_spec *spec);
/* t is a finished command whose left-behind processes run under its shim. */
static inline bool task_left_running(const struct task *t)
{
	return t->lingering && t->proc_running;
}
/* What t left behind, for the task lists: {"pids": [...], "count": n, "output_dropped_bytes": n}
 * (pids of the shim's descendants, at most 64 listed), or NULL when nothing is. New reference. */
json_t *task_left_behind_json(struct task *t);
/* SIGKILL the tree now (an interactive shell ignores SIGTERM). */
void task_kill_now(struct task *t, enum task_status why);

void task_reader_attach(struct task *t, struct task_reader *rd, bool live);
void task_reader_detach(struct task_reader *rd);
/* 1 = a record, 0 = nothing yet, <0 = -errno. buf holds SPOOL_MAX_REC. */
int task_reader_next(struct task_reader *rd, struct spool_rec *rec, void *buf);
/* The same without a copy where the record is still in memory: *data
 * points at the payload (or into buf), valid until the caller returns to
 * the loop. */
int task_reader_next_ref(struct task_reader *rd, struct spool_rec *rec, void *buf,
			 const char **data);

/* A record a stream consumes over several calls (a long one goes out in
 * pieces): where it is, to fetch the rest of its payload later. */
struct task_rec_ref {
	struct spool_rec rec;
	uint64_t gen, pos;
	uint32_t done; /* payload bytes consumed */
	bool active;
};
/* task_reader_next_ref, also noting where the record is in ref (active). */
int task_reader_next_rec(struct task_reader *rd, struct task_rec_ref *ref, void *buf,
			 const char **data);
/* The unconsumed payload of ref (from ref->done): *data as for
 * task_reader_next_ref. -ESTALE when it is no longer retained. */
int task_reader_rest(struct task_reader *rd, const struct task_rec_ref *ref, void *buf,
		     const char **data);
/* All records read and the task is finished. */
bool task_reader_at_end(struct task_reader *rd);
/* More output is due within the task's rest (design/performance.md#decisions): the reader is woken
 * when it comes or when the rest ends, whichever is first. */
static inline bool task_reader_more_due(const struct task_reader *rd)
{
	return rd->task && rd->task->resting;
}
