/* The request-body schema of every route that takes a JSON object: one
 * table per route, one line per field (docs/design.md §21). The handlers
 * check the body against it before reading any field:
 *
 * - on the native API (strict), a field not in the table is 400
 *   UNKNOWN_FIELD naming it, and a field of execd's vocabulary names the
 *   native one ("timeout" -> "timeout_ms");
 * - on the execd-compatible API, unknown fields are accepted (OpenSandbox's
 *   SDKs may send fields a newer execd knows), except the native API's
 *   names a caller could confuse with execd's (timeout_ms, env, task): 400
 *   UNKNOWN_FIELD naming the execd field.
 *
 * A field present with a JSON null counts as absent; a present field of the
 * wrong JSON type is 400 INVALID_REQUEST_BODY. Finer checks (ranges, paths)
 * stay with each route's parser. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

enum field_type {
	FIELD_STRING,
	FIELD_INTEGER,
	FIELD_BOOLEAN,
	FIELD_OBJECT,
	FIELD_ANY, /* several JSON types (the route's parser checks) */
};

struct body_field {
	const char *name;
	enum field_type type;
};

struct body_schema {
	const char *route;               /* "POST /v1/tasks", for messages */
	bool strict;                     /* native API: unknown fields are refused */
	const struct body_field *fields; /* ends with {NULL} */
};

/* The routes' schemas (schema.c). */
extern const struct body_schema schema_task_create;       /* POST /v1/tasks */
extern const struct body_schema schema_command_operation; /* POST /command/operations */
extern const struct body_schema schema_task_resize;       /* POST /v1/tasks/{id}/resize */
extern const struct body_schema schema_task_signal;       /* POST /v1/tasks/{id}/signal */
extern const struct body_schema schema_command;           /* POST /command */
extern const struct body_schema schema_session;           /* POST /session */
extern const struct body_schema schema_session_run;       /* POST /session/{id}/run */
extern const struct body_schema schema_pty_create;        /* POST /pty */

struct error;
/* 0 when body (a JSON object) fits s; else -1 with err set (UNKNOWN_FIELD
 * or INVALID_REQUEST_BODY). */
int schema_check(const struct body_schema *s, json_t *body, struct error *err);

struct error;
/* A client-chosen request id (Idempotency-Key, operation_id): 1..API_KEY_MAX visible ASCII
 * characters, else -1 with err set naming what. */
#define API_KEY_MAX 255
int api_check_key(const char *key, const char *what, struct error *err);
/* SHA-256 of the request body's canonical form (sorted keys, compact), without the field
 * skip (NULL: none): a retry of the same request hashes the same. -ENOMEM. */
int api_request_hash(json_t *body, const char *skip, unsigned char out[32]);
