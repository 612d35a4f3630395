/* Runtime init's state, shared by runtime.c (the binding, the gate) and hooks.c (the hooks
 * run as tasks). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/loop.h"
#include "core/runner.h"
#include "init/config.h"
#include "init/runtime.h"

enum prestart_state { PS_NONE, PS_RUNNING, PS_OK, PS_FAILED };

struct hook_run {
	struct runner *r;
	const struct lc_hook *h; /* in rt->cfg */
	struct task *task;       /* running, or NULL */
	struct loop_timer timer; /* periodic: the interval */
	bool timer_ok;
	unsigned runs, failures, skipped;
	char last_status[16];
	int last_exit;
	uint64_t last_ms;
};

struct runtime_init {
	struct init_hooks hooks; /* what it calls above itself (runtime.h) */
	bool initialized;
	char sandbox_id[129];
	uint64_t generation;
	bool have_generation; /* a later init must bring a greater one */
	json_t *attributes;
	struct lc_config cfg;
	json_t *startup; /* the box's own hooks (environment or file), for after a reset */
	bool hooks_on;
	enum prestart_state prestart;
	char prestart_msg[256];
	struct hook_run pre;
	struct hook_run per[LC_MAX_PERIODIC];
	/* Which hook each recent hook task ran, for the task list (a ring). */
	struct {
		char id[33];
		char name[64];
	} names[64];
	unsigned next_name;
};

static inline struct runtime_init *rt_of(struct runner *r)
{
	return r->runtime_init;
}

/* hooks.c: preStart, then the periodic hooks; stopped (their tasks killed) by a new
 * configuration and by a reset. The startup status file; a hook's figures for /ready. */
void hooks_start(struct runner *r);
void hooks_stop(struct runner *r);
void report_startup(struct runner *r, const char *status, const char *msg);
json_t *hook_status(const struct hook_run *hr);
