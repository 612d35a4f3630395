/* Lifecycle hooks (OSEP-0020: preStart and periodic;
 * docs/design/profiles.md#lifecycle-hooks-osep-0020-prestart-and-periodic), run as tasks of their
 * own kind through the task engine, so they are confined exactly like a client's command; and
 * execd's startup status file. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "init/internal.h"
#include "task/task.h"

/* ---- the startup status file (execd's --lifecycle-startup-status-file) ---- */

static void write_status_file(struct runner *r, json_t *st)
{
	const char *path = r->cfg.lifecycle_status_file;
	if (!path)
		return;
	cleanup_free char *s = json_dumps(st, JSON_COMPACT | JSON_SORT_KEYS);
	if (!s)
		return;
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
		return;
	/* O_EXCL|O_NOFOLLOW: a file planted at the temporary name is never
	 * written through; rename replaces a link itself, never its target. */
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		log_errno("lifecycle: cannot write the startup status file", errno, tmp);
		return;
	}
	size_t len = strlen(s);
	errno = EIO; /* a short write sets none */
	bool ok = write(fd, s, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
	int werr = errno;
	if (close(fd) < 0 && ok) {
		ok = false;
		werr = errno;
	}
	if (!ok || rename(tmp, path) < 0) {
		log_errno("lifecycle: cannot write the startup status file", ok ? errno : werr,
			  path);
		(void)unlink(tmp);
	}
}

json_t *hook_status(const struct hook_run *hr)
{
	return json_pack("{s:s,s:I,s:I,s:I,s:s,s:i,s:I}", "name", hr->h ? hr->h->name : "", "runs",
			 (json_int_t)hr->runs, "failures", (json_int_t)hr->failures, "skipped",
			 (json_int_t)hr->skipped, "last_status",
			 hr->last_status[0] ? hr->last_status : "none", "last_exit_code",
			 hr->last_exit, "last_finished_at", (json_int_t)hr->last_ms);
}

void report_startup(struct runner *r, const char *status, const char *msg)
{
	struct runtime_init *rt = rt_of(r);
	json_t *st = json_pack("{s:s,s:s?,s:I}", "status", status, "message", msg, "timestamp",
			       (json_int_t)now_ms());
	if (!st)
		return;
	if (rt && rt->cfg.has_prestart)
		json_object_set_new(st, "preStart", hook_status(&rt->pre));
	if (rt && rt->initialized)
		json_object_set_new(st, "sandboxId", json_string(rt->sandbox_id));
	write_status_file(r, st);
	json_decref(st);
}

/* ---- running hooks ---- */

static void start_main_if_due(struct runner *r)
{
	struct runtime_init *rt = rt_of(r);
	if (rt->hooks.prestart_done)
		rt->hooks.prestart_done(r);
}

static int hook_spawn(struct hook_run *hr, struct error *e)
{
	struct runner *r = hr->r;
	cleanup_json json_t *argv = json_array();
	if (!argv)
		return error_set(e, ENOMEM, NULL, "hook");
	for (char **a = hr->h->argv; *a; a++)
		json_array_append_new(argv, json_string(*a));
	struct task_spec spec = {
		.api = TASK_API_HOOK,
		.argv = argv,
		.timeout_ms = (uint64_t)hr->h->timeout_s * 1000,
		.has_timeout = true,
		.background = true,
		.state_in_fd = -1,
		.state_out_fd = -1,
	};
	struct task *t = task_start(r, &spec, e);
	if (!t)
		return -1;
	hr->task = t;
	hr->runs++;
	struct runtime_init *rt = rt_of(r);
	unsigned slot = rt->next_name++ % (sizeof(rt->names) / sizeof(rt->names[0]));
	snprintf(rt->names[slot].id, sizeof(rt->names[slot].id), "%s", t->id);
	snprintf(rt->names[slot].name, sizeof(rt->names[slot].name), "%s", hr->h->name);
	log_info("lifecycle: hook started", "{s:s,s:s,s:i}", "hook", hr->h->name, "task", t->id,
		 "timeout_s", (int)hr->h->timeout_s);
	return 0;
}

static void hook_record(struct hook_run *hr, const char *status, int exit_code)
{
	snprintf(hr->last_status, sizeof(hr->last_status), "%s", status);
	hr->last_exit = exit_code;
	hr->last_ms = now_ms();
	if (strcmp(status, "succeeded") != 0)
		hr->failures++;
}

static void periodic_start(struct runner *r);

static void prestart_end(struct runner *r, bool ok, const char *msg)
{
	struct runtime_init *rt = rt_of(r);
	const struct lc_hook *h = &rt->cfg.prestart;
	snprintf(rt->prestart_msg, sizeof(rt->prestart_msg), "%s", msg);
	if (ok || !h->abort_on_failure) {
		rt->prestart = PS_OK;
		log_info("lifecycle: preStart done", "{s:b,s:s,s:s}", "succeeded", ok, "message",
			 msg, "failurePolicy", h->abort_on_failure ? "Abort" : "Continue");
		report_startup(r, ok ? "succeeded" : "failed_continued", msg);
		periodic_start(r);
		start_main_if_due(r);
		return;
	}
	rt->prestart = PS_FAILED;
	log_error("lifecycle: preStart failed: the box refuses tasks (failurePolicy Abort)",
		  "{s:s}", "message", msg);
	report_startup(r, "failed", msg);
}

static void on_periodic(struct loop *loop, struct loop_timer *tm)
{
	(void)loop;
	struct hook_run *hr = tm->arg;
	struct runner *r = hr->r;
	struct runtime_init *rt = rt_of(r);
	if (!rt || !rt->hooks_on || r->shutting_down)
		return;
	/* Never overlapping (execd's rule): a run still going skips this turn. */
	if (hr->task) {
		hr->skipped++;
		return;
	}
	struct error e;
	if (hook_spawn(hr, &e) < 0) {
		hook_record(hr, "start_failed", -1);
		log_warn("lifecycle: periodic hook not started", "{s:s,s:s}", "hook", hr->h->name,
			 "error", e.msg);
	}
}

void hooks_stop(struct runner *r)
{
	struct runtime_init *rt = rt_of(r);
	if (!rt)
		return;
	rt->hooks_on = false;
	for (unsigned i = 0; i < LC_MAX_PERIODIC; i++) {
		struct hook_run *hr = &rt->per[i];
		if (hr->timer_ok)
			loop_timer_close(&r->loop, &hr->timer);
		hr->timer_ok = false;
		if (hr->task && !hr->task->finished)
			task_kill(hr->task, TS_KILLED);
		hr->task = NULL;
	}
	if (rt->pre.task && !rt->pre.task->finished)
		task_kill(rt->pre.task, TS_KILLED);
	rt->pre.task = NULL;
}

static void periodic_start(struct runner *r)
{
	struct runtime_init *rt = rt_of(r);
	for (unsigned i = 0; i < rt->cfg.n_periodic; i++) {
		struct hook_run *hr = &rt->per[i];
		memset(hr, 0, sizeof(*hr));
		hr->r = r;
		hr->h = &rt->cfg.periodic[i];
		int rc = loop_timer_init(&r->loop, &hr->timer, on_periodic, hr);
		if (rc == 0)
			rc = loop_timer_start(&r->loop, &hr->timer,
					      (uint64_t)hr->h->interval_s * 1000,
					      (uint64_t)hr->h->interval_s * 1000);
		if (rc < 0) {
			log_errno("lifecycle: periodic hook timer", -rc, hr->h->name);
			continue;
		}
		hr->timer_ok = true;
	}
}

/* preStart first (the API refuses tasks until it is done), periodic hooks
 * from then on; with no preStart the box is ready at once. */
void hooks_start(struct runner *r)
{
	struct runtime_init *rt = rt_of(r);
	rt->hooks_on = true;
	memset(&rt->pre, 0, sizeof(rt->pre));
	rt->pre.r = r;
	rt->pre.h = &rt->cfg.prestart;
	rt->prestart_msg[0] = 0;
	if (!rt->cfg.has_prestart) {
		rt->prestart = PS_NONE;
		report_startup(r, "succeeded", "no preStart hook");
		periodic_start(r);
		start_main_if_due(r);
		return;
	}
	rt->prestart = PS_RUNNING;
	report_startup(r, "running", NULL);
	struct error e;
	if (hook_spawn(&rt->pre, &e) < 0) {
		hook_record(&rt->pre, "start_failed", -1);
		prestart_end(r, false, e.msg);
	}
}

void runtime_init_task_finished(struct task *t)
{
	struct runner *r = t->r;
	struct runtime_init *rt = rt_of(r);
	if (!rt || t->api != TASK_API_HOOK)
		return;
	const char *st = task_status_name(t->status);
	if (rt->pre.task == t) {
		rt->pre.task = NULL;
		hook_record(&rt->pre, st, t->exit_code);
		char msg[200];
		if (t->status == TS_TIMEOUT)
			snprintf(msg, sizeof(msg), "preStart timed out after %u s and was killed",
				 rt->cfg.prestart.timeout_s);
		else
			snprintf(msg, sizeof(msg), "preStart %s (exit code %d)", st, t->exit_code);
		prestart_end(r, t->status == TS_SUCCEEDED, msg);
		return;
	}
	for (unsigned i = 0; i < rt->cfg.n_periodic; i++) {
		struct hook_run *hr = &rt->per[i];
		if (hr->task != t)
			continue;
		hr->task = NULL;
		hook_record(hr, st, t->exit_code);
		log_json(t->status == TS_SUCCEEDED ? "info" : "warn",
			 "lifecycle: periodic hook ended", "{s:s,s:s,s:s,s:i}", "hook", hr->h->name,
			 "task", t->id, "status", st, "exit_code", t->exit_code);
		return;
	}
}

const char *runtime_init_hook_name(struct runner *r, const struct task *t)
{
	struct runtime_init *rt = rt_of(r);
	if (!rt || !t || t->api != TASK_API_HOOK)
		return NULL;
	for (size_t i = 0; i < sizeof(rt->names) / sizeof(rt->names[0]); i++)
		if (!strcmp(rt->names[i].id, t->id))
			return rt->names[i].name;
	return NULL;
}
