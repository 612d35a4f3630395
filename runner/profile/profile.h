/* The gateway's runtime profiles (README "Runtime profiles"):
 * - `ephemeral-task`: --one-shot, the runner serves one task and exits with
 *   its status once the terminal event is delivered (profile.c);
 * - `pooled`: POST /v1/reset makes a used box indistinguishable from a fresh
 *   one for the next tenant (reset.c, reset_snapshot.c on the tree/ engine,
 *   api/reset.c);
 * - `session`: the default, nothing to do.
 * main registers the hooks below with the task engine (struct task_hooks)
 * and the HTTP layer (struct http_hooks): this module sits above both and
 * the files layer that a reset uses; what it ends above itself (the model
 * proxy's tokens, conversations, PTY, MCP and code sessions) it reaches
 * through struct profile_hooks (mk/lint.mk's LAYERS). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include <sys/types.h>

struct runner;
struct task;
struct task_spec;
struct error;
struct http_req;
struct reset;

#define PROFILE_MAX_UIDS 32

/* What a reset must end that lives above this module (main registers it):
 * the execd PTY sessions (pty/session.c; returns how many were ended), the MCP
 * sessions (mcp/session.c). */
struct profile_hooks {
	unsigned (*end_ptys)(struct runner *r);
	void (*end_mcp_sessions)(struct runner *r);
	/* The preStart hook is over (succeeded, or failed with Continue) or
	 * there is none: the box's main process (-- CMD) may start now. */
	void (*prestart_done)(struct runner *r);
	/* entrypointPolicy restart: stop the main process and start it again
	 * with envs added (once preStart is over); false when there is none. */
	bool (*restart_main)(struct runner *r, json_t *envs);
	unsigned (*end_code_contexts)(struct runner *r); /* code/code.h */
	/* The model proxy's per-task tokens, revoked: how many, and in *requests
	 * the requests in flight that ended (model/modelproxy.h). */
	unsigned (*revoke_model_tokens)(struct runner *r, unsigned *requests);
	/* The agent tasks' conversations, forgotten: how many (model/conversation.h). */
	unsigned (*forget_conversations)(struct runner *r);
	/* E2B's envd face (envd/envd.h): its /init's variables and workdir, its watchers and
	 * process records, forgotten with the tenant. */
	void (*end_envd)(struct runner *r);
};

struct profile {
	/* one-shot */
	struct task *oneshot; /* the task being served, until it finishes */
	bool oneshot_done;
	bool oneshot_shutdown_due; /* main's exit check starts the shutdown */

	/* reset */
	uint64_t gen;        /* bumped by each reset: requests from before it are dropped */
	struct reset *reset; /* NULL without --allow-reset */
	uid_t uids[PROFILE_MAX_UIDS]; /* identities tasks ran as, for the /proc sweep */
	unsigned n_uids;
	bool uids_overflow; /* more than that: every uid but the runner's counts */
	const struct profile_hooks *hooks;
	struct rtinit *rt; /* runtime init and lifecycle hooks (rtinit.c) */
};

/* At start, before "ready": with --allow-reset the snapshot of the roots
 * (long for big roots; fails beyond --reset-snapshot-max). 0 or -1. */
int profile_init(struct runner *r, const struct profile_hooks *hooks, struct error *e);
/* At exit: a waiting reset request is answered (before http_stop: it must
 * not stay suspended), the worker killed, the snapshot store removed. */
void profile_abort(struct runner *r);
void profile_free(struct runner *r);

/* Admission of a task (every API): -1 with e set when refused (409 for a
 * second one-shot task, 503 while a reset runs or after one failed). */
int profile_admit(struct runner *r, const struct task_spec *spec, struct error *e);
/* A task was started / has written its terminal event. */
void profile_task_started(struct task *t);
void profile_task_finished(struct task *t);
/* Once, after the one-shot task finished: time to shut down (the main
 * loop's exit check asks after every batch). Streams still deliver their
 * terminal event: the shutdown waits for them up to --grace-ms (+0.5 s),
 * and a client that does not read is dropped after --idle-timeout-ms. */
bool profile_shutdown_due(struct runner *r);

/* HTTP: the reset generation a request belongs to, and whether a request
 * must be refused now (while a reset runs only /ping, /metrics,
 * /v1/hardening and /v1/reset answer). */
uint64_t profile_gen(struct runner *r);
bool profile_request_blocked(struct runner *r, const char *method, const char *path,
			     struct error *e);

/* reset.c, for api/reset.c: start a reset for req (suspended until it is
 * done), and its answer once resumed. */
int reset_start(struct runner *r, struct http_req *req, struct error *e);
json_t *reset_answer(struct http_req *req, unsigned *status);

/* rtinit.c: execd's runtime init (POST /internal/init, --runtime-init) and
 * lifecycle hooks (preStart, periodic), docs/design.md §12.1, §12.2. */
#define RTINIT_PROTOCOL_VERSION 1
/* At start (profile_init): the hooks' configuration from the environment
 * or lifecycle.toml; a bad one is -1 (the runner does not start). */
int rtinit_init(struct runner *r, struct error *e);
/* The lifecycle configuration file rtinit_init reads (execd's order:
 * EXECD_LIFECYCLE_CONFIG, else $HOME/.execd/lifecycle.toml if present), or
 * NULL: none, or the hooks come in OPEN_SANDBOX_LIFECYCLE. buf holds the
 * default's path. */
const char *rtinit_config_file(char *buf, size_t len);
/* Once the API serves: the hooks start (or wait for the binding). */
void rtinit_start(struct runner *r);
/* May the main process (-- CMD) start now (no preStart in the way)? */
bool rtinit_main_may_start(struct runner *r);
void rtinit_free(struct runner *r);
/* A task may start (hook: a lifecycle hook's own task)? -1 with e set
 * (NOT_INITIALIZED, STARTING, PRESTART_FAILED: 503). */
int rtinit_admit(struct runner *r, bool hook, struct error *e);
bool rtinit_blocks(struct runner *r, const char *method, const char *path, struct error *e);
void rtinit_task_finished(struct task *t);
/* The hook a task runs ("preStart", a periodic hook's name), else NULL. */
const char *rtinit_hook_name(struct runner *r, const struct task *t);
/* GET /ready's answer and status. */
json_t *rtinit_ready(struct runner *r, unsigned *status);
/* sandbox_id, generation, attributes into o when bound (/metrics). */
void rtinit_add_binding(struct runner *r, json_t *o);
/* POST /internal/init: the answer (status 200), or NULL with e and status
 * set (400: nothing applied, the slot unused; 409 already initialized or a
 * stale generation). */
/* Already bound? true with e set (ALREADY_INITIALIZED). */
bool rtinit_bound(struct runner *r, struct error *e);
json_t *rtinit_apply(struct runner *r, json_t *body, unsigned *status, struct error *e);
/* A reset: hooks end at its start; on success the binding is forgotten
 * (what the answer says about it, or NULL). */
void rtinit_reset_begin(struct runner *r);
json_t *rtinit_reset_done(struct runner *r);
