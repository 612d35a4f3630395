/* The per-task network policy "none" (docs/design/security.md#network-policy): a second, tiny
 * seccomp filter stacked under the policy's that makes socket(AF_INET) and
 * socket(AF_INET6) fail with EACCES. Everything else is left to the main
 * policy (seccomp takes the strictest answer of all filters), so AF_UNIX
 * and the rest behave as before. Only the low 32 bits of the domain are
 * compared: that is what the kernel reads (an int), so high bits cannot
 * smuggle AF_INET past the filter. */
#pragma once
#include <linux/filter.h>

#define NETDENY_LEN 11

struct netdeny {
	struct sock_filter insns[NETDENY_LEN];
};

/* Parent side, at start: build the program for the native architecture.
 * Returns 0 or -1 (no native architecture known). */
int netdeny_build(struct netdeny *nd);
/* Child side, async-signal-safe; no_new_privs must be set. 0 or -errno. */
int netdeny_apply(const struct netdeny *nd);
