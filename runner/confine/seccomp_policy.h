/* The seccomp policy: an OCI runtime-spec seccomp JSON file parsed with
 * jansson and compiled once with libseccomp at start (docs/design.md §6). */
#pragma once
#include <linux/filter.h>
#include <stddef.h>

struct seccomp_policy {
	struct sock_fprog prog; /* compiled BPF; prog.filter is heap memory */
	char name[64];          /* basename of the policy file */
	unsigned n_allowed;     /* number of syscall names allowed */
	unsigned flags;         /* SECCOMP_FILTER_FLAG_* from the policy's "flags" */
	unsigned n_unknown;     /* names libseccomp knows on no architecture (skipped) */
	char warning[256];      /* non-fatal problems worth a log line; "" when none */
};

/* Parse and compile `path`. Returns 0, or -1 with err set: a one-line
 * message naming the file and the problem. */
struct error;
int seccomp_policy_load(const char *path, struct seccomp_policy *out, struct error *err);

/* Child side, async-signal-safe: install the precompiled filter.
 * Returns 0 or -errno. */
int seccomp_policy_apply(const struct seccomp_policy *p);

void seccomp_policy_free(struct seccomp_policy *p);
