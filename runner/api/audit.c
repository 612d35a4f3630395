/* GET /v1/audit: the current tenant's audit trail (audit/trail.h), as JSON
 * from ?since=SEQ, or as a live SSE tail (Accept: text/event-stream)
 * resumable with Last-Event-ID. And the door of every API path. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "audit/trail.h"
#include "audit/otlp.h"
#include "core/cleanup.h"
#include "core/runner.h"
#include "http/sse.h"

#define AUDIT_PAGE_MAX 10000 /* events per JSON answer */
#define AUDIT_SSE_CHUNK (64 * 1024)

const char *api_audit_door(const char *path)
{
	static const struct {
		const char *prefix, *door;
	} doors[] = {
		{"/ping", NULL}, /* probes: not actions (a kubelet asks every few seconds) */
		{"/ready", NULL},
		{"/files", "files"},
		{"/directories", "files"},
		{"/pty", "pty"},
		{"/proxy", "proxy"},
		{"/mcp", "mcp"},
		{"/v1/mcp", "mcp"},
		{"/v1/reset", "reset"},
		{"/internal/init", "init"},
		{"/v1/init", "init"},
		{"/v1/runtime", "init"},
		{"/code", "code"},
		{"/execute", "code"},
		{"/contexts", "code"},
		{"/v1/code", "code"},
		{"/v1/contexts", "code"},
		{"/command", "execd"},
		{"/session", "execd"},
		{"/metrics", "execd"},
		{"/v1/isolated", "execd"},
		/* execd's operations (GET /execution/operation|instance) are execd's;
		 * checkpoints get their own door (issue 38): a restore rewrites files but
		 * is one operation a reader filters for, not a files API call. */
		{"/execution", "execd"},
		{"/v1/checkpoints", "checkpoint"},
		/* E2B's envd face (--envd-listen): its RPCs, its variables; its /init is init's,
		 * its /health a probe. */
		{"/process.Process", "envd"},
		{"/filesystem.Filesystem", "envd"},
		{"/envs", "envd"},
		{"/init", "init"},
		{"/health", NULL},
	};
	for (size_t i = 0; i < sizeof(doors) / sizeof(doors[0]); i++) {
		size_t n = strlen(doors[i].prefix);
		if (!strncmp(path, doors[i].prefix, n) && (path[n] == 0 || path[n] == '/'))
			return doors[i].door;
	}
	return "native";
}

static bool parse_u64(const char *s, uint64_t *out)
{
	if (!s || !*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 19)
		return false;
	*out = strtoull(s, NULL, 10);
	return true;
}

struct audit_stream {
	struct http_stream hs;
	struct audit_watcher w;
	uint32_t chain;
	uint64_t next; /* the next seq to send */
	char task[33];
};

static void as_wake(struct audit_watcher *w)
{
	struct audit_stream *as =
		(struct audit_stream *)((char *)w - offsetof(struct audit_stream, w));
	http_stream_wake(&as->hs);
}

static void as_produce(struct http_stream *hs)
{
	struct audit_stream *as = (struct audit_stream *)hs;
	struct runner *r = hs->r;
	uint32_t chain;
	uint64_t first, oldest, last;
	audit_position(r, &chain, &first, &oldest, &last);
	/* The tenant changed (a reset): this reader's trail is closed. */
	if (chain != as->chain || r->shutting_down || !audit_enabled(r)) {
		hs->done = true;
		return;
	}
	if (as->next < oldest && as->next <= last) {
		char lost[64];
		int n = snprintf(lost, sizeof(lost), "{\"from\":%llu,\"to\":%llu}",
				 (unsigned long long)as->next, (unsigned long long)oldest - 1);
		sse_event(&hs->out, SSE_NO_ID, "lost", lost, (size_t)n);
		as->next = oldest;
	}
	while (as->next <= last && hs->out.len < AUDIT_SSE_CHUNK) {
		const struct audit_rec *rec = audit_get(r, as->next);
		as->next++;
		if (!rec || !rec->line || (as->task[0] && strcmp(rec->task, as->task)))
			continue;
		sse_event(&hs->out, rec->seq, NULL, rec->line, rec->len);
	}
}

static void as_close(struct http_stream *hs)
{
	struct audit_stream *as = (struct audit_stream *)hs;
	audit_unwatch(hs->r, &as->w);
	free(as);
}

/* Every second: a reset or a shutdown is noticed by as_produce. */
static void as_tick(struct http_stream *hs, uint64_t now)
{
	(void)now;
	http_stream_wake(hs);
}

static const struct http_stream_ops audit_stream_ops = {.produce = as_produce,
							.close = as_close,
							.tick = as_tick,
							.keepalive_ms = SSE_KEEPALIVE_MS,
							.keepalive = SSE_KEEPALIVE};

enum MHD_Result api_audit(struct http_req *req)
{
	struct runner *r = req->r;
	if (!audit_enabled(r))
		return http_failf(
			req, "AUDIT_OFF",
			"the audit trail is off (--insecure-no-audit, a test-only switch)");
	uint32_t chain;
	uint64_t first, oldest, last, since = 0;
	audit_position(r, &chain, &first, &oldest, &last);
	const char *q = http_query(req, "since");
	const char *lei = http_header(req, "Last-Event-ID");
	if ((q && !parse_u64(q, &since)) || (!q && lei && !parse_u64(lei, &since)))
		return http_failf(req, "INVALID_QUERY",
				  "since (or Last-Event-ID) must be a sequence number");
	const char *task = http_query(req, "task");
	if (task && strlen(task) > 32)
		return http_failf(req, "INVALID_QUERY", "task: not a task id");
	uint64_t limit = 1000;
	const char *ql = http_query(req, "limit");
	if (ql && (!parse_u64(ql, &limit) || !limit || limit > AUDIT_PAGE_MAX))
		return http_failf(req, "INVALID_QUERY", "limit must be 1..%d", AUDIT_PAGE_MAX);
	/* Only the current tenant's events: a reset closed the chain before. */
	uint64_t from = since + 1 < first ? first : since + 1;
	const char *accept = http_header(req, "Accept");
	if ((accept && strstr(accept, SSE_CONTENT_TYPE)) || http_query(req, "stream")) {
		struct audit_stream *as = calloc(1, sizeof(*as));
		if (!as)
			return http_failf(req, "RUNTIME_ERROR", "out of memory");
		as->chain = chain;
		as->next = from;
		snprintf(as->task, sizeof(as->task), "%s", task ? task : "");
		as->w.wake = as_wake;
		audit_watch(r, &as->w);
		return http_stream_start(req, &as->hs, &audit_stream_ops, SSE_CONTENT_TYPE);
	}
	json_t *events = json_array();
	uint64_t lost = 0, seq = from, n = 0;
	if (seq < oldest && seq <= last) {
		lost = oldest - seq;
		seq = oldest;
	}
	for (; seq <= last && n < limit; seq++) {
		const struct audit_rec *rec = audit_get(r, seq);
		if (!rec || !rec->line || (task && strcmp(rec->task, task)))
			continue;
		json_t *o = json_loadb(rec->line, rec->len, 0, NULL);
		if (o) {
			json_array_append_new(events, o);
			n++;
		}
	}
	json_t *status = audit_status(r);
	json_object_set_new(status, "otlp", audit_otlp_status(r));
	/* The head at last_seq: what --verify-audit --audit-head checks a saved
	 * trail reaches (docs/design/audit.md#the-head-a-trail-cut-at-its-end-is-found-out). */
	char head[AUDIT_HEAD_MAX];
	audit_head(r, head);
	json_t *body = json_pack("{s:i,s:I,s:I,s:s,s:I,s:I,s:o,s:o}", "chain", chain,
				 "chain_first_seq", (json_int_t)first, "last_seq", (json_int_t)last,
				 "head", head, "next_since", (json_int_t)(seq - 1), "lost",
				 (json_int_t)lost, "events", events, "status", status);
	return http_json(req, 200, body);
}
