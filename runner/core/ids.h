/* Which identities tasks may have (docs/design/security.md#identities): a request's uid/gid
 * only if it is the task user's own, in --task-id-range (never nobody, never a gid below 1000:
 * shadow, disk, adm would open files no task should read) or 0 with --allow-root-tasks. The
 * same sets say who is a task elsewhere: the in-box API refuses connections owned by a task
 * uid, and a secret file must not be readable by one. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

struct runner_config;

#define IDS_NOBODY 65534u
#define IDS_SYSTEM_GID_MAX 999u

bool ids_uid_allowed(const struct runner_config *cfg, uid_t uid);
bool ids_gid_allowed(const struct runner_config *cfg, gid_t gid);
/* For GET /v1/hardening: {"uids", "gids", "root"}. New reference. */
json_t *ids_report(const struct runner_config *cfg);
