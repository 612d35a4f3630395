/* What every tool call shares: the call's life (async end, cancel, files jobs as the task
 * user), arguments, and the wording of files-layer errors. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/runner.h"
#include "files/path.h"
#include "tools/internal.h"

void tool_result_free(struct tool_result *res)
{
	buf_free(&res->text);
	json_decref(res->structured);
	res->structured = NULL;
}

static int vfail(struct tool_result *res, const char *fmt, va_list ap)
{
	res->is_error = true;
	buf_reset(&res->text);
	char m[2048];
	vsnprintf(m, sizeof(m), fmt, ap);
	buf_append_str(&res->text, m);
	json_decref(res->structured);
	res->structured = NULL;
	return 0;
}

int tool_result_fail(struct tool_result *res, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(res, fmt, ap);
	va_end(ap);
	return 0;
}

static void ident_of(struct runner *r, struct files_ident *id)
{
	id->uid = r->cfg.task_uid;
	id->gid = r->cfg.task_gid;
	/* As for the files API: writes only beneath the Landlock roots tasks get. */
	id->write_roots = r->policy->enabled && r->policy->landlock.abi > 0
				  ? r->policy->landlock.roots
				  : NULL;
}

void tool_call_free(struct tool_call *c)
{
	if (c->release) {
		/* A files job's descriptors are closed (and temporaries removed) as the task user.
		 */
		bool entered = c->as_user && files_enter(&c->id) == 0;
		c->release(c);
		if (entered)
			files_leave();
	}
	tool_result_free(&c->res);
	json_decref(c->ctx.env);
	free(c);
}

struct tool_call *tool_call_new(struct runner *r, const struct tool_ctx *ctx,
				const struct tool_call_ops *ops, void *arg)
{
	struct tool_call *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->r = r;
	c->ops = ops;
	c->arg = arg;
	if (ctx)
		c->ctx = *ctx;
	json_incref(c->ctx.env);
	if (!c->ctx.output_max)
		c->ctx.output_max = r->cfg.agent_output_max;
	ident_of(r, &c->id);
	return c;
}

void tool_call_finish(struct tool_call *c)
{
	struct tool_result res = c->res;
	memset(&c->res, 0, sizeof(c->res));
	const struct tool_call_ops *ops = c->ops;
	void *arg = c->arg;
	tool_call_free(c);
	if (ops && ops->done)
		ops->done(arg, &res);
	else
		tool_result_free(&res);
}

void tool_call_cancel(struct tool_call *c)
{
	if (!c)
		return;
	c->cancelled = true;
	files_sched_remove(c->r->files_sched, &c->sj);
	tool_call_free(c);
}

/* ---- files jobs ---- */

static int slice(struct tool_call *c, uint64_t deadline_ms)
{
	int rc = files_enter(&c->id);
	if (rc < 0) {
		tool_fs_error(c, rc, "act as the task user", "");
		return 0;
	}
	rc = c->step(c, deadline_ms);
	files_leave();
	return rc;
}

static int sched_step(struct files_job *sj, uint64_t deadline_ms)
{
	struct tool_call *c = (struct tool_call *)((char *)sj - offsetof(struct tool_call, sj));
	return slice(c, deadline_ms);
}

static void sched_done(struct files_job *sj)
{
	tool_call_finish((struct tool_call *)((char *)sj - offsetof(struct tool_call, sj)));
}

int tool_files_run(struct tool_call *c)
{
	c->as_user = true;
	if (slice(c, monotonic_ms() + FILES_SLICE_MS) == 0)
		return 0;
	c->sj.step = sched_step;
	c->sj.done = sched_done;
	int rc = files_sched_add(c->r->files_sched, &c->r->loop, &c->sj);
	if (rc < 0)
		return tool_fs_error(c, rc, "schedule", "");
	return 1;
}

/* ---- arguments ---- */

int tool_arg_str(struct tool_call *c, json_t *args, const char *key, bool required,
		 const char **out, size_t *len)
{
	json_t *v = json_object_get(args, key);
	*out = NULL;
	if (len)
		*len = 0;
	if (!v || json_is_null(v)) {
		if (required) {
			tool_result_fail(&c->res, "missing argument '%s'", key);
			return -1;
		}
		return 0;
	}
	if (!json_is_string(v)) {
		tool_result_fail(&c->res, "argument '%s' must be a string", key);
		return -1;
	}
	*out = json_string_value(v);
	if (len)
		*len = json_string_length(v);
	return 0;
}

int tool_arg_path(struct tool_call *c, json_t *args, const char *key, char *out, size_t outsz)
{
	const char *s;
	size_t n;
	if (tool_arg_str(c, args, key, true, &s, &n) < 0)
		return -1;
	char joined[PATH_MAX];
	if (n && s[0] != '/' && c->ctx.cwd) {
		/* Relative to the caller's working directory (the agent's task). */
		int k = snprintf(joined, sizeof(joined), "%s/%s", c->ctx.cwd, s);
		if (k < 0 || (size_t)k >= sizeof(joined) || memchr(s, 0, n)) {
			tool_result_fail(&c->res, "argument '%s': path too long or has a NUL byte",
					 key);
			return -1;
		}
		s = joined;
		n = (size_t)k;
	}
	int rc = files_clean_path(s, n, out, outsz);
	if (rc == -ENAMETOOLONG) {
		tool_result_fail(&c->res, "argument '%s': path too long", key);
		return -1;
	}
	if (rc < 0) {
		tool_result_fail(
			&c->res,
			"argument '%s' must be a non-empty absolute path without NUL bytes", key);
		return -1;
	}
	return 0;
}

int tool_arg_uint(struct tool_call *c, json_t *args, const char *key, uint64_t max, uint64_t *out)
{
	json_t *v = json_object_get(args, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) > max) {
		tool_result_fail(&c->res, "argument '%s' must be an integer from 0 to %llu", key,
				 (unsigned long long)max);
		return -1;
	}
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

int tool_arg_bool(struct tool_call *c, json_t *args, const char *key, bool *out)
{
	json_t *v = json_object_get(args, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v)) {
		tool_result_fail(&c->res, "argument '%s' must be true or false", key);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

int tool_fs_error(struct tool_call *c, int rc, const char *op, const char *path)
{
	int e = rc < 0 ? -rc : rc;
	struct tool_result *res = &c->res;
	switch (e) {
	case ENOENT:
		return tool_result_fail(res, "%s %.1024s: not found", op, path);
	case EACCES:
	case EPERM:
	case EROFS:
		return tool_result_fail(
			res, "%s %.1024s: not permitted (%s, acting as the task user, uid %u)", op,
			path, strerror(e), (unsigned)c->id.uid);
	case FILES_EOUTSIDE:
		return tool_result_fail(
			res, "%s %.1024s: outside the directories tasks may write (%.300s)", op,
			path, c->id.write_roots ? c->id.write_roots : "");
	case EISDIR:
		return tool_result_fail(res, "%s %.1024s: is a directory", op, path);
	case ENOTDIR:
		return tool_result_fail(res, "%s %.1024s: not a directory", op, path);
	case ELOOP:
		return tool_result_fail(res, "%s %.1024s: is a symbolic link (not followed)", op,
					path);
	case EFBIG:
		return tool_result_fail(res, "%s %.1024s: file too large", op, path);
	case ESTALE:
		return tool_result_fail(res,
					"%s %.1024s: changed while it was worked on; try again", op,
					path);
	case FILES_ELIMIT:
		return tool_result_fail(res, "%s %.1024s: a bound was hit", op, path);
	default:
		return tool_result_fail(res, "%s %.1024s: %s", op, path, strerror(e));
	}
}
