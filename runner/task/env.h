/* The clean environment of a task: an allowlist of the runner's own
 * variables (never its secrets or FORCEAI_* settings), the task user's
 * identity, then the request's variables. */
#pragma once
#include <jansson.h>
#include <sys/types.h>

struct error;

/* Returns a NULL-terminated array (free with env_free), or NULL with err
 * set (INVALID_REQUEST_BODY: a bad variable name or value). */
char **env_build(uid_t uid, const char *cwd, json_t *req_env, struct error *err);
void env_free(char **env);
/* Checks a request's env object: names [A-Za-z_][A-Za-z0-9_]*, string
 * values without NUL. 0, or -1 with err set (INVALID_REQUEST_BODY). */
int env_validate(json_t *req_env, struct error *err);
/* The request's env over the EXECD_ENVS file's, as one object for
 * env_build; a new reference, or NULL when neither has anything. For
 * execd's commands only (POST /command), as execd does: never the
 * runner's own tasks (docs/design/wire.md#opensandbox-execd-12). The file is parsed again
 * only when it changed (inode, size, mtime, ctime of the open
 * descriptor); one that cannot be read or parsed is logged and skipped,
 * never fatal; what it may set is bounded (task/envfile.h). */
json_t *env_with_file(json_t *req_env, const char *envs_file, uid_t task_uid);
/* The request's env with only EXECD_ENVS=path under it (execd's sessions
 * and terminals see the variable, as execd's own environment has it, so
 * the SDK's set_env works from them, but not the file's contents). */
json_t *env_with_path(json_t *req_env, const char *envs_file);
