/* POST /v1/reset: a used box becomes indistinguishable from a fresh one for
 * the next tenant (the `pooled` profile). A state machine on the loop, one
 * step every 10 ms, never blocking it:
 *
 *   processes  sessions deleted, model-proxy tokens revoked and proxied
 *              calls cut, every task tree SIGKILLed, then /proc swept (reset_sweep.c)
 *              (SIGSTOP, SIGKILL) until no descendant of the runner is left
 *              outside the main process's tree, nor (as PID 1) any process
 *              of a task uid;
 *   drain      every task record has its terminal event;
 *   streams    every stream is told to end (task streams send their
 *              terminal event first); after 1 s the rest are cut;
 *   records    every record, log and spool dropped;
 *   files      a child process restores the writable roots from the
 *              snapshot taken at start (reset_snapshot.c) and, as PID 1,
 *              removes the task uids' SysV IPC objects and POSIX queues.
 *
 * New tasks get 503 meanwhile (other routes too, but /ping, /metrics,
 * /v1/hardening); requests from before the reset that are still being
 * received are dropped. A reset that cannot finish (a process that will
 * not die, a restore error) leaves the box refusing tasks until a reset
 * succeeds. */
#include "profile/reset_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "core/closefds.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/signals.h"
#include "core/signame.h"
#include "http/http.h"
#include "init/runtime.h"
#include "profile/profile.h"
#include "profile/reset.h"
#include "task/ipcclean.h"
#include "task/session.h"
#include "task/task.h"
#include "tree/tree.h"

/* What a waiting POST /v1/reset gets (its req->ctx). */
struct reset_wait {
	struct reset *rs;
	unsigned status;
	json_t *body;
};

static struct reset *rs_of(struct runner *r)
{
	return r->profile ? r->profile->reset : NULL;
}

bool reset_busy(struct runner *r)
{
	struct reset *rs = rs_of(r);
	return rs && rs->phase != R_IDLE;
}

const char *reset_failure(struct runner *r)
{
	struct reset *rs = rs_of(r);
	return rs && rs->failed[0] ? rs->failed : NULL;
}

/* ---- answering ---- */

static void respond(struct reset *rs, unsigned status, json_t *body)
{
	struct http_req *req = rs->waiter;
	rs->waiter = NULL;
	if (!req) {
		json_decref(body);
		return;
	}
	struct reset_wait *w = req->ctx;
	w->status = status;
	w->body = body;
	http_req_resume(req);
}

static json_t *counts(struct reset *rs)
{
	return json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:i}", "tasks", (int)rs->tasks,
			 "processes", (int)reset_distinct_killed(rs), "sessions", (int)rs->sessions,
			 "pty_sessions", (int)rs->ptys, "model_tokens", (int)rs->tokens,
			 "model_requests", (int)rs->proxy_requests, "streams", (int)rs->streams,
			 "records", (int)rs->records, "log_bytes", (json_int_t)rs->log_bytes,
			 "conversations", (int)rs->conversations);
}

static void stop_worker(struct reset *rs)
{
	if (rs->worker_running) {
		if (kill(rs->worker, SIGKILL) < 0 && errno != ESRCH)
			log_errno("reset: SIGKILL to the worker failed", errno, NULL);
		reaper_forget(&rs->r->reaper, rs->worker);
		rs->worker_running = false;
	}
	if (rs->worker_fd >= 0) {
		close(rs->worker_fd);
		rs->worker_fd = -1;
	}
}

static void end_reset(struct reset *rs)
{
	rs->phase = R_IDLE;
	loop_timer_stop(&rs->r->loop, &rs->timer);
	free(rs->killed);
	rs->killed = NULL;
	rs->n_killed = rs->cap_killed = 0;
	free(rs->shims);
	rs->shims = NULL;
	rs->n_shims = 0;
}

static void fail(struct reset *rs, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void fail(struct reset *rs, unsigned status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rs->failed, sizeof(rs->failed), fmt, ap);
	va_end(ap);
	stop_worker(rs);
	uint64_t ms = monotonic_ms() - rs->t0;
	log_error("reset failed: the box refuses tasks until a reset succeeds", "{s:s,s:I}",
		  "error", rs->failed, "duration_ms", (json_int_t)ms);
	/* A pool reads "discard": the box refuses tasks until a reset
	 * succeeds, and this one could not make it fresh. */
	json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:o}", "code", code, "message", rs->failed, "box",
			      status == 500 ? "discard" : "unavailable", "duration_ms",
			      (json_int_t)ms, "removed", counts(rs));
	end_reset(rs);
	respond(rs, status, o);
}

static uint64_t vm_hwm_kib(void)
{
	char buf[4096];
	if (reset_read_small("/proc/self/status", buf, sizeof(buf)) < 0)
		return 0;
	char *p = strstr(buf, "VmHWM:");
	return p ? strtoull(p + 6, NULL, 10) : 0;
}

static void finish(struct reset *rs, json_t *w)
{
	uint64_t ms = monotonic_ms() - rs->t0;
	json_t *removed = counts(rs);
	json_t *wr = json_object_get(w, "removed");
	if (wr)
		json_object_update(removed, wr);
	json_t *o = json_pack("{s:s,s:I,s:o,s:O?,s:{s:I,s:I,s:I}}", "status", "reset",
			      "duration_ms", (json_int_t)ms, "removed", removed, "restored",
			      json_object_get(w, "restored"), "phases_ms", "processes",
			      (json_int_t)rs->ms_processes, "streams", (json_int_t)rs->ms_streams,
			      "files", (json_int_t)rs->ms_files);
	static const char *const copy[] = {"unchanged", "mount_points_skipped", "not_restorable",
					   "ipc", "worker_peak_rss_kib"};
	for (size_t i = 0; i < sizeof(copy) / sizeof(copy[0]); i++) {
		json_t *v = json_object_get(w, copy[i]);
		if (v)
			json_object_set(o, copy[i], v);
	}
	json_object_set_new(o, "runner_peak_rss_kib", json_integer((json_int_t)vm_hwm_kib()));
	json_object_set_new(o, "longest_step_ms", json_integer((json_int_t)rs->longest_step_ms));
	rs->failed[0] = 0;
	json_t *bind = runtime_init_reset_done(rs->r);
	if (bind)
		json_object_set_new(o, "runtime_init", bind);
	log_info("reset done", "{s:O}", "result", o);
	end_reset(rs);
	respond(rs, 200, o);
}

/* ---- the worker: restores the roots in a child process ---- */

/* Reads --execd-envs at start (never through a symlink; a regular file of at
 * most ENVS_MAX bytes), so that reset can put it back. */
static int envs_take(struct reset *rs, struct error *e)
{
	const char *path = rs->r->cfg.execd_envs;
	if (!path)
		return 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0)
		return error_set(e, errno, NULL, "--execd-envs '%s': cannot snapshot it", path);
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int saved = errno;
		close(fd);
		return error_set(e, saved, NULL, "--execd-envs '%s': fstat", path);
	}
	if (!S_ISREG(st.st_mode) || st.st_size > ENVS_MAX) {
		close(fd);
		return error_set(e, 0, NULL,
				 "--execd-envs '%s': not a regular file of at most %u bytes", path,
				 ENVS_MAX);
	}
	rs->envs.data = malloc((size_t)st.st_size + 1);
	if (!rs->envs.data) {
		close(fd);
		return error_set(e, ENOMEM, NULL, "--execd-envs");
	}
	size_t len = 0;
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, rs->envs.data + len, (size_t)st.st_size - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int saved = errno;
			close(fd);
			return error_set(e, saved, NULL, "--execd-envs '%s': read", path);
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	rs->envs.had = true;
	rs->envs.len = len;
	rs->envs.uid = st.st_uid;
	rs->envs.gid = st.st_gid;
	rs->envs.mode = st.st_mode & 07777;
	return 0;
}

/* In the worker: the file gets its content, owner and mode of the start
 * back (a tenant's set_env lines gone), or is removed when it was absent.
 * What is not a regular file of one link there is replaced. */
static int envs_restore(struct reset *rs, struct error *e)
{
	const char *path = rs->r->cfg.execd_envs;
	if (!path)
		return 0;
	int fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)) {
		close(fd);
		fd = -1;
		if (unlink(path) < 0 && errno != ENOENT)
			return error_set(e, errno, NULL, "EXECD_ENVS '%s': remove", path);
	} else if (fd < 0 && errno != ENOENT) {
		/* ELOOP: a symlink in its place; anything else, removed too. */
		if (unlink(path) < 0 && errno != ENOENT)
			return error_set(e, errno, NULL, "EXECD_ENVS '%s': remove", path);
	}
	if (!rs->envs.had) {
		if (fd >= 0) {
			close(fd);
			if (unlink(path) < 0 && errno != ENOENT)
				return error_set(e, errno, NULL, "EXECD_ENVS '%s': remove", path);
		}
		return 0;
	}
	if (fd < 0)
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return error_set(e, errno, NULL, "EXECD_ENVS '%s': recreate", path);
	int rc = 0;
	if (ftruncate(fd, 0) < 0)
		rc = error_set(e, errno, NULL, "EXECD_ENVS '%s': truncate", path);
	for (size_t off = 0; rc == 0 && off < rs->envs.len;) {
		ssize_t n = pwrite(fd, rs->envs.data + off, rs->envs.len - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = error_set(e, n < 0 ? errno : EIO, NULL, "EXECD_ENVS '%s': write",
				       path);
		else
			off += (size_t)n;
	}
	if (rc == 0 &&
	    (fchown(fd, rs->envs.uid, rs->envs.gid) < 0 || fchmod(fd, rs->envs.mode) < 0))
		rc = error_set(e, errno, NULL, "EXECD_ENVS '%s': owner and mode", path);
	close(fd);
	return rc;
}

static _Noreturn void worker_main(struct reset *rs, int out)
{
	struct runner *r = rs->r;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != r->self_pid)
		_exit(1);
	signals_reset_child();
	/* Client sockets must not stay open in here (a connection the runner
	 * closes would linger until we exit). */
	int keep[2 * TREE_MAX_ROOTS + 3];
	unsigned nk = reset_snapshot_fds(&rs->snap, keep, 2 * TREE_MAX_ROOTS + 1);
	keep[nk++] = out;
	if (r->state_dir_fd >= 0)
		keep[nk++] = r->state_dir_fd;
	int crc = closefds_except(3, keep, (int)nk);
	if (crc < 0) /* the worker goes on: what stays open only lingers */
		log_errno("reset worker: closing fds failed", -crc, NULL);
	umask(0);
	uint64_t t0 = monotonic_ms();
	struct tree_restore_stats st;
	struct error e = {0};
	if (r->state_dir_fd >= 0)
		tree_store_purge_dead(
			r->state_dir_fd); /* the checkpoints dropped (checkpoint_drop_all) */
	int rc = reset_snapshot_restore(&rs->snap, &st, &e);
	if (rc == 0)
		rc = envs_restore(rs, &e);
	json_t *ipc;
	if (rc == 0 && r->init_mode == INIT_PID1) {
		struct ipc_stats is;
		struct profile *p = r->profile;
		uid_t uids[PROFILE_MAX_UIDS + 1];
		unsigned nu = 0;
		uids[nu++] = r->cfg.task_uid;
		for (unsigned i = 0; i < p->n_uids; i++)
			uids[nu++] = p->uids[i];
		if (ipc_clean(uids, nu, p->uids_overflow, &is, &e) < 0)
			rc = -1;
		ipc = json_pack("{s:i,s:i,s:i,s:i,s:s}", "shm", (int)is.shm, "sem", (int)is.sem,
				"msg", (int)is.msg, "mqueue", (int)is.mqueue, "mqueue_fs",
				is.mqueue_checked ? "checked" : "not mounted: not checked");
	} else {
		ipc = json_string("not cleaned: the runner is not PID 1, so the IPC namespace "
				  "may be the host's");
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	json_t *o = json_pack(
		"{s:b,s:s,s:I,s:{s:I,s:I,s:I,s:I,s:I},s:{s:I,s:I,s:I,s:I,s:I,s:I},s:I,s:I,s:I,s:o,"
		"s:I}",
		"ok", rc == 0, "error", e.msg, "ms", (json_int_t)(monotonic_ms() - t0), "removed",
		"files", (json_int_t)st.removed_files, "dirs", (json_int_t)st.removed_dirs,
		"symlinks", (json_int_t)st.removed_links, "other", (json_int_t)st.removed_other,
		"bytes", (json_int_t)st.removed_bytes, "restored", "files",
		(json_int_t)st.restored_files, "dirs", (json_int_t)st.restored_dirs, "symlinks",
		(json_int_t)st.restored_links, "other", (json_int_t)st.restored_other, "bytes",
		(json_int_t)st.restored_bytes, "attributes", (json_int_t)st.attrs_fixed,
		"unchanged", (json_int_t)st.unchanged, "mount_points_skipped",
		(json_int_t)st.mounts_skipped, "not_restorable", (json_int_t)st.not_restorable,
		"ipc", ipc, "worker_peak_rss_kib", (json_int_t)ru.ru_maxrss);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	for (size_t off = 0, len = s ? strlen(s) : 0; off < len;) {
		ssize_t k = write(out, s + off, len - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		off += (size_t)k;
	}
	_exit(rc == 0 ? 0 : 1);
}

static void on_worker_exit(void *arg, pid_t pid, int status)
{
	(void)pid;
	struct reset *rs = arg;
	rs->worker_running = false;
	rs->worker_status = status;
	rs->ms_files = monotonic_ms() - rs->phase_t0;
	/* It has exited: all it wrote is in the pipe (a few hundred bytes). */
	char buf[16384];
	size_t len = 0;
	for (;;) {
		ssize_t n = read(rs->worker_fd, buf + len, sizeof(buf) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || (len += (size_t)n) == sizeof(buf) - 1)
			break;
	}
	buf[len] = 0;
	close(rs->worker_fd);
	rs->worker_fd = -1;
	if (rs->phase != R_FILES)
		return;
	json_t *w = json_loads(buf, 0, NULL);
	if (!w || !json_is_true(json_object_get(w, "ok"))) {
		const char *msg = json_string_value(json_object_get(w, "error"));
		char why[64];
		if (WIFSIGNALED(status))
			snprintf(why, sizeof(why), "killed by %s", signal_name(WTERMSIG(status)));
		else
			snprintf(why, sizeof(why), "exit %d", WEXITSTATUS(status));
		fail(rs, 500, "RESET_FAILED", "restoring the writable roots failed: %s",
		     msg && *msg ? msg : why);
		json_decref(w);
		return;
	}
	finish(rs, w);
	json_decref(w);
}

static int spawn_worker(struct reset *rs, struct error *e)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return error_set(e, errno, NULL, "reset: pipe");
	pid_t pid = fork();
	if (pid < 0) {
		int err = errno;
		close(p[0]);
		close(p[1]);
		return error_set(e, err, NULL, "reset: fork");
	}
	if (pid == 0) {
		close(p[0]);
		worker_main(rs, p[1]);
	}
	close(p[1]);
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0)
		log_errno("reset: fcntl(O_NONBLOCK)", errno, NULL);
	rs->worker = pid;
	rs->worker_fd = p[0];
	rs->worker_running = true;
	if (reaper_watch(&rs->r->reaper, pid, on_worker_exit, rs) < 0) {
		stop_worker(rs);
		return error_set(e, ENOMEM, NULL, "reset: watching the worker");
	}
	return 0;
}

/* ---- the steps ---- */

static bool all_finished(struct runner *r)
{
	for (struct task *t = r->tasks->head; t; t = t->next)
		if (!t->finished)
			return false;
	return true;
}

static void enter(struct reset *rs, enum phase ph)
{
	rs->phase = ph;
	rs->phase_t0 = monotonic_ms();
}

static void step_once(struct reset *rs);

/* One step; a phase that is done at once moves on in the same step. */
static void step(struct loop *loop, struct loop_timer *timer)
{
	(void)loop;
	struct reset *rs = timer->arg;
	uint64_t t0 = monotonic_ms();
	for (;;) {
		enum phase before = rs->phase;
		step_once(rs);
		uint64_t d = monotonic_ms() - t0;
		if (d > rs->longest_step_ms)
			rs->longest_step_ms = d;
		if (rs->phase == before || rs->phase == R_IDLE)
			return;
	}
}

static void step_once(struct reset *rs)
{
	struct runner *r = rs->r;
	uint64_t now = monotonic_ms(), in_phase = now - rs->phase_t0;
	if (r->shutting_down) {
		fail(rs, 503, "UNAVAILABLE", "the runner is shutting down");
		return;
	}
	switch (rs->phase) {
	case R_IDLE:
		return;
	case R_PROCESSES: {
		int left = reset_sweep(rs);
		if (left < 0) {
			fail(rs, 500, "RESET_FAILED", "cannot read /proc: %s", strerror(-left));
			return;
		}
		if (left == 0 && tasks_running(r) == 0) {
			rs->ms_processes = now - rs->t0;
			enter(rs, R_DRAIN);
		} else if (in_phase > KILL_DEADLINE_MS) {
			fail(rs, 500, "RESET_FAILED",
			     "%d processes and %u task trees still alive after %d ms of SIGKILL",
			     left, tasks_running(r), KILL_DEADLINE_MS);
			return;
		}
		break;
	}
	case R_DRAIN:
		if (all_finished(r)) {
			http_streams_end(r, false);
			enter(rs, R_STREAMS);
		} else if (in_phase > DRAIN_DEADLINE_MS) {
			fail(rs, 500, "RESET_FAILED", "task output did not close after %d ms",
			     DRAIN_DEADLINE_MS);
			return;
		}
		break;
	case R_STREAMS:
		if (http_streams_end(r, false) == 0) {
			tasks_drop_finished(r, &rs->records, &rs->log_bytes);
			if (r->tasks->head) {
				fail(rs, 500, "RESET_FAILED", "a task record is still in use");
				return;
			}
			rs->ms_streams = now - rs->phase_t0;
			struct error e = {0};
			enter(rs, R_FILES);
			if (spawn_worker(rs, &e) < 0) {
				fail(rs, 500, "RESET_FAILED", "%s", e.msg);
				return;
			}
		} else if (!rs->streams_forced && in_phase > STREAM_GRACE_MS) {
			rs->streams_forced = true;
			unsigned n = http_streams_end(r, true);
			log_warn("reset: cut the streams of clients that did not read to the end",
				 "{s:i}", "streams", (int)n);
		} else if (in_phase > STREAM_DEADLINE_MS) {
			fail(rs, 500, "RESET_FAILED", "streams did not close after %d ms",
			     STREAM_DEADLINE_MS);
			return;
		}
		break;
	case R_FILES:
		if (in_phase > FILES_DEADLINE_MS) {
			fail(rs, 500, "RESET_FAILED", "restoring the writable roots took over %d s",
			     FILES_DEADLINE_MS / 1000);
			return;
		}
		break;
	}
}

static void wait_free(struct http_req *req)
{
	struct reset_wait *w = req->ctx;
	if (w->rs && w->rs->waiter == req)
		w->rs->waiter = NULL;
	json_decref(w->body);
	free(w);
	req->ctx = NULL;
}

int reset_start(struct runner *r, struct http_req *req, struct error *e)
{
	struct reset *rs = rs_of(r);
	if (!rs)
		return error_set(e, 0, "RESET_DISABLED",
				 "reset is not enabled (start the runner with --allow-reset or "
				 "FORCEAI_ALLOW_RESET=1)");
	if (r->shutting_down)
		return error_set(e, 0, "UNAVAILABLE", "the runner is shutting down");
	if (rs->phase != R_IDLE)
		return error_set(e, 0, "RESET_IN_PROGRESS", "a reset is already in progress");
	struct reset_wait *w = calloc(1, sizeof(*w));
	if (!w)
		return error_set(e, ENOMEM, NULL, "reset");
	w->rs = rs;
	req->ctx = w;
	req->ctx_free = wait_free;
	rs->waiter = req;
	/* Whatever an earlier client is still sending belongs to the previous
	 * tenant: from now on it is dropped. */
	r->profile->gen++;
	req->gen = r->profile->gen;
	http_req_suspend(req);

	rs->t0 = monotonic_ms();
	enter(rs, R_PROCESSES);
	rs->tasks = rs->sessions = rs->ptys = rs->tokens = rs->proxy_requests = 0;
	rs->conversations = 0;
	rs->streams = rs->records = 0;
	rs->log_bytes = 0;
	rs->ms_processes = rs->ms_streams = rs->ms_files = 0;
	rs->streams_forced = false;
	rs->longest_step_ms = 0;
	log_info("reset started", NULL);
	runtime_init_reset_begin(r); /* lifecycle hooks end with the tenant's tasks */
	/* The shims are the runner's: not counted among the tenant's. */
	rs->tasks = tasks_running(r);
	rs->streams = http_stream_count(r); /* all of them end with the reset */
	rs->shims = calloc(rs->tasks + 1, sizeof(pid_t));
	for (struct task *t = r->tasks->head; t && rs->shims; t = t->next)
		if (t->proc_running && rs->n_shims < rs->tasks)
			rs->shims[rs->n_shims++] = t->shim_pid;
	if (rs->shims)
		qsort(rs->shims, rs->n_shims, sizeof(pid_t), reset_cmp_pid);
	/* Every process first (stopped, then killed: nothing forks or exits
	 * on its own meanwhile), then what owns them. */
	int left = reset_sweep(rs);
	if (left < 0)
		log_errno("reset: cannot read /proc", -left, NULL);
	while (r->sessions->head) {
		session_delete(r, r->sessions->head);
		rs->sessions++;
	}
	/* PTY sessions, connected or not: their ids are forgotten and their
	 * pins let go, so no record stays in use. */
	const struct profile_hooks *hk = r->profile->hooks;
	rs->ptys = hk && hk->end_ptys ? hk->end_ptys(r) : 0;
	/* MCP sessions were the previous tenant's too (their commands die with the tasks; the
	 * stdio servers exit with them and start afresh on next use). */
	if (hk && hk->end_mcp_sessions)
		hk->end_mcp_sessions(r);
	if (hk && hk->end_code_contexts)
		hk->end_code_contexts(r);
	if (hk && hk->end_envd)
		hk->end_envd(r);
	rs->tokens = hk && hk->revoke_model_tokens ? hk->revoke_model_tokens(r, &rs->proxy_requests)
						   : 0;
	rs->conversations = hk && hk->forget_conversations ? hk->forget_conversations(r) : 0;
	tasks_kill_all(r, true);
	checkpoint_drop_all(r); /* the tenant's checkpoints: gone with it */
	/* Non-root mode: the state dir is of the tasks' uid (outside their
	 * Landlock roots, but chmod is not Landlock's): its mode comes back. */
	if (r->state_dir_fd >= 0 && fchmod(r->state_dir_fd, 0700) < 0)
		log_errno("reset: cannot chmod the state dir back to 0700", errno, NULL);
	rs->longest_step_ms = monotonic_ms() - rs->t0;
	loop_timer_start(&r->loop, &rs->timer, STEP_MS, STEP_MS);
	return 0;
}

json_t *reset_answer(struct http_req *req, unsigned *status)
{
	struct reset_wait *w = req->ctx;
	if (!w || !w->body)
		return NULL;
	*status = w->status;
	json_t *b = w->body;
	w->body = NULL;
	return b;
}

int reset_init(struct runner *r, struct error *e)
{
	struct reset *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return error_set(e, ENOMEM, NULL, "reset");
	rs->r = r;
	rs->worker_fd = -1;
	reset_snapshot_init(&rs->snap);
	r->profile->reset = rs;
	if (loop_timer_init(&r->loop, &rs->timer, step, rs) < 0)
		return error_set(e, errno, NULL, "reset: timerfd");
	/* The roots tasks may write: Landlock's, and /dev/shm as PID 1 (a
	 * container's own tmpfs; as a subreaper it is the host's). */
	char *list = strdup(r->cfg.landlock_roots);
	if (!list)
		return error_set(e, ENOMEM, NULL, "reset");
	const char *roots[TREE_MAX_ROOTS + 1];
	unsigned n = 0;
	for (char *save, *tok = strtok_r(list, ":", &save); tok; tok = strtok_r(NULL, ":", &save))
		if (n < TREE_MAX_ROOTS)
			roots[n++] = tok;
	if (r->init_mode == INIT_PID1 && n < TREE_MAX_ROOTS)
		roots[n++] = "/dev/shm";
	uint64_t t0 = monotonic_ms();
	int rc = reset_snapshot_take(&rs->snap, roots, n, r->state_dir_fd,
				     r->cfg.reset_snapshot_max, &rs->skipped_roots, e);
	free(list);
	if (rc < 0)
		return error_wrap(e, "--allow-reset");
	if (envs_take(rs, e) < 0)
		return error_wrap(e, "--allow-reset");
	log_info("reset: writable roots snapshotted", "{s:i,s:I,s:I,s:s?,s:I}", "entries",
		 (int)rs->snap.m.n, "bytes", (json_int_t)rs->snap.store.pack_len, "ms",
		 (json_int_t)(monotonic_ms() - t0), "skipped_roots", rs->skipped_roots,
		 "peak_rss_kib", (json_int_t)vm_hwm_kib());
	return 0;
}

void reset_abort(struct runner *r)
{
	struct reset *rs = rs_of(r);
	if (rs && rs->phase != R_IDLE)
		fail(rs, 503, "UNAVAILABLE", "the runner is shutting down");
}

void reset_free(struct runner *r)
{
	struct reset *rs = rs_of(r);
	stop_worker(rs);
	loop_timer_close(&r->loop, &rs->timer);
	reset_snapshot_free(&rs->snap);
	free(rs->skipped_roots);
	free(rs->killed);
	free(rs->shims);
	free(rs->envs.data);
	free(rs);
	r->profile->reset = NULL;
}
