/* Native task API (docs/design.md §3.3): standard SSE with id/event/data, raw output
 * chunks, re-attach with Last-Event-ID. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/agent.h"
#include "api/api.h"
#include "model/gateway.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "model/modelproxy.h"
#include "core/runner.h"
#include "task/task.h"
#include "core/util.h"

#define KEEPALIVE_MS 5000 /* well inside the idle timeout of proxies and of our own server */

struct native_stream {
	struct http_stream hs; /* hs.out: the events to send; hs.done after the terminal one */
	struct task_reader rd;
	bool keepalive_due;
};

static void encode_record(struct native_stream *ns, const struct spool_rec *rec, const char *data)
{
	struct buf *o = &ns->hs.out;
	uint64_t id = rec->seq + 1;
	if (rec->type == SPOOL_EVENT) {
		const char *nl = memchr(data, '\n', rec->len);
		if (!nl)
			return;
		size_t nlen = (size_t)(nl - data);
		buf_appendf(o, "id: %llu\nevent: %.*s\ndata: ", (unsigned long long)id, (int)nlen,
			    data);
		buf_append(o, nl + 1, rec->len - nlen - 1);
		buf_append_str(o, "\n\n");
		if ((nlen == 4 && !memcmp(data, "exit", 4)) ||
		    (nlen == 5 && !memcmp(data, "error", 5)))
			ns->hs.done = true; /* the terminal event */
		return;
	}
	buf_append_lit(o, "id: ");
	buf_append_u64(o, id);
	if (rec->type == SPOOL_STDOUT)
		buf_append_lit(o, "\nevent: stdout\ndata: {");
	else
		buf_append_lit(o, "\nevent: stderr\ndata: {");
	buf_append_lit(o, "\"text\":");
	if (buf_append_json_utf8(o, data, rec->len) == 1) {
		o->len -= sizeof("\"text\":") - 1;
		buf_append_lit(o, "\"data_b64\":\"");
		buf_append_base64(o, (const unsigned char *)data, rec->len);
		buf_append_lit(o, "\"");
	}
	buf_append_lit(o, "}\n\n");
}

static void produce(struct native_stream *ns)
{
	static char rbuf[SPOOL_MAX_REC];
	struct task *t = ns->rd.task;
	while (!ns->hs.done && buf_avail(&ns->hs.out) < 16 * 1024) {
		struct spool_rec rec;
		const char *data;
		int rc = task_reader_next_ref(&ns->rd, &rec, rbuf, &data);
		if (rc < 0) {
			log_errno("reading the task log failed", -rc, t->id);
			break;
		}
		if (rc == 0) {
			if (task_reader_at_end(&ns->rd)) {
				/* The exit record could not be written (disk full):
				 * the terminal event is owed all the same. */
				buf_appendf(&ns->hs.out,
					    "id: %llu\nevent: exit\ndata: {\"exit_code\":%d,\"status\":\"%s\"}\n\n",
					    (unsigned long long)t->spool.next_seq + 1, t->exit_code,
					    task_status_name(t->status));
				ns->hs.done = true;
			}
			break;
		}
		encode_record(ns, &rec, data);
	}
	if (!ns->hs.done && ns->keepalive_due && !buf_avail(&ns->hs.out))
		buf_append_str(&ns->hs.out, ": keep-alive\n\n");
	ns->keepalive_due = false;
}

static void ns_produce(struct http_stream *hs)
{
	produce((struct native_stream *)hs);
}

static void ns_close(struct http_stream *hs)
{
	struct native_stream *ns = (struct native_stream *)hs;
	task_reader_detach(&ns->rd);
	free(ns);
}

static void ns_tick(struct http_stream *hs, uint64_t now)
{
	struct native_stream *ns = (struct native_stream *)hs;
	if (!hs->done && now - hs->last_send_ms >= KEEPALIVE_MS) {
		ns->keepalive_due = true;
		http_stream_wake(hs);
	}
}

static void ns_wake(struct task_reader *rd)
{
	struct native_stream *ns =
		(struct native_stream *)((char *)rd - offsetof(struct native_stream, rd));
	http_stream_wake(&ns->hs);
}

static const struct http_stream_ops native_ops = {ns_produce, ns_close, ns_tick};

static enum MHD_Result start_stream(struct http_req *req, struct task *t, bool from_start,
				    uint64_t after_id)
{
	struct native_stream *ns = calloc(1, sizeof(*ns));
	if (!ns)
		return MHD_NO;
	ns->rd.wake = ns_wake;
	if (!from_start)
		spool_seek_seq(&t->spool, &ns->rd.cur, after_id); /* event id N = seq N-1 */
	task_reader_attach(t, &ns->rd, true);
	return http_stream_start(req, &ns->hs, &native_ops, "text/event-stream");
}

static struct task *find_task(struct http_req *req)
{
	struct task *t = is_hex_id(req->param) ? task_find(req->r, req->param) : NULL;
	return t && t->api == TASK_API_NATIVE ? t : NULL;
}

int api_parse_task(json_t *body, struct task_spec *spec, struct error *err)
{
	if (api_read_spec(body, "task", spec, err) < 0)
		return -1;
	spec->api = TASK_API_NATIVE;
	json_t *cap = json_object_get(body, "capability");
	const char *capability = "exec";
	if (cap && !json_is_null(cap)) {
		if (!json_is_string(cap))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field 'capability' must be a string");
		capability = json_string_value(cap);
	}
	if (strcmp(capability, "exec") && strcmp(capability, "chat") && strcmp(capability, "agent"))
		return error_set(err, 0, "UNKNOWN_CAPABILITY",
				 "unknown capability '%.32s' (expected exec, chat or agent)",
				 capability);
	spec->capability = capability;
	json_t *to = json_object_get(body, "timeout_ms");
	if (to && !json_is_null(to)) {
		if (!json_is_integer(to) || json_integer_value(to) < 0 ||
		    json_integer_value(to) > 7LL * 24 * 3600 * 1000)
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field 'timeout_ms' must be a non-negative integer (ms)");
		spec->timeout_ms = (uint64_t)json_integer_value(to);
		spec->has_timeout = true;
	}
	spec->env = json_object_get(body, "env");
	if (api_parse_task_io(body, spec, err) < 0)
		return -1;
	json_t *model = json_object_get(body, "model");
	if (model && !json_is_null(model)) {
		if (!json_is_string(model) || !json_string_length(model) ||
		    json_string_length(model) > 256 ||
		    strlen(json_string_value(model)) != json_string_length(model))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field 'model' must be a non-empty string");
		spec->model = json_string_value(model);
	}
	static const char *const limits[] = {"max_steps", "max_tokens"};
	for (int i = 0; i < 2; i++) {
		json_t *v = json_object_get(body, limits[i]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 1000000000)
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field '%s' must be a positive integer", limits[i]);
		*(i == 0 ? &spec->max_steps : &spec->max_tokens) = (uint64_t)json_integer_value(v);
	}
	return 0;
}

enum MHD_Result api_task_create(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct task_spec spec;
	struct error err;
	if (api_parse_task(body, &spec, &err) < 0)
		return http_fail(req, &err);
	if (strcmp(spec.capability, "exec") && !gateway_enabled(req->r))
		return http_failf(req, "CAPABILITY_UNAVAILABLE",
				  "capability '%s' needs a model gateway (FORCEAI_GATEWAY_URL is not "
				  "set)",
				  spec.capability);
	struct task *t;
	if (!strcmp(spec.capability, "agent"))
		t = agent_start(req->r, &spec, &err);
	else if (!strcmp(spec.capability, "chat"))
		t = modelproxy_start_task(req->r, &spec, &err);
	else
		t = task_start(req->r, &spec, &err);
	if (!t)
		return http_fail(req, &err);
	return start_stream(req, t, true, 0);
}

enum MHD_Result api_task_get(struct http_req *req)
{
	struct task *t = find_task(req);
	if (!t)
		return http_failf(req, "NOT_FOUND", "task not found: %.64s", req->param);
	json_t *o = json_pack("{s:s,s:s,s:s,s:b,s:I,s:s}", "id", t->id, "capability",
			      t->capability ? t->capability : "exec", "status",
			      task_status_name(t->finished ? t->status : TS_RUNNING), "running",
			      !t->finished, "started_at", (json_int_t)t->started_ms, "cwd", t->cwd);
	json_object_set_new(o, "last_event_id", json_integer((json_int_t)t->spool.next_seq));
	if (t->finished) {
		json_object_set_new(o, "exit_code", json_integer(t->exit_code));
		json_object_set_new(o, "finished_at", json_integer((json_int_t)t->finished_ms));
		json_object_set_new(o, "duration_ms",
				    json_integer((json_int_t)(t->finished_ms - t->started_ms)));
		if (t->term_signal)
			json_object_set_new(o, "signal", json_integer(t->term_signal));
	}
	return http_json(req, 200, o);
}

enum MHD_Result api_task_events(struct http_req *req)
{
	struct task *t = find_task(req);
	if (!t)
		return http_failf(req, "NOT_FOUND", "task not found: %.64s", req->param);
	const char *last = http_header(req, "Last-Event-ID");
	if (!last || !*last)
		last = http_query(req, "last_event_id");
	if (!last || !*last)
		return start_stream(req, t, true, 0);
	char *end;
	errno = 0;
	unsigned long long v = strtoull(last, &end, 10);
	if (*last == '-' || *end || errno)
		return http_failf(req, "INVALID_LAST_EVENT_ID",
				  "Last-Event-ID must be a decimal event id");
	return start_stream(req, t, false, v);
}

enum MHD_Result api_task_delete(struct http_req *req)
{
	struct task *t = find_task(req);
	if (!t)
		return http_failf(req, "NOT_FOUND", "task not found: %.64s", req->param);
	if (t->finished)
		return http_json(req, 200,
				 json_pack("{s:s,s:s}", "id", t->id, "status",
					   task_status_name(t->status)));
	task_kill(t, TS_CANCELLED);
	return http_json(req, 202, json_pack("{s:s,s:s}", "id", t->id, "status", "cancelling"));
}
