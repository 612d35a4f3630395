/* GET /metrics and /metrics/watch, shaped like execd's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "core/audit.h"
#include "core/cleanup.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/util.h"
#include "profile/profile.h"

struct cpu_sample {
	unsigned long long busy, total;
};

static int read_cpu(struct cpu_sample *s)
{
	FILE *f = fopen("/proc/stat", "re");
	if (!f)
		return -1;
	unsigned long long v[8] = {0};
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		       &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 4)
		return -1;
	s->total = 0;
	for (int i = 0; i < 8; i++)
		s->total += v[i];
	s->busy = s->total - v[3] - v[4]; /* minus idle and iowait */
	return 0;
}

static double mem_kib(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "re");
	if (!f)
		return 0;
	char line[256];
	double val = 0;
	size_t kl = strlen(key);
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			val = strtod(line + kl + 1, NULL);
			break;
		}
	}
	fclose(f);
	return val;
}

/* CPU use since the previous call (or since boot on the first). */
json_t *api_metrics_now(void)
{
	static struct cpu_sample prev;
	struct cpu_sample cur = {0};
	double pct = 0;
	if (read_cpu(&cur) == 0) {
		unsigned long long dt = cur.total - prev.total, db = cur.busy - prev.busy;
		if (dt)
			pct = 100.0 * (double)db / (double)dt;
		prev = cur;
	}
	double total = mem_kib("MemTotal"), avail = mem_kib("MemAvailable");
	return json_pack("{s:f,s:f,s:f,s:f,s:I}", "cpu_count",
			 (double)sysconf(_SC_NPROCESSORS_ONLN), "cpu_used_pct", pct,
			 "mem_total_mib", total / 1024.0, "mem_used_mib", (total - avail) / 1024.0,
			 "timestamp", (json_int_t)now_ms());
}

enum MHD_Result api_metrics(struct http_req *req)
{
	json_t *m = api_metrics_now();
	rtinit_add_binding(req->r, m);
	/* What the audit trail emitted, dropped and its sinks missed (§22). */
	json_object_set_new(m, "audit", audit_status(req->r));
	/* The OTLP metrics exporter's own counts (§22.5), null when off. */
	json_object_set_new(m, "otlp_metrics", api_metrics_otlp_status(req->r));
	return http_json(req, 200, m);
}

struct watch_stream {
	struct http_stream hs;
	bool due;
};

static void ws_produce(struct http_stream *hs)
{
	struct watch_stream *ws = (struct watch_stream *)hs;
	if (ws->due) {
		ws->due = false;
		cleanup_json json_t *m = api_metrics_now();
		rtinit_add_binding(hs->r, m);
		cleanup_free char *s = json_dumps(m, JSON_COMPACT);
		if (s) {
			buf_append_str(&hs->out, s);
			buf_append_str(&hs->out, "\n");
		}
	}
	/* Shutting down: what is buffered goes, then the stream ends. */
	if (hs->r->shutting_down)
		hs->done = true;
}

static void ws_close(struct http_stream *hs)
{
	free((struct watch_stream *)hs);
}

static void ws_tick(struct http_stream *hs, uint64_t now)
{
	(void)now;
	struct watch_stream *ws = (struct watch_stream *)hs;
	ws->due = true;
	http_stream_wake(hs);
}

static const struct http_stream_ops watch_ops = {.produce = ws_produce,
						 .close = ws_close,
						 .tick = ws_tick};

enum MHD_Result api_metrics_watch(struct http_req *req)
{
	struct watch_stream *ws = calloc(1, sizeof(*ws));
	if (!ws)
		return MHD_NO;
	ws->due = true;
	return http_stream_start(req, &ws->hs, &watch_ops, "text/event-stream");
}
