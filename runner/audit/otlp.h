/* The audit trail's OpenTelemetry sink (docs/design/audit.md#sinks): the ring's
 * events as OTLP/HTTP JSON logs, POSTed in batches to --otlp-endpoint by
 * libcurl's multi interface, stepped from a loop timer (never a blocking
 * call). Down or slow, it only falls behind: what the ring dropped before
 * it was sent is counted (missed), failed posts are retried. */
#pragma once
#include <jansson.h>

struct runner;
struct error;

/* After audit_init, when --otlp-endpoint is set. */
int audit_otlp_start(struct runner *r, struct error *err);
/* Once a second: a batch of what is new, if none is in flight. */
void audit_otlp_tick(struct runner *r);
void audit_otlp_stop(struct runner *r);
/* {endpoint set, sent, failed posts, missed events, behind} or null. */
json_t *audit_otlp_status(const struct runner *r);
