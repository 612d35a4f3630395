/* forceai-runner: init (PID 1 or subreaper) and task endpoint of a box. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/gateway.h"
#include "confine/confine.h"
#include "files/ident.h"
#include "files/sched.h"
#include "api/hardening.h"
#include "api/routes.h"
#include "mcp/session.h"
#include "metrics/metrics.h"
#include "mcp/upstream.h"
#include "http/gate.h"
#include "http/http.h"
#include "http/ws.h"
#include "core/error.h"
#include "core/log.h"
#include "model/conversation.h"
#include "model/engine.h"
#include "model/modelproxy.h"
#include "init/runtime.h"
#include "profile/profile.h"
#include "pty/session.h"
#include "api/proxy.h"
#include "relay/portproxy.h"
#include "task/proctree.h"
#include "api/api.h"
#include "envd/envd.h"
#include "code/code.h"
#include "core/runner.h"
#include "task/session.h"
#include "core/signals.h"
#include "core/statedir.h"
#include "core/trustfile.h"
#include "audit/trail.h"
#include "audit/otlp.h"
#include "core/ping.h"
#include "task/task.h"
#include "task/task_uids.h"
#include "core/version.h"

/* Start a graceful shutdown (idempotent); the exit check ends the loop. */
static void runner_shutdown(struct runner *r, const char *why)
{
	if (r->shutting_down)
		return;
	r->shutting_down = true;
	r->shutdown_started_ms = monotonic_ms();
	log_info("shutting down", "{s:s,s:i}", "reason", why, "grace_ms", (int)r->cfg.grace_ms);
	http_quiesce(r);
	tasks_kill_all(r, false);
	sessions_close_all(r);
	if (r->main_running && kill(-r->main_pid, SIGTERM) < 0 && errno != ESRCH)
		log_errno("SIGTERM to the main child failed", errno, NULL);
	loop_timer_start(&r->loop, &r->shutdown_timer, r->cfg.grace_ms, 0);
}

static void on_prestart_done(struct runner *r);

static void on_main_exit(void *arg, pid_t pid, int status)
{
	struct runner *r = arg;
	(void)pid;
	r->main_running = false;
	r->main_status = status;
	if (r->main_restarting && !r->shutting_down) {
		/* entrypointPolicy restart: it starts again once the binding's
		 * preStart is over (at once when there is none). */
		r->main_restarting = false;
		r->main_pid = 0;
		loop_timer_stop(&r->loop, &r->main_kill_timer);
		log_info("main child stopped for a restart", "{s:i}", "pid", (int)pid);
		if (runtime_init_main_may_start(r))
			on_prestart_done(r);
		return;
	}
	if (WIFEXITED(status))
		r->exit_code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		r->exit_code = 128 + WTERMSIG(status);
	log_info("main child exited", "{s:i,s:i}", "pid", (int)pid, "exit_code", r->exit_code);
	runner_shutdown(r, "main child exited");
}

static int spawn_main(struct runner *r)
{
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		setpgid(0, 0);
		/* An interactive box: give the terminal to the main child's group
		 * (SIGTTOU is still ignored here, so this cannot stop us). */
		if (isatty(STDIN_FILENO))
			tcsetpgrp(STDIN_FILENO, getpid());
		signals_reset_child();
		/* A runtime init's restart: the sandbox's variables over the image's. */
		const char *k;
		json_t *v;
		json_object_foreach(r->main_env, k, v) {
			if (setenv(k, json_string_value(v), 1) < 0)
				_exit(126);
		}
		/* The raised fd limit is the runner's, not the main process's
		 * (select() users break beyond 1024). */
		if (setrlimit(RLIMIT_NOFILE, &r->nofile_at_start) < 0)
			log_errno("setrlimit(RLIMIT_NOFILE) of the main child failed", errno, NULL);
		execvp(r->cfg.main_argv[0], r->cfg.main_argv);
		int err = errno;
		log_error("cannot run the main command", "{s:s,s:s}", "argv0", r->cfg.main_argv[0],
			  "error", strerror(err));
		_exit(err == ENOENT ? 127 : 126);
	}
	/* Also from the parent, so a signal forwarded right away cannot race
	 * the child's own setpgid. */
	if (setpgid(pid, pid) < 0 && errno != EACCES && errno != ESRCH)
		log_errno("setpgid(main child) failed", errno, NULL);
	r->main_pid = pid;
	r->main_running = true;
	int rc = reaper_watch(&r->reaper, pid, on_main_exit, r);
	if (rc < 0)
		return rc;
	log_info("main child started", "{s:i,s:s}", "pid", (int)pid, "argv0", r->cfg.main_argv[0]);
	return 0;
}

static void on_grace_expired(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct runner *r = t->arg;
	log_warn("grace period over: killing what remains", "{s:i}", "grace_ms",
		 (int)r->cfg.grace_ms);
	tasks_kill_all(r, true);
	if (r->main_running && kill(-r->main_pid, SIGKILL) < 0 && errno != ESRCH)
		log_errno("SIGKILL to the main child failed", errno, NULL);
	proctree_kill_children(r->self_pid, SIGKILL, r->main_running ? r->main_pid : 0);
	/* Leave a moment for terminal events to reach clients; never more
	 * than a second past the grace period. */
	r->shutdown_hard = true;
	loop_timer_start(&r->loop, &r->shutdown_timer, 500, 0);
}

static void on_shutdown_timer(struct loop *loop, struct loop_timer *t)
{
	struct runner *r = t->arg;
	if (!r->shutdown_hard) {
		on_grace_expired(loop, t);
		return;
	}
	log_warn("shutdown deadline: exiting with work still pending", NULL);
	loop_stop(&r->loop);
}

/* A loop hook, after every dispatch batch (and after the HTTP daemons'
 * pumps, which may close the last streams): once shutting down, the loop
 * ends when nothing runs any more. */
static void exit_check(struct loop *loop, void *arg)
{
	struct runner *r = arg;
	if (!r->shutting_down && profile_shutdown_due(r))
		runner_shutdown(r, "one-shot task finished");
	if (!r->shutting_down)
		return;
	if (r->main_running || tasks_running(r) > 0)
		return;
	if (http_busy(r)) {
		/* Terminal events are on their way; the final deadline bounds
		 * the wait, also after the grace period, when killed tasks
		 * still have output to drain. */
		return;
	}
	loop_stop(loop);
}

static void on_tick(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct runner *r = t->arg;
	tasks_tick(r);
	http_tick(r);
	audit_tick(r);
	audit_otlp_tick(r);
}

/* Every connection is an fd: the soft limit goes up to the hard one, so
 * connection floods meet the HTTP daemons' own limits (sized from this,
 * gate_connection_limit) rather than EMFILE. */
static void raise_nofile(struct runner *r)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		log_errno("getrlimit(RLIMIT_NOFILE) failed", errno, NULL);
		return;
	}
	r->nofile_at_start = rl;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_errno("setrlimit(RLIMIT_NOFILE) failed", errno, NULL);
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 4096)
		log_warn("few file descriptors: connection limits are lowered to fit", "{s:I}",
			 "nofile", (json_int_t)rl.rlim_cur);
}

/* ---- signals: what each one means, decided here (as tini does) ---- */

static void on_sigchld(void *arg, int sig)
{
	(void)sig;
	struct runner *r = arg;
	reaper_reap(&r->reaper);
}

/* To the main child's process group, as a terminal would deliver it. */
static void forward_to_main(struct runner *r, int sig)
{
	if (kill(-r->main_pid, sig) < 0 && errno != ESRCH)
		log_errno("forwarding a signal failed", errno, strsignal(sig));
}

static void on_stop_signal(void *arg, int sig)
{
	struct runner *r = arg;
	if (r->main_running)
		forward_to_main(r, sig);
	runner_shutdown(r, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_forwarded_signal(void *arg, int sig)
{
	struct runner *r = arg;
	if (r->main_running)
		forward_to_main(r, sig);
	else
		log_info("signal ignored (no main child)", "{s:s}", "signal", strsignal(sig));
}

static const struct signal_action signal_table[] = {
	{SIGCHLD, on_sigchld},
	{SIGTERM, on_stop_signal},
	{SIGINT, on_stop_signal},
	{SIGHUP, on_forwarded_signal},
	{SIGQUIT, on_forwarded_signal},
	{SIGUSR1, on_forwarded_signal},
	{SIGUSR2, on_forwarded_signal},
	{SIGWINCH, on_forwarded_signal},
	/* A vanished client must never kill the runner (libmicrohttpd relies
	 * on it to use sendfile); job-control stops must never freeze PID 1. */
	{SIGPIPE, NULL},
	{SIGTTIN, NULL},
	{SIGTTOU, NULL},
};

/* ---- what the lower layers call up to, decided here ---- */

/* The runtime profiles (profile/profile.h) admit every task and follow it. */
static const struct task_hooks task_hooks = {
	.admit = profile_admit,
	.started = profile_task_started,
	.finished = profile_task_finished,
};

/* The main process (-- CMD) starts once the preStart lifecycle hook is
 * over (OSEP-0020: preStart runs before the entrypoint). */
static void on_prestart_done(struct runner *r)
{
	if (!r->cfg.main_argv || r->main_pid || r->shutting_down)
		return;
	int rc = spawn_main(r);
	if (rc < 0) {
		log_errno("cannot start the main child", -rc, "fork");
		r->exit_code = 1;
		runner_shutdown(r, "the main child could not start");
	}
}

static void on_main_kill_timer(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct runner *r = t->arg;
	if (r->main_running && kill(-r->main_pid, SIGKILL) < 0 && errno != ESRCH)
		log_errno("SIGKILL to the main child failed", errno, NULL);
}

/* entrypointPolicy restart: SIGTERM to the main process's group, SIGKILL
 * after --grace-ms; on_main_exit starts it again with envs. */
static bool restart_main(struct runner *r, json_t *envs)
{
	if (!r->cfg.main_argv || !r->main_running || r->shutting_down)
		return false;
	json_decref(r->main_env);
	r->main_env = envs ? json_deep_copy(envs) : NULL;
	r->main_restarting = true;
	if (kill(-r->main_pid, SIGTERM) < 0 && errno != ESRCH)
		log_errno("SIGTERM to the main child failed", errno, NULL);
	loop_timer_start(&r->loop, &r->main_kill_timer, r->cfg.grace_ms, 0);
	log_info("restarting the main child (entrypointPolicy restart)", "{s:i}", "pid",
		 (int)r->main_pid);
	return true;
}

/* Who is a task, for the API's doors (http/gate.h): the task engine's policy. */
static const struct gate_tasks api_doors_tasks = {
	.is_task_uid = task_uids_include,
	.describe = task_uids_describe,
};

/* A reset ends the execd PTY sessions (pty/session.c) too. */
static const struct profile_hooks profile_hooks = {
	.end_ptys = pty_end_all,
	.end_mcp_sessions = mcp_end_sessions,
	.prestart_done = on_prestart_done,
	.restart_main = restart_main,
	.end_code_contexts = code_end_all,
	.end_envd = envd_reset,
	.revoke_model_tokens = modelproxy_revoke_all,
	.forget_conversations = conv_forget_all,
};

/* The HTTP layer: while a reset runs only a few routes answer, and a request received across one
 * is dropped (profile/profile.h); the WebSocket connections (http/ws.h) are upgraded ones. */
static const struct http_hooks http_hooks = {
	.request_blocked = profile_request_blocked,
	.request_gen = profile_gen,
	.self_path = proxy_self_path,
	.upgraded_count = ws_count,
	.upgraded_tick = ws_tick,
	.upgraded_close_all = ws_close_all,
	.audit_door = api_audit_door,
};

/* ---- the start, step by step ---- */

/* A failure of the start: one line on stderr, and the exit status: 2 for a configuration
 * error; else 1, or 2 when the failure is bad configuration found only once a file was parsed
 * (docs/configuration.md, Exit status). */
static int failed(const struct error *err, int status)
{
	fprintf(stderr, "forceai-runner: %s\n", err->msg);
	return status == 2 || strcmp(error_code(err), "INVALID_CONFIG") == 0 ? 2 : 1;
}

/* --write-seccomp-cache: the policy compiled into POLICY.bpf beside it (image build). */
static int write_seccomp_cache(struct runner *r, struct error *err)
{
	char out[4096];
	snprintf(out, sizeof(out), "%s.bpf", r->cfg.seccomp_policy);
	if (seccomp_cache_write_file(r->cfg.seccomp_policy, out, err) < 0)
		return failed(err, 1);
	printf("%s\n", out);
	return 0;
}

#define RUN (-1) /* configure: the runner runs (no exit status yet) */

/* The options, and the commands that run instead of the runner (--help, --version, --ping,
 * --verify-audit, --write-seccomp-cache): their exit status, or RUN. */
static int configure(struct runner *r, int argc, char **argv, struct error *err)
{
	int pr = config_parse(&r->cfg, argc, argv, err);
	if (pr != 0)
		return pr == 1 ? 0 : failed(err, 2); /* printed; or a usage error */
	if (r->cfg.ping)
		return ping_run(&r->cfg);
	if (r->cfg.verify_audit)
		return audit_verify_file(r->cfg.verify_audit, r->cfg.audit_head);
	/* The files the options name are configuration: one that cannot be read
	 * is a configuration error (exit 2), told with its fix, like a bad value. */
	if (config_check_files(&r->cfg, err) < 0)
		return failed(err, 2);
	return r->cfg.write_seccomp_cache ? write_seccomp_cache(r, err) : RUN;
}

/* Tasks must not read our memory or environment through /proc. Not PID 1,
 * the runner adopts the orphans below it as a child subreaper. */
static int become_init(struct runner *r, struct error *err)
{
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return error_set(err, errno, NULL, "prctl(PR_SET_DUMPABLE)");
	r->self_pid = getpid();
	r->init_mode = r->self_pid == 1 ? INIT_PID1 : INIT_SUBREAPER;
	if (r->init_mode == INIT_SUBREAPER && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		return error_set(err, errno, NULL, "prctl(PR_SET_CHILD_SUBREAPER)");
	return 0;
}

/* Non-root mode: a runner that is not root runs tasks as itself, unless
 * --task-user says otherwise (then it needs the capabilities). The state dir
 * comes before confinement: it also holds the compiled seccomp program. */
static int open_state_dir(struct runner *r, struct error *err)
{
	if (geteuid() != 0 && !r->cfg.task_user_set) {
		r->cfg.task_uid = getuid();
		r->cfg.task_gid = getgid();
	}
	int fd = statedir_open(&r->cfg, r->state_dir, sizeof(r->state_dir), &r->state_dir_fallback,
			       err);
	if (fd < 0)
		return -1;
	r->state_dir_fd = fd;
	return 0;
}

/* The policy, and where tasks may write. Non-root mode: the state dir is
 * the tasks' own unless Landlock keeps them out. An explicit one they could
 * write is refused; a default one is given up for memory (spools and the
 * snapshot in memfds). */
static int init_confinement(struct runner *r, struct error *err)
{
	if (confine_policy_init(r->policy, &r->cfg, r->state_dir_fd, err) < 0)
		return -1;
	r->task_write_roots = r->policy->enabled && r->policy->landlock.abi > 0
				      ? r->policy->landlock.roots
				      : NULL;
	if (r->policy->caps.privileged || !r->policy->enabled ||
	    !statedir_task_reachable(r->state_dir, r->policy->landlock.abi,
				     r->policy->landlock.roots, r->state_dir_why,
				     sizeof(r->state_dir_why)))
		return 0;
	if (r->cfg.state_dir_set)
		return error_set(
			err, 0, "STATE_DIR",
			"non-root mode: --state-dir %s is reachable by tasks (%s); give the "
			"runner a directory outside --landlock-roots (its own volume or "
			"tmpfs), or leave --state-dir unset to keep the state in memory",
			r->state_dir, r->state_dir_why);
	log_warn("state dir: reachable by tasks in non-root mode, not used: spools and the "
		 "reset snapshot are kept in memory",
		 "{s:s,s:s}", "dir", r->state_dir, "why", r->state_dir_why);
	close(r->state_dir_fd);
	r->state_dir_fd = -1;
	r->state_in_memory = true;
	return 0;
}

/* Non-root mode: tasks have the runner's uid and groups, and Landlock
 * lets them read everywhere, so a secret file the runner can read, they
 * can read. The environment is safe: scrubbed, and we are not dumpable.
 * A secret file refused is a configuration error, as at parse time. */
static int refuse_secret_files(struct runner *r, struct error *err)
{
	if (r->policy->caps.privileged || (!r->cfg.token_file.path && !r->cfg.key_file.path))
		return 0;
	return error_set(err, 0, NULL,
			 "non-root mode (uid %u): tasks run with the runner's uid and groups and "
			 "could read %s; pass the secret in the environment instead (%s; "
			 "Kubernetes: env valueFrom secretKeyRef), which the runner removes from "
			 "its own",
			 (unsigned)geteuid(),
			 r->cfg.token_file.path ? "--token-file" : "--gateway-key-file",
			 r->cfg.token_file.path ? "EXECD_ACCESS_TOKEN" : "FORCEAI_GATEWAY_KEY");
}

/* The files read as configuration at start come from where no task could
 * have written them (docs/design/security.md#trusted-input-only-from-places-no-task-can-write):
 * once the mode, the task user and the roots Landlock keeps tasks to are known, before anything
 * reads them but the token files (read and dropped from memory at parse time). */
static int check_trusted_config(struct runner *r, struct error *err)
{
	struct trust_scope scope = {
		.runner_uid = geteuid(),
		.task_uid = r->cfg.task_uid,
		.shared_uid = !r->policy->caps.privileged,
		.root_tasks = r->cfg.allow_root_tasks,
		.roots = r->task_write_roots,
	};
	char buf[PATH_MAX];
	return trust_check_config(&r->cfg, &scope, runtime_init_config_file(buf, sizeof(buf)), err);
}

/* Read once trusted (a bad file is a configuration error too). */
static int load_mcp_servers(struct runner *r, struct error *err)
{
	if (r->cfg.mcp_servers && mcp_upstream_load(r, r->cfg.mcp_servers, err) < 0) {
		mcp_upstream_free(r);
		return -1;
	}
	mcp_upstream_on_change(r, mcp_notify_tools_changed);
	return 0;
}

/* The event loop and what it waits on: the reaper, the signals, the timers. */
static int init_loop(struct runner *r, struct error *err)
{
	raise_nofile(r);
	int rc = loop_init(&r->loop);
	if (rc < 0)
		return error_set(err, -rc, NULL, "epoll_create1");
	reaper_init(&r->reaper);
	rc = signals_init(&r->signals, &r->loop, signal_table,
			  sizeof(signal_table) / sizeof(signal_table[0]), r);
	if (rc < 0)
		return error_set(err, -rc, NULL, "signal setup");
	rc = loop_timer_init(&r->loop, &r->shutdown_timer, on_shutdown_timer, r);
	if (rc == 0)
		rc = loop_timer_init(&r->loop, &r->tick, on_tick, r);
	if (rc == 0)
		rc = loop_timer_init(&r->loop, &r->main_kill_timer, on_main_kill_timer, r);
	return rc < 0 ? error_set(err, -rc, NULL, "timerfd_create") : 0;
}

/* The task engine's tables. The files API acts with the task user's
 * file-system identity; our own supplementary groups must not widen it. */
static int init_tasks(struct runner *r, struct error *err)
{
	if (files_init() < 0)
		return error_set(err, errno, NULL, "cannot drop supplementary groups");
	if (tasks_init(r) < 0 || sessions_init(r) < 0 || relay_init(r) < 0)
		return error_set(err, ENOMEM, NULL, "task tables");
	tasks_set_hooks(r, &task_hooks);
	return 0;
}

/* An API of E2B's on a port of its own (code/code.h, envd/envd.h), at ADDR:PORT given by opt. */
static int open_e2b(struct runner *r, const char *opt, const char *name, const char *listen,
		    const struct http_route *routes, size_t n, struct error *err)
{
	char host[64];
	unsigned port, bound;
	if (!listen)
		return 0;
	if ((!strcmp(name, "envd") && envd_init(r) < 0) ||
	    code_parse_listen(listen, host, sizeof(host), &port, err) < 0 ||
	    !(bound = http_listen_extra(r, name, host, port, routes, n, err)))
		return error_wrap(err, "%s", opt);
	log_info(!strcmp(name, "envd") ? "envd API listening" : "code interpreter API listening",
		 "{s:s,s:i}", "listen", host, "port", (int)bound);
	return 0;
}

/* The exit check is added last: it runs after the daemons' pumps. With
 * --runtime-init the entrypoint runs from the start (the init's
 * entrypointPolicy keeps it); otherwise it waits for preStart. */
static int begin(struct runner *r, struct error *err)
{
	loop_hook_add(&r->loop, &r->exit_check, exit_check, r);
	if (r->cfg.main_argv && r->cfg.runtime_init) {
		int rc = spawn_main(r);
		if (rc < 0)
			return error_set(err, -rc, NULL, "fork(main child)");
	}
	runtime_init_start(r);
	loop_timer_start(&r->loop, &r->tick, 1000, 1000);
	log_info("ready", "{s:s,s:s,s:i,s:s,s:b,s:i,s:i}", "version", FORCEAI_RUNNER_VERSION,
		 "listen", r->cfg.listen_host, "port", (int)http_port(r), "init_mode",
		 r->init_mode == INIT_PID1 ? "pid1" : "subreaper", "token_required",
		 r->cfg.token != NULL, "pid", (int)r->self_pid, "model_proxy_port",
		 (int)modelproxy_port(r));
	if (r->init_mode == INIT_SUBREAPER)
		log_info("not PID 1: running as child subreaper", "{s:i}", "pid", (int)r->self_pid);
	hardening_log(r);
	return 0;
}

/* The start, in order: RUN, or the exit status of a failure (failed()). */
static int start(struct runner *r, struct error *err)
{
	if (become_init(r, err) < 0 || open_state_dir(r, err) < 0 || init_confinement(r, err) < 0)
		return failed(err, 1);
	if (refuse_secret_files(r, err) < 0 || check_trusted_config(r, err) < 0 ||
	    load_mcp_servers(r, err) < 0)
		return failed(err, 2); /* configuration refused */
	/* The audit trail before any door opens: every action through one is recorded. */
	if (init_loop(r, err) < 0 || init_tasks(r, err) < 0 || audit_init(r, err) < 0 ||
	    audit_otlp_start(r, err) < 0 || code_init(r, err) < 0 ||
	    profile_init(r, &profile_hooks, err) < 0 || metrics_otlp_start(r, err) < 0 ||
	    http_start(r, api_routes, api_n_routes, &api_doors_tasks, err) < 0)
		return failed(err, 1);
	http_set_hooks(r, &http_hooks);
	if (open_e2b(r, "--code-interpreter-listen", "code interpreter",
		     r->cfg.code_interpreter_listen, e2b_routes, e2b_n_routes, err) < 0 ||
	    open_e2b(r, "--envd-listen", "envd", r->cfg.envd_listen, envd_routes, envd_n_routes,
		     err) < 0 ||
	    gateway_init(r, err) < 0 || modelproxy_start(r, err) < 0 ||
	    engines_check_config(r, err) < 0 || begin(r, err) < 0)
		return failed(err, 1);
	return RUN;
}

/* The event loop until shutdown; then whatever still runs was ours: leave
 * nothing behind, and free every table in the order their users need. */
static int serve(struct runner *r)
{
	int rc = loop_run(&r->loop);
	if (rc < 0)
		log_errno("event loop failed", -rc, NULL);
	tasks_kill_all(r, true);
	proctree_kill_children(r->self_pid, SIGKILL, 0);
	reaper_reap(&r->reaper);
	profile_abort(r);   /* a waiting reset request must not stay suspended */
	relay_close_all(r); /* libmicrohttpd must not stop with upgraded connections */
	http_stop(r);
	mcp_free_all(r); /* after http_stop (its streams are closed), before the tasks */
	mcp_upstream_free(r);
	relay_free_all(r);
	sessions_free_all(r);
	pty_free_all(r);
	code_free_all(r); /* before the tasks: each context reads its interpreter's */
	envd_free_all(r);
	tasks_free_all(r);
	modelproxy_stop(r); /* after the tasks: chat tasks hold proxy tokens */
	conv_free_all(r);   /* after the tasks: agents hold conversations */
	gateway_stop(r);    /* last: agents and the proxy hold gateway calls */
	profile_free(r);
	json_decref(r->main_env);
	metrics_otlp_stop(r);
	audit_otlp_stop(r);
	/* The trail's head in the container log's last line: a verifier given it
	 * finds a trail cut at its end
	 * (docs/design/audit.md#the-head-a-trail-cut-at-its-end-is-found-out). */
	char head[AUDIT_HEAD_MAX];
	audit_shutdown(r);
	audit_head(r, head);
	audit_free(r);
	log_info("exited", "{s:i,s:i,s:s*}", "exit_code", r->exit_code, "orphans_reaped",
		 (int)r->reaper.orphans_reaped, "audit_head", head[0] ? head : NULL);
	confine_policy_free(r->policy);
	config_free(&r->cfg);
	loop_close(&r->loop);
#if defined(__SANITIZE_ADDRESS__)
	/* LeakSanitizer's exit check must trace us; nothing runs after it. */
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
#endif
	return r->exit_code;
}

static struct runner runner; /* the one instance; passed explicitly from here on */
/* Its parts of higher folders than core/ (runner.h holds pointers to them). */
static struct confine_policy policy;
static struct files_sched files_sched;

int main(int argc, char **argv)
{
	struct runner *r = &runner;
	r->policy = &policy;
	r->files_sched = &files_sched;
	r->state_dir_fd = -1;
	r->signals.fd = -1;
	struct error err;
	int status = configure(r, argc, argv, &err);
	if (status == RUN)
		status = start(r, &err);
	if (status == RUN)
		status = serve(r); /* which frees all, the configuration included */
	else
		config_free(&r->cfg);
	return status;
}
