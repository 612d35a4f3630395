/* Landlock (docs/design/confinement.md#landlock-and-the-hardening-report): tasks may read and
 * execute everywhere but write only under the configured roots. The ruleset is built once in the
 * parent; each task child restricts itself with it just before seccomp. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

struct landlock_info {
	int abi;        /* Landlock ABI in use; 0 when not in force */
	int ruleset_fd; /* -1 when not in force; >= 64, out of the way of stdio dup2s */
	/* The same rules, plus (ABI >= 6) scoping: no signal to, and no
	 * abstract UNIX socket of, a process outside the task. For root
	 * tasks, which the kernel's uid check would otherwise let signal the
	 * runner and the shims (uid 0 too). Not for ordinary tasks: agents
	 * stop servers started by an earlier command, and their uid already
	 * keeps them off the runner. -1 when the ABI has no scoping. */
	int root_ruleset_fd;
	char reason[160];  /* why Landlock is not in force ("" when it is) */
	char roots[512];   /* writable roots in force, colon-separated */
	char skipped[512]; /* configured roots that do not exist, colon-separated */
};

/* `roots`: colon-separated absolute directories (NULL: the default
 * "/workspace:/tmp:/var/tmp:/home"). A kernel without Landlock is not an error
 * (abi 0 and a reason); a ruleset that cannot be built is (fail closed). */
struct error;
/* envs_file: OpenSandbox's EXECD_ENVS file, which tasks may write (file
 * rights only), or NULL. */
int landlock_prepare(struct landlock_info *ll, const char *roots, const char *envs_file,
		     struct error *err);

/* Child side, async-signal-safe: landlock_restrict_self. 0 or -errno.
 * Needs no_new_privs (or CAP_SYS_ADMIN). */
int landlock_apply(int ruleset_fd);

void landlock_info_free(struct landlock_info *ll);
