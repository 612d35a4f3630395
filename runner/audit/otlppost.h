/* One OTLP/HTTP JSON POST at a time, by libcurl's multi interface stepped
 * from a loop timer: never a blocking call on the loop (docs/design.md
 * design/audit.md#sinks). Shared by the audit trail's logs sink and the metrics exporter. */
#pragma once
#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>

#include "core/loop.h"

struct runner;
struct error;
struct otlp_post;

/* Called on the loop when the POST ended: ok = a 2xx answer. */
typedef void (*otlp_post_done_fn)(struct runner *r, struct otlp_post *p, bool ok);

struct otlp_post {
	CURLM *multi;
	CURL *easy;
	struct curl_slist *hdrs;
	struct loop_timer step;
	bool busy;
	otlp_post_done_fn done;
	struct runner *r;
	char errbuf[CURL_ERROR_SIZE];
};

/* url: http or https, checked at start. */
int otlp_post_init(struct runner *r, struct otlp_post *p, const char *url, otlp_post_done_fn done,
		   struct error *err);
/* Copies body; -1 when one is in flight or libcurl refused it. */
int otlp_post_send(struct otlp_post *p, const char *body);
/* Why the last one failed (libcurl's words, or the HTTP status). */
const char *otlp_post_error(const struct otlp_post *p);
void otlp_post_close(struct otlp_post *p);

/* An OTLP string attribute {key, value: {stringValue}} (v NULL: ""). New reference. */
json_t *otlp_attr_str(const char *k, const char *v);
/* A batch's resource attributes: service.name, then the string values of resource (the bound
 * box's sandbox.id, sandbox.generation and telemetry attributes: audit_set_resource). */
json_t *otlp_resource_attrs(json_t *resource);
