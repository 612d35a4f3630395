/* The runner's one error type (docs/design/architecture.md#error-handling): a failing function
 * fills a caller-provided struct error and returns -1 (or NULL); callers add context with
 * error_wrap() and pass it up; error_http_status() alone chooses an error's HTTP status. Thin
 * system-call wrappers return 0 or -errno instead, like the kernel, and pure parsers keep their
 * own result enums (the list: that section). The child side of a fork (confine_exec) cannot use
 * this type: it reports on fd 2 and exits. */
#pragma once
#include <stddef.h>

#define ERROR_MSG_MAX 1024 /* start-up messages name paths, some more than once */

struct error {
	int errnum;       /* errno of the failing call; 0 when none */
	const char *code; /* stable machine-readable code (static string), e.g.
			   * "INVALID_REQUEST_BODY"; NULL = "RUNTIME_ERROR" */
	char msg[ERROR_MSG_MAX];
};

/* Fill e (may be NULL: then nothing is recorded) and return -1, so that
 * `return error_set(err, ...)` is the whole error path. errnum, when not 0,
 * is appended to the message as ": <strerror>" */
int error_set(struct error *e, int errnum, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Prefix the message with context ("ctx: old message"); returns -1. */
int error_wrap(struct error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reset to "no error". */
void error_clear(struct error *e);
/* The code, never NULL. */
const char *error_code(const struct error *e);
/* The one place where an error becomes an HTTP status. */
unsigned error_http_status(const struct error *e);
