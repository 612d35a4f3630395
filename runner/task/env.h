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
/* The request's env over the EXECD_ENVS file's (read again for every task:
 * task/envfile.h), as one object for env_build; a new reference, or NULL
 * when neither has anything. A file that cannot be read or parsed is
 * logged and skipped, never fatal. */
json_t *env_with_file(json_t *req_env, const char *envs_file, uid_t task_uid);
