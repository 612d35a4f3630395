/* Runtime profiles: the hooks of profile.h and the one-shot profile. The
 * reset engine is reset.c. */
#include "profile/profile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "init/runtime.h"
#include "checkpoint/checkpoint.h"
#include "task/task.h"

/* reset.c */
int reset_init(struct runner *r, struct error *e);
bool reset_busy(struct runner *r);
const char *reset_failure(struct runner *r);
void reset_abort(struct runner *r);
void reset_free(struct runner *r);

int profile_init(struct runner *r, const struct profile_hooks *hooks, struct error *e)
{
	r->profile = calloc(1, sizeof(*r->profile));
	if (!r->profile)
		return error_set(e, ENOMEM, NULL, "runtime profiles");
	r->profile->hooks = hooks;
	const struct init_hooks ih = {.prestart_done = hooks ? hooks->prestart_done : NULL,
				      .restart_main = hooks ? hooks->restart_main : NULL};
	if (runtime_init_init(r, &ih, e) < 0)
		return -1;
	if (checkpoint_init(r, e) < 0)
		return -1;
	if (r->cfg.allow_reset)
		return reset_init(r, e);
	return 0;
}

void profile_abort(struct runner *r)
{
	if (r->checkpoints)
		checkpoint_abort(r);
	if (r->profile && r->profile->reset)
		reset_abort(r);
}

void profile_free(struct runner *r)
{
	if (!r->profile)
		return;
	if (r->profile->reset)
		reset_free(r);
	runtime_init_free(r);
	checkpoint_free_all(r);
	free(r->profile);
	r->profile = NULL;
}

int profile_admit(struct runner *r, const struct task_spec *spec, struct error *e)
{
	struct profile *p = r->profile;
	if (!p)
		return 0;
	if (p->reset && reset_busy(r))
		return error_set(e, 0, "RESETTING",
				 "a reset (POST /v1/reset) is in progress: no task starts until it "
				 "is done");
	if (checkpoint_restoring(r))
		return error_set(e, 0, "CHECKPOINT_RESTORING",
				 "a checkpoint is being restored: no task starts until it is done");
	const char *failed = p->reset ? reset_failure(r) : NULL;
	if (failed)
		return error_set(e, 0, "RESET_FAILED",
				 "the last reset did not complete (%s): retry POST /v1/reset or "
				 "discard this box",
				 failed);
	if (runtime_init_admit(r, spec->api == TASK_API_HOOK, e) < 0)
		return -1;
	/* An agent's tool calls are part of its task. */
	if (!r->cfg.one_shot || spec->api == TASK_API_TOOL || spec->api == TASK_API_HOOK)
		return 0;
	if (p->oneshot)
		return error_set(e, 0, "ONE_SHOT_BUSY",
				 "this runner is one-shot (--one-shot) and runs its task %s",
				 p->oneshot->id);
	if (p->oneshot_done)
		return error_set(e, 0, "ONE_SHOT_DONE",
				 "this runner is one-shot (--one-shot) and has served its task: it "
				 "is shutting down");
	return 0;
}

static void note_uid(struct profile *p, uid_t uid)
{
	for (unsigned i = 0; i < p->n_uids; i++)
		if (p->uids[i] == uid)
			return;
	if (p->n_uids == PROFILE_MAX_UIDS) {
		p->uids_overflow = true;
		return;
	}
	p->uids[p->n_uids++] = uid;
}

void profile_task_started(struct task *t)
{
	struct runner *r = t->r;
	struct profile *p = r->profile;
	if (!p)
		return;
	note_uid(p, t->uid);
	if (r->cfg.one_shot && t->api != TASK_API_TOOL && t->api != TASK_API_HOOK && !p->oneshot &&
	    !p->oneshot_done) {
		p->oneshot = t;
		log_info("one-shot: serving this task, then exiting", "{s:s}", "task", t->id);
	}
}

void profile_task_finished(struct task *t)
{
	struct runner *r = t->r;
	struct profile *p = r->profile;
	if (p && t->api == TASK_API_HOOK)
		runtime_init_task_finished(t);
	if (!p || p->oneshot != t)
		return;
	p->oneshot = NULL;
	p->oneshot_done = true;
	/* As with -- CMD: the exit code, 128+N for a signal (the task engine
	 * already counts it so), 124 for a native-API timeout. */
	r->exit_code = t->exit_code < 0 ? 1 : t->exit_code;
	p->oneshot_shutdown_due = true;
	log_info("one-shot: task finished, shutting down", "{s:s,s:i,s:s}", "task", t->id,
		 "exit_code", r->exit_code, "status", task_status_name(t->status));
}

bool profile_shutdown_due(struct runner *r)
{
	struct profile *p = r->profile;
	if (!p || !p->oneshot_shutdown_due)
		return false;
	p->oneshot_shutdown_due = false;
	return true;
}

uint64_t profile_gen(struct runner *r)
{
	return r->profile ? r->profile->gen : 0;
}

bool profile_request_blocked(struct runner *r, const char *method, const char *path,
			     struct error *e)
{
	if (!r->profile)
		return false;
	if (!r->profile->reset || !reset_busy(r))
		return runtime_init_blocks(r, method, path, e);
	static const char *const open_routes[][2] = {
		{"GET", "/ping"},
		{"GET", "/metrics"},
		{"GET", "/v1/hardening"},
		{"POST", "/v1/reset"},
	};
	for (size_t i = 0; i < sizeof(open_routes) / sizeof(open_routes[0]); i++)
		if (!strcmp(method, open_routes[i][0]) && !strcmp(path, open_routes[i][1]))
			return false;
	error_set(e, 0, "RESETTING",
		  "a reset (POST /v1/reset) is in progress: retry when it is done");
	return true;
}
