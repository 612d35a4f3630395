#include "core/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int error_set(struct error *e, int errnum, const char *code, const char *fmt, ...)
{
	if (!e)
		return -1;
	e->errnum = errnum;
	e->code = code;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	if (errnum && n >= 0 && (size_t)n < sizeof e->msg)
		snprintf(e->msg + n, sizeof e->msg - (size_t)n, ": %s", strerror(errnum));
	return -1;
}

int error_wrap(struct error *e, const char *fmt, ...)
{
	if (!e)
		return -1;
	char prefix[ERROR_MSG_MAX], old[ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof prefix, fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof old);
	/* Truncation is fine: the context comes first, the tail may go. */
	size_t n = strnlen(prefix, sizeof e->msg - 3);
	memcpy(e->msg, prefix, n);
	memcpy(e->msg + n, ": ", 2);
	n += 2;
	size_t rest = sizeof e->msg - 1 - n;
	size_t olen = strnlen(old, rest);
	memcpy(e->msg + n, old, olen);
	e->msg[n + olen] = '\0';
	return -1;
}

void error_clear(struct error *e)
{
	if (!e)
		return;
	e->errnum = 0;
	e->code = NULL;
	e->msg[0] = '\0';
}

const char *error_code(const struct error *e)
{
	return e && e->code ? e->code : "RUNTIME_ERROR";
}

static const struct {
	const char *code;
	unsigned status;
} code_status[] = {
	{"INVALID_REQUEST_BODY", 400},
	{"INVALID_FILE", 400},
	{"INVALID_FILE_METADATA", 400},
	{"INVALID_FILE_CONTENT", 400},
	{"MISSING_QUERY", 400},
	{"INVALID_QUERY", 400},
	{"UNKNOWN_FIELD", 400},
	{"INVALID_LAST_EVENT_ID", 400},
	{"UNKNOWN_CAPABILITY", 400},
	{"NO_MODEL", 400},
	{"UNKNOWN_ENGINE", 400},
	{"UNSUPPORTED_LANGUAGE", 400},
	{"ENGINE_NOT_FOUND", 400},
	{"BAD_REQUEST_FRAMING", 400},
	{"INVALID_SIGNAL", 400},
	{"BAD_WEBSOCKET_HANDSHAKE", 400},
	{"INVALID_PORT", 400},
	{"UNAUTHORIZED", 401},
	{"PERMISSION_DENIED", 403},
	{"FORBIDDEN", 403},
	{"RESET_DISABLED", 403},
	{"NOT_FOUND", 404},
	{"FILE_NOT_FOUND", 404},
	{"SESSION_NOT_FOUND", 404},
	{"CONTEXT_NOT_FOUND", 404},
	{"CONVERSATION_NOT_FOUND", 404},
	{"CHECKPOINT_NOT_FOUND", 404},
	{"METHOD_NOT_ALLOWED", 405},
	{"FILE_EXISTS", 409},
	{"SESSION_BUSY", 409},
	{"CONTEXT_BUSY", 409},
	{"ONE_SHOT_BUSY", 409},
	{"ONE_SHOT_DONE", 409},
	{"RESET_IN_PROGRESS", 409},
	{"CONFLICT", 409},
	{"AUDIT_OFF", 409},
	{"ALREADY_CONNECTED", 409},
	{"STDIN_NOT_OPEN", 409},
	{"STDIN_CLOSED", 409},
	{"NOT_A_TERMINAL", 409},
	{"TASK_NOT_RUNNING", 409},
	{"CONVERSATION_BUSY", 409},
	{"CONVERSATION_MISMATCH", 409},
	{"IDEMPOTENCY_KEY_CONFLICT", 409},
	{"ALREADY_INITIALIZED", 409},
	{"STALE_GENERATION", 409},
	{"CHECKPOINT_BUSY", 409},
	{"CHECKPOINT_RESTORING", 409},
	{"TASKS_RUNNING", 409},
	{"PAYLOAD_TOO_LARGE", 413},
	{"FILE_TOO_LARGE", 413},
	{"RANGE_NOT_SATISFIABLE", 416},
	{"TOO_MANY_TASKS", 429},
	{"TOO_MANY_SESSIONS", 429},
	{"TOO_MANY_CONTEXTS", 429},
	{"TOO_MANY_WATCHES", 429},
	{"UPGRADE_REQUIRED", 426},
	{"RUNTIME_ERROR", 500},
	{"START_FAILED", 500},
	{"RESTORE_INCOMPLETE", 500},
	{"CAPABILITY_UNAVAILABLE", 501},
	{"WEBSOCKET_UNAVAILABLE", 501},
	{"BAD_GATEWAY", 502},
	{"UNAVAILABLE", 503},
	{"SERVICE_UNAVAILABLE", 503},
	{"RESETTING", 503},
	{"RESET_FAILED", 503},
	{"NOT_INITIALIZED", 503},
	{"STARTING", 503},
	{"PRESTART_FAILED", 503},
	{"GATEWAY_TIMEOUT", 504},
	{"INSUFFICIENT_STORAGE", 507},
	/* execd's operations (OpenSandbox PR #1771) answer with its codes. */
	{"invalid_operation_id", 400},
	{"invalid_operation_kind", 400},
	{"operation_not_found", 404},
	{"operation_conflict", 409},
	{"operation_instance_mismatch", 409},
	{"operation_expired", 410},
	{"operation_capacity_exceeded", 503},
	/* The model proxy answers in OpenAI's shape, with OpenAI's codes. */
	{"bad_request", 400},
	{"invalid_api_key", 401},
	{"not_allowed", 404},
	{"method_not_allowed", 405},
	{"request_too_large", 413},
	{"too_many_requests", 429},
	{"budget_exceeded", 429},
	{"budget_held", 429},
	{"gateway_unavailable", 502},
	{"gateway_unreachable", 502},
	{"tls_error", 502},
	{"gateway_connection_error", 502},
	{"aborted", 502},
	{"gateway_timeout", 504},
};

unsigned error_http_status(const struct error *e)
{
	const char *code = error_code(e);
	for (size_t i = 0; i < sizeof code_status / sizeof code_status[0]; i++)
		if (strcmp(code_status[i].code, code) == 0)
			return code_status[i].status;
	switch (e ? e->errnum : 0) {
	case ENOENT:
	case ENOTDIR:
		return 404;
	case EACCES:
	case EPERM:
	case EROFS:
		return 403;
	case EEXIST:
	case ENOTEMPTY:
	case EBUSY:
		return 409;
	case EINVAL:
	case ENAMETOOLONG:
	case ELOOP:
		return 400;
	case EFBIG:
		return 413;
	case ENOSPC:
	case EDQUOT:
		return 507;
	default:
		return 500;
	}
}
