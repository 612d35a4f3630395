/* A task request (and the other JSON bodies of the routes): the body schema
 * of every route that takes a JSON object, one table per route, one line per field (docs/design.md
 * design/architecture.md#options-one-set-of-rules). The handlers check the body against it before
 * reading any field:
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

/* The routes' schemas (request.c). */
extern const struct body_schema schema_task_create;       /* POST /v1/tasks */
extern const struct body_schema schema_command_operation; /* POST /command/operations */
extern const struct body_schema schema_task_resize;       /* POST /v1/tasks/{id}/resize */
extern const struct body_schema schema_task_signal;       /* POST /v1/tasks/{id}/signal */
extern const struct body_schema schema_pty_create;        /* POST /pty */

struct error;
/* 0 when body (a JSON object) fits s; else -1 with err set (UNKNOWN_FIELD
 * or INVALID_REQUEST_BODY). */
int schema_check(const struct body_schema *s, json_t *body, struct error *err);

struct error;
/* A client-chosen request id (Idempotency-Key, operation_id): 1..REQUEST_KEY_MAX visible ASCII
 * characters, else -1 with err set naming what. */
#define REQUEST_KEY_MAX 255
int request_check_key(const char *key, const char *what, struct error *err);
/* SHA-256 of the request body's canonical form (sorted keys, compact), without the field
 * skip (NULL: none): a retry of the same request hashes the same. -ENOMEM. */
int request_hash(json_t *body, const char *skip, unsigned char out[32]);

/* Request bodies to a task_spec, validated without I/O (also driven by tests/fuzz): each
 * returns 0, or -1 with err set (INVALID_REQUEST_BODY; UNKNOWN_FIELD from the route's
 * schema), which the route answers with http_fail. Strings in the spec point into body.
 * request_read_spec: the fields every command route shares (cmd_key NULL: the command
 * comes another way, argv); request_parse_command: POST /command (a command or execd
 * 1.2's argv); the session's create and run; request_parse_task_io: POST /v1/tasks's
 * "stdin": true and "tty": {"cols", "rows"}. */
struct task_spec;
int request_read_spec(json_t *body, const char *cmd_key, struct task_spec *spec, struct error *err);
int request_parse_command(json_t *body, struct task_spec *spec, struct error *err);
int request_parse_session_create(json_t *body, const char **cwd, struct error *err);
int request_parse_session_run(json_t *body, struct task_spec *spec, struct error *err);
int request_parse_task_io(json_t *body, struct task_spec *spec, struct error *err);
