/* The runner's metrics as OTLP/HTTP JSON (docs/design/audit.md#the-metrics-over-otlp): what GET
 * /metrics serves plus the audit counters, POSTed every
 * OTEL_METRIC_EXPORT_INTERVAL ms to OTEL_EXPORTER_OTLP_METRICS_ENDPOINT
 * through the shared non-blocking poster. One POST at a time: a tick that
 * finds the previous one in flight is skipped and counted, never queued. */
#include <errno.h>
#include <stdlib.h>

#include "audit/trail.h"
#include "metrics/metrics.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "audit/otlppost.h"
#include "core/runner.h"
#include "core/version.h"

struct otlp_metrics {
	struct otlp_post post;
	struct loop_timer every;
	uint64_t start_ns; /* a sum's startTimeUnixNano: the runner's start */
	uint64_t sent, failed, skipped;
};

/* OTLP JSON: 64-bit integers and nanosecond times are decimal strings. */
static json_t *point_int(uint64_t now_ns, uint64_t start_ns, long long v)
{
	char t[24], s[24], n[24];
	snprintf(t, sizeof(t), "%llu", (unsigned long long)now_ns);
	snprintf(s, sizeof(s), "%llu", (unsigned long long)start_ns);
	snprintf(n, sizeof(n), "%lld", v);
	if (!start_ns)
		return json_pack("{s:s,s:s}", "timeUnixNano", t, "asInt", n);
	return json_pack("{s:s,s:s,s:s}", "startTimeUnixNano", s, "timeUnixNano", t, "asInt", n);
}

static json_t *gauge_double(const char *name, const char *unit, const char *desc, uint64_t now_ns,
			    double v)
{
	char t[24];
	snprintf(t, sizeof(t), "%llu", (unsigned long long)now_ns);
	return json_pack("{s:s,s:s,s:s,s:{s:[{s:s,s:f}]}}", "name", name, "unit", unit,
			 "description", desc, "gauge", "dataPoints", "timeUnixNano", t, "asDouble",
			 v);
}

static json_t *gauge_int(const char *name, const char *unit, const char *desc, uint64_t now_ns,
			 long long v)
{
	return json_pack("{s:s,s:s,s:s,s:{s:[o]}}", "name", name, "unit", unit, "description", desc,
			 "gauge", "dataPoints", point_int(now_ns, 0, v));
}

/* A cumulative monotonic counter (AGGREGATION_TEMPORALITY_CUMULATIVE = 2). */
static json_t *sum_int(const char *name, const char *unit, const char *desc, uint64_t now_ns,
		       uint64_t start_ns, long long v)
{
	return json_pack("{s:s,s:s,s:s,s:{s:[o],s:i,s:b}}", "name", name, "unit", unit,
			 "description", desc, "sum", "dataPoints", point_int(now_ns, start_ns, v),
			 "aggregationTemporality", 2, "isMonotonic", 1);
}

static long long num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (long long)json_integer_value(v)
				  : (long long)json_number_value(v);
}

static json_t *document(struct runner *r, const struct otlp_metrics *m)
{
	cleanup_json json_t *now = metrics_now();
	cleanup_json json_t *au = audit_status(r);
	if (!now || !au)
		return NULL;
	uint64_t ns = (uint64_t)now_ms() * 1000000ull;
	double mib = 1024.0 * 1024.0;
	json_t *ms = json_array();
	/* execd's names where the figure is the same (execd.system.*), ours
	 * under forceai.* for what execd has no name for. */
	json_array_append_new(ms, gauge_double("execd.system.cpu.usage", "%",
					       "System-wide CPU usage percentage", ns,
					       json_number_value(
						       json_object_get(now, "cpu_used_pct"))));
	json_array_append_new(ms,
			      gauge_int("execd.system.memory.usage_bytes", "By",
					"System memory used bytes", ns,
					(long long)(json_number_value(
							    json_object_get(now, "mem_used_mib")) *
						    mib)));
	json_array_append_new(ms, gauge_int("forceai.system.cpu.count", "{cpu}", "Online CPUs", ns,
					    num(now, "cpu_count")));
	json_array_append_new(ms,
			      gauge_int("forceai.system.memory.total_bytes", "By",
					"System memory total bytes", ns,
					(long long)(json_number_value(
							    json_object_get(now, "mem_total_mib")) *
						    mib)));
	if (json_is_true(json_object_get(au, "enabled"))) {
		json_array_append_new(ms, sum_int("forceai.audit.events.emitted", "{event}",
						  "Audit events emitted", ns, m->start_ns,
						  num(au, "emitted")));
		json_array_append_new(ms, sum_int("forceai.audit.events.dropped", "{event}",
						  "Audit events dropped (rate limit)", ns,
						  m->start_ns, num(au, "dropped")));
	}
	/* Its own misses: what the collector did not get before this post. */
	json_array_append_new(ms, sum_int("forceai.otlp.metrics.failed", "{post}",
					  "Metric posts that failed", ns, m->start_ns,
					  (long long)m->failed));
	json_array_append_new(ms, sum_int("forceai.otlp.metrics.skipped", "{post}",
					  "Metric posts skipped: the previous one in flight", ns,
					  m->start_ns, (long long)m->skipped));
	return json_pack("{s:[{s:{s:o},s:[{s:{s:s,s:s},s:o}]}]}", "resourceMetrics", "resource",
			 "attributes", otlp_resource_attrs(audit_resource(r)), "scopeMetrics",
			 "scope", "name", "forceai-runner", "version", FORCEAI_RUNNER_VERSION,
			 "metrics", ms);
}

static void on_done(struct runner *r, struct otlp_post *p, bool ok)
{
	struct otlp_metrics *m = r->otlp_metrics;
	if (ok) {
		m->sent++;
		return;
	}
	if (!m->failed++ || m->failed % 60 == 0)
		log_warn("metrics: OTLP export failed", "{s:s,s:I}", "error", otlp_post_error(p),
			 "failures", (json_int_t)m->failed);
}

static void on_every(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct runner *r = t->arg;
	struct otlp_metrics *m = r->otlp_metrics;
	if (!m)
		return;
	/* A slow collector: this figure is not queued behind the last one. */
	if (m->post.busy) {
		m->skipped++;
		return;
	}
	json_t *doc = document(r, m);
	cleanup_free char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!s || otlp_post_send(&m->post, s) < 0)
		m->failed++;
}

int metrics_otlp_start(struct runner *r, struct error *err)
{
	if (!r->cfg.otlp_metrics_endpoint)
		return 0;
	struct otlp_metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return error_set(err, ENOMEM, NULL, "OTLP metrics");
	m->every.w.fd = -1;
	m->start_ns = (uint64_t)now_ms() * 1000000ull;
	if (otlp_post_init(r, &m->post, r->cfg.otlp_metrics_endpoint, on_done, err) < 0) {
		free(m);
		return -1;
	}
	r->otlp_metrics = m;
	int rc = loop_timer_init(&r->loop, &m->every, on_every, r);
	if (rc < 0) {
		metrics_otlp_stop(r);
		return error_set(err, -rc, NULL, "OTLP metrics: timerfd");
	}
	uint64_t iv = r->cfg.otlp_metrics_interval_ms;
	rc = loop_timer_start(&r->loop, &m->every, iv, iv);
	if (rc < 0) {
		metrics_otlp_stop(r);
		return error_set(err, -rc, NULL, "OTLP metrics: timer");
	}
	log_info("metrics: OTLP export on", "{s:I}", "interval_ms", (json_int_t)iv);
	return 0;
}

void metrics_otlp_stop(struct runner *r)
{
	struct otlp_metrics *m = r->otlp_metrics;
	if (!m)
		return;
	if (m->every.w.fd >= 0)
		loop_timer_close(&r->loop, &m->every);
	otlp_post_close(&m->post);
	free(m);
	r->otlp_metrics = NULL;
}

json_t *metrics_otlp_status(const struct runner *r)
{
	const struct otlp_metrics *m = r->otlp_metrics;
	if (!m)
		return json_null();
	return json_pack("{s:I,s:I,s:I,s:I,s:b}", "interval_ms",
			 (json_int_t)r->cfg.otlp_metrics_interval_ms, "sent", (json_int_t)m->sent,
			 "failed", (json_int_t)m->failed, "skipped_busy", (json_int_t)m->skipped,
			 "in_flight", m->post.busy);
}
