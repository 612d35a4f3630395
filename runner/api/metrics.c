/* GET /metrics and /metrics/watch, shaped like execd's (the watch: one JSON object a line,
 * every second, application/x-ndjson). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "audit/trail.h"
#include "core/cleanup.h"
#include "metrics/metrics.h"
#include "core/runner.h"
#include "core/buf.h"
#include "init/runtime.h"

/* The one object GET /metrics answers and /metrics/watch writes every
 * second (docs/api.md: "the same object"). */
static json_t *metrics_object(struct runner *r)
{
	json_t *m = metrics_now();
	if (!m)
		return NULL;
	runtime_init_add_binding(r, m);
	/* What the audit trail emitted, dropped and its sinks missed (design/audit.md). */
	json_object_set_new(m, "audit", audit_status(r));
	/* The OTLP metrics exporter's own counts (design/audit.md#the-metrics-over-otlp), null when
	 * off. */
	json_object_set_new(m, "otlp_metrics", metrics_otlp_status(r));
	return m;
}

enum MHD_Result api_metrics(struct http_req *req)
{
	return http_json(req, 200, metrics_object(req->r));
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
		cleanup_json json_t *m = metrics_object(hs->r);
		cleanup_free char *s = m ? json_dumps(m, JSON_COMPACT) : NULL;
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
	/* One JSON object a line, as execd writes it (which labels it text/event-stream
	 * without SSE framing): named for what it is. */
	return http_stream_start(req, &ws->hs, &watch_ops, "application/x-ndjson");
}
