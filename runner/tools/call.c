/* What every tool call shares: the call's life (async end, cancel, files jobs as the task
 * user through files/userjob.h), arguments, and files-layer errors in the files API's words
 * (files/fserror.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/runner.h"
#include "files/fserror.h"
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

/* ---- files jobs ---- */

static int uj_step(struct files_userjob *uj, uint64_t deadline_ms)
{
	struct tool_call *c = (struct tool_call *)((char *)uj - offsetof(struct tool_call, uj));
	return c->step(c, deadline_ms);
}

/* A job that could not act as the task user: its result says why. */
static void uj_failure(struct tool_call *c)
{
	if (c->uj.failed)
		tool_result_fail(&c->res, "%s", c->uj.err.msg);
}

static void uj_done(struct files_userjob *uj)
{
	struct tool_call *c = (struct tool_call *)((char *)uj - offsetof(struct tool_call, uj));
	uj_failure(c);
	tool_call_finish(c);
}

static void uj_release(struct files_userjob *uj)
{
	struct tool_call *c = (struct tool_call *)((char *)uj - offsetof(struct tool_call, uj));
	if (c->release)
		c->release(c);
}

void tool_call_free(struct tool_call *c)
{
	if (c->as_user)
		files_userjob_release(&c->uj); /* c->release as the task user */
	else if (c->release)
		c->release(c);
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
	files_userjob_init(&c->uj, r, uj_step, uj_done, uj_release);
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
	tool_call_free(c); /* a files job is taken off the loop's turns first */
}

int tool_files_run(struct tool_call *c)
{
	c->as_user = true;
	if (files_userjob_slice(&c->uj, monotonic_ms() + FILES_SLICE_MS) == 0) {
		uj_failure(c);
		return 0;
	}
	int rc = files_userjob_schedule(&c->uj);
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
	struct error e;
	files_error(&e, rc, op, path, &c->uj.id, false);
	return tool_result_fail(&c->res, "%s", e.msg);
}
