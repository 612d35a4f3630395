/* Admission and start of a task (task/task.h): what every task must pass, its identity, its
 * environment and argv, its pipes or terminal, the spawn; a driven task's record. */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "confine/cgroup.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/randomid.h"
#include "task/env.h"
#include "task/internal.h"
#include "task/pty.h"
#include "task/spawn.h"
#include "task/task.h"

static const char *shell_path(void)
{
	static const char *shell;
	if (!shell)
		shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
	return shell;
}

/* What runs a command without a terminal: Debian's static build of the same bash when the box
 * has it (no dynamic loader, no shared libraries mapped: 0.3 ms less per task start,
 * docs/design/tasks.md#the-task-shell), exec'd under bash's own name so $0 and $BASH are what
 * they were. A terminal's shell stays the dynamic one (its line editing and terminfo). */
static const char *command_shell_exe(void)
{
	static const char *exe;
	if (!exe)
		exe = strcmp(shell_path(), "/bin/bash") == 0 &&
				      access("/bin/bash-static", X_OK) == 0
			      ? "/bin/bash-static"
			      : shell_path();
	return exe;
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
			       const struct task_capability *cap, struct error *err)
{
	cleanup_task struct task *t = calloc(1, sizeof(*t));
	if (!t) {
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the task");
		return NULL;
	}
	t->r = r;
	t->out_fd = t->err_fd = t->linger_fd = -1;
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
		t->cap = cap;
		if (!t->command || !t->cwd)
			rc = -ENOMEM;
	}
	if (rc == 0)
		rc = spool_open(&t->spool, r->state_dir_fd, r->cfg.task_log_max,
				&r->tasks->spool_maps);
	if (rc == 0)
		rc = loop_timer_init(&r->loop, &t->timer, task_on_timer, t);
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

/* The task's environment. The EXECD_ENVS file goes where execd applies
 * it, its commands, and nowhere else: any task can write it, and the
 * runner's own tasks (MCP servers, engines, chat, tool commands) run for
 * other clients (docs/design/wire.md#opensandbox-execd-12). execd's sessions and terminals see
 * only the variable naming it. The sandbox-level variables of a runtime
 * init (replace semantics, set by the control plane) go under the file's
 * and the request's. */
static char **task_envp(struct runner *r, const struct task_spec *spec, uid_t uid, const char *cwd,
			struct error *err)
{
	cleanup_json json_t *env = spec->api == TASK_API_EXECD
					   ? env_with_file(spec->env, r->cfg.execd_envs, uid)
				   : spec->api == TASK_API_SESSION || spec->api == TASK_API_PTY
					   ? env_with_path(spec->env, r->cfg.execd_envs)
				   : spec->env ? json_incref(spec->env)
					       : NULL;
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
	return env_build(uid, cwd, env, err);
}

/* What is exec'd: the shell with the command, or the request's own argv
 * (its program resolved in the task's PATH). words and exe are freed. */
struct start_argv {
	char *shell[4], **words, *exe, **argv;
};

static void start_argv_free(struct start_argv *a)
{
	free(a->words);
	free(a->exe);
}
#define cleanup_start_argv __attribute__((cleanup(start_argv_free)))

static int command_argv(const struct task *t, const struct task_spec *spec, char *const *envp,
			struct start_argv *a, struct error *err)
{
	a->shell[0] = (char *)shell_path();
	a->shell[1] = "-c";
	a->shell[2] = t->command;
	if (spec->api == TASK_API_PTY && !*t->command)
		a->shell[1] = NULL; /* an interactive shell of its own */
	a->argv = a->shell;
	if (!spec->argv) {
		if (spec->api != TASK_API_PTY && !spec->tty &&
		    command_shell_exe() != shell_path() && !(a->exe = strdup(command_shell_exe())))
			return error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the task");
		return 0;
	}
	size_t n = json_array_size(spec->argv);
	if (!(a->words = calloc(n + 1, sizeof(*a->words))))
		return error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot start the task");
	for (size_t i = 0; i < n; i++)
		a->words[i] = (char *)json_string_value(json_array_get(spec->argv, i));
	if (!(a->exe = argv_resolve(a->words[0], t->cwd, envp, err)))
		return -1;
	a->argv = a->words;
	return 0;
}

/* The runner's and the task's ends of the task's pipes, /dev/null for its
 * input, its cgroup leaf's procs file: closed unless taken. */
struct start_fds {
	int out_r, out_w, err_r, err_w, linger_r, linger_w, devnull, procs;
};

static void start_fds_close(struct start_fds *f)
{
	int all[] = {f->out_r,    f->out_w,    f->err_r,   f->err_w,
		     f->linger_r, f->linger_w, f->devnull, f->procs};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		cleanup_closep(&all[i]);
}
#define cleanup_start_fds __attribute__((cleanup(start_fds_close)))

/* A terminal or a stdin pipe (task/pty.c), the output pipes, the status
 * pipe of a task that may leave processes behind. 0, or -1 with err set. */
static int open_stdio(struct runner *r, const struct task_spec *spec, struct task_io_prep *iop,
		      struct start_fds *f, struct error *err)
{
	int rc = 0;
	if (task_io_prepare(spec, iop, err) < 0)
		return -1;
	if (!iop->tty && ((rc = make_pipe(&f->out_r, &f->out_w)) < 0 ||
			  (rc = make_pipe(&f->err_r, &f->err_w)) < 0))
		return error_set(err, -rc, "RUNTIME_ERROR", "cannot start the task");
	/* A few tasks at a time get a 256 KiB stdout pipe: a task that prints
	 * fast blocks less and each read moves up to a whole record. Bounded
	 * (pipe pages count against the user's pipe limit, and root without
	 * CAP_SYS_RESOURCE has one); refused is fine, the pipe stays as it is. */
	if (!iop->tty && r->tasks->running < 8)
		(void)fcntl(f->out_r, F_SETPIPE_SZ, 256 * 1024);
	if ((f->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
		return error_set(err, errno, "RUNTIME_ERROR", "cannot start the task");
	if (!iop->tty && task_may_linger(spec) && (rc = make_pipe(&f->linger_r, &f->linger_w)) < 0)
		return error_set(err, -rc, "RUNTIME_ERROR", "cannot start the task");
	return 0;
}

/* The confinement plan and the task's fds, then the shim. Its pid or -errno. */
static pid_t spawn_confined(struct task *t, const struct task_spec *spec, char **envp,
			    const struct start_argv *a, const struct start_fds *f,
			    const struct task_io_prep *iop)
{
	struct runner *r = t->r;
	struct confine_plan plan = {
		.policy = r->policy,
		.path = a->exe ? a->exe : a->argv[0],
		.argv = a->argv,
		.envp = envp,
		.cwd = t->cwd,
		.uid = t->uid,
		.gid = t->gid,
		.cgroup_procs_fd = f->procs,
		.deny_inet = t->net_none,
		/* The uid change clears the shim's death signal: re-armed in
		 * the task so it dies if the shim does. */
		.pdeath_signal = SIGKILL,
		.ctty = iop->tty,
	};
	struct spawn_io io = {.in_fd = iop->child_in >= 0 ? iop->child_in : f->devnull,
			      .out_fd = iop->tty ? iop->child_out : f->out_w,
			      .err_fd = iop->tty ? iop->child_out : f->err_w,
			      .linger_fd = f->linger_w};
	if (spec->state_in_fd >= 0 && spec->state_out_fd >= 0) {
		io.extra[0] = spec->state_in_fd;
		io.extra[1] = spec->state_out_fd;
		io.n_extra = 2;
	}
	t->started_ms = now_ms();
	t->started_mono = monotonic_ms();
	bool shim_ok = !r->tasks->shim.disabled;
	pid_t pid = prefork_spawn(r, &plan, &io);
	if (pid >= 0 && shim_ok && r->tasks->shim.disabled)
		log_warn("task shim could not be exec'd: shims are forked from now on", "{s:s}",
			 "error", strerror(r->tasks->shim.disabled_errno));
	return pid;
}

/* The running task's record: its shim reaped, its output and status
 * pipes watched, its timeout armed. */
static void task_watch(struct task *t, const struct task_spec *spec, pid_t pid, struct start_fds *f,
		       struct task_io_prep *iop)
{
	struct runner *r = t->r;
	int rc;
	t->shim_pid = pid;
	t->proc_running = true;
	r->tasks->running++;
	if (reaper_watch(&r->reaper, pid, task_on_exit, t) < 0)
		log_error("out of memory watching a task", NULL);
	t->out_fd = iop->tty ? take_fd(iop->parent_out) : take_fd(f->out_r);
	t->drain_off = iop->tty;
	t->err_fd = take_fd(f->err_r); /* -1 on a terminal: one stream */
	if ((rc = task_io_attach(t, iop)) < 0)
		log_errno("task input unavailable", -rc, t->id);
	loop_watch_add(&r->loop, &t->out_w, t->out_fd, EPOLLIN, task_on_output, t);
	if (t->err_fd >= 0)
		loop_watch_add(&r->loop, &t->err_w, t->err_fd, EPOLLIN, task_on_output, t);
	if (f->linger_r >= 0) {
		t->linger_fd = take_fd(f->linger_r);
		loop_watch_add(&r->loop, &t->linger_w, t->linger_fd, EPOLLIN, task_on_linger, t);
	}
	if (spec->timeout_ms)
		loop_timer_start(&r->loop, &t->timer, spec->timeout_ms, 0);
}

/* The started event, the table, the audit trail, the log. */
static void task_announce(struct task *t, const struct task_spec *spec, pid_t pid)
{
	const char *net = t->net_none ? "none" : "full";
	cleanup_json json_t *started =
		json_pack("{s:s,s:i,s:I,s:s,s:s}", "task_id", t->id, "pid", (int)pid, "started_at",
			  (json_int_t)t->started_ms, "capability",
			  spec->cap ? spec->cap->name : "exec", "network", net);
	task_append_event(t, "started", started);
	task_link(t);
	task_audit_started(t, spec);
	log_info("task started", "{s:s,s:i,s:i,s:i,s:b,s:s}", "task", t->id, "pid", (int)pid, "uid",
		 (int)t->uid, "gid", (int)t->gid, "background", spec->background, "network", net);
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
	/* The capability says what it needs (a chat task: its model proxy is on 127.0.0.1). */
	if (spec->net_required && spec->network == TASK_NET_NONE) {
		error_set(err, 0, "INVALID_REQUEST_BODY", "%s", spec->net_required);
		return NULL;
	}
	cleanup_env char **envp = task_envp(r, spec, uid, cwd, err);
	if (!envp)
		return NULL;
	cleanup_task struct task *t = task_alloc(r, spec, cwd, spec->cap, err);
	if (!t)
		return start_failed(err, 0);
	t->uid = uid;
	t->gid = gid;
	t->net_none = spec->network == TASK_NET_NONE ||
		      (spec->network == TASK_NET_DEFAULT && !spec->net_required &&
		       r->cfg.exec_network_none);
	cleanup_start_fds struct start_fds fds = {-1, -1, -1, -1, -1, -1, -1, -1};
	cleanup_task_io struct task_io_prep iop = TASK_IO_PREP_INIT;
	cleanup_start_argv struct start_argv args = {0};
	if (open_stdio(r, spec, &iop, &fds, err) < 0 || command_argv(t, spec, envp, &args, err) < 0)
		return start_failed(err, 0);
	if (r->policy->cgroup_mode == CGROUP_V2) {
		/* Limits are part of the confinement: no leaf, no task. */
		int rc = cgroup_task_create(t->id, r->cfg.task_memory_max, r->cfg.task_pids_max,
					    r->cfg.task_cpu_max, &fds.procs);
		if (rc < 0)
			return start_failed(err, -rc);
		t->cgroup = true;
	}
	pid_t pid = spawn_confined(t, spec, envp, &args, &fds, &iop);
	if (pid < 0)
		return start_failed(err, -pid);
	task_watch(t, spec, pid, &fds, &iop);
	task_announce(t, spec, pid);
	return take_ptr(t);
}

struct task *task_start_driven(struct runner *r, const struct task_spec *spec,
			       const struct task_driver_ops *ops, void *arg, struct error *err)
{
	const char *cwd = task_admit(r, spec, err);
	if (!cwd)
		return NULL;
	struct task *t = task_alloc(r, spec, cwd, spec->cap, err);
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
		json_pack("{s:s,s:I,s:s}", "task_id", t->id, "started_at",
			  (json_int_t)t->started_ms, "capability", task_cap_name(t));
	if (started && spec->started_fields)
		json_object_update(started, spec->started_fields);
	task_append_event(t, "started", started);
	task_link(t);
	task_audit_started(t, spec);
	log_info("task started", "{s:s,s:s}", "task", t->id, "capability", task_cap_name(t));
	return t;
}

const struct task_capability task_cap_exec = {
	.name = "exec",
	.changes = TASK_CHANGES_OFF,
	.may_linger = true,
	.start = task_start,
};
