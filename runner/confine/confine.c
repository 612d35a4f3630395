/* Confinement of one task process (docs/design/confinement.md). See confine.h.
 *
 * Parent side (confine_policy_init): everything that needs memory, files
 * or libraries is done once at start: the seccomp policy is compiled, the
 * Landlock ruleset built, capabilities inspected (libcap-ng), cgroup mode
 * detected, rlimits computed and checked against what we may set.
 *
 * Child side (confine_exec): only system calls, no allocation, no stdio;
 * failures are formatted by hand onto fd 2. Order:
 *   1 setsid (+ the terminal), close fds   2 join cgroup leaf, rlimits
 *   4 empty bounding set, lock securebits (needs CAP_SETPCAP: still root)
 *   5 setgroups/setresgid/setresuid, then clear the capability sets
 *   3 chdir (after 5, so the cwd is entered with the task's own rights)
 *   6 no_new_privs   7 Landlock   8 seccomp, execve
 * A runner that is not privileged (development, as an ordinary user) may
 * only run tasks as its own uid/gid; steps that need privilege are then
 * skipped, everything else still applies (fail closed otherwise). */
#include "confine/confine.h"

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "confine/ptracedeny.h"
#include "core/closefds.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"

/* Built-in limits; see docs/design/confinement.md#prepared-once-at-start and
 * design/confinement.md#limits-sized-for-real-work. RLIMIT_NPROC counts every process and thread of
 * the task's real uid, across all tasks of that uid: where each task has a cgroup with pids.max
 * (--task-pids-max), that is the per-task bound and the rlimit only a backstop for the uid;
 * elsewhere the rlimit is the only bound, shared by every task, sized so that one JVM, Chromium or
 * make -j fits and a fork bomb still stops. */
#define DEFAULT_NPROC 4096
#define DEFAULT_NPROC_CGROUP 32768
#define DEFAULT_NOFILE 65536

#ifndef PIPEFS_MAGIC
#define PIPEFS_MAGIC 0x50495045
#endif

/* ---- child side: async-signal-safe helpers ---------------------------- */

#define E(name) [name] = #name
static const char *const errnames[] = {E(EPERM),  E(ENOENT),     E(ESRCH),   E(EINTR),
				       E(EIO),    E(ENXIO),      E(E2BIG),   E(ENOEXEC),
				       E(EBADF),  E(ECHILD),     E(EAGAIN),  E(ENOMEM),
				       E(EACCES), E(EFAULT),     E(EBUSY),   E(EEXIST),
				       E(ENODEV), E(ENOTDIR),    E(EISDIR),  E(EINVAL),
				       E(ENFILE), E(EMFILE),     E(ETXTBSY), E(EFBIG),
				       E(ENOSPC), E(EROFS),      E(ELOOP),   E(ENAMETOOLONG),
				       E(ENOSYS), E(EOPNOTSUPP), E(ELIBBAD)};
#undef E

struct msg {
	char buf[256];
	size_t len;
};

static void msg_put(struct msg *m, const char *s)
{
	while (*s && m->len < sizeof(m->buf) - 1)
		m->buf[m->len++] = *s++;
}

static void msg_num(struct msg *m, long v)
{
	char tmp[24];
	int i = 0;
	unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
	do
		tmp[i++] = (char)('0' + u % 10);
	while ((u /= 10) && i < (int)sizeof(tmp));
	if (v < 0 && m->len < sizeof(m->buf) - 1)
		m->buf[m->len++] = '-';
	while (i > 0 && m->len < sizeof(m->buf) - 1)
		m->buf[m->len++] = tmp[--i];
}

/* "forceai-runner: confine: <step>[ <what>]: <ENAME> (errno N)\n", then exit. */
static _Noreturn void die(const char *step, const char *what, int err, int code)
{
	struct msg m = {.len = 0};
	msg_put(&m, "forceai-runner: confine: ");
	msg_put(&m, step);
	if (what) {
		msg_put(&m, " ");
		msg_put(&m, what);
	}
	msg_put(&m, ": ");
	if (err > 0 && (size_t)err < sizeof(errnames) / sizeof(errnames[0]) && errnames[err])
		msg_put(&m, errnames[err]);
	else
		msg_put(&m, "error");
	msg_put(&m, " (errno ");
	msg_num(&m, err);
	msg_put(&m, ")\n");
	ssize_t n = write(STDERR_FILENO, m.buf, m.len);
	(void)n;
	_exit(code);
}

int confine_close_fds(const struct confine_policy *pol, int lowfd, int keep, int keep2)
{
	int k[4] = {pol->enabled ? pol->landlock_ruleset_fd : -1,
		    pol->enabled ? pol->landlock.root_ruleset_fd : -1, keep, keep2};
	return closefds_except(lowfd, k, 4);
}

/* The runner's pipes belong to root with mode 0600, so a task could not
 * reopen its own stdio through /dev/stdout or /proc/self/fd (a common
 * idiom: echo >/dev/stderr). Hand the anonymous pipes among the kept fds
 * to the task user; never anything with a name in the filesystem. */
static int give_pipes(int nfds, uid_t uid, gid_t gid)
{
	for (int fd = 0; fd < nfds; fd++) {
		struct stat st;
		struct statfs sfs;
		if (fstat(fd, &st) < 0) {
			if (errno == EBADF)
				continue;
			return -errno;
		}
		if (!S_ISFIFO(st.st_mode) || st.st_uid == uid)
			continue;
		if (fstatfs(fd, &sfs) < 0)
			return -errno;
		if (sfs.f_type != PIPEFS_MAGIC)
			continue;
		if (fchown(fd, uid, gid) < 0)
			return -errno;
	}
	return 0;
}

/* 0. Who the task may be: never root unless allowed; without privilege
 * we cannot change identity, so only a task that runs as ourselves. */
static void check_identity(const struct confine_plan *plan)
{
	const struct confine_policy *pol = plan->policy;
	if (plan->uid == 0 && !pol->allow_root_tasks)
		die("identity", "(root tasks are not allowed)", EPERM, 126);
	if (!pol->caps.privileged && (getuid() != plan->uid || geteuid() != plan->uid ||
				      getgid() != plan->gid || getegid() != plan->gid))
		die("identity", "(runner not privileged: tasks must run as its own uid/gid)", EPERM,
		    126);
}

/* The Landlock ruleset for this task (-1: none). A task with the runner's
 * own uid (root tasks; every task in non-root mode) gets the ruleset that
 * also scopes signals (landlock.h): the kernel's uid check would let it
 * signal the runner and the shims. */
static int pick_ruleset(const struct confine_plan *plan)
{
	const struct confine_policy *pol = plan->policy;
	const bool same_uid = plan->uid == 0 || plan->uid == getuid();
	return !pol->enabled                                    ? -1
	       : same_uid && pol->landlock.root_ruleset_fd >= 0 ? pol->landlock.root_ruleset_fd
								: pol->landlock_ruleset_fd;
}

/* 1. Own session and process group (a terminal task: its terminal controls
 * the new session, so ^C reaches the foreground job); nothing of the
 * runner's fds. 2. The cgroup leaf, the limits. */
static void enter_session(const struct confine_plan *plan, int ll_fd)
{
	const struct confine_policy *pol = plan->policy;
	if (setsid() < 0)
		die("setsid", NULL, errno, 126);
	if (plan->ctty && ioctl(0, TIOCSCTTY, 0) < 0)
		die("ioctl", "(TIOCSCTTY)", errno, 126);
	/* With a listener the fd table is the supervisor's too (CLONE_FILES): spare its fds
	 * (close-on-exec, so the task never holds them). */
	int keep[4] = {ll_fd, plan->cgroup_procs_fd, plan->listener_out ? plan->supervisor_fd : -1,
		       plan->listener_out ? plan->supervisor_fd2 : -1};
	int rc = closefds_except(plan->nkeep_fds, keep, 4);
	if (rc < 0)
		die("close_range", NULL, -rc, 126);
	if (plan->cgroup_procs_fd >= 0) {
		if (write(plan->cgroup_procs_fd, "0", 1) != 1)
			die("cgroup", "(join the task's leaf)", errno, 126);
		close(plan->cgroup_procs_fd);
	}
	for (size_t i = 0; pol->enabled && i < pol->n_rlimits; i++)
		if (setrlimit(pol->rlimits[i].resource, &pol->rlimits[i].value) < 0)
			die("setrlimit", NULL, errno, 126);
}

/* 4. While still root: bounding set, securebits. 5. Identity, checked,
 * then the capability sets (NO_SETUID_FIXUP: the kernel kept them across
 * the uid change); the death signal the credential change cleared. */
static void become_task_user(const struct confine_plan *plan, pid_t parent)
{
	const struct confine_policy *pol = plan->policy;
	const bool priv = pol->caps.privileged;
	int rc;
	if (pol->enabled && priv) {
		if ((rc = caps_drop_bounding(&pol->caps)) < 0)
			die("capabilities", "(bounding set)", -rc, 126);
		if ((rc = caps_lock_securebits(&pol->caps)) < 0)
			die("securebits", NULL, -rc, 126);
	}
	if (priv) {
		if ((rc = give_pipes(plan->nkeep_fds, plan->uid, plan->gid)) < 0)
			die("fchown", "(stdio pipes)", -rc, 126);
		if (setgroups(0, NULL) < 0)
			die("setgroups", NULL, errno, 126);
		if (setresgid(plan->gid, plan->gid, plan->gid) < 0)
			die("setresgid", NULL, errno, 126);
		if (setresuid(plan->uid, plan->uid, plan->uid) < 0)
			die("setresuid", NULL, errno, 126);
	}
	uid_t ru, eu, su;
	gid_t rg, eg, sg;
	if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0 || ru != plan->uid ||
	    eu != plan->uid || su != plan->uid || rg != plan->gid || eg != plan->gid ||
	    sg != plan->gid)
		die("identity", "(check)", EPERM, 126);
	if (pol->enabled && (rc = caps_clear_all()) < 0)
		die("capabilities", "(clear effective/permitted/inheritable/ambient)", -rc, 126);
	if (plan->pdeath_signal) {
		/* Do not outlive a parent that died in between. */
		if (prctl(PR_SET_PDEATHSIG, (unsigned long)plan->pdeath_signal, 0, 0, 0) < 0)
			die("prctl", "(PR_SET_PDEATHSIG)", errno, 126);
		if (getppid() != parent)
			_exit(126);
	}
}

/* 6. no_new_privs (also without confinement when the network policy needs
 * a filter: seccomp requires it); 8a. the network filter, before the main
 * one (which may not allow seccomp() itself); 7. Landlock; 8. seccomp,
 * last: from here on only the policy's system calls. */
static void lock_down(const struct confine_plan *plan, int ll_fd)
{
	const struct confine_policy *pol = plan->policy;
	int rc;
	if ((pol->enabled || plan->deny_inet) && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die("no_new_privs", NULL, errno, 126);
	if (plan->deny_inet && (rc = netdeny_apply(&pol->netdeny)) < 0)
		die("seccomp", "(network none)", -rc, 126);
	if (!pol->enabled)
		return;
	if (ll_fd >= 0) {
		if ((rc = landlock_apply(ll_fd)) < 0)
			die("landlock", NULL, -rc, 126);
		close(ll_fd);
	} else if ((rc = ptracedeny_apply()) < 0) {
		/* No domain to scope ptrace to: refused (ptracedeny.h). */
		die("seccomp", "(ptrace without Landlock)", -rc, 126);
	}
	if ((rc = seccomp_policy_apply_notify(&pol->seccomp, plan->listener_out)) < 0)
		die("seccomp", NULL, -rc, 126);
}

_Noreturn void confine_exec(const struct confine_plan *plan)
{
	const pid_t parent = getppid();
	check_identity(plan);
	const int ll_fd = pick_ruleset(plan);
	enter_session(plan, ll_fd);
	become_task_user(plan, parent);
	/* 3. Working directory, with the task's rights. */
	if (plan->cwd && chdir(plan->cwd) < 0)
		die("chdir", plan->cwd, errno, 126);
	lock_down(plan, ll_fd);
	execve(plan->path, plan->argv, plan->envp);
	int e = errno;
	die("execve", plan->path, e, e == ENOENT || e == ENOTDIR ? 127 : 126);
}

/* ---- parent side ------------------------------------------------------ */

static const char *rlimit_name(int res)
{
	switch (res) {
	case RLIMIT_CORE:
		return "core";
	case RLIMIT_NPROC:
		return "nproc";
	case RLIMIT_NOFILE:
		return "nofile";
	case RLIMIT_AS:
		return "as";
	case RLIMIT_FSIZE:
		return "fsize";
	default:
		return "other";
	}
}

/* Add soft = hard = want. A built-in default above what we may set is
 * lowered to our hard limit; an explicit setting is an error instead. */
static int add_rlimit(struct confine_policy *pol, int res, rlim_t want, bool is_explicit,
		      const char *option, struct error *err)
{
	struct rlimit cur;
	if (getrlimit(res, &cur) < 0)
		return error_set(err, errno, NULL, "getrlimit(%s)", rlimit_name(res));
	if (cur.rlim_max != RLIM_INFINITY && want > cur.rlim_max && !pol->caps.sys_resource) {
		if (is_explicit)
			return error_set(err, 0, NULL,
					 "--%s %llu exceeds the runner's own hard limit %llu "
					 "(raising it needs CAP_SYS_RESOURCE)",
					 option, (unsigned long long)want,
					 (unsigned long long)cur.rlim_max);
		want = cur.rlim_max;
	}
	if (pol->n_rlimits >= sizeof(pol->rlimits) / sizeof(pol->rlimits[0]))
		return error_set(err, 0, NULL, "too many rlimits");
	pol->rlimits[pol->n_rlimits++] =
		(struct confine_rlimit){.resource = res,
					.value = {.rlim_cur = want, .rlim_max = want}};
	return 0;
}

int confine_policy_init(struct confine_policy *pol, const struct runner_config *cfg,
			int cache_dirfd, struct error *err)
{
	memset(pol, 0, sizeof(*pol));
	pol->landlock_ruleset_fd = -1;
	pol->landlock.ruleset_fd = -1;
	pol->landlock.root_ruleset_fd = -1;
	pol->enabled = !cfg->insecure_no_confine;
	pol->allow_root_tasks = cfg->allow_root_tasks;
	pol->task_uid = cfg->task_uid;
	pol->task_gid = cfg->task_gid;

	if (caps_init(&pol->caps, cfg->allow_reset, err) < 0)
		return -1;
	if (cfg->task_uid == 0 && !cfg->allow_root_tasks)
		return error_set(err, 0, NULL,
				 "the task uid is 0 but root tasks are not allowed "
				 "(--allow-root-tasks)");
	if (!pol->caps.privileged && (cfg->task_uid != getuid() || cfg->task_gid != getgid()))
		return error_set(err, 0, NULL,
				 "the runner is not privileged (uid %u): tasks can only run as uid "
				 "%u gid %u, not %u:%u; set the task uid/gid to match or run the "
				 "runner as root",
				 (unsigned)getuid(), (unsigned)getuid(), (unsigned)getgid(),
				 (unsigned)cfg->task_uid, (unsigned)cfg->task_gid);

	if (netdeny_build(&pol->netdeny) < 0)
		return error_set(err, 0, NULL, "libseccomp knows no native architecture");
	pol->cgroup_mode = cgroup_init();
	if (!pol->enabled) {
		log_warn("task confinement is DISABLED (--insecure-no-confine, test only)", NULL);
		return 0;
	}

	if (seccomp_policy_load_cached(cfg->seccomp_policy, cache_dirfd, &pol->seccomp, err) < 0)
		return -1;
	if (pol->seccomp.warning[0])
		log_warn("seccomp policy", "{s:s,s:s}", "policy", cfg->seccomp_policy, "warning",
			 pol->seccomp.warning);
	/* Refusals explained (docs/design/confinement.md#every-refusal-recorded): the program that
	 * notifies the shim. */
	if (seccomp_policy_notify_build(&pol->seccomp) < 0) {
		error_set(err, ENOMEM, NULL, "seccomp policy %s", cfg->seccomp_policy);
		goto fail;
	}

	const bool per_task_pids = cgroup_has_pids() && cfg->task_pids_max != 0;
	pol->pids_per_task = per_task_pids ? cfg->task_pids_max : 0;
	const rlim_t nproc = cfg->rlimit_nproc ? cfg->rlimit_nproc
			     : per_task_pids   ? DEFAULT_NPROC_CGROUP
					       : DEFAULT_NPROC;
	if (add_rlimit(pol, RLIMIT_CORE, 0, false, "", err) < 0 ||
	    add_rlimit(pol, RLIMIT_NPROC, nproc, cfg->rlimit_nproc != 0, "limit-nproc", err) < 0 ||
	    add_rlimit(pol, RLIMIT_NOFILE, cfg->rlimit_nofile ? cfg->rlimit_nofile : DEFAULT_NOFILE,
		       cfg->rlimit_nofile != 0, "limit-nofile", err) < 0 ||
	    (cfg->rlimit_as &&
	     add_rlimit(pol, RLIMIT_AS, cfg->rlimit_as, true, "limit-as", err) < 0) ||
	    (cfg->rlimit_fsize &&
	     add_rlimit(pol, RLIMIT_FSIZE, cfg->rlimit_fsize, true, "limit-fsize", err) < 0))
		goto fail;

	if (landlock_prepare(&pol->landlock, cfg->landlock_roots, cfg->execd_envs, err) < 0)
		goto fail;
	pol->landlock_ruleset_fd = pol->landlock.ruleset_fd;
	pol->landlock_abi = pol->landlock.abi;
	if (pol->landlock.abi == 0)
		log_warn("Landlock not in force", "{s:s}", "reason", pol->landlock.reason);
	if (pol->landlock.skipped[0])
		log_warn("Landlock: writable roots that do not exist were skipped", "{s:s}",
			 "roots", pol->landlock.skipped);
	return 0;
fail:
	confine_policy_free(pol);
	return -1;
}

void confine_policy_free(struct confine_policy *pol)
{
	seccomp_policy_free(&pol->seccomp);
	/* landlock_ruleset_fd is the public copy (the caller may have moved it). */
	pol->landlock.ruleset_fd = pol->landlock_ruleset_fd;
	landlock_info_free(&pol->landlock);
	pol->landlock_ruleset_fd = -1;
}

static json_t *split_roots(const char *list)
{
	json_t *a = json_array();
	const char *p = list;
	while (p && *p) {
		size_t n = strcspn(p, ":");
		if (n)
			json_array_append_new(a, json_stringn(p, n));
		p += n;
		if (*p == ':')
			p++;
	}
	return a;
}

static json_t *report_seccomp(const struct confine_policy *pol)
{
	if (!pol->enabled)
		return json_null();
	struct utsname uts;
	json_t *sc = json_pack("{s:s,s:i,s:s,s:s,s:s}", "policy", pol->seccomp.name,
			       "allowed_syscalls", (int)pol->seccomp.n_allowed, "architecture",
			       uname(&uts) == 0 ? uts.machine : "?", "other_architectures",
			       "killed (x32 and 32-bit compat)", "program", pol->seccomp.source);
	if (pol->seccomp.warning[0])
		json_object_set_new(sc, "warning", json_string(pol->seccomp.warning));
	return sc;
}

/* Capabilities, securebits, no_new_privs: what a task keeps of privilege. */
static void report_privilege(const struct confine_policy *pol, json_t *o)
{
	const bool on = pol->enabled, priv = pol->caps.privileged;
	char caps[320], names[256];
	if (!on)
		snprintf(caps, sizeof(caps), "not dropped (confinement disabled)");
	else if (priv)
		snprintf(caps, sizeof(caps),
			 "all dropped (bounding, effective, permitted, "
			 "inheritable, ambient)");
	else if (!pol->caps.bounding)
		snprintf(caps, sizeof(caps),
			 "none: the runner's bounding set is empty, so tasks "
			 "can hold none; effective, permitted, inheritable, ambient cleared");
	else
		snprintf(caps, sizeof(caps),
			 "effective, permitted, inheritable, ambient cleared; "
			 "bounding set inherited (%.200s): emptying it needs CAP_SETPCAP",
			 caps_names(pol->caps.bounding, false, names, sizeof(names)));
	json_object_set_new(o, "capabilities", json_string(caps));
	json_object_set_new(o, "securebits",
			    json_string(on && priv ? "noroot, no_setuid_fixup, "
						     "no_cap_ambient_raise set and locked; "
						     "keep_caps clear"
					: on       ? "unchanged (locking them needs CAP_SETPCAP)"
						   : "unchanged"));
	json_object_set_new(o, "no_new_privs", json_boolean(on));
}

static json_t *report_landlock(const struct confine_policy *pol)
{
	const bool on = pol->enabled, priv = pol->caps.privileged;
	json_t *ll = json_object();
	bool ll_on = on && pol->landlock.abi > 0;
	json_object_set_new(ll, "abi", ll_on ? json_integer(pol->landlock.abi) : json_null());
	json_object_set_new(ll, "writable_roots",
			    ll_on ? split_roots(pol->landlock.roots) : json_array());
	if (!ll_on) {
		json_object_set_new(ll, "reason",
				    json_string(on ? pol->landlock.reason
						   : "confinement disabled"));
		return ll;
	}
	json_object_set_new(ll, "always_writable",
			    json_pack("[s,s,s]", "/dev/shm",
				      "/dev/null (and zero, full, "
				      "random, urandom, tty, ptmx)",
				      "/dev/pts"));
	json_object_set_new(ll, "skipped_roots", split_roots(pol->landlock.skipped));
	json_object_set_new(
		ll, "scoped",
		json_string(pol->landlock.root_ruleset_fd >= 0
				    ? priv ? "root tasks: signals and abstract UNIX sockets stay "
					     "inside the task"
					   : "every task (non-root mode: tasks share the runner's "
					     "uid): signals and abstract UNIX sockets stay inside "
					     "the task"
			    : priv ? "none (ABI < 6)"
				   : "none (ABI < 6): in non-root mode a task could signal the "
				     "runner, which shares its uid"));
	return ll;
}

/* The rlimits, and which bound stops a fork bomb and whose processes it counts. */
static void report_limits(const struct confine_policy *pol, json_t *o)
{
	const bool on = pol->enabled;
	json_t *rl = json_object();
	for (size_t i = 0; on && i < pol->n_rlimits; i++) {
		rlim_t v = pol->rlimits[i].value.rlim_max;
		json_object_set_new(rl, rlimit_name(pol->rlimits[i].resource),
				    v == RLIM_INFINITY ? json_string("unlimited")
						       : json_integer((json_int_t)v));
	}
	json_object_set_new(o, "rlimits", rl);
	char procs[200];
	if (!on)
		snprintf(procs, sizeof(procs), "none (confinement disabled)");
	else if (pol->pids_per_task)
		snprintf(procs, sizeof(procs),
			 "per task: pids.max %llu in each task's cgroup; RLIMIT_NPROC a backstop "
			 "for every task of the uid together",
			 (unsigned long long)pol->pids_per_task);
	else
		snprintf(procs, sizeof(procs),
			 "RLIMIT_NPROC only, shared by every task of the uid (no per-task cgroup "
			 "with the pids controller)");
	json_object_set_new(o, "process_limit", json_string(procs));
}

json_t *confine_report(const struct confine_policy *pol)
{
	const bool on = pol->enabled;
	json_t *o = json_object();
	json_object_set_new(o, "enabled", json_boolean(on));
	json_object_set_new(o, "seccomp", report_seccomp(pol));
	report_privilege(pol, o);
	json_object_set_new(o, "landlock", report_landlock(pol));
	bool ll_on = on && pol->landlock.abi > 0;
	/* The policy allows ptrace; where it reaches
	 * (docs/design/confinement.md#debugging-inside-the-tasks-own-tree-ptrace). */
	json_object_set_new(
		o, "ptrace",
		json_string(
			!on     ? "not confined (confinement disabled)"
			: ll_on ? "a task's own process tree only: Landlock scopes ptrace, "
				  "process_vm_readv/writev and /proc/PID/mem to the caller's domain "
				  "and the domains nested in it"
				: "refused (no Landlock domain to scope it to: the uid check alone "
				  "would let a task trace every other task)"));
	json_object_set_new(o, "cgroup",
			    json_pack("{s:s,s:s}", "mode",
				      pol->cgroup_mode == CGROUP_V2 ? "v2" : "none", "reason",
				      cgroup_mode_reason()));
	report_limits(pol, o);
	json_object_set_new(o, "task_uid", json_integer(pol->task_uid));
	json_object_set_new(o, "task_gid", json_integer(pol->task_gid));
	json_object_set_new(o, "root_tasks_allowed", json_boolean(pol->allow_root_tasks));
	return o;
}
