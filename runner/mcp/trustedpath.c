/* Paths no task can change: see trustedpath.h. */
#include "mcp/trustedpath.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/cleanup.h"
#include "core/log.h"

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* Neither replaceable nor writable by a task: root's and not group- or
 * other-writable; a directory may be when sticky (/tmp), since others
 * cannot rename or remove root's entries in it. */
static bool inode_trusted(const struct stat *st)
{
	if (st->st_uid != 0)
		return false;
	if (!(st->st_mode & (S_IWGRP | S_IWOTH)))
		return true;
	return S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX);
}

/* The task user (never root, no supplementary groups) may search or run
 * a root's inode through its group's bits or the others'. */
static bool task_can_x(const struct stat *st, gid_t gid)
{
	return (st->st_mode & S_IXOTH) || (st->st_gid == gid && (st->st_mode & S_IXGRP));
}

/* "/", every directory on the way to p, and p itself, trusted and
 * reachable by the task user (stat follows links: each is the directory
 * the next name is looked up in). */
static bool chain_trusted(const char *p, struct pcheck *c)
{
	char buf[PATH_MAX];
	size_t n = strlen(p);
	if (p[0] != '/' || n >= sizeof(buf)) {
		snprintf(c->why, sizeof(c->why), "'%.200s' is not an absolute path", p);
		return false;
	}
	memcpy(buf, p, n + 1);
	/* "/" first, then each prefix that ends before a '/' or at the end. */
	for (size_t i = 0; i <= n; i++) {
		if (i && i < n && buf[i] != '/')
			continue;
		char ch = buf[i];
		const char *at = i ? buf : "/";
		if (i)
			buf[i] = 0;
		struct stat st;
		bool ok = stat(at, &st) == 0;
		int e = errno;
		if (i)
			buf[i] = ch;
		const char *bad = !ok                   ? strerror(e)
				  : !inode_trusted(&st) ? "can be changed by tasks (not root's, or "
							  "writable by its group or others)"
				  : !task_can_x(&st, c->task_gid)
					  ? "cannot be searched or run by the task user"
					  : NULL;
		if (bad) {
			c->missing = !ok && e == ENOENT;
			c->unreachable = ok && inode_trusted(&st);
			snprintf(c->why, sizeof(c->why), "'%.*s' %s", i ? (int)i : 1, i ? p : "/",
				 bad);
			return false;
		}
	}
	return true;
}

/* p (absolute) is one of roots or beneath one. */
static bool under_roots(const char *p, const char *roots)
{
	for (const char *r = roots; r && *r;) {
		const char *e = strchr(r, ':');
		size_t n = e ? (size_t)(e - r) : strlen(r);
		size_t m = n;
		while (m > 1 && r[m - 1] == '/')
			m--;
		if (m && !strncmp(p, r, m) && (p[m] == '/' || !p[m] || (m == 1 && r[0] == '/')))
			return true;
		r = e ? e + 1 : r + n;
	}
	return false;
}

bool path_trusted(const char *p, struct pcheck *c)
{
	if (!chain_trusted(p, c))
		return false;
	char real[PATH_MAX];
	if (!realpath(p, real)) {
		c->missing = errno == ENOENT;
		snprintf(c->why, sizeof(c->why), "'%.200s': %s", p, strerror(errno));
		return false;
	}
	if (!chain_trusted(real, c))
		return false;
	if (c->roots && (under_roots(p, c->roots) || under_roots(real, c->roots))) {
		snprintf(
			c->why, sizeof(c->why),
			"'%.200s' can be changed by tasks (beneath a writable root, and root tasks "
			"are allowed)",
			p);
		return false;
	}
	return true;
}

char *trusted_path(const char *server, const struct pcheck *tmpl)
{
	const char *all = getenv("PATH");
	cleanup_free char *copy = strdup(all && *all ? all : DEFAULT_PATH);
	struct buf out = {0};
	if (!copy)
		return NULL;
	char *save = NULL;
	for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		struct pcheck c = *tmpl;
		if (!path_trusted(d, &c)) {
			if (!c.missing && !c.unreachable)
				log_warn("mcp server: a PATH directory left out", "{s:s,s:s}",
					 "server", server, "reason", c.why);
			continue;
		}
		if (out.len)
			buf_append_lit(&out, ":");
		buf_append_str(&out, d);
	}
	if (buf_append(&out, "", 1) < 0) {
		buf_free(&out);
		return NULL;
	}
	return out.data;
}

char *resolve_program(const char *prog, const char *path, const struct pcheck *tmpl,
		      struct error *err)
{
	char cand[PATH_MAX];
	struct pcheck c = *tmpl;
	if (strchr(prog, '/')) {
		if (snprintf(cand, sizeof(cand), "%s%s", prog[0] == '/' ? "" : "/", prog) >=
		    (int)sizeof(cand)) {
			error_set(err, 0, NULL, "command '%.100s': name too long", prog);
			return NULL;
		}
		if (!path_trusted(cand, &c)) {
			error_set(err, 0, NULL, "command '%.100s' refused: %s", cand, c.why);
			return NULL;
		}
	} else {
		bool found = false;
		const char *d = path;
		while (*d && !found) {
			const char *e = strchr(d, ':');
			size_t dl = e ? (size_t)(e - d) : strlen(d);
			struct stat st;
			c = *tmpl;
			/* Every directory of path is trusted: the first file the
			 * task user can run, as execvp would pick it. */
			if (dl &&
			    snprintf(cand, sizeof(cand), "%.*s/%s", (int)dl, d, prog) <
				    (int)sizeof(cand) &&
			    stat(cand, &st) == 0 && S_ISREG(st.st_mode) && path_trusted(cand, &c))
				found = true;
			else if (c.why[0] && !c.missing && !c.unreachable)
				break; /* found, but tasks can change it: refused, not skipped */
			d = e ? e + 1 : d + dl;
		}
		if (!found) {
			if (c.why[0] && !c.missing && !c.unreachable)
				error_set(err, 0, NULL, "command '%.100s' refused: %s", cand,
					  c.why);
			else
				error_set(
					err, 0, NULL,
					"command '%.100s' not found in the servers' PATH (%.200s)",
					prog, path);
			return NULL;
		}
	}
	struct stat st;
	if (stat(cand, &st) < 0 || !S_ISREG(st.st_mode)) {
		error_set(err, 0, NULL, "command '%.200s' is not a regular file", cand);
		return NULL;
	}
	char *out = strdup(cand);
	if (!out)
		error_set(err, ENOMEM, NULL, "out of memory");
	return out;
}
