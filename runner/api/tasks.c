/* Native task API (docs/design/wire.md#native-task-api): standard SSE with id/event/data, raw
 * output chunks, re-attach with Last-Event-ID. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/engine.h"
#include "api/api.h"
#include "task/request.h"
#include "model/gateway.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "model/args.h"
#include "model/chattask.h"
#include "checkpoint/checkpoint.h"
#include "core/runner.h"
#include "task/task.h"
#include "core/buf.h"
#include "core/utf8.h"
#include "core/jsonesc.h"
#include "core/base64.h"
#include "core/randomid.h"
#include "http/sse.h"

struct native_stream {
	struct http_stream hs; /* hs.out: small events; hs.done after the terminal one */
	struct task_reader rd;
	/* The output record being written straight into the send buffer, in
	 * as many pieces as it takes (stage 0 header, 1 text, 2 trailer). */
	struct task_rec_ref cur;
	int stage;
	bool b64;
	bool checked; /* b64 is decided: the whole record was looked at */
};

/* An event record (started, exit, agent events): small, through out. */
static void encode_event(struct native_stream *ns, const struct spool_rec *rec, const char *data)
{
	struct buf *o = &ns->hs.out;
	const char *nl = memchr(data, '\n', rec->len);
	if (!nl)
		return;
	size_t nlen = (size_t)(nl - data);
	sse_head(o, rec->seq + 1, data, nlen);
	sse_data(o, nl + 1, rec->len - nlen - 1);
	if ((nlen == 4 && !memcmp(data, "exit", 4)) || (nlen == 5 && !memcmp(data, "error", 5)))
		ns->hs.done = true; /* the terminal event */
}

/* The next piece of ns->cur into dst; the bytes written. */
static size_t record_piece(struct native_stream *ns, char *dst, size_t max)
{
	static char scratch[SPOOL_MAX_REC];
	struct task_rec_ref *c = &ns->cur;
	const char *data = NULL;
	size_t n = 0;
	if (ns->stage < 2) {
		int rc = task_reader_rest(&ns->rd, c, scratch, &data);
		if (rc < 0) {
			/* No longer retained (a reader far behind): the event ends
			 * with what it had. */
			log_errno("reading the task log failed", -rc, ns->rd.task->id);
			if (ns->stage == 0) {
				c->active = false;
				return 0;
			}
			c->done = c->rec.len;
		}
	}
restart:
	if (ns->stage == 0) {
		char hdr[96];
		size_t h = sse_head_to(hdr, sizeof(hdr), c->rec.seq + 1,
				       c->rec.type == SPOOL_STDOUT ? "stdout" : "stderr", 6);
		h += (size_t)snprintf(hdr + h, sizeof(hdr) - h, "{\"%s\":\"",
				      ns->b64 ? "data_b64" : "text");
		if (max < h + 8)
			return 0;
		memcpy(dst, hdr, h);
		n = h;
		ns->stage = 1;
	}
	if (ns->stage == 1) {
		size_t left = c->rec.len - c->done;
		if (ns->b64) {
			/* Whole groups of 3 until the last. */
			size_t take = (max - n) / 4 * 3;
			if (take < left)
				left = take;
			n += base64_encode_to(dst + n, (const unsigned char *)data, left);
			c->done += (uint32_t)left;
		} else if (max - n >= 6) {
			/* Text or base64 is the whole record's choice
			 * (design/wire.md#native-task-api), made here in the same pass as the
			 * escaping: the escaper counts the bytes that are not UTF-8 and what did
			 * not fit is checked now, before any of the record can leave. The first
			 * piece always shares this call with the header, so going
			 * back to base64 only rewinds this buffer. */
			size_t used, bad = 0;
			n += json_escape_part(dst + n, max - n, data, left, &used,
					      ns->checked ? NULL : &bad);
			if (!ns->checked) {
				ns->checked = true;
				if (bad ||
				    (used < left && !utf8_valid((const unsigned char *)data + used,
								left - used))) {
					ns->b64 = true;
					ns->stage = 0;
					n = 0;
					goto restart;
				}
			}
			c->done += (uint32_t)used;
		}
		if (c->done < c->rec.len)
			return n;
		ns->stage = 2;
	}
	if (max - n < 4)
		return n;
	memcpy(dst + n, "\"}" SSE_END, 4);
	c->active = false;
	return n + 4;
}

static size_t ns_produce_into(struct http_stream *hs, char *dst, size_t max)
{
	static char rbuf[SPOOL_MAX_REC];
	struct native_stream *ns = (struct native_stream *)hs;
	struct task *t = ns->rd.task;
	size_t n = 0;
	for (;;) {
		n += buf_take(&hs->out, dst + n, max - n);
		if (buf_avail(&hs->out) || n == max)
			break;
		if (ns->cur.active) {
			size_t k = record_piece(ns, dst + n, max - n);
			n += k;
			if (ns->cur.active)
				break; /* dst is full */
			continue;
		}
		if (hs->done)
			break;
		const char *data;
		int rc = task_reader_next_rec(&ns->rd, &ns->cur, rbuf, &data);
		if (rc < 0) {
			log_errno("reading the task log failed", -rc, t->id);
			break;
		}
		if (rc == 0) {
			ns->cur.active = false;
			if (task_reader_at_end(&ns->rd)) {
				/* The exit record could not be written (disk full):
				 * the terminal event is owed all the same. */
				char d[128];
				int k = snprintf(d, sizeof(d),
						 "{\"exit_code\":%d,\"status\":\"%s\"}",
						 t->exit_code, task_status_str(t));
				if (k > 0 && (size_t)k < sizeof(d))
					sse_event(&hs->out, t->spool.next_seq + 1, "exit", d,
						  (size_t)k);
				hs->done = true;
				continue;
			}
			/* Nothing now: the keep-alive is the stream layer's (http/sse.h). */
			break;
		}
		if (ns->cur.rec.type == SPOOL_EVENT) {
			ns->cur.active = false;
			encode_event(ns, &ns->cur.rec, data);
			continue;
		}
		/* Text or base64 is decided with the first piece (record_piece). */
		ns->b64 = false;
		ns->checked = false;
		ns->stage = 0;
	}
	return n;
}

static void ns_close(struct http_stream *hs)
{
	struct native_stream *ns = (struct native_stream *)hs;
	task_reader_detach(&ns->rd);
	free(ns);
}

static void ns_wake(struct task_reader *rd)
{
	struct native_stream *ns =
		(struct native_stream *)((char *)rd - offsetof(struct native_stream, rd));
	http_stream_wake(&ns->hs);
}

static bool ns_more_soon(struct http_stream *hs)
{
	struct native_stream *ns = (struct native_stream *)hs;
	return task_reader_more_due(&ns->rd);
}

static const struct http_stream_ops native_ops = {.close = ns_close,
						  .keepalive_ms = SSE_KEEPALIVE_TASK_MS,
						  .keepalive = SSE_KEEPALIVE,
						  .produce_into = ns_produce_into,
						  .more_soon = ns_more_soon};

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
	return http_stream_start(req, &ns->hs, &native_ops, SSE_CONTENT_TYPE);
}

static struct task *find_task(struct http_req *req)
{
	struct task *t = is_hex_id(req->param) ? task_find(req->r, req->param) : NULL;
	/* A code context's interpreter is a task like these (code/code.h), so is a process of
	 * the envd face, and a tool command whose left-behind processes run (listed in GET
	 * /v1/tasks, stopped by DELETE). */
	return t && (t->api == TASK_API_NATIVE || t->api == TASK_API_CODE ||
		     t->api == TASK_API_ENVD || (t->api == TASK_API_TOOL && task_left_running(t)))
		       ? t
		       : NULL;
}

/* The capabilities a client names in POST /v1/tasks, each defined by the layer that owns it:
 * resolved here once, then the spec carries it (task/task.h: struct task_capability). */
static const struct task_capability *const capabilities[] = {&task_cap_exec, &model_cap_chat,
							     &model_cap_agent};

static const struct task_capability *capability_find(const char *name)
{
	for (size_t i = 0; i < sizeof(capabilities) / sizeof(capabilities[0]); i++)
		if (!strcmp(capabilities[i]->name, name))
			return capabilities[i];
	return NULL;
}

int api_parse_task(json_t *body, struct task_spec *spec, struct model_args *margs,
		   struct error *err)
{
	*margs = (struct model_args){0};
	if (schema_check(&schema_task_create, body, err) < 0)
		return -1;
	if (request_read_spec(body, "task", spec, err) < 0)
		return -1;
	spec->api = TASK_API_NATIVE;
	spec->cap_args = margs;
	json_t *cap = json_object_get(body, "capability");
	const char *capability = "exec";
	if (cap && !json_is_null(cap)) {
		if (!json_is_string(cap))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field 'capability' must be a string");
		capability = json_string_value(cap);
	}
	spec->cap = capability_find(capability);
	if (!spec->cap)
		return error_set(err, 0, "UNKNOWN_CAPABILITY",
				 "unknown capability '%.32s' (expected exec, chat or agent)",
				 capability);
	spec->net_required = spec->cap->net_required;
	json_t *to = json_object_get(body, "timeout_ms");
	if (to && !json_is_null(to)) {
		if (!json_is_integer(to) || json_integer_value(to) < 0 ||
		    json_integer_value(to) > 7LL * 24 * 3600 * 1000)
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field 'timeout_ms' must be an integer between 0 and %lld "
					 "(ms, 7 days)",
					 7LL * 24 * 3600 * 1000);
		spec->timeout_ms = (uint64_t)json_integer_value(to);
		spec->has_timeout = true;
	}
	spec->env = json_object_get(body, "env");
	if (request_parse_task_io(body, spec, err) < 0)
		return -1;
	json_t *model = json_object_get(body, "model");
	if (model && !json_is_null(model)) {
		if (!json_is_string(model) || !json_string_length(model) ||
		    json_string_length(model) > 256 ||
		    strlen(json_string_value(model)) != json_string_length(model))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field 'model' must be a non-empty string");
		margs->model = json_string_value(model);
	}
	/* Agent tasks (docs/design/model.md#agent-engines-finding-an-engine): the engine and the
	 * conversation to continue. */
	static const char *const names[] = {"engine", "conversation"};
	for (int i = 0; i < 2; i++) {
		json_t *v = json_object_get(body, names[i]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) > 64 ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field '%s' must be a non-empty string (at most 64 bytes)",
					 names[i]);
		if (!spec->cap->agent_fields)
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field '%s' is for capability agent only", names[i]);
		*(i == 0 ? &margs->engine : &margs->conversation) = json_string_value(v);
	}
	static const char *const limits[] = {"max_steps", "max_tokens", "max_model_requests"};
	uint64_t *dst[] = {&margs->max_steps, &margs->max_tokens, &margs->max_requests};
	for (int i = 0; i < 3; i++) {
		json_t *v = json_object_get(body, limits[i]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 1000000000)
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "field '%s' must be a positive integer", limits[i]);
		*dst[i] = (uint64_t)json_integer_value(v);
	}
	return 0;
}

/* Last-Event-ID (header, or ?last_event_id=): *from_start when absent; -1 once answered 400. */
static int last_event_id(struct http_req *req, bool *from_start, uint64_t *after)
{
	const char *last = http_header(req, "Last-Event-ID");
	if (!last || !*last)
		last = http_query(req, "last_event_id");
	*from_start = !last || !*last;
	*after = 0;
	if (*from_start)
		return 0;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(last, &end, 10);
	if (*last == '-' || *end || errno) {
		http_failf(req, "INVALID_LAST_EVENT_ID",
			   "Last-Event-ID must be a decimal event id");
		return -1;
	}
	*after = v;
	return 0;
}

/* A retry of POST /v1/tasks under the Idempotency-Key of a task still on record: the same
 * request attaches to it (from the start, or after Last-Event-ID), another is 409. */
static enum MHD_Result attach_retry(struct http_req *req, struct task *t, const char *key,
				    const unsigned char hash[32])
{
	if (memcmp(t->op_hash, hash, 32))
		return http_failf(req, "IDEMPOTENCY_KEY_CONFLICT",
				  "Idempotency-Key '%s' was used for another request (task %s): "
				  "choose a new key for a new request",
				  key, t->id);
	bool from_start;
	uint64_t after;
	if (last_event_id(req, &from_start, &after) < 0)
		return MHD_YES;
	return start_stream(req, t, from_start, after);
}

/* "changes" (docs/design/checkpoints.md#checkpoints-undo-for-agents): the checkpoint before the
 * task, taken while the request waits suspended; the task starts once it is (or is known not to be)
 * taken. */
struct changes_wait {
	struct runner *r;
	bool waiting;
	char ck[20];
	char why[ERROR_MSG_MAX];
	uint64_t from_ms;
};

static void changes_wait_free(struct http_req *req)
{
	struct changes_wait *w = req->ctx;
	if (w->waiting)
		checkpoint_forget_waiter(w->r, req);
	free(w);
	req->ctx = NULL;
}

static void on_checkpoint(void *arg, unsigned status, json_t *body)
{
	struct http_req *req = arg;
	struct changes_wait *w = req->ctx;
	w->waiting = false;
	const char *id = json_string_value(json_object_get(body, "id"));
	if (status == 201 && id)
		snprintf(w->ck, sizeof(w->ck), "%s", id);
	else
		snprintf(w->why, sizeof(w->why), "%s",
			 json_string_value(json_object_get(body, "message")));
	json_decref(body);
	http_req_resume(req);
}

/* Field "changes": the capability's default (on for agent tasks, off for the others). */
static int parse_changes(json_t *body, const struct task_spec *spec, bool *on, struct error *err)
{
	bool has, v;
	*on = spec->cap->changes == TASK_CHANGES_ON;
	if (body_bool(body, "changes", &has, &v, err) < 0)
		return -1;
	if (!has)
		return 0;
	*on = v;
	if (*on && spec->cap->changes == TASK_CHANGES_NO)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "field 'changes' is for capability exec and agent");
	return 0;
}

/* Start the checkpoint before the task: 1 when the request waits for it or is answered (*rc),
 * 0 when the task goes on without one (req->ctx says why). */
static int wait_checkpoint(struct http_req *req, const char *cwd, enum MHD_Result *rc)
{
	struct changes_wait *w = calloc(1, sizeof(*w));
	if (!w) {
		*rc = http_failf(req, "RUNTIME_ERROR", "out of memory");
		return 1;
	}
	w->r = req->r;
	w->from_ms = now_ms();
	req->ctx = w;
	req->ctx_free = changes_wait_free;
	struct error e = {0};
	if (checkpoint_task_before(req->r, cwd, on_checkpoint, req, &e) < 0) {
		/* No checkpoint (none kept here, a full store): the task runs, its exit
		 * event says why there are no changes. */
		snprintf(w->why, sizeof(w->why), "%s", e.msg);
		return 0;
	}
	w->waiting = true;
	http_req_suspend(req);
	*rc = MHD_YES;
	return 1;
}

enum MHD_Result api_task_create(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct task_spec spec;
	struct model_args margs;
	struct error err;
	const char *key = http_header(req, "Idempotency-Key");
	unsigned char hash[32];
	if (key) {
		if (request_check_key(key, "header Idempotency-Key", &err) < 0)
			return http_fail(req, &err);
		if (request_hash(body, NULL, hash) < 0)
			return MHD_NO;
		struct task *t = task_find_key(req->r, TASK_API_NATIVE, key);
		if (t)
			return attach_retry(req, t, key, hash);
	}
	if (api_parse_task(body, &spec, &margs, &err) < 0)
		return http_fail(req, &err);
	/* A model asked for is in the audit trail whatever the capability (an agent's says which
	 * it resolved to, model/engine.c). */
	cleanup_json json_t *audit = margs.model ? json_pack("{s:s}", "model", margs.model) : NULL;
	spec.audit_fields = audit;
	if (spec.cap->needs_gateway && !gateway_enabled(req->r))
		return http_failf(
			req, "CAPABILITY_UNAVAILABLE",
			"capability '%s' needs a model gateway (FORCEAI_GATEWAY_URL is not "
			"set)",
			spec.cap->name);
	bool changes;
	if (parse_changes(body, &spec, &changes, &err) < 0)
		return http_fail(req, &err);
	struct changes_wait *w = req->ctx;
	/* A request its capability would refuse gets its 4xx before a checkpoint is taken for
	 * it (the first one of a box reads every file of the writable roots). */
	if (!w && spec.cap->check && spec.cap->check(req->r, &spec, &err) < 0)
		return http_fail(req, &err);
	enum MHD_Result rc;
	if (changes && !w && wait_checkpoint(req, spec.cwd, &rc))
		return rc;
	w = req->ctx;
	if (w && http_stopping(req->r))
		return http_failf(req, "UNAVAILABLE", "the runner is shutting down");
	if (w &&
	    checkpoint_task_watch(req->r, &spec, w->ck[0] ? w->ck : NULL, w->why, w->from_ms) < 0)
		return http_failf(req, "RUNTIME_ERROR", "out of memory");
	struct task *t = spec.cap->start(req->r, &spec, &err);
	if (!t) {
		checkpoint_task_unwatch(&spec);
		return http_fail(req, &err);
	}
	if (key && task_set_key(t, key, hash) < 0) {
		/* It runs, but a retry would not find it: a second run. Refused instead. */
		log_errno("cannot keep the task's Idempotency-Key", ENOMEM, t->id);
		task_kill(t, TS_CANCELLED);
		return http_failf(req, "RUNTIME_ERROR", "out of memory: task %s cancelled", t->id);
	}
	return start_stream(req, t, true, 0);
}

enum MHD_Result api_agent_engines(struct http_req *req)
{
	return http_json(req, 200, json_pack("{s:o}", "engines", engines_report(req->r)));
}

enum MHD_Result api_task_get(struct http_req *req)
{
	struct task *t = find_task(req);
	if (!t)
		return http_failf(req, "NOT_FOUND", "task not found: %.64s", req->param);
	json_t *o =
		json_pack("{s:s,s:s,s:s,s:b,s:I,s:s}", "id", t->id, "capability",
			  t->cap ? t->cap->name : "exec", "status", task_status_str(t), "running",
			  !t->finished, "started_at", (json_int_t)t->started_ms, "cwd", t->cwd);
	json_object_set_new(o, "last_event_id", json_integer((json_int_t)t->spool.next_seq));
	json_object_set_new(o, "audit",
			    json_pack("{s:I,s:s+}", "first_seq", (json_int_t)t->audit_seq, "url",
				      "/v1/audit?task=", t->id));
	if (t->finished) {
		json_object_set_new(o, "exit_code", json_integer(t->exit_code));
		json_object_set_new(o, "finished_at", json_integer((json_int_t)t->finished_ms));
		json_object_set_new(o, "duration_ms",
				    json_integer((json_int_t)(t->finished_ms - t->started_ms)));
		if (t->term_signal)
			json_object_set_new(o, "signal", json_integer(t->term_signal));
		if (t->denied)
			json_object_set(o, "denied", t->denied);
	}
	json_t *left = task_left_behind_json(t);
	if (left)
		json_object_set_new(o, "left_behind", left);
	return http_json(req, 200, o);
}

enum MHD_Result api_task_events(struct http_req *req)
{
	struct task *t = find_task(req);
	if (!t)
		return http_failf(req, "NOT_FOUND", "task not found: %.64s", req->param);
	bool from_start;
	uint64_t after;
	if (last_event_id(req, &from_start, &after) < 0)
		return MHD_YES;
	return start_stream(req, t, from_start, after);
}

enum MHD_Result api_task_delete(struct http_req *req)
{
	struct task *t = find_task(req);
	if (!t)
		return http_failf(req, "NOT_FOUND", "task not found: %.64s", req->param);
	if (t->finished && t->lingering && t->proc_running) {
		/* What the finished command left behind is stopped; its status stays. */
		task_kill(t, TS_CANCELLED);
		return http_json(req, 202,
				 json_pack("{s:s,s:s,s:s}", "id", t->id, "status",
					   task_status_str(t), "left_behind", "stopping"));
	}
	if (t->finished)
		return http_json(req, 200,
				 json_pack("{s:s,s:s}", "id", t->id, "status", task_status_str(t)));
	task_kill(t, TS_CANCELLED);
	return http_json(req, 202, json_pack("{s:s,s:s}", "id", t->id, "status", "cancelling"));
}
