/* A task's life after its start (task/task.h): its time limit, kills, the exit of its
 * process, its terminal event (or a driver's end of it), and both in the audit trail. */
#include "task/task.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "confine/cgroup.h"
#include "confine/seccomp_notify.h"
#include "audit/trail.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/signame.h"
#include "task/internal.h"
#include "task/proctree.h"
#include "task/pty.h"

const char *task_status_name(enum task_status s)
{
	switch (s) {
	case TS_RUNNING:
		return "running";
	case TS_SUCCEEDED:
		return "succeeded";
	case TS_FAILED:
		return "failed";
	case TS_TIMEOUT:
		return "timeout";
	case TS_KILLED:
		return "killed";
	case TS_CANCELLED:
		return "cancelled";
	case TS_ERROR:
		return "error";
	case TS_LIMIT:
		return "limit";
	}
	return "unknown";
}

const char *task_status_str(const struct task *t)
{
	return t->status == TS_LIMIT && t->end_reason ? t->end_reason : task_status_name(t->status);
}

/* The audit trail's door of a task (docs/design/audit.md): the API that
 * started it; a tool task's is the MCP client's when one asked, else the
 * agent's. */
static const char *task_door(const struct task *t)
{
	switch (t->api) {
	case TASK_API_EXECD:
	case TASK_API_SESSION:
		return "execd";
	case TASK_API_PTY:
		return "pty";
	case TASK_API_ENVD:
		return "envd";
	case TASK_API_TOOL:
		return audit_client(t->r) ? "mcp" : "agent";
	case TASK_API_NATIVE:
	default:
		return t->cap && t->cap->audit_door ? t->cap->audit_door : "native";
	}
}

/* Every kind of task, started: what runs, as whom, where, with which
 * limits. Of the environment, the names only (values may be secrets). */
void task_audit_started(struct task *t, const struct task_spec *spec)
{
	if (!audit_enabled(t->r))
		return;
	json_t *env = json_array();
	const char *k;
	json_t *v;
	if (spec->env && json_is_object(spec->env))
		json_object_foreach(spec->env, k, v)
			json_array_append_new(env, json_string(k));
	const char *client = audit_client(t->r);
	json_t *who = json_pack("{s:s}", "task", t->id);
	if (client)
		json_object_set_new(who, "client", json_string(client));
	t->audit_door = task_door(t);
	json_t *ev = json_pack("{s:o,s:s*,s:s*,s:i,s:i,s:s*}", "who", who, "command", t->command,
			       "cwd", t->cwd, "uid", (int)t->uid, "gid", (int)t->gid, "capability",
			       task_cap_name(t));
	/* The capability's own (engine, model) where they always were: after the capability. */
	if (ev && spec->audit_fields)
		json_object_update(ev, spec->audit_fields);
	if (ev)
		json_object_update_new(ev,
				       json_pack("{s:s,s:I,s:b,s:b,s:o}", "network",
						 t->net_none ? "none" : "full", "timeout_ms",
						 (json_int_t)spec->timeout_ms, "background",
						 spec->background, "tty", spec->tty, "env", env));
	else
		json_decref(env);
	audit_emit(t->r, t->audit_door, "task started", ev);
	uint32_t chain;
	uint64_t first, oldest;
	audit_position(t->r, &chain, &first, &oldest, &t->audit_seq);
}

/* ... and ended: the terminal event's fields (exit code or signal, status,
 * duration, model usage), the output's bytes. */
void task_audit_ended(struct task *t, json_t *exit_ev)
{
	if (!audit_enabled(t->r))
		return;
	json_t *ev = json_deep_copy(exit_ev);
	if (!ev)
		ev = json_object();
	json_object_del(ev, "message"); /* an error's text may quote anything */
	json_object_set_new(ev, "who", json_pack("{s:s}", "task", t->id));
	json_object_set_new(ev, "outcome", json_string(task_status_str(t)));
	json_object_set_new(ev, "bytes_out", json_integer((json_int_t)t->spool.next_off));
	audit_emit(t->r, t->audit_door ? t->audit_door : task_door(t), "task ended", ev);
}

static void hook_finished(struct task *t)
{
	const struct task_hooks *h = t->r->tasks->hooks;
	if (h && h->finished)
		h->finished(t);
}

static void task_finalize(struct task *t);

void task_maybe_finalize(struct task *t)
{
	if (!t->driver && !t->finished && !t->proc_running && t->out_fd < 0 && t->err_fd < 0)
		task_finalize(t);
}

static void task_signal_shim(struct task *t, int sig)
{
	if (t->proc_running && kill(t->shim_pid, sig) < 0 && errno != ESRCH)
		log_errno("signalling a task failed", errno, t->id);
}

void task_on_timer(struct loop *loop, struct loop_timer *timer)
{
	(void)loop;
	struct task *t = timer->arg;
	if (t->driver && !t->finished) {
		log_info("task timed out", "{s:s,s:i}", "task", t->id, "timeout_ms",
			 (int)t->timeout_ms);
		t->driver->cancel(t, TS_TIMEOUT);
		return;
	}
	if (!t->proc_running)
		return;
	if (t->kill_phase == 0) {
		log_info("task timed out", "{s:s,s:i}", "task", t->id, "timeout_ms",
			 (int)t->timeout_ms);
		task_kill(t, TS_TIMEOUT);
	} else if (t->kill_phase == 1) {
		t->kill_phase = 2;
		task_signal_shim(t, SHIM_SIG_KILL);
		if (t->cgroup)
			cgroup_task_kill(t->id);
	}
}

void task_kill(struct task *t, enum task_status why)
{
	if (t->driver && !t->finished) {
		t->driver->cancel(t, why);
		return;
	}
	if (!t->proc_running || t->kill_phase >= 1)
		return;
	if (!t->finished) /* a lingering record keeps the status its exit event gave */
		t->kill_reason = why;
	t->kill_phase = 1;
	task_signal_shim(t, SHIM_SIG_TERM);
	loop_timer_start(&t->r->loop, &t->timer, t->r->cfg.grace_ms, 0);
}

void task_kill_now(struct task *t, enum task_status why)
{
	if (t->driver && !t->finished) {
		t->driver->cancel(t, why);
		return;
	}
	if (!t->proc_running)
		return;
	if (!t->kill_reason && !t->finished)
		t->kill_reason = why;
	t->kill_phase = 2;
	task_signal_shim(t, SHIM_SIG_KILL);
	if (t->cgroup)
		cgroup_task_kill(t->id);
}

void tasks_kill_all(struct runner *r, bool hard)
{
	if (!r->tasks)
		return;
	prefork_kill(r); /* no spare outlives the tenant's tasks (reset, shutdown) */
	for (struct task *t = r->tasks->head, *next; t; t = next) {
		next = t->next;
		if (t->driver && !t->finished) {
			t->driver->cancel(t, TS_KILLED);
			continue;
		}
		if (!t->proc_running)
			continue;
		if (hard) {
			if (!t->kill_reason && !t->finished)
				t->kill_reason = TS_KILLED;
			t->kill_phase = 2;
			task_signal_shim(t, SHIM_SIG_KILL);
			if (t->cgroup)
				cgroup_task_kill(t->id);
		} else {
			task_kill(t, TS_KILLED);
		}
	}
}

void task_linger_close(struct task *t)
{
	if (t->linger_fd < 0)
		return;
	loop_watch_del(&t->r->loop, &t->linger_w);
	close(t->linger_fd);
	t->linger_fd = -1;
}

/* The main process exited and part of its tree runs on under the shim: its output so far
 * goes into the log, then its exit event; what the rest prints after that is dropped. The
 * command's time limit is over (a server it started is not killed by it), the shim stays
 * counted as running (--max-tasks bounds the left-behind sets too) until it exits. */
static void linger_begin(struct task *t, int status)
{
	t->wait_status = status;
	t->lingering = true;
	t->finished_mono = monotonic_ms();
	if (t->kill_phase == 0)
		loop_timer_stop(&t->r->loop, &t->timer);
	task_output_drain(t);
	log_info("task left processes behind", "{s:s,s:i}", "task", t->id, "shim",
		 (int)t->shim_pid);
	task_finalize(t);
	task_output_discard(t);
}

/* The shims' refusal reports (confine/seccomp_notify.h) waiting on the socket: each to its
 * task by the shim's pid. A shim sends before it exits (or, when it keeps left-behind
 * processes, before it reports the main process's status), so its own is here then; a task refused
 * nothing sent none, and this is one empty read. */
static void denied_drain(struct runner *r)
{
	int fd = r->tasks->shim.report_rd;
	if (fd < 0)
		return;
	for (;;) {
		struct seccomp_denied_msg m;
		ssize_t n = recv(fd, &m, sizeof(m), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return; /* EAGAIN: all read */
		pid_t pid;
		json_t *d = seccomp_denied_decode(&m, (size_t)n, &pid);
		if (!d) {
			log_warn("a malformed refusal report was dropped", "{s:i}", "bytes",
				 (int)n);
			continue;
		}
		struct task *t = NULL;
		for (struct task *c = r->tasks->head; c; c = c->next)
			if (c->shim_pid == pid && !c->finished && !c->driver)
				t = c;
		if (t) {
			json_decref(t->denied);
			t->denied = d;
		} else {
			json_decref(d);
		}
	}
}

static void shim_reaped(void *arg, pid_t pid, int status)
{
	(void)arg;
	(void)pid;
	(void)status;
}

void task_on_linger(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	struct task *t = w->arg;
	struct spawn_status m;
	ssize_t n = read(t->linger_fd, &m, sizeof(m));
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	task_linger_close(t); /* one status at most, or EOF: wait for the shim's exit */
	if (n == (ssize_t)sizeof(m) && t->proc_running && !t->finished) {
		/* The shim sent its refusal report before the status: the exit event has it. */
		denied_drain(t->r);
		if (!m.ended) {
			linger_begin(t, m.status);
			return;
		}
		/* Nothing is left of the tree and the shim only exits now: the task ends here,
		 * the shim's exit is only reaped (not counted among the orphans). */
		reaper_forget(&t->r->reaper, t->shim_pid);
		(void)reaper_watch(&t->r->reaper, t->shim_pid, shim_reaped, NULL);
		task_on_exit(t, t->shim_pid, m.status);
	}
}

void task_on_exit(void *arg, pid_t pid, int status)
{
	(void)pid;
	struct task *t = arg;
	task_linger_close(t);
	denied_drain(t->r);
	t->proc_running = false;
	if (t->lingering) {
		/* The last left-behind process is gone (or was stopped): the record
		 * already holds the main process's status. */
		t->r->tasks->running--;
		loop_timer_close(&t->r->loop, &t->timer);
		if (t->cgroup) {
			cgroup_task_kill(t->id);
			cgroup_task_remove(t->id);
			t->cgroup = false;
		}
		task_close_pipe(t, 0);
		task_close_pipe(t, 1);
		log_info("left-behind processes ended", "{s:s,s:I}", "task", t->id,
			 "output_dropped_bytes", (json_int_t)t->linger_dropped);
		return;
	}
	t->wait_status = status;
	t->finished_mono = monotonic_ms();
	t->r->tasks->running--;
	loop_timer_stop(&t->r->loop, &t->timer);
	if (t->cgroup) {
		/* Whatever of the tree escaped the shim goes with the leaf. */
		cgroup_task_kill(t->id);
		cgroup_task_remove(t->id);
		t->cgroup = false;
	}
	/* Drain what is already in the pipes; EOF follows since the shim
	 * killed the rest of the tree. */
	task_maybe_finalize(t);
}

bool task_may_linger(const struct task_spec *spec)
{
	if (spec->kill_tree_on_exit || spec->tty)
		return false;
	switch (spec->api) {
	case TASK_API_EXECD:
	case TASK_API_SESSION:
	case TASK_API_ENVD: /* envd keeps them too */
		return true;
	case TASK_API_NATIVE:
		return !spec->cap || spec->cap->may_linger;
	case TASK_API_TOOL:
		return spec->tool_command;
	default: /* MCP servers, CLI engines, terminals, hooks, code contexts: as before */
		return false;
	}
}

#define LEFT_BEHIND_LISTED 64

json_t *task_left_behind_json(struct task *t)
{
	if (!task_left_running(t))
		return NULL;
	pid_t pids[LEFT_BEHIND_LISTED];
	size_t total = 0;
	size_t n = proctree_descendants(t->shim_pid, pids, LEFT_BEHIND_LISTED, &total);
	if (total == 0)
		return NULL; /* the set is gone; its shim is exiting and about to be reaped */
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, json_integer(pids[i]));
	return json_pack("{s:o,s:I,s:I}", "pids", arr, "count", (json_int_t)total,
			 "output_dropped_bytes", (json_int_t)t->linger_dropped);
}

static json_t *exit_json(struct task *t)
{
	json_t *o =
		json_pack("{s:i,s:s,s:I}", "exit_code", t->exit_code, "status", task_status_str(t),
			  "duration_ms", (json_int_t)(t->finished_ms - t->started_ms));
	if (t->term_signal) {
		json_object_set_new(o, "signal", json_integer(t->term_signal));
		json_object_set_new(o, "signal_name", json_string(signal_name(t->term_signal)));
	}
	if (t->denied)
		json_object_set(o, "denied", t->denied);
	return o;
}

/* The terminal event (ev is taken): written now, or held for the owner (exit_hold). */
static void terminal_event(struct task *t, const char *name, json_t *ev)
{
	t->held_ev = ev;
	t->held_name = name;
	if (t->exit_hold)
		t->exit_hold(t, t->exit_hold_arg, false);
	else
		task_exit_release(t);
}

static void task_finalize(struct task *t)
{
	int st = t->wait_status;
	t->finished = true;
	t->finished_ms = now_ms();
	if (WIFEXITED(st)) {
		t->exit_code = WEXITSTATUS(st);
	} else if (WIFSIGNALED(st)) {
		t->term_signal = WTERMSIG(st);
		t->exit_code = 128 + t->term_signal;
	}
	if (t->kill_reason)
		t->status = t->kill_reason;
	else
		t->status = t->exit_code == 0 ? TS_SUCCEEDED : TS_FAILED;
	if (t->status == TS_TIMEOUT && t->api == TASK_API_NATIVE)
		t->exit_code = 124; /* as timeout(1) reports it */
	json_t *ev = exit_json(t);
	if (t->on_finish) {
		t->on_finish(t, ev);
		t->on_finish = NULL;
	}
	t->r->tasks->finished++;
	/* Its time limit is over: a kept record holds no fd (256 of them
	 * would otherwise each keep a timerfd, and every spawn copies them).
	 * A lingering one keeps it for the grace of a stop (task_kill). */
	if (!t->lingering)
		loop_timer_close(&t->r->loop, &t->timer);
	log_info("task finished", "{s:s,s:s,s:i,s:I}", "task", t->id, "status", task_status_str(t),
		 "exit_code", t->exit_code, "duration_ms",
		 (json_int_t)(t->finished_ms - t->started_ms));
	task_io_finish(t);
	terminal_event(t, "exit", ev);
}

void task_exit_release(struct task *t)
{
	json_t *ev = t->held_ev;
	if (!ev)
		return;
	t->held_ev = NULL;
	t->exit_hold = NULL;
	task_append_event(t, t->held_name, ev);
	task_audit_ended(t, ev);
	json_decref(ev);
	task_wake_readers(t);
	hook_finished(t);
}

/* ---- driven tasks (agent) ---- */

void task_emit(struct task *t, const char *name, json_t *data)
{
	task_append_event(t, name, data);
	task_wake_readers(t);
}

static void driven_end(struct task *t, enum task_status st, const char *limit, int exit_code)
{
	t->finished = true;
	t->finished_ms = now_ms();
	t->finished_mono = monotonic_ms();
	t->status = st;
	t->end_reason = st == TS_LIMIT ? limit : NULL;
	t->exit_code = exit_code;
	t->driver = NULL;
	t->r->tasks->running--;
	t->r->tasks->finished++;
	loop_timer_close(&t->r->loop, &t->timer);
}

static void driven_log(struct task *t, const char *name, json_t *ev)
{
	log_info("task finished", "{s:s,s:s,s:i,s:I}", "task", t->id, "status", task_status_str(t),
		 "exit_code", t->exit_code, "duration_ms",
		 (json_int_t)(t->finished_ms - t->started_ms));
	terminal_event(t, name, ev);
}

void task_driven_finish(struct task *t, enum task_status st, const char *limit, int exit_code,
			json_t *extra)
{
	if (t->finished)
		return;
	driven_end(t, st, limit, exit_code);
	json_t *ev = exit_json(t);
	if (extra)
		json_object_update(ev, extra);
	driven_log(t, "exit", ev);
}

void task_driven_fail(struct task *t, const char *code, const char *message, json_t *extra)
{
	if (t->finished)
		return;
	driven_end(t, TS_ERROR, NULL, 1);
	json_t *ev = json_pack("{s:s,s:s,s:I}", "code", code, "message", message, "duration_ms",
			       (json_int_t)(t->finished_ms - t->started_ms));
	if (extra)
		json_object_update(ev, extra);
	driven_log(t, "error", ev);
}
