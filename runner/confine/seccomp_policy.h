/* The seccomp policy: an OCI runtime-spec seccomp JSON file parsed with
 * jansson and compiled once with libseccomp at start
 * (docs/design/confinement.md#the-seccomp-policy). */
#pragma once
#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>

struct seccomp_policy {
	struct sock_fprog prog; /* compiled BPF; prog.filter is heap memory */
	char name[64];          /* basename of the policy file */
	unsigned n_allowed;     /* number of syscall names allowed */
	unsigned flags;         /* SECCOMP_FILTER_FLAG_* from the policy's "flags" */
	unsigned n_unknown;     /* names libseccomp knows on no architecture (skipped) */
	char warning[256];      /* non-fatal problems worth a log line; "" when none */
	char source[256];       /* where the program came from (seccomp_policy_load_cached) */
	/* The same program with every "fail with EPERM" return made a user notification
	 * (SECCOMP_RET_USER_NOTIF): the task's shim answers EPERM and counts the call
	 * (seccomp_notify.h, docs/design/confinement.md#every-refusal-recorded). filter NULL: no
	 * such return. */
	struct sock_fprog notify_prog;
	unsigned n_notify; /* returns turned into notifications */
};

/* Parse and compile `path`. Returns 0, or -1 with err set: a one-line
 * message naming the file and the problem. */
struct error;
int seccomp_policy_load(const char *path, struct seccomp_policy *out, struct error *err);
/* The same from the file's bytes (path only names it). *kernel_dep (may be
 * NULL) is set when a rule's minKernel was evaluated: the program then
 * depends on the running kernel's release. */
int seccomp_policy_compile(const char *path, const char *data, size_t len,
			   struct seccomp_policy *out, bool *kernel_dep, struct error *err);
/* The policy file's bytes, NUL-terminated (free them). -1 with err set. */
int seccomp_policy_read(const char *path, char **data, size_t *len, struct error *err);

/* Compiling takes milliseconds at every start: the program is cached
 * (seccomp_cache.c). The cache key is SHA-256 over the cache format, the
 * native architecture, libseccomp's version and the policy file's bytes
 * (and the kernel release, checked separately, when the policy has
 * minKernel rules); the file carries a SHA-256 of its header and program,
 * checked before use. Looked for at "<path>.bpf" (written at image build
 * time with --write-seccomp-cache), then "seccomp-cache.bpf" in cache_dirfd
 * (the state dir; -1: none). A cache that is missing, stale or does not
 * verify means compile as without one (then written to cache_dirfd); a
 * policy that does not compile is still an error. out->source says which. */
int seccomp_policy_load_cached(const char *path, int cache_dirfd, struct seccomp_policy *out,
			       struct error *err);
/* Compile `path` and write its cache to `cache_path`. -1 with err set. */
int seccomp_cache_write_file(const char *path, const char *cache_path, struct error *err);

/* Child side, async-signal-safe: install the precompiled filter.
 * Returns 0 or -errno. */
int seccomp_policy_apply(const struct seccomp_policy *p);
/* The same with the notifying program when there is one and listener is not NULL: *listener
 * is then the listener fd (close-on-exec), or -1 where the kernel refused one (too old, or
 * a listener is already stacked above us) and the plain program was installed instead. */
int seccomp_policy_apply_notify(const struct seccomp_policy *p, int *listener);
/* Parent side, once: build p->notify_prog from p->prog. 0 or -ENOMEM. */
int seccomp_policy_notify_build(struct seccomp_policy *p);

void seccomp_policy_free(struct seccomp_policy *p);
