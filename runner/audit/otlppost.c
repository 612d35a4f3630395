#include "audit/otlppost.h"

#include <errno.h>
#include <string.h>

#include "core/error.h"
#include "core/runner.h"

#define OTLP_STEP_MS 20      /* libcurl is stepped this often while a POST is in flight */
#define OTLP_TIMEOUT_MS 5000 /* a POST that takes longer failed */

static void finish(struct otlp_post *p, bool ok)
{
	loop_timer_stop(&p->r->loop, &p->step);
	curl_multi_remove_handle(p->multi, p->easy);
	p->busy = false;
	p->done(p->r, p, ok);
}

static void on_step(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct otlp_post *p = t->arg;
	if (!p->busy)
		return;
	int running = 0;
	curl_multi_perform(p->multi, &running);
	int left;
	CURLMsg *m;
	while ((m = curl_multi_info_read(p->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		long status = 0;
		curl_easy_getinfo(p->easy, CURLINFO_RESPONSE_CODE, &status);
		bool ok = m->data.result == CURLE_OK && status >= 200 && status < 300;
		if (!ok && !p->errbuf[0])
			snprintf(p->errbuf, sizeof(p->errbuf), "HTTP status %ld", status);
		finish(p, ok);
		return;
	}
}

static size_t discard(char *b, size_t size, size_t n, void *arg)
{
	(void)b;
	(void)arg;
	return size * n;
}

int otlp_post_send(struct otlp_post *p, const char *body)
{
	if (p->busy)
		return -1;
	p->errbuf[0] = 0;
	if (curl_easy_setopt(p->easy, CURLOPT_COPYPOSTFIELDS, body) != CURLE_OK ||
	    curl_multi_add_handle(p->multi, p->easy) != CURLM_OK) {
		snprintf(p->errbuf, sizeof(p->errbuf), "libcurl refused the request");
		return -1;
	}
	p->busy = true;
	loop_timer_start(&p->r->loop, &p->step, 0, OTLP_STEP_MS);
	return 0;
}

const char *otlp_post_error(const struct otlp_post *p)
{
	return p->errbuf[0] ? p->errbuf : "unknown";
}

int otlp_post_init(struct runner *r, struct otlp_post *p, const char *url, otlp_post_done_fn done,
		   struct error *err)
{
	memset(p, 0, sizeof(*p));
	p->r = r;
	p->done = done;
	p->step.w.fd = -1;
	p->multi = curl_multi_init();
	p->easy = curl_easy_init();
	p->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	if (!p->multi || !p->easy || !p->hdrs) {
		otlp_post_close(p);
		return error_set(err, ENOMEM, NULL, "OTLP sink");
	}
	int rc = loop_timer_init(&r->loop, &p->step, on_step, p);
	if (rc < 0) {
		otlp_post_close(p);
		return error_set(err, -rc, NULL, "OTLP sink: timerfd");
	}
	CURL *e = p->easy;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, p->hdrs);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)OTLP_TIMEOUT_MS);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
	curl_easy_setopt(e, CURLOPT_PROXY, ""); /* proxy variables are not ours to follow */
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, p->errbuf);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	return 0;
}

void otlp_post_close(struct otlp_post *p)
{
	if (!p->r)
		return;
	if (p->busy)
		curl_multi_remove_handle(p->multi, p->easy);
	p->busy = false;
	if (p->step.w.fd >= 0)
		loop_timer_close(&p->r->loop, &p->step);
	if (p->easy)
		curl_easy_cleanup(p->easy);
	if (p->multi)
		curl_multi_cleanup(p->multi);
	curl_slist_free_all(p->hdrs);
	p->easy = NULL;
	p->multi = NULL;
	p->hdrs = NULL;
	p->r = NULL;
}

json_t *otlp_attr_str(const char *k, const char *v)
{
	return json_pack("{s:s,s:{s:s}}", "key", k, "value", "stringValue", v ? v : "");
}

json_t *otlp_resource_attrs(json_t *resource)
{
	json_t *a = json_array();
	json_array_append_new(a, otlp_attr_str("service.name", "forceai-runner"));
	const char *k;
	json_t *v;
	if (json_is_object(resource))
		json_object_foreach(resource, k, v) {
			if (json_is_string(v))
				json_array_append_new(a, otlp_attr_str(k, json_string_value(v)));
		}
	return a;
}
