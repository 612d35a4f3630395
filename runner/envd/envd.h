/* E2B's envd API (the in-box daemon E2B's SDK drives: process.Process and
 * filesystem.Filesystem over Connect, /files, /health, /envs, /metrics, /init) on a port of its
 * own (--envd-listen), as a codec over the runner's one engine: every process is a task of
 * the task engine, every file operation the files layer's as the task user, every request
 * through the same gate, token and audit door (docs/design/envd.md). */
#pragma once
#include <stddef.h>

#include "http/http.h"

struct runner;

extern const struct http_route envd_routes[];
extern const size_t envd_n_routes;

/* envd's own state (its /init's variables, default workdir, polling watchers). */
int envd_init(struct runner *r);
void envd_free_all(struct runner *r);
/* A reset (profile/profile.h): the tenant's /init variables, workdir, watchers and process
 * records go; the token /init set is the runtime init's binding, which the reset ends. */
void envd_reset(struct runner *r);
