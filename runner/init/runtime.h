/* Runtime init and lifecycle hooks (runtime.c: the binding, the gate in front of the API;
 * hooks.c: the hooks run as tasks). The parsing: config.h. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct runner;
struct task;
struct error;

/* What runtime init reaches above itself (main registers them through profile_hooks). */
struct init_hooks {
	/* The preStart hook is over (succeeded, or failed with Continue) or there is none: the
	 * box's main process (-- CMD) may start now. */
	void (*prestart_done)(struct runner *r);
	/* entrypointPolicy restart: stop the main process and start it again with envs added
	 * (once preStart is over); false when there is none. */
	bool (*restart_main)(struct runner *r, json_t *envs);
};

/* execd's runtime init (POST /internal/init, --runtime-init) and
 * lifecycle hooks (preStart, periodic),
 * docs/design/profiles.md#runtime-init-a-warm-box-bound-to-one-sandbox,
 * design/profiles.md#lifecycle-hooks-osep-0020-prestart-and-periodic. */
#define RTINIT_PROTOCOL_VERSION 1
/* At start (profile_init; hooks: what it calls above itself, copied): the hooks' configuration from
 * the environment or lifecycle.toml; a bad one is -1 (the runner does not start). */
int runtime_init_init(struct runner *r, const struct init_hooks *hooks, struct error *e);
/* The lifecycle configuration file runtime_init_init reads (execd's order:
 * EXECD_LIFECYCLE_CONFIG, else $HOME/.execd/lifecycle.toml if present), or
 * NULL: none, or the hooks come in OPEN_SANDBOX_LIFECYCLE. buf holds the
 * default's path. */
const char *runtime_init_config_file(char *buf, size_t len);
/* Once the API serves: the hooks start (or wait for the binding). */
void runtime_init_start(struct runner *r);
/* May the main process (-- CMD) start now (no preStart in the way)? */
bool runtime_init_main_may_start(struct runner *r);
void runtime_init_free(struct runner *r);
/* A task may start (hook: a lifecycle hook's own task)? -1 with e set
 * (NOT_INITIALIZED, STARTING, PRESTART_FAILED: 503). */
int runtime_init_admit(struct runner *r, bool hook, struct error *e);
bool runtime_init_blocks(struct runner *r, const char *method, const char *path, struct error *e);
void runtime_init_task_finished(struct task *t);
/* The hook a task runs ("preStart", a periodic hook's name), else NULL. */
const char *runtime_init_hook_name(struct runner *r, const struct task *t);
/* GET /ready's answer and status. */
json_t *runtime_init_ready(struct runner *r, unsigned *status);
/* sandbox_id, generation, attributes into o when bound (/metrics). */
void runtime_init_add_binding(struct runner *r, json_t *o);
/* POST /internal/init: the answer (status 200), or NULL with e and status
 * set (400: nothing applied, the slot unused; 409 already initialized or a
 * stale generation). */
/* Already bound? true with e set (ALREADY_INITIALIZED). */
bool runtime_init_bound(struct runner *r, struct error *e);
json_t *runtime_init_apply(struct runner *r, json_t *body, unsigned *status, struct error *e);
/* A reset: hooks end at its start; on success the binding is forgotten
 * (what the answer says about it, or NULL). */
void runtime_init_reset_begin(struct runner *r);
json_t *runtime_init_reset_done(struct runner *r);
