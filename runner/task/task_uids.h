/* Who is a task, seen from a door of the runner: the in-box API refuses a
 * connection whose socket is owned by a uid a task can run as (http/gate.h
 * asks through struct gate_tasks; main hands these in). The identities
 * themselves are core/ids.h's; this is the task engine's reading of them
 * for peers. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct runner;

/* Is uid one a task can have (and not the runner's own)? */
bool task_uids_include(const struct runner *r, uid_t uid);
/* Those uids in words, for GET /v1/hardening (truncated to len). */
void task_uids_describe(const struct runner *r, char *buf, size_t len);
