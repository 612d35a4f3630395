#include "audit/otlp.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "audit/trail.h"
#include "core/error.h"
#include "core/log.h"
#include "audit/otlppost.h"
#include "core/runner.h"

#define OTLP_BATCH_MAX 512 /* events per POST */

struct otlp {
	struct otlp_post post; /* a failed POST is retried at the next tick */
	uint64_t next_seq;     /* the first event not yet delivered */
	uint64_t batch_end;    /* the last seq of the batch in flight */
	uint64_t sent, failed, missed;
};

static struct otlp *otlp_of(const struct runner *r)
{
	return r->otlp;
}

/* One OTLP LogRecord: the event's line is the body, byte for byte (a
 * collector's copy still verifies); seq, door, what and chain as attributes. */
static json_t *record_of(const struct audit_rec *rec)
{
	json_t *ev = json_loadb(rec->line, rec->len, 0, NULL);
	char ns[32], seq[24];
	json_int_t ts = ev ? json_integer_value(json_object_get(ev, "ts")) : 0;
	snprintf(ns, sizeof(ns), "%lld000000", (long long)ts);
	snprintf(seq, sizeof(seq), "%llu", (unsigned long long)rec->seq);
	json_t *attrs = json_array();
	json_array_append_new(attrs, json_pack("{s:s,s:{s:s}}", "key", "audit.seq", "value",
					       "intValue", seq));
	json_array_append_new(attrs, otlp_attr_str("audit.door",
						   json_string_value(json_object_get(ev, "door"))));
	json_array_append_new(attrs, otlp_attr_str("audit.what",
						   json_string_value(json_object_get(ev, "what"))));
	json_decref(ev);
	return json_pack("{s:s,s:s,s:i,s:{s:s%},s:o}", "timeUnixNano", ns, "severityText", "INFO",
			 "severityNumber", 9, "body", "stringValue", rec->line, (size_t)rec->len,
			 "attributes", attrs);
}

static void finish(struct runner *r, struct otlp_post *p, bool ok)
{
	struct otlp *o = otlp_of(r);
	(void)p;
	if (ok) {
		o->sent += o->batch_end - o->next_seq + 1;
		o->next_seq = o->batch_end + 1;
		return;
	}
	/* Retried from the same seq at the next tick; the ring keeps the events
	 * until it must drop them (then they count as missed). */
	if (!o->failed++ || o->failed % 60 == 0)
		log_warn("audit: OTLP export failed, retried each second", "{s:s,s:I}", "error",
			 otlp_post_error(&o->post), "failures", (json_int_t)o->failed);
}

void audit_otlp_tick(struct runner *r)
{
	struct otlp *o = otlp_of(r);
	if (!o || o->post.busy)
		return;
	uint32_t chain;
	uint64_t first, oldest, last;
	audit_position(r, &chain, &first, &oldest, &last);
	if (o->next_seq < oldest) {
		o->missed += oldest - o->next_seq;
		o->next_seq = oldest;
	}
	if (!oldest || o->next_seq > last)
		return;
	json_t *recs = json_array();
	uint64_t seq = o->next_seq;
	for (unsigned n = 0; seq <= last && n < OTLP_BATCH_MAX; seq++, n++) {
		const struct audit_rec *rec = audit_get(r, seq);
		if (rec && rec->line)
			json_array_append_new(recs, record_of(rec));
	}
	o->batch_end = seq - 1;
	/* The head as of the batch's last event (its seq and its line's hash):
	 * a collector keeps where the trail reached, for --audit-head. */
	char head[AUDIT_HEAD_MAX] = "";
	const struct audit_rec *end = audit_get(r, o->batch_end);
	if (end && end->line) {
		char hash[AUDIT_HASH_HEX];
		auditchain_hash(end->line, end->len, hash);
		auditchain_head_format(end->seq, hash, head);
	}
	json_t *scope_attrs = json_array();
	if (head[0])
		json_array_append_new(scope_attrs, otlp_attr_str("audit.head", head));
	json_t *body = json_pack("{s:[{s:{s:o},s:[{s:{s:s,s:o},s:o}]}]}", "resourceLogs",
				 "resource", "attributes", otlp_resource_attrs(audit_resource(r)),
				 "scopeLogs", "scope", "name", "forceai-runner.audit", "attributes",
				 scope_attrs, "logRecords", recs);
	char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!s)
		return;
	if (otlp_post_send(&o->post, s) < 0)
		o->failed++;
	free(s);
}

int audit_otlp_start(struct runner *r, struct error *err)
{
	if (!r->cfg.otlp_endpoint || !audit_enabled(r))
		return 0;
	struct otlp *o = calloc(1, sizeof(*o));
	if (!o)
		return error_set(err, ENOMEM, NULL, "OTLP sink");
	r->otlp = o;
	if (otlp_post_init(r, &o->post, r->cfg.otlp_endpoint, finish, err) < 0) {
		free(o);
		r->otlp = NULL;
		return -1;
	}
	o->next_seq = 1;
	return 0;
}

void audit_otlp_stop(struct runner *r)
{
	struct otlp *o = otlp_of(r);
	if (!o)
		return;
	otlp_post_close(&o->post);
	free(o);
	r->otlp = NULL;
}

json_t *audit_otlp_status(const struct runner *r)
{
	const struct otlp *o = otlp_of(r);
	if (!o)
		return json_null();
	uint32_t chain;
	uint64_t first, oldest, last;
	audit_position(r, &chain, &first, &oldest, &last);
	return json_pack("{s:I,s:I,s:I,s:I}", "sent", (json_int_t)o->sent, "failed_posts",
			 (json_int_t)o->failed, "missed", (json_int_t)o->missed, "behind",
			 (json_int_t)(last >= o->next_seq ? last - o->next_seq + 1 : 0));
}
