/* The runner's metrics: the figures GET /metrics serves (metrics/figures.c) and the OTLP/HTTP
 * JSON exporter that posts them with the audit counters (metrics/otlp.c,
 * design/audit.md#the-metrics-over-otlp). */
#pragma once
#include <jansson.h>

#include "core/error.h"

struct runner;

/* GET /metrics' figures: cpu_count, cpu_used_pct (since the previous call),
 * mem_total_mib, mem_used_mib, timestamp (new reference). */
json_t *metrics_now(void);
/* The exporter: started when OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set. */
int metrics_otlp_start(struct runner *r, struct error *err);
void metrics_otlp_stop(struct runner *r);
/* {endpoint_set, interval_ms, sent, failed, skipped_busy} or null. */
json_t *metrics_otlp_status(const struct runner *r);
