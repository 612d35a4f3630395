/* `forceai-runner --ping`: a health probe for orchestrators (Kubernetes exec
 * probes, podman healthchecks). */
#pragma once

struct runner_config;

/* GET /ping from the runner this configuration describes (the wildcard
 * listen address is reached on loopback), with the access token from the
 * same place the runner reads it (EXECD_ACCESS_TOKEN or --token-file), sent
 * in the request and never on a command line. Returns the exit status:
 * 0 when it answers 200, 1 otherwise (one line on stderr). */
int ping_run(const struct runner_config *cfg);
