#include "core/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t monotonic_ms(void)
{
	return monotonic_us() / 1000;
}

uint64_t monotonic_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void log_emit(json_t *obj)
{
	char *line = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!line)
		return;
	size_t len = strlen(line);
	line[len] = '\n'; /* json_dumps leaves room for the NUL we overwrite */
	/* One write per line so concurrent writers never interleave a line. */
	ssize_t n = write(STDERR_FILENO, line, len + 1);
	(void)n;
	free(line);
}

/* Process-wide on purpose: one box is bound to one sandbox at a time. */
static char ctx_sandbox[129];
static uint64_t ctx_generation;

void log_set_context(const char *sandbox_id, uint64_t generation)
{
	snprintf(ctx_sandbox, sizeof(ctx_sandbox), "%s", sandbox_id ? sandbox_id : "");
	ctx_generation = generation;
}

static json_t *log_head(const char *level, const char *msg)
{
	json_t *obj = json_object();
	json_object_set_new(obj, "ts", json_integer((json_int_t)now_ms()));
	json_object_set_new(obj, "level", json_string(level));
	json_object_set_new(obj, "msg", json_string(msg));
	if (ctx_sandbox[0]) {
		json_object_set_new(obj, "sandboxId", json_string(ctx_sandbox));
		json_object_set_new(obj, "generation", json_integer((json_int_t)ctx_generation));
	}
	return obj;
}

void log_json(const char *level, const char *msg, const char *fmt, ...)
{
	json_t *obj = log_head(level, msg);
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		json_error_t jerr;
		json_t *extra = json_vpack_ex(&jerr, 0, fmt, ap);
		va_end(ap);
		if (extra) {
			json_object_update(obj, extra);
			json_decref(extra);
		}
	}
	log_emit(obj);
	json_decref(obj);
}

void log_errno(const char *msg, int err, const char *what)
{
	json_t *obj = log_head("error", msg);
	if (what)
		json_object_set_new(obj, "what", json_string(what));
	json_object_set_new(obj, "errno", json_integer(err));
	json_object_set_new(obj, "error", json_string(strerror(err)));
	log_emit(obj);
	json_decref(obj);
}

void iso_time_ms(char *out, size_t len, uint64_t ms)
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&s, &tm);
	size_t n = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, len - n, ".%03uZ", (unsigned)(ms % 1000));
}
