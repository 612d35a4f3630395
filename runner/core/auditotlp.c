#include "core/auditotlp.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/audit.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"

#define OTLP_BATCH_MAX 512   /* events per POST */
#define OTLP_STEP_MS 20      /* libcurl is stepped this often while a POST is in flight */
#define OTLP_TIMEOUT_MS 5000 /* a POST that takes longer failed (retried next tick) */

struct otlp {
	CURLM *multi;
	CURL *easy;
	struct curl_slist *hdrs;
	struct loop_timer step;
	bool busy;
	uint64_t next_seq;  /* the first event not yet delivered */
	uint64_t batch_end; /* the last seq of the batch in flight */
	uint64_t sent, failed, missed;
	char errbuf[CURL_ERROR_SIZE];
};

static struct otlp *otlp_of(const struct runner *r)
{
	return r->otlp;
}

static json_t *attr_str(const char *k, const char *v)
{
	return json_pack("{s:s,s:{s:s}}", "key", k, "value", "stringValue", v ? v : "");
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
	json_array_append_new(attrs, attr_str("audit.door",
					      json_string_value(json_object_get(ev, "door"))));
	json_array_append_new(attrs, attr_str("audit.what",
					      json_string_value(json_object_get(ev, "what"))));
	json_decref(ev);
	return json_pack("{s:s,s:s,s:i,s:{s:s%},s:o}", "timeUnixNano", ns, "severityText", "INFO",
			 "severityNumber", 9, "body", "stringValue", rec->line, (size_t)rec->len,
			 "attributes", attrs);
}

static json_t *resource_attrs(const struct runner *r, json_t *resource)
{
	json_t *a = json_array();
	json_array_append_new(a, attr_str("service.name", "forceai-runner"));
	(void)r;
	const char *k;
	json_t *v;
	if (json_is_object(resource))
		json_object_foreach(resource, k, v) {
			if (json_is_string(v))
				json_array_append_new(a, attr_str(k, json_string_value(v)));
		}
	return a;
}

static void finish(struct runner *r, bool ok)
{
	struct otlp *o = otlp_of(r);
	loop_timer_stop(&r->loop, &o->step);
	curl_multi_remove_handle(o->multi, o->easy);
	o->busy = false;
	if (ok) {
		o->sent += o->batch_end - o->next_seq + 1;
		o->next_seq = o->batch_end + 1;
		return;
	}
	/* Retried from the same seq at the next tick; the ring keeps the events
	 * until it must drop them (then they count as missed). */
	if (!o->failed++ || o->failed % 60 == 0)
		log_warn("audit: OTLP export failed, retried each second", "{s:s,s:I}", "error",
			 o->errbuf[0] ? o->errbuf : "HTTP status not 2xx", "failures",
			 (json_int_t)o->failed);
}

static void on_step(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct runner *r = t->arg;
	struct otlp *o = otlp_of(r);
	if (!o || !o->busy)
		return;
	int running = 0;
	curl_multi_perform(o->multi, &running);
	int left;
	CURLMsg *m;
	while ((m = curl_multi_info_read(o->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		long status = 0;
		curl_easy_getinfo(o->easy, CURLINFO_RESPONSE_CODE, &status);
		finish(r, m->data.result == CURLE_OK && status >= 200 && status < 300);
		return;
	}
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
	(void)p;
	(void)arg;
	return size * n;
}

void audit_otlp_tick(struct runner *r)
{
	struct otlp *o = otlp_of(r);
	if (!o || o->busy)
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
	json_t *body = json_pack("{s:[{s:{s:o},s:[{s:{s:s},s:o}]}]}", "resourceLogs", "resource",
				 "attributes", resource_attrs(r, audit_resource(r)), "scopeLogs",
				 "scope", "name", "forceai-runner.audit", "logRecords", recs);
	char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!s)
		return;
	o->errbuf[0] = 0;
	curl_easy_setopt(o->easy, CURLOPT_COPYPOSTFIELDS, s);
	free(s);
	if (curl_multi_add_handle(o->multi, o->easy) != CURLM_OK) {
		o->failed++;
		return;
	}
	o->busy = true;
	loop_timer_start(&r->loop, &o->step, 0, OTLP_STEP_MS);
}

int audit_otlp_start(struct runner *r, struct error *err)
{
	if (!r->cfg.otlp_endpoint || !audit_enabled(r))
		return 0;
	struct otlp *o = calloc(1, sizeof(*o));
	if (!o)
		return error_set(err, ENOMEM, NULL, "OTLP sink");
	r->otlp = o;
	o->step.w.fd = -1;
	o->multi = curl_multi_init();
	o->easy = curl_easy_init();
	o->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	if (!o->multi || !o->easy || !o->hdrs) {
		audit_otlp_stop(r);
		return error_set(err, ENOMEM, NULL, "OTLP sink");
	}
	int rc = loop_timer_init(&r->loop, &o->step, on_step, r);
	if (rc < 0) {
		audit_otlp_stop(r);
		return error_set(err, -rc, NULL, "OTLP sink: timerfd");
	}
	CURL *e = o->easy;
	curl_easy_setopt(e, CURLOPT_URL, r->cfg.otlp_endpoint);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, o->hdrs);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)OTLP_TIMEOUT_MS);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
	curl_easy_setopt(e, CURLOPT_PROXY, ""); /* proxy variables are not ours to follow */
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, o->errbuf);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	o->next_seq = 1;
	return 0;
}

void audit_otlp_stop(struct runner *r)
{
	struct otlp *o = otlp_of(r);
	if (!o)
		return;
	if (o->busy)
		curl_multi_remove_handle(o->multi, o->easy);
	loop_timer_close(&r->loop, &o->step);
	if (o->easy)
		curl_easy_cleanup(o->easy);
	if (o->multi)
		curl_multi_cleanup(o->multi);
	curl_slist_free_all(o->hdrs);
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
