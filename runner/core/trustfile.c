/* Trusted input only from places no task can write: see trustfile.h. */
#include "core/trustfile.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"

#define TRUST_LINKS_MAX 40 /* as the kernel's own limit (ELOOP) */

struct walk {
	const struct trust_scope *s;
	const char *what, *path;
	unsigned flags;
	struct error *err;
};

/* Is real (a path without links) one of the roots or below one? The root in root. */
static bool under_roots(const struct trust_scope *s, const char *real, char *root, size_t rootlen)
{
	if (!s->roots)
		return true;
	char *list = strdup(s->roots);
	if (!list)
		return true; /* fail closed */
	bool hit = false;
	for (char *save, *tok = strtok_r(list, ":", &save); tok && !hit;
	     tok = strtok_r(NULL, ":", &save)) {
		char rr[PATH_MAX];
		if (!realpath(tok, rr))
			continue; /* a root that does not exist is not in force */
		size_t n = strlen(rr);
		hit = !strcmp(rr, "/") ||
		      (!strncmp(real, rr, n) && (real[n] == 0 || real[n] == '/'));
		if (hit)
			snprintf(root, rootlen, "%s", tok);
	}
	free(list);
	return hit;
}

static bool owner_is_task(const struct trust_scope *s, uid_t uid)
{
	if (s->shared_uid)
		return uid == s->task_uid;
	return uid != s->runner_uid || (s->root_tasks && uid == 0);
}

/* Could a task write the object (its content, or its entries for a
 * directory)? The reason in why. owner_ok: its owner being a task's does
 * not count (TRUST_TASK_OWNED_OK). */
static bool task_may_write(const struct trust_scope *s, const char *real, const struct stat *st,
			   bool owner_ok, char *why, size_t whylen)
{
	char root[PATH_MAX];
	if (!under_roots(s, real, root, sizeof(root)))
		return false;
	char reach[PATH_MAX + 96];
	if (s->roots)
		snprintf(reach, sizeof(reach), "inside the tasks' writable root %s", root);
	else
		snprintf(reach, sizeof(reach), "and Landlock is not in force");
	unsigned mode = (unsigned)st->st_mode & 07777;
	if (!owner_ok && owner_is_task(s, st->st_uid))
		snprintf(why, whylen, "is owned by uid %u, a task's (%s)", (unsigned)st->st_uid,
			 reach);
	else if (st->st_mode & S_IWOTH)
		snprintf(why, whylen, "is writable by every user (mode %04o, %s)", mode, reach);
	else if (st->st_mode & S_IWGRP)
		snprintf(why, whylen, "is writable by group %u (mode %04o, %s)",
			 (unsigned)st->st_gid, mode, reach);
	else
		return false;
	return true;
}

static int refuse(struct walk *w, const char *kind, const char *obj, const char *why)
{
	const struct trust_scope *s = w->s;
	char fix[512];
	if (s->shared_uid && s->roots)
		snprintf(fix, sizeof(fix),
			 "non-root mode: tasks run with the runner's uid %u and may write what it "
			 "owns under --landlock-roots (%s): keep the file in a directory outside "
			 "them, or make it and every directory above it root's and not writable "
			 "by group or others",
			 (unsigned)s->runner_uid, s->roots);
	else
		snprintf(
			fix, sizeof(fix),
			"make it and every directory above it root's and not writable by group "
			"or others (chown root:, chmod go-w)%s",
			s->roots
				? ", or move it out of the tasks' writable roots (--landlock-roots)"
				: "");
	return error_set(w->err, 0, "UNTRUSTED_CONFIG",
			 "%s %s: refused, a task could have written it: %s %s %s; %s", w->what,
			 w->path, kind, obj, why, fix);
}

/* Looking up `entry` (stat est) in the directory dir (stat dst): a task
 * that may write dir may swap the entry, unless dir is sticky and neither
 * dir nor the entry is a task's (only their owners may rename it then). */
static int lookup_ok(struct walk *w, const char *dir, const struct stat *dst, const char *entry,
		     const struct stat *est)
{
	char why[PATH_MAX + 256];
	if (S_ISLNK(est->st_mode) && task_may_write(w->s, entry, est, false, why, sizeof(why)) &&
	    owner_is_task(w->s, est->st_uid))
		return refuse(w, "the symlink", entry, why);
	if (!task_may_write(w->s, dir, dst, false, why, sizeof(why)))
		return 0;
	if ((dst->st_mode & S_ISVTX) && !owner_is_task(w->s, dst->st_uid) &&
	    !owner_is_task(w->s, est->st_uid))
		return 0;
	return refuse(w, "the directory", dir, why);
}

/* The rest of the path after a link: its target, then what followed it. */
static int follow(char *todo, size_t todolen, const char *full, const char *rest, char *cur)
{
	char target[PATH_MAX];
	ssize_t n = readlink(full, target, sizeof(target) - 1);
	if (n < 0)
		return -1;
	target[n] = 0;
	char next[2 * PATH_MAX + 2];
	if (snprintf(next, sizeof(next), "%s/%s", target, rest) >= (int)sizeof(next) ||
	    strlen(next) >= todolen)
		return -1;
	if (target[0] == '/')
		cur[0] = 0;
	strcpy(todo, next);
	return 0;
}

/* One component at a time from `/`, links expanded as the kernel would. A
 * path that fails to resolve is its reader's to report: 0. */
static int walk_path(struct walk *w, char *todo, size_t todolen)
{
	char cur[PATH_MAX] = ""; /* resolved so far, without links; "" is "/" */
	struct stat dst;
	if (stat("/", &dst) < 0)
		return 0;
	int links = 0;
	const char *p = todo;
	for (;;) {
		p += strspn(p, "/");
		size_t n = strcspn(p, "/");
		if (n == 0)
			return 0; /* a path naming a directory: not a file to read */
		const char *rest = p + n + strspn(p + n, "/");
		bool last = !*rest;
		char full[PATH_MAX];
		if (n == 1 && p[0] == '.') {
			p = rest;
			continue;
		}
		if (n == 2 && p[0] == '.' && p[1] == '.') {
			char *slash = strrchr(cur, '/');
			if (slash)
				*slash = 0;
			if (stat(cur[0] ? cur : "/", &dst) < 0)
				return 0;
			p = rest;
			continue;
		}
		if (snprintf(full, sizeof(full), "%s/%.*s", cur, (int)n, p) >= (int)sizeof(full))
			return 0;
		struct stat st;
		if (lstat(full, &st) < 0)
			return 0;
		if (lookup_ok(w, cur[0] ? cur : "/", &dst, full, &st) < 0)
			return -1;
		if (S_ISLNK(st.st_mode)) {
			if (++links > TRUST_LINKS_MAX || follow(todo, todolen, full, rest, cur) < 0)
				return 0;
			p = todo;
			if (!cur[0] && stat("/", &dst) < 0)
				return 0;
			continue;
		}
		if (last) {
			char why[PATH_MAX + 256];
			bool owner_ok = w->flags & TRUST_TASK_OWNED_OK;
			if (task_may_write(w->s, full, &st, owner_ok, why, sizeof(why)))
				return refuse(w, "the file", full, why);
			return 0;
		}
		if (!S_ISDIR(st.st_mode))
			return 0;
		strcpy(cur, full);
		dst = st;
		p = rest;
	}
}

/* 0 when no task could have written the file at `path` (or it does not
 * exist: its reader says so), nor changed where the path leads: every
 * directory looked up on the way (through every symlink) and every link is
 * out of the tasks' reach, a world-writable sticky directory counting as
 * such for entries no task owns. A task could write an object when it lies
 * under one of scope->roots (or Landlock is not in force) and its owner is
 * a task's uid (root mode: any uid but root's, and root's too with
 * root_tasks; non-root mode: the runner's own) or it is group- or other-
 * writable. Else -1: err (code UNTRUSTED_CONFIG) names `what` and the
 * path, the object a task could write and why, and the fix. */
static int trust_check_file(const struct trust_scope *scope, const char *what, const char *path,
			    unsigned flags, struct error *err)
{
	if (!path || !*path)
		return 0;
	struct walk w = {scope, what, path, flags, err};
	char todo[2 * PATH_MAX + 2];
	char cwd[PATH_MAX];
	if (path[0] != '/' && !getcwd(cwd, sizeof(cwd)))
		return error_set(err, errno, "UNTRUSTED_CONFIG",
				 "%s %s: cannot tell who could have written it: getcwd", what,
				 path);
	if (snprintf(todo, sizeof(todo), "%s/%s", path[0] == '/' ? "" : cwd, path) >=
	    (int)sizeof(todo))
		return error_set(err, ENAMETOOLONG, "UNTRUSTED_CONFIG", "%s %s", what, path);
	return walk_path(&w, todo, sizeof(todo));
}

int trust_check_config(const struct runner_config *cfg, const struct trust_scope *scope,
		       const char *lifecycle, struct error *err)
{
	/* The operator's files: each is trusted as it is read. EXECD_ENVS is
	 * the tasks' own channel (design/wire.md#opensandbox-execd-12): its file may be the task
	 * user's. */
	const char *lc_var = getenv("EXECD_LIFECYCLE_CONFIG");
	if (trust_check_file(scope, "--token-file", cfg->token_file.path, 0, err) < 0 ||
	    trust_check_file(scope, "--gateway-key-file", cfg->key_file.path, 0, err) < 0 ||
	    trust_check_file(scope, "--mcp-servers", cfg->mcp_servers, 0, err) < 0 ||
	    trust_check_file(scope,
			     lc_var && *lc_var ? "EXECD_LIFECYCLE_CONFIG"
					       : "$HOME/.execd/lifecycle.toml",
			     lifecycle, 0, err) < 0 ||
	    trust_check_file(scope, "--execd-envs", cfg->execd_envs, TRUST_TASK_OWNED_OK, err) < 0)
		return -1;
	return 0;
}
