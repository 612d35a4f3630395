#include "task/task.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "confine/cgroup.h"
#include "task/env.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/ids.h"
#include "core/audit.h"
#include "core/log.h"
#include "core/runner.h"
#include "task/pty.h"
#include "task/spawn.h"
#include "core/util.h"

static const char *shell_path(void)
{
	static const char *shell;
	if (!shell)
		shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
	return shell;
}

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
	case TS_MAX_STEPS:
		return "max_steps";
	case TS_MAX_TOKENS:
		return "max_tokens";
	case TS_MAX_MODEL_REQUESTS:
		return "max_model_requests";
	case TS_ERROR:
		return "error";
	}
	return "unknown";
}

/* A mapped spool puts up to task-log-max of page cache, which exists
 * either way, in the runner's RSS: a few bulk writers at a time get it. */
#define TASK_SPOOL_MAPS 4

static void on_rest_over(struct loop *loop, struct loop_timer *timer);
static void on_output(struct loop *loop, struct loop_watch *w, uint32_t events);

/* Room for a read's worth of pipe buffers however they are aligned (a
 * whole page each at most, some split by an earlier read). A smaller one
 * would cut bulk reads short, and each short one rests the pipe. */
#define TASK_DRAIN_PIPE (256 * 1024)

static void drain_close(int fds[2])
{
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	fds[0] = fds[1] = -1;
}

/* 0, or -errno with fds {-1, -1}: no drain pipe, bulk output is read. */
static int drain_open(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
		fds[0] = fds[1] = -1;
		return -errno;
	}
	/* Refused where the user's pipe pages are used up (non-root mode:
	 * the tasks' uid is the runner's). */
	if (fcntl(fds[0], F_SETPIPE_SZ, TASK_DRAIN_PIPE) < 0) {
		int e = errno;
		drain_close(fds);
		return -e;
	}
	return 0;
}

int tasks_init(struct runner *r)
{
	r->tasks = calloc(1, sizeof(*r->tasks));
	if (!r->tasks)
		return -1;
	r->tasks->spool_maps.max = TASK_SPOOL_MAPS;
	if (random_id(r->tasks->key_instance) < 0)
		return -1;
	int drc = drain_open(r->tasks->drain);
	if (drc < 0)
		log_warn("no drain pipe: bulk output is read straight from the task's pipe",
			 "{s:s}", "error", strerror(-drc));
	int trc = loop_timer_init(&r->loop, &r->tasks->rest_timer, on_rest_over, r->tasks);
	if (trc < 0)
		log_warn(
			"no timer for output coalescing: pipes are read as soon as they are readable",
			"{s:s}", "error", strerror(-trc));
	int rc = spawn_shim_init(&r->tasks->shim, r->policy);
	if (rc < 0)
		log_warn("task shim not available: shims are forked", "{s:s}", "error",
			 strerror(-rc));
	return 0;
}

void tasks_set_hooks(struct runner *r, const struct task_hooks *hooks)
{
	r->tasks->hooks = hooks;
}

/* The audit trail's door of a task (docs/design.md §22): the API that
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
	case TASK_API_TOOL:
		return audit_client(t->r) ? "mcp" : "agent";
	case TASK_API_NATIVE:
	default:
		return t->capability && !strcmp(t->capability, "agent") ? "agent" : "native";
	}
}

/* Every kind of task, started: what runs, as whom, where, with which
 * limits. Of the environment, the names only (values may be secrets). */
static void audit_task_started(struct task *t, const struct task_spec *spec)
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
	audit_emit(t->r, t->audit_door, "task started",
		   json_pack("{s:o,s:s*,s:s*,s:i,s:i,s:s*,s:s*,s:s*,s:s,s:I,s:b,s:b,s:o}", "who",
			     who, "command", t->command, "cwd", t->cwd, "uid", (int)t->uid, "gid",
			     (int)t->gid, "capability", t->capability, "engine", spec->engine,
			     "model", spec->model, "network", t->net_none ? "none" : "full",
			     "timeout_ms", (json_int_t)spec->timeout_ms, "background",
			     spec->background, "tty", spec->tty, "env", env));
	uint32_t chain;
	uint64_t first, oldest;
	audit_position(t->r, &chain, &first, &oldest, &t->audit_seq);
}

/* ... and ended: the terminal event's fields (exit code or signal, status,
 * duration, model usage), the output's bytes. */
static void audit_task_ended(struct task *t, json_t *exit_ev)
{
	if (!audit_enabled(t->r))
		return;
	json_t *ev = json_deep_copy(exit_ev);
	if (!ev)
		ev = json_object();
	json_object_del(ev, "message"); /* an error's text may quote anything */
	json_object_set_new(ev, "who", json_pack("{s:s}", "task", t->id));
	json_object_set_new(ev, "outcome", json_string(task_status_name(t->status)));
	json_object_set_new(ev, "bytes_out", json_integer((json_int_t)t->spool.next_off));
	audit_emit(t->r, t->audit_door ? t->audit_door : task_door(t), "task ended", ev);
}

static void hook_finished(struct task *t)
{
	const struct task_hooks *h = t->r->tasks->hooks;
	if (h && h->finished)
		h->finished(t);
}

unsigned tasks_running(struct runner *r)
{
	return r->tasks ? r->tasks->running : 0;
}

struct task *task_find(struct runner *r, const char *id)
{
	for (struct task *t = r->tasks->head; t; t = t->next)
		if (!strcmp(t->id, id))
			return t;
	return NULL;
}

struct task *task_find_key(struct runner *r, enum task_api api, const char *key)
{
	for (struct task *t = r->tasks->head; t; t = t->next)
		if (t->op_key && t->api == api && !strcmp(t->op_key, key))
			return t;
	return NULL;
}

int task_set_key(struct task *t, const char *key, const unsigned char hash[32])
{
	char *k = strdup(key);
	if (!k)
		return -ENOMEM;
	free(t->op_key);
	t->op_key = k;
	memcpy(t->op_hash, hash, 32);
	return 0;
}

unsigned tasks_pinned(struct runner *r)
{
	uint64_t now = monotonic_ms();
	unsigned n = 0;
	for (struct task *t = r->tasks->head; t; t = t->next)
		n += t->op_key && t->key_until_mono > now;
	return n;
}

static void wake_readers(struct task *t)
{
	for (struct task_reader *rd = t->readers; rd;) {
		struct task_reader *next = rd->next; /* wake may detach */
		if (rd->wake)
			rd->wake(rd);
		rd = next;
	}
}

/* The pipes are watched unless backpressure holds them or they rest. */
static void apply_watches(struct task *t)
{
	uint32_t ev = t->paused || t->resting ? 0 : EPOLLIN;
	if (t->out_fd >= 0)
		loop_watch_set(&t->r->loop, &t->out_w, ev);
	if (t->err_fd >= 0)
		loop_watch_set(&t->r->loop, &t->err_w, ev);
}

static void set_paused(struct task *t, bool paused)
{
	if (t->paused == paused)
		return;
	t->paused = paused;
	if (paused)
		t->paused_mono = monotonic_ms();
	apply_watches(t);
}

/* Output coalescing (docs/design.md §15.1). A bulk writer - a read of at
 * least TASK_BULK_MIN bytes drained its pipe less than TASK_BULK_US after
 * the previous read - has its pipes left alone for TASK_REST_US: the next
 * read then takes a whole record instead of the few KiB one write left,
 * and the task's writes in between wake nobody. Everything else (a prompt,
 * a line now and then, a terminal's echo of each keystroke however fast
 * they come) is read the moment it is written, as before. */
#define TASK_REST_US 150
#define TASK_BULK_US 1000
#define TASK_BULK_MIN 4096
/* A mapped writer that makes this many short reads in a row has stopped
 * its burst; one short read is only the tail of a burst (what its last
 * write left), which a burst ends with nearly always. */
#define TASK_SHORT_READS 8
/* ... and one that has read nothing for this long (a server after its
 * burst, with nothing more to say) gives it back at the next tick. */
#define TASK_QUIET_UNMAP_MS 1000
/* A writer held back by its reader keeps its slot while the reader
 * catches up, but a reader that stopped for this long keeps no slot from
 * the other bulk writers: the task maps again at its next wrap. */
#define TASK_PAUSED_UNMAP_MS 5000
/* A read takes at most this much: a record of text that escapes by a few
 * percent then still fits one 64 KiB send with its framing (a larger one
 * would leave a scrap of a packet after every record). */
#define TASK_READ_MAX (SPOOL_MAX_REC - 2048)

static void rest_pipes(struct task *t)
{
	struct task_table *tt = t->r->tasks;
	if (t->resting || t->paused || tt->rest_timer.w.fd < 0)
		return;
	if (!tt->resting && loop_timer_start_us(&t->r->loop, &tt->rest_timer, TASK_REST_US) < 0)
		return; /* read at once, as without coalescing */
	t->resting = true;
	t->rest_next = tt->resting;
	tt->resting = t;
	apply_watches(t);
}

static void on_rest_over(struct loop *loop, struct loop_timer *timer)
{
	(void)loop;
	struct task_table *tt = timer->arg;
	struct task *t = tt->resting;
	tt->resting = NULL;
	while (t) {
		struct task *next = t->rest_next;
		t->rest_next = NULL;
		t->resting = false;
		apply_watches(t);
		/* Read now rather than after another wait, and wake the readers
		 * either way: a stream holding a short tail for this read sends it
		 * (http/stream.c). The read may start a new rest. */
		if (!t->paused && t->out_fd >= 0)
			on_output(loop, &t->out_w, EPOLLIN);
		if (!t->paused && !t->resting && t->err_fd >= 0)
			on_output(loop, &t->err_w, EPOLLIN);
		wake_readers(t);
		t = next;
	}
}

static void rest_forget(struct task *t)
{
	if (!t->resting || !t->r->tasks)
		return;
	for (struct task **p = &t->r->tasks->resting; *p; p = &(*p)->rest_next)
		if (*p == t) {
			*p = t->rest_next;
			break;
		}
	t->rest_next = NULL;
	t->resting = false;
}

/* Backpressure: the slowest connected client decides whether we read. */
static void update_backpressure(struct task *t)
{
	uint64_t window = t->r->cfg.stream_window;
	uint64_t max_lag = 0;
	for (struct task_reader *rd = t->readers; rd; rd = rd->next) {
		if (!rd->live)
			continue;
		uint64_t lag = t->spool.next_off - rd->off_read;
		if (lag > max_lag)
			max_lag = lag;
	}
	if (!t->paused && max_lag > window)
		set_paused(t, true);
	else if (t->paused && max_lag <= window / 2)
		set_paused(t, false);
}

/* A map slot taken (the log wrapped: §4.3) or given back, once per change:
 * an operator sees which task holds a mapping and why it let go, and seq
 * (the records so far) places the change in the task's output. The task
 * decides how often that happens (bursts and pauses of its own), so only
 * its first TASK_MAP_LOGS changes are logged, then one line says so. */
#define TASK_MAP_LOGS 32
static void log_mapping(struct task *t, const char *why_unmapped)
{
	if (t->spool.mapped == t->log_mapped)
		return;
	t->log_mapped = t->spool.mapped;
	if (t->map_logged >= TASK_MAP_LOGS) {
		if (t->map_logged == TASK_MAP_LOGS && ++t->map_logged)
			log_info("task log map changes no longer logged", "{s:s,s:i}", "task",
				 t->id, "logged", TASK_MAP_LOGS);
		return;
	}
	t->map_logged++;
	log_info(t->log_mapped ? "task log mapped" : "task log unmapped", "{s:s,s:s,s:I}", "task",
		 t->id, "why", t->log_mapped ? "wrapped" : why_unmapped, "seq",
		 (json_int_t)t->spool.next_seq);
}

static void append_event(struct task *t, const char *name, json_t *data)
{
	cleanup_free char *json = json_dumps(data, JSON_COMPACT);
	if (!json)
		return;
	cleanup_buf struct buf b = {0};
	buf_appendf(&b, "%s\n%s", name, json);
	int rc = spool_append(&t->spool, SPOOL_EVENT, b.data, (uint32_t)b.len);
	if (rc < 0)
		log_errno("task log write failed", -rc, t->id);
	log_mapping(t, "event");
}

static void close_pipe(struct task *t, int which)
{
	int *fd = which == 0 ? &t->out_fd : &t->err_fd;
	struct loop_watch *w = which == 0 ? &t->out_w : &t->err_w;
	if (*fd < 0)
		return;
	/* Whatever is left of a cut UTF-8 sequence goes out as it is. */
	if (t->carry_len[which]) {
		spool_append(&t->spool, which == 0 ? SPOOL_STDOUT : SPOOL_STDERR, t->carry[which],
			     (uint32_t)t->carry_len[which]);
		t->carry_len[which] = 0;
	}
	loop_watch_del(&t->r->loop, w);
	close(*fd);
	*fd = -1;
	if (t->out_fd < 0 && t->err_fd < 0) {
		t->pipes_closed_mono = monotonic_ms();
		spool_unmap(&t->spool); /* the writer is done: its map slot is free */
		log_mapping(t, "pipes closed");
	}
}

static void task_finalize(struct task *t);

static void maybe_finalize(struct task *t)
{
	if (!t->driver && !t->finished && !t->proc_running && t->out_fd < 0 && t->err_fd < 0)
		task_finalize(t);
}

/* Up to len bytes of a task's pipe into buf, as read(2) would. A bulk
 * writer's are first spliced into the drain pipe, which moves page
 * references under the task pipe's lock instead of copying 62 KiB under
 * it: the task, writing into the same pipe at the same time, no longer
 * waits on that lock (§15.3, seventh round). The drain pipe is emptied
 * before this returns; where it cannot be, it is replaced, so no byte of
 * one task can ever reach another's output. */
static ssize_t read_output(struct task *t, int which, int fd, unsigned char *buf, size_t len)
{
	int *drain = t->r->tasks->drain;
	if (!t->drain_next[which] || t->drain_off || drain[0] < 0)
		return read(fd, buf, len);
	ssize_t n = splice(fd, NULL, drain[1], NULL, len, SPLICE_F_NONBLOCK);
	if (n < 0 && errno == EINVAL) {
		/* Not a pipe: this task reads as it always did. */
		t->drain_off = true;
		return read(fd, buf, len);
	}
	if (n <= 0)
		return n;
	size_t got = 0;
	while (got < (size_t)n) {
		ssize_t m = read(drain[0], buf + got, (size_t)n - got);
		if (m > 0) {
			got += (size_t)m;
			continue;
		}
		int e = m < 0 ? errno : EPIPE;
		if (e == EINTR)
			continue;
		/* What is left in it belongs to this task alone: the pipe goes,
		 * with those bytes, and a new one takes its place. The task's own
		 * pipe stays: what it writes next is read as before. */
		log_error("reading the drain pipe failed: output lost", "{s:s, s:s, s:I}", "task",
			  t->id, "error", strerror(e), "bytes_lost", (json_int_t)((size_t)n - got));
		drain_close(drain);
		int rc = drain_open(drain);
		if (rc < 0)
			log_errno(
				"no drain pipe: bulk output is read straight from the task's pipe",
				-rc, t->id);
		if (got > 0)
			return (ssize_t)got;
		errno = EAGAIN;
		return -1;
	}
	return n;
}

static void on_output(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	struct task *t = w->arg;
	int which = w == &t->out_w ? 0 : 1;
	int fd = which == 0 ? t->out_fd : t->err_fd;
	/* Up to 64 KiB (a record's most) per read: streams encode a record
	 * in pieces, so their buffers stay small whatever its size. The
	 * buffer is shared: the record it held is no longer hot. */
	struct task_table *tt = t->r->tasks;
	/* Straight into the task's log where it can (one copy fewer: a
	 * bulk writer's bytes are otherwise copied twice here); else into
	 * the shared buffer, whose record then stops being hot. */
	unsigned char *buf = spool_window(&t->spool, TASK_READ_MAX);
	bool in_place = buf != NULL;
	if (!in_place) {
		if (tt->rbuf_owner) {
			spool_drop_hot(&tt->rbuf_owner->spool);
			tt->rbuf_owner = NULL;
		}
		buf = tt->rbuf;
	}
	size_t carry = t->carry_len[which];
	memcpy(buf, t->carry[which], carry);
	ssize_t n = read_output(t, which, fd, buf + carry, TASK_READ_MAX - carry);
	if (n < 0 && errno == EIO)
		n = 0; /* a terminal whose every task side is closed */
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return;
		log_errno("read from task pipe failed", errno, t->id);
		close_pipe(t, which);
		maybe_finalize(t);
		return;
	}
	uint64_t now_us = monotonic_us();
	bool bulk = n >= TASK_BULK_MIN && now_us - t->last_read_us < TASK_BULK_US;
	t->last_read_us = now_us;
	if (n == 0) {
		close_pipe(t, which);
		wake_readers(t);
		maybe_finalize(t);
		return;
	}
	(void)events;
	size_t total = carry + (size_t)n;
	/* Keep a multi-byte character whole across reads, so chunks stay
	 * valid UTF-8 where the task wrote valid UTF-8. */
	size_t tail = utf8_incomplete_tail(buf, total);
	if (tail == total)
		tail = 0;
	memcpy(t->carry[which], buf + total - tail, tail);
	t->carry_len[which] = tail;
	uint16_t type = which == 0 ? SPOOL_STDOUT : SPOOL_STDERR;
	int rc = in_place ? spool_commit(&t->spool, type, (uint32_t)(total - tail))
			  : spool_append_hot(&t->spool, type, buf, (uint32_t)(total - tail));
	if (rc < 0)
		log_errno("task log write failed", -rc, t->id);
	else if (!in_place)
		tt->rbuf_owner = t;
	/* A mapped writer that prints a little now (a server after its burst
	 * of logs) gives its map slot back; a next burst maps again when it
	 * writes over a segment. */
	t->short_reads = (size_t)n < TASK_BULK_MIN ? t->short_reads + 1 : 0;
	t->drain_next[which] = !t->drain_off && (size_t)n >= TASK_BULK_MIN;
	if (t->short_reads >= TASK_SHORT_READS && t->spool.mapped)
		spool_unmap(&t->spool);
	log_mapping(t, "short reads");
	update_backpressure(t);
	wake_readers(t);
	if (bulk && (size_t)n < TASK_READ_MAX - carry)
		rest_pipes(t);
}

static void task_signal_shim(struct task *t, int sig)
{
	if (t->proc_running && kill(t->shim_pid, sig) < 0 && errno != ESRCH)
		log_errno("signalling a task failed", errno, t->id);
}

static void on_task_timer(struct loop *loop, struct loop_timer *timer)
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
	if (!t->kill_reason)
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
	for (struct task *t = r->tasks->head, *next; t; t = next) {
		next = t->next;
		if (t->driver && !t->finished) {
			t->driver->cancel(t, TS_KILLED);
			continue;
		}
		if (!t->proc_running)
			continue;
		if (hard) {
			if (!t->kill_reason)
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

static void on_task_exit(void *arg, pid_t pid, int status)
{
	(void)pid;
	struct task *t = arg;
	t->proc_running = false;
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
	maybe_finalize(t);
}

static json_t *exit_json(struct task *t)
{
	json_t *o = json_pack("{s:i,s:s,s:I}", "exit_code", t->exit_code, "status",
			      task_status_name(t->status), "duration_ms",
			      (json_int_t)(t->finished_ms - t->started_ms));
	if (t->term_signal) {
		json_object_set_new(o, "signal", json_integer(t->term_signal));
		json_object_set_new(o, "signal_name", json_string(signal_name(t->term_signal)));
	}
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
	 * would otherwise each keep a timerfd, and every spawn copies them). */
	loop_timer_close(&t->r->loop, &t->timer);
	log_info("task finished", "{s:s,s:s,s:i,s:I}", "task", t->id, "status",
		 task_status_name(t->status), "exit_code", t->exit_code, "duration_ms",
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
	append_event(t, t->held_name, ev);
	audit_task_ended(t, ev);
	json_decref(ev);
	wake_readers(t);
	hook_finished(t);
}

static void task_unlink(struct task *t)
{
	struct runner *r = t->r;
	if (!t->linked)
		return;
	if (t->prev)
		t->prev->next = t->next;
	else
		r->tasks->head = t->next;
	if (t->next)
		t->next->prev = t->prev;
	t->prev = t->next = NULL;
	t->linked = false;
	if (t->finished)
		r->tasks->finished--;
}

/* The one teardown, whatever state the record is in: never started (a
 * failed start), running (runner exit) or finished. */
static void task_free(struct task *t)
{
	if (!t)
		return;
	struct runner *r = t->r;
	task_unlink(t);
	rest_forget(t);
	if (r->tasks && r->tasks->rbuf_owner == t)
		r->tasks->rbuf_owner = NULL;
	if (t->driver && t->driver->release)
		t->driver->release(t);
	t->driver = NULL;
	if (t->exit_hold) /* the owner forgets it (held, or never finished) */
		t->exit_hold(t, t->exit_hold_arg, true);
	t->exit_hold = NULL;
	if (t->held_ev) /* its end is still a fact the trail keeps */
		audit_task_ended(t, t->held_ev);
	json_decref(t->held_ev);
	t->held_ev = NULL;
	if (t->on_finish) {
		/* Never finished (runner exit): let the owner drop its state. */
		json_t *ev = json_object();
		t->on_finish(t, ev);
		json_decref(ev);
		t->on_finish = NULL;
	}
	loop_timer_close(&r->loop, &t->timer);
	task_io_free(t);
	for (int i = 0; i < 2; i++)
		close_pipe(t, i);
	if (t->proc_running)
		reaper_forget(&r->reaper, t->shim_pid);
	if (t->cgroup)
		cgroup_task_remove(t->id);
	spool_close(&t->spool);
	free(t->command);
	free(t->cwd);
	free(t->capability);
	free(t->op_key);
	free(t);
}

static void task_freep(struct task **t)
{
	task_free(*t);
}
#define cleanup_task __attribute__((cleanup(task_freep)))

static void env_freep(char ***env)
{
	env_free(*env);
}
#define cleanup_env __attribute__((cleanup(env_freep)))

static void task_free_deferred(struct loop *loop, void *arg)
{
	(void)loop;
	task_free(arg);
}

/* Finished records are kept for a bounded time and count; ones a client
 * still reads from stay until it lets go. */
static void expire_records(struct runner *r)
{
	uint64_t now = monotonic_ms();
	unsigned finished = r->tasks->finished;
	/* Oldest are at the tail: new tasks go to the head. */
	struct task *t = r->tasks->head;
	while (t && t->next)
		t = t->next;
	for (struct task *prev; t; t = prev) {
		prev = t->prev;
		if (!t->finished || t->held_ev || t->n_readers ||
		    (t->op_key && t->key_until_mono > now))
			continue;
		bool too_many = finished > r->cfg.retain_count;
		bool too_old = now - t->finished_mono > r->cfg.retain_ms;
		if (!too_many && !too_old)
			continue;
		finished--;
		/* Unlink now so it is not found again, free after the batch. */
		task_unlink(t);
		loop_defer(&r->loop, task_free_deferred, t);
	}
}

void tasks_tick(struct runner *r)
{
	uint64_t now = monotonic_ms();
	for (struct task *t = r->tasks->head; t; t = t->next) {
		/* A process that escaped its shim could hold a pipe open:
		 * after the shim is gone, two seconds is all it gets. */
		uint64_t last_read_ms = t->last_read_us / 1000;
		uint64_t quiet_since = last_read_ms > t->finished_mono ? last_read_ms
								       : t->finished_mono;
		if (!t->driver && !t->finished && !t->proc_running && !t->paused &&
		    now - quiet_since > 2000) {
			close_pipe(t, 0);
			close_pipe(t, 1);
			maybe_finalize(t);
		}
		/* A paused writer is held back by its reader, not quiet. */
		bool stalled = t->paused && now - t->paused_mono > TASK_PAUSED_UNMAP_MS;
		bool quiet = !t->paused && now - last_read_ms > TASK_QUIET_UNMAP_MS;
		if (t->spool.mapped && (stalled || quiet)) {
			spool_unmap(&t->spool);
			log_mapping(t, stalled ? "reader stalled" : "quiet");
		}
	}
	expire_records(r);
}

void tasks_drop_finished(struct runner *r, unsigned *records, uint64_t *log_bytes)
{
	/* The keys are forgotten: ids of the previous instance are refused as such, never
	 * taken for new ones. */
	char fresh[33];
	if (random_id(fresh) == 0)
		memcpy(r->tasks->key_instance, fresh, sizeof(fresh));
	else
		log_error("cannot renew the operation instance id", NULL);
	for (struct task *t = r->tasks->head, *next; t; t = next) {
		next = t->next;
		free(t->op_key);
		t->op_key = NULL;
		t->key_until_mono = 0;
		if (!t->finished || t->held_ev || t->n_readers)
			continue;
		(*records)++;
		for (int i = 0; i < t->spool.nseg; i++)
			*log_bytes += t->spool.seg[i].size;
		task_unlink(t);
		loop_defer(&r->loop, task_free_deferred, t);
	}
}

void tasks_free_all(struct runner *r)
{
	if (!r->tasks)
		return;
	while (r->tasks->head) {
		struct task *t = r->tasks->head;
		while (t->readers)
			task_reader_detach(t->readers);
		task_free(t);
	}
	spawn_shim_free(&r->tasks->shim);
	loop_timer_close(&r->loop, &r->tasks->rest_timer);
	drain_close(r->tasks->drain);
	free(r->tasks);
	r->tasks = NULL;
}

/* A pipe whose read end (ours) does not block. 0 or -errno. */
static int make_pipe(int *rd, int *wr)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	*rd = fds[0];
	*wr = fds[1];
	if (fcntl(*rd, F_SETFL, O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static int resolve_identity(struct runner *r, const struct task_spec *spec, uid_t *uid, gid_t *gid,
			    struct error *err)
{
	*uid = r->cfg.task_uid;
	*gid = r->cfg.task_gid;
	if (spec->has_gid && !spec->has_uid)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "uid is required when gid is provided");
	if (spec->has_uid) {
		*uid = spec->uid;
		struct passwd *pw = getpwuid(spec->uid);
		*gid = spec->has_gid ? spec->gid : pw ? pw->pw_gid : (gid_t)spec->uid;
	}
	if ((*uid == 0 || *gid == 0) && !r->cfg.allow_root_tasks)
		return error_set(err, 0, "FORBIDDEN",
				 "tasks may not run as uid/gid 0 (the runner was started without "
				 "--allow-root-tasks)");
	/* Without the capabilities no identity change is possible: say so
	 * here rather than fail the task with 126. */
	if (!r->policy->caps.privileged && (*uid != r->cfg.task_uid || *gid != r->cfg.task_gid))
		return error_set(
			err, 0, "FORBIDDEN",
			"the runner is in non-root mode (uid %u, no capabilities): tasks run "
			"as uid %u gid %u only, not %u:%u",
			(unsigned)geteuid(), (unsigned)r->cfg.task_uid, (unsigned)r->cfg.task_gid,
			(unsigned)*uid, (unsigned)*gid);
	if (!ids_uid_allowed(&r->cfg, *uid) || !ids_gid_allowed(&r->cfg, *gid))
		return error_set(err, 0, "FORBIDDEN",
				 "%s %u is not an identity tasks may have (the task user's own, or "
				 "--task-id-range %u-%u without 65534; never a system group below "
				 "1000)",
				 ids_uid_allowed(&r->cfg, *uid) ? "gid" : "uid",
				 ids_uid_allowed(&r->cfg, *uid) ? (unsigned)*gid : (unsigned)*uid,
				 (unsigned)r->cfg.task_id_lo, (unsigned)r->cfg.task_id_hi);
	return 0;
}

/* What every kind of task must pass before anything is allocated: the
 * runner accepts work, the cap, a cwd that exists. Returns the cwd. */
static const char *task_admit(struct runner *r, const struct task_spec *spec, struct error *err)
{
	const struct task_hooks *h = r->tasks->hooks;
	if (h && h->admit && h->admit(r, spec, err) < 0)
		return NULL;
	if (r->shutting_down) {
		error_set(err, 0, "SERVICE_UNAVAILABLE", "the runner is shutting down");
		return NULL;
	}
	if (r->tasks->running >= r->cfg.max_tasks) {
		error_set(err, 0, "TOO_MANY_TASKS",
			  "%u tasks are running, the configured maximum (--max-tasks)",
			  r->tasks->running);
		return NULL;
	}
	const char *cwd = spec->cwd;
	struct stat st;
	if (!cwd)
		cwd = (stat("/workspace", &st) == 0 && S_ISDIR(st.st_mode)) ? "/workspace" : "/";
	if (cwd[0] != '/') {
		error_set(err, 0, "INVALID_REQUEST_BODY", "cwd '%.200s' must be an absolute path",
			  cwd);
		return NULL;
	}
	if (stat(cwd, &st) < 0 || !S_ISDIR(st.st_mode)) {
		error_set(err, 0, "INVALID_REQUEST_BODY",
			  "cwd '%.200s' does not exist or is not a directory", cwd);
		return NULL;
	}
	return cwd;
}

/* An argv request's command as shown by the status and list APIs: its
 * words joined by spaces (display only; never run by a shell). */
static char *argv_display(json_t *argv)
{
	struct buf b = {0};
	size_t i;
	json_t *v;
	json_array_foreach(argv, i, v) {
		if ((i && buf_append_lit(&b, " ") < 0) ||
		    buf_append(&b, json_string_value(v), json_string_length(v)) < 0) {
			buf_free(&b);
			return NULL;
		}
	}
	if (buf_append(&b, "", 1) < 0) {
		buf_free(&b);
		return NULL;
	}
	return b.data;
}

/* argv[0] of an argv request as a path to exec: with a '/', relative to the
 * cwd; else the first executable regular file of that name in the task's
 * PATH (from envp), as execvp would pick it. */
static char *argv_resolve(const char *name, const char *cwd, char *const *envp, struct error *err)
{
	char *path = NULL;
	if (strchr(name, '/')) {
		if (name[0] == '/')
			path = strdup(name);
		else if (asprintf(&path, "%s/%s", cwd, name) < 0)
			path = NULL;
		if (!path)
			error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the task");
		return path;
	}
	const char *pathvar = "/usr/local/bin:/usr/bin:/bin";
	for (char *const *e = envp; *e; e++)
		if (!strncmp(*e, "PATH=", 5))
			pathvar = *e + 5;
	for (const char *p = pathvar;; p++) {
		size_t n = strcspn(p, ":");
		char *cand;
		if (asprintf(&cand, "%.*s/%s", (int)n, n ? p : cwd, name) < 0) {
			error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the task");
			return NULL;
		}
		struct stat st;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
			return cand;
		free(cand);
		p += n;
		if (!*p)
			break;
	}
	error_set(err, 0, "INVALID_REQUEST_BODY",
		  "argv[0] '%.200s' is not an executable file in the task's PATH (%.300s)", name,
		  pathvar);
	return NULL;
}

/* A task record with its id, strings, spool and timer; not yet in the
 * table. */
static struct task *task_alloc(struct runner *r, const struct task_spec *spec, const char *cwd,
			       const char *capability, struct error *err)
{
	cleanup_task struct task *t = calloc(1, sizeof(*t));
	if (!t) {
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the task");
		return NULL;
	}
	t->r = r;
	t->out_fd = t->err_fd = -1;
	t->timer.w.fd = -1;
	t->exit_code = -1;
	t->api = spec->api;
	t->background = spec->background;
	t->timeout_ms = spec->timeout_ms;
	t->exit_hold = spec->exit_hold;
	t->exit_hold_arg = spec->exit_hold_arg;
	int rc = random_id(t->id);
	if (rc == 0) {
		t->command = spec->argv ? argv_display(spec->argv) : strdup(spec->command);
		t->cwd = strdup(cwd);
		t->capability = capability ? strdup(capability) : NULL;
		if (!t->command || !t->cwd || (capability && !t->capability))
			rc = -ENOMEM;
	}
	if (rc == 0)
		rc = spool_open(&t->spool, r->state_dir_fd, r->cfg.task_log_max,
				&r->tasks->spool_maps);
	if (rc == 0)
		rc = loop_timer_init(&r->loop, &t->timer, on_task_timer, t);
	if (rc < 0) {
		error_set(err, -rc, "RUNTIME_ERROR", "cannot start the task");
		return NULL;
	}
	return take_ptr(t);
}

/* Logged once; errnum, when not 0, is what failed (else err is set). */
static struct task *start_failed(struct error *err, int errnum)
{
	if (errnum)
		error_set(err, errnum, "RUNTIME_ERROR", "cannot start the task");
	log_error("task start failed", "{s:s}", "error", err->msg);
	return NULL;
}

static void task_link(struct task *t)
{
	struct runner *r = t->r;
	t->next = r->tasks->head;
	if (t->next)
		t->next->prev = t;
	r->tasks->head = t;
	t->linked = true;
	if (r->tasks->hooks && r->tasks->hooks->started)
		r->tasks->hooks->started(t);
}

struct task *task_start(struct runner *r, const struct task_spec *spec, struct error *err)
{
	const char *cwd = task_admit(r, spec, err);
	if (!cwd)
		return NULL;
	uid_t uid;
	gid_t gid;
	if (resolve_identity(r, spec, &uid, &gid, err) < 0)
		return NULL;
	bool chat = spec->capability && !strcmp(spec->capability, "chat");
	if (chat && spec->network == TASK_NET_NONE) {
		error_set(err, 0, "INVALID_REQUEST_BODY",
			  "a chat task needs the network: its model proxy is on 127.0.0.1");
		return NULL;
	}
	bool net_none = spec->network == TASK_NET_NONE ||
			(spec->network == TASK_NET_DEFAULT && !chat && r->cfg.exec_network_none);
	/* The EXECD_ENVS file goes where execd applies it, its commands, and
	 * nowhere else: any task can write it, and the runner's own tasks
	 * (MCP servers, engines, chat, tool commands) run for other clients
	 * (docs/design.md §20.3). execd's sessions and terminals see only the
	 * variable naming it. */
	cleanup_json json_t *env = spec->api == TASK_API_EXECD
					   ? env_with_file(spec->env, r->cfg.execd_envs, uid)
				   : spec->api == TASK_API_SESSION || spec->api == TASK_API_PTY
					   ? env_with_path(spec->env, r->cfg.execd_envs)
				   : spec->env ? json_incref(spec->env)
					       : NULL;
	/* The sandbox-level variables of a runtime init (replace semantics,
	 * set by the control plane) go under the file's and the request's. */
	if (r->sandbox_env && json_object_size(r->sandbox_env)) {
		json_t *all = json_deep_copy(r->sandbox_env);
		if (!all || (env && json_object_update(all, env) < 0)) {
			json_decref(all);
			error_set(err, ENOMEM, NULL, "task environment");
			return NULL;
		}
		json_decref(env);
		env = all;
	}
	cleanup_env char **envp = env_build(uid, cwd, env, err);
	if (!envp)
		return NULL;
	cleanup_task struct task *t = task_alloc(r, spec, cwd, spec->capability, err);
	if (!t)
		return start_failed(err, 0);
	t->uid = uid;
	t->gid = gid;
	t->net_none = net_none;
	cleanup_close int out_r = -1, out_w = -1, err_r = -1, err_w = -1;
	int rc;
	/* A terminal or a stdin pipe (task/pty.c); closed here on failure. */
	cleanup_task_io struct task_io_prep iop = TASK_IO_PREP_INIT;
	if (task_io_prepare(spec, &iop, err) < 0)
		return start_failed(err, 0);
	if (!iop.tty &&
	    ((rc = make_pipe(&out_r, &out_w)) < 0 || (rc = make_pipe(&err_r, &err_w)) < 0))
		return start_failed(err, -rc);
	/* A few tasks at a time get a 256 KiB stdout pipe: a task that prints
	 * fast blocks less and each read moves up to a whole record. Bounded
	 * (pipe pages count against the user's pipe limit, and root without
	 * CAP_SYS_RESOURCE has one); refused is fine, the pipe stays as it is. */
	if (!iop.tty && r->tasks->running < 8)
		(void)fcntl(out_r, F_SETPIPE_SZ, 256 * 1024);
	cleanup_close int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0)
		return start_failed(err, errno);

	char *shell_argv[] = {(char *)shell_path(), "-c", t->command, NULL};
	if (spec->api == TASK_API_PTY && !*t->command)
		shell_argv[1] = NULL; /* an interactive shell of its own */
	char **argv = shell_argv;
	cleanup_free char **words = NULL;
	cleanup_free char *exe = NULL;
	if (spec->argv) {
		size_t n = json_array_size(spec->argv);
		if (!(words = calloc(n + 1, sizeof(*words))))
			return start_failed(err, ENOMEM);
		for (size_t i = 0; i < n; i++)
			words[i] = (char *)json_string_value(json_array_get(spec->argv, i));
		if (!(exe = argv_resolve(words[0], t->cwd, envp, err)))
			return start_failed(err, 0);
		argv = words;
	}
	cleanup_close int procs_fd = -1;
	if (r->policy->cgroup_mode == CGROUP_V2) {
		/* Limits are part of the confinement: no leaf, no task. */
		rc = cgroup_task_create(t->id, r->cfg.task_memory_max, r->cfg.task_pids_max,
					r->cfg.task_cpu_max, &procs_fd);
		if (rc < 0)
			return start_failed(err, -rc);
		t->cgroup = true;
	}
	struct confine_plan plan = {
		.policy = r->policy,
		.path = exe ? exe : argv[0],
		.argv = argv,
		.envp = envp,
		.cwd = t->cwd,
		.uid = uid,
		.gid = gid,
		.cgroup_procs_fd = procs_fd,
		.deny_inet = net_none,
		/* The uid change clears the shim's death signal: re-armed in
		 * the task so it dies if the shim does. */
		.pdeath_signal = SIGKILL,
		.ctty = iop.tty,
	};
	struct spawn_io io = {.in_fd = iop.child_in >= 0 ? iop.child_in : devnull,
			      .out_fd = iop.tty ? iop.child_out : out_w,
			      .err_fd = iop.tty ? iop.child_out : err_w};
	if (spec->state_in_fd >= 0 && spec->state_out_fd >= 0) {
		io.extra[0] = spec->state_in_fd;
		io.extra[1] = spec->state_out_fd;
		io.n_extra = 2;
	}
	t->started_ms = now_ms();
	t->started_mono = monotonic_ms();
	bool shim_ok = !r->tasks->shim.disabled;
	pid_t pid = spawn_task(&r->tasks->shim, &plan, &io);
	if (pid < 0)
		return start_failed(err, -pid);
	if (shim_ok && r->tasks->shim.disabled)
		log_warn("task shim could not be exec'd: shims are forked from now on", "{s:s}",
			 "error", strerror(r->tasks->shim.disabled_errno));
	t->shim_pid = pid;
	t->proc_running = true;
	r->tasks->running++;
	if (reaper_watch(&r->reaper, pid, on_task_exit, t) < 0)
		log_error("out of memory watching a task", NULL);
	t->out_fd = iop.tty ? take_fd(iop.parent_out) : take_fd(out_r);
	t->drain_off = iop.tty;
	t->err_fd = take_fd(err_r); /* -1 on a terminal: one stream */
	if ((rc = task_io_attach(t, &iop)) < 0)
		log_errno("task input unavailable", -rc, t->id);
	loop_watch_add(&r->loop, &t->out_w, t->out_fd, EPOLLIN, on_output, t);
	if (t->err_fd >= 0)
		loop_watch_add(&r->loop, &t->err_w, t->err_fd, EPOLLIN, on_output, t);
	if (spec->timeout_ms)
		loop_timer_start(&r->loop, &t->timer, spec->timeout_ms, 0);
	cleanup_json json_t *started =
		json_pack("{s:s,s:i,s:I,s:s,s:s}", "task_id", t->id, "pid", (int)pid, "started_at",
			  (json_int_t)t->started_ms, "capability",
			  spec->capability ? spec->capability : "exec", "network",
			  net_none ? "none" : "full");
	append_event(t, "started", started);

	task_link(t);
	audit_task_started(t, spec);
	log_info("task started", "{s:s,s:i,s:i,s:i,s:b,s:s}", "task", t->id, "pid", (int)pid, "uid",
		 (int)uid, "gid", (int)gid, "background", spec->background, "network",
		 net_none ? "none" : "full");
	return take_ptr(t);
}

void task_reader_attach(struct task *t, struct task_reader *rd, bool live)
{
	rd->task = t;
	rd->live = live;
	rd->prev = NULL;
	rd->next = t->readers;
	if (t->readers)
		t->readers->prev = rd;
	t->readers = rd;
	t->n_readers++;
	if (!rd->cur.gen && !rd->cur.pos && !rd->cur.seq)
		spool_cursor_start(&t->spool, &rd->cur);
	rd->off_read = spool_first_off(&t->spool);
}

void task_reader_detach(struct task_reader *rd)
{
	struct task *t = rd->task;
	if (!t)
		return;
	if (rd->prev)
		rd->prev->next = rd->next;
	else
		t->readers = rd->next;
	if (rd->next)
		rd->next->prev = rd->prev;
	rd->task = NULL;
	t->n_readers--;
	update_backpressure(t);
}

int task_reader_next_ref(struct task_reader *rd, struct spool_rec *rec, void *buf,
			 const char **data)
{
	struct task *t = rd->task;
	bool skipped;
	const void *p;
	int rc = spool_next_ref(&t->spool, &rd->cur, rec, buf, &p, &skipped);
	if (rc == 1) {
		*data = p;
		if (rec->type != SPOOL_EVENT)
			rd->off_read = rec->off + rec->len;
		if (t->paused)
			update_backpressure(t);
	}
	return rc;
}

/* The copying form, for readers that keep the bytes past the next append. */
int task_reader_next(struct task_reader *rd, struct spool_rec *rec, void *buf)
{
	const char *data;
	int rc = task_reader_next_ref(rd, rec, buf, &data);
	if (rc == 1 && data != buf)
		memcpy(buf, data, rec->len);
	return rc;
}

int task_reader_next_rec(struct task_reader *rd, struct task_rec_ref *ref, void *buf,
			 const char **data)
{
	int rc = task_reader_next_ref(rd, &ref->rec, buf, data);
	if (rc == 1) {
		/* A record never spans segments: it ends where the cursor is. */
		ref->gen = rd->cur.gen;
		ref->pos = rd->cur.pos - sizeof(struct spool_rec) - ref->rec.len;
		ref->done = 0;
		ref->active = true;
	}
	return rc;
}

int task_reader_rest(struct task_reader *rd, const struct task_rec_ref *ref, void *buf,
		     const char **data)
{
	const void *p;
	int rc = spool_payload(&rd->task->spool, ref->gen, ref->pos, ref->done,
			       ref->rec.len - ref->done, buf, &p);
	if (rc == 0)
		*data = p;
	return rc;
}

bool task_reader_at_end(struct task_reader *rd)
{
	struct task *t = rd->task;
	return t->finished && !t->held_ev && rd->cur.seq >= t->spool.next_seq;
}

/* ---- driven tasks (agent) ---- */

void task_emit(struct task *t, const char *name, json_t *data)
{
	append_event(t, name, data);
	wake_readers(t);
}

struct task *task_start_driven(struct runner *r, const struct task_spec *spec,
			       const struct task_driver_ops *ops, void *arg, struct error *err)
{
	const char *cwd = task_admit(r, spec, err);
	if (!cwd)
		return NULL;
	struct task *t =
		task_alloc(r, spec, cwd, spec->capability ? spec->capability : "agent", err);
	if (!t)
		return start_failed(err, 0);
	t->uid = r->cfg.task_uid;
	t->gid = r->cfg.task_gid;
	t->started_ms = now_ms();
	t->started_mono = monotonic_ms();
	t->driver = ops;
	t->driver_arg = arg;
	r->tasks->running++;
	if (spec->timeout_ms)
		loop_timer_start(&r->loop, &t->timer, spec->timeout_ms, 0);
	cleanup_json json_t *started =
		json_pack("{s:s,s:I,s:s,s:s?,s:s?}", "task_id", t->id, "started_at",
			  (json_int_t)t->started_ms, "capability", t->capability, "engine",
			  spec->engine, "conversation", spec->conversation);
	append_event(t, "started", started);
	task_link(t);
	audit_task_started(t, spec);
	log_info("task started", "{s:s,s:s}", "task", t->id, "capability", t->capability);
	return t;
}

static void driven_end(struct task *t, enum task_status st, int exit_code)
{
	t->finished = true;
	t->finished_ms = now_ms();
	t->finished_mono = monotonic_ms();
	t->status = st;
	t->exit_code = exit_code;
	t->driver = NULL;
	t->r->tasks->running--;
	t->r->tasks->finished++;
	loop_timer_close(&t->r->loop, &t->timer);
}

static void driven_log(struct task *t, const char *name, json_t *ev)
{
	log_info("task finished", "{s:s,s:s,s:i,s:I}", "task", t->id, "status",
		 task_status_name(t->status), "exit_code", t->exit_code, "duration_ms",
		 (json_int_t)(t->finished_ms - t->started_ms));
	terminal_event(t, name, ev);
}

void task_driven_finish(struct task *t, enum task_status st, int exit_code, json_t *extra)
{
	if (t->finished)
		return;
	driven_end(t, st, exit_code);
	json_t *ev = exit_json(t);
	if (extra)
		json_object_update(ev, extra);
	driven_log(t, "exit", ev);
}

void task_driven_fail(struct task *t, const char *code, const char *message, json_t *extra)
{
	if (t->finished)
		return;
	driven_end(t, TS_ERROR, 1);
	json_t *ev = json_pack("{s:s,s:s,s:I}", "code", code, "message", message, "duration_ms",
			       (json_int_t)(t->finished_ms - t->started_ms));
	if (extra)
		json_object_update(ev, extra);
	driven_log(t, "error", ev);
}
