/* Configuration the runner reads at start must come from a place no task
 * can write (docs/design/security.md#trusted-input-only-from-places-no-task-can-write): the file
 * and every directory on the way to it, symlinks followed one by one. */
#pragma once
#include <stdbool.h>
#include <sys/types.h>

struct error;

/* Who the tasks are and where they may write. */
struct trust_scope {
	uid_t runner_uid;  /* the runner's euid */
	uid_t task_uid;    /* the task user's uid */
	bool shared_uid;   /* non-root mode: tasks run with the runner's own uid */
	bool root_tasks;   /* --allow-root-tasks: uid 0 may be a task's too */
	const char *roots; /* the writable roots Landlock keeps tasks to (":"-separated);
			    * NULL: Landlock is not in force, tasks may write wherever
			    * their uid may */
};

/* The file may be the task user's own (EXECD_ENVS: the SDK's set_env writes
 * it by design); it still must not be writable by group or others, and no
 * directory above it may be a task's. */
#define TRUST_TASK_OWNED_OK 1u

struct runner_config;
/* Every file the configuration names and the runner reads at start:
 * --token-file, --gateway-key-file, --mcp-servers, --execd-envs (its file
 * may be the task user's), and the lifecycle configuration at `lifecycle`
 * (NULL: none). The first refusal in err. */
int trust_check_config(const struct runner_config *cfg, const struct trust_scope *scope,
		       const char *lifecycle, struct error *err);
