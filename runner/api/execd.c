/* OpenSandbox execd-compatible command API (docs/design/wire.md#opensandbox-execd-compatible-api):
 * events are raw JSON objects each followed by a blank line, every one with a timestamp. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "task/request.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "task/session.h"
#include "task/task.h"
#include "core/buf.h"
#include "core/randomid.h"
#include "core/version.h"
#include "init/runtime.h"
#include "profile/profile.h"

#define LOGS_MAX (4u << 20)

enum MHD_Result api_ping(struct http_req *req)
{
	return http_empty(req, 200);
}

/* Ready once the loop serves requests; a box whose tasks are refused (a
 * reset that failed: profile/profile.h) is not ready, and says why. */
enum MHD_Result api_ready(struct http_req *req)
{
	struct error e;
	unsigned status;
	json_t *o = runtime_init_ready(req->r, &status);
	if (!o)
		return MHD_NO;
	json_object_set_new(o, "version", json_string(FORCEAI_RUNNER_VERSION));
	/* A reset (running or failed) refuses tasks too. */
	if (status == 200 && profile_request_blocked(req->r, "POST", "/command", &e)) {
		status = 503;
		json_object_set_new(o, "initialized", json_false());
		json_object_set_new(o, "status", json_string("not_ready"));
		json_object_set_new(o, "code", json_string(e.code));
		json_object_set_new(o, "message", json_string(e.msg));
	}
	return http_json(req, status, o);
}

enum MHD_Result api_session_list(struct http_req *req)
{
	json_t *list = json_array();
	if (!list)
		return MHD_NO;
	for (struct session *s = req->r->sessions ? req->r->sessions->head : NULL; s; s = s->next)
		json_array_append_new(list, json_pack("{s:s,s:s?,s:b}", "session_id", s->id, "cwd",
						      s->cwd, "running", s->running != NULL));
	return http_json(req, 200, json_pack("{s:o}", "sessions", list));
}

/* execd's runtime init (docs/design/profiles.md#runtime-init-a-warm-box-bound-to-one-sandbox):
 * served without the API token, as execd does (control-plane trust: the caller delivers the token's
 * hash), but with the startup token when the box has one; tasks never reach it (the connection
 * gate, design/security.md#no-api-from-tasks). */
enum MHD_Result api_runtime_init(struct http_req *req)
{
	struct runner *r = req->r;
	if (!r->cfg.runtime_init)
		return http_failf(req, "NOT_FOUND",
				  "runtime init (POST /internal/init) is not offered: this runner "
				  "runs without --runtime-init (EXECD_RUNTIME_INIT)");
	if (strcmp(req->method, "POST") != 0)
		return http_failf(req, "METHOD_NOT_ALLOWED",
				  "method %.16s is not allowed on /internal/init", req->method);
	struct error e;
	unsigned status;
	/* A second call is 409 whoever makes it: the slot is used. */
	if (runtime_init_bound(r, &e))
		return http_fail(req, &e);
	const char *got = http_header(req, "X-EXECD-ACCESS-TOKEN");
	if (r->cfg.token && !(got && secret_equal(got, r->cfg.token)))
		return http_failf(req, "UNAUTHORIZED",
				  "this box was started with an access token: POST /internal/init "
				  "needs it in X-EXECD-ACCESS-TOKEN");
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	json_t *o = runtime_init_apply(r, body, &status, &e);
	if (!o)
		return http_fail(req, &e);
	return http_json(req, status, o);
}

enum MHD_Result api_isolated(struct http_req *req)
{
	return http_error(
		req, 501, "NOT_IMPLEMENTED",
		"isolated sessions (/v1/isolated/*) are not implemented by "
		"forceai-runner: every command already runs confined (GET /v1/hardening)");
}

enum MHD_Result api_command_run(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct task_spec spec;
	struct error err;
	if (request_parse_command(body, &spec, &err) < 0)
		return http_fail(req, &err);
	struct task *t = task_start(req->r, &spec, &err);
	if (!t)
		return http_fail(req, &err);
	return execd_stream_start(req, t, false, t->id, 0);
}

enum MHD_Result api_command_stream(struct http_req *req, struct task_spec *spec)
{
	struct error err;
	struct task *t = task_start(req->r, spec, &err);
	if (!t)
		return http_fail(req, &err);
	return execd_stream_start(req, t, false, t->id, 0);
}

static struct task *find_command(struct http_req *req, const char *id)
{
	struct task *t = (id && is_hex_id(id)) ? task_find(req->r, id) : NULL;
	if (t && (t->api == TASK_API_NATIVE || t->api == TASK_API_TOOL || t->api == TASK_API_PTY ||
		  t->api == TASK_API_HOOK))
		t = NULL;
	return t;
}

enum MHD_Result api_command_interrupt(struct http_req *req)
{
	const char *id = http_query(req, "id");
	if (!id || !*id)
		return http_failf(req, "MISSING_QUERY", "missing query parameter 'id'");
	struct task *t = find_command(req, id);
	if (!t) {
		struct session *s = is_hex_id(id) ? session_find(req->r, id) : NULL;
		if (s) {
			session_delete(req->r, s);
			return http_empty(req, 200);
		}
		return http_failf(req, "NOT_FOUND", "command not found: %.64s", id);
	}
	task_kill(t, TS_CANCELLED);
	return http_empty(req, 200);
}

enum MHD_Result api_command_status(struct http_req *req)
{
	struct task *t = find_command(req, req->param);
	if (!t)
		return http_failf(req, "NOT_FOUND", "command not found: %.64s", req->param);
	char started[40];
	iso_time_ms(started, sizeof(started), t->started_ms);
	json_t *o = json_pack("{s:s,s:s,s:b,s:s}", "id", t->id, "content", t->command, "running",
			      !t->finished, "started_at", started);
	api_command_end_fields(o, t);
	if (o && t->finished && t->denied)
		json_object_set(o, "denied", t->denied);
	return http_json(req, 200, o);
}

/* PR #583's GET /command/{id}/resume?after_eid=N: the command's events after N, replayed from
 * its log, then live until the terminal event. Any number of streams may read one command
 * (execd answers 409 while its first stream is open; here each reads the log on its own). */
enum MHD_Result api_command_resume(struct http_req *req)
{
	struct task *t = find_command(req, req->param);
	if (!t)
		return http_failf(req, "NOT_FOUND", "command not found: %.64s", req->param);
	uint64_t after = 0;
	const char *a = http_query(req, "after_eid");
	if (a && *a) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(a, &end, 10);
		if (*a == '-' || *end || errno)
			return http_failf(req, "INVALID_QUERY",
					  "invalid query parameter 'after_eid': must be a "
					  "non-negative event id");
		after = v;
	}
	return execd_stream_start(req, t, t->api == TASK_API_SESSION, NULL, after);
}

/* ---- caller-bound creation: execd's operations (OpenSandbox PR #1771,
 * docs/design/wire.md#opensandbox-execd-compatible-api) ----
 */

/* The recovery window: execd keeps 24 h; here a command's record is what remembers its id,
 * and records are kept --retain-ms after they finish, so the window is that long from the id's
 * issued_at, and a keyed record stays at least that long (task.key_until_mono). */
static uint64_t op_retention_s(struct runner *r)
{
	uint64_t s = r->cfg.retain_ms / 1000;
	return s ? s : 1;
}

/* No cache may keep an answer that names an execution. */
static enum MHD_Result op_json(struct http_req *req, unsigned status, json_t *body)
{
	struct MHD_Response *resp = http_json_response(body);
	if (resp)
		MHD_add_response_header(resp, "Cache-Control", "no-store");
	return http_queue(req, status, resp);
}

static enum MHD_Result op_fail(struct http_req *req, const struct error *e)
{
	return op_json(req, error_http_status(e), http_error_body(e));
}

/* execd's operation id: "<instance_id>.<issued_at>.<token>", the first two from GET
 * /execution/instance, the token 8-128 of [A-Za-z0-9_-]. The instance must be this one's
 * (it changes at start and at every reset, which forget the ids). */
static int check_operation_id(struct runner *r, const char *id, uint64_t *expires_s,
			      struct error *err)
{
	const char *d1 = strchr(id, '.'), *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
	const char *tok = d2 ? d2 + 1 : NULL;
	size_t tlen = tok ? strlen(tok) : 0;
	bool ok = d2 && d1 - id == 32 && tlen >= 8 && tlen <= 128 &&
		  strspn(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") ==
			  tlen;
	size_t ilen = ok ? (size_t)(d2 - d1 - 1) : 0;
	ok = ok && ilen >= 1 && ilen <= 19 && strspn(d1 + 1, "0123456789") == ilen &&
	     (ilen == 1 || d1[1] != '0');
	if (!ok)
		return error_set(err, 0, "invalid_operation_id",
				 "operation_id must be <instance_id>.<issued_at>.<token>: the "
				 "instance id and time from GET /execution/instance, then 8-128 of "
				 "A-Z a-z 0-9 _ -");
	if (memcmp(id, r->tasks->key_instance, 32))
		return error_set(
			err, 0, "operation_instance_mismatch",
			"this execd instance did not issue operation_id (it restarted or "
			"was reset, or the id is another sandbox's): the earlier request's "
			"outcome is unknown, do not retry it under a new id");
	uint64_t issued = strtoull(d1 + 1, NULL, 10);
	if (issued > now_ms() / 1000)
		return error_set(err, 0, "invalid_operation_id",
				 "operation_id's time is in the future: use the issued_at of GET "
				 "/execution/instance");
	*expires_s = issued + op_retention_s(r);
	return 0;
}

static json_t *operation_body(const struct task *t, uint64_t expires_s)
{
	char exp[40];
	iso_time_ms(exp, sizeof(exp), expires_s * 1000);
	/* The process is started before the answer: never "creating". */
	return json_pack("{s:s,s:s,s:s,s:s}", "id", t->id, "kind", "command", "state", "created",
			 "expires_at", exp);
}

enum MHD_Result api_operation_instance(struct http_req *req)
{
	struct runner *r = req->r;
	return op_json(req, 200,
		       json_pack("{s:s,s:I,s:I,s:I}", "instance_id", r->tasks->key_instance,
				 "issued_at", (json_int_t)(now_ms() / 1000), "retention_seconds",
				 (json_int_t)op_retention_s(r), "capacity",
				 (json_int_t)r->cfg.retain_count));
}

enum MHD_Result api_command_operation(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct error err;
	const char *op_id;
	uint64_t expires;
	if (schema_check(&schema_command_operation, body, &err) < 0 ||
	    body_str(body, "operation_id", true, &op_id, &err) < 0 ||
	    check_operation_id(req->r, op_id, &expires, &err) < 0)
		return op_fail(req, &err);
	unsigned char hash[32];
	if (request_hash(body, "operation_id", hash) < 0)
		return MHD_NO;
	struct task *t = task_find_key(req->r, TASK_API_EXECD, op_id);
	if (t) {
		if (memcmp(t->op_hash, hash, 32)) {
			error_set(&err, 0, "operation_conflict",
				  "operation_id was used with another request (command %s)", t->id);
			return op_fail(req, &err);
		}
		return op_json(req, 200, operation_body(t, expires));
	}
	if (now_ms() / 1000 >= expires) {
		error_set(&err, 0, "operation_expired",
			  "operation_id is past its recovery window: creation refused");
		return op_fail(req, &err);
	}
	if (tasks_pinned(req->r) >= req->r->cfg.retain_count) {
		error_set(&err, 0, "operation_capacity_exceeded",
			  "%u commands are kept for their operation ids: creation refused until "
			  "one's window ends",
			  req->r->cfg.retain_count);
		return op_fail(req, &err);
	}
	struct task_spec spec;
	if (request_parse_command(body, &spec, &err) < 0)
		return op_fail(req, &err);
	t = task_start(req->r, &spec, &err);
	if (!t)
		return op_fail(req, &err); /* nothing ran: the id is not used up */
	if (task_set_key(t, op_id, hash) < 0) {
		/* It runs, but a retry would not find it: the client must not retry blindly. */
		log_errno("cannot keep the command's operation_id", ENOMEM, t->id);
		task_kill(t, TS_CANCELLED);
		return http_failf(req, "RUNTIME_ERROR", "out of memory: command %s cancelled",
				  t->id);
	}
	t->key_until_mono = monotonic_ms() + (expires * 1000 - now_ms());
	return op_json(req, 200, operation_body(t, expires));
}

enum MHD_Result api_operation_get(struct http_req *req)
{
	struct error err;
	const char *kind = http_query(req, "kind");
	if (!kind || (strcmp(kind, "command") && strcmp(kind, "pty"))) {
		error_set(&err, 0, "invalid_operation_kind",
			  "query parameter kind must be command "
			  "or pty");
		return op_fail(req, &err);
	}
	const char *op_id = http_header(req, "X-EXECD-OPERATION-ID");
	uint64_t expires;
	if (!op_id || !*op_id) {
		error_set(&err, 0, "invalid_operation_id",
			  "header X-EXECD-OPERATION-ID is required");
		return op_fail(req, &err);
	}
	if (check_operation_id(req->r, op_id, &expires, &err) < 0)
		return op_fail(req, &err);
	/* PTY sessions are never created through operations here (no POST /pty/operations). */
	struct task *t = strcmp(kind, "command") ? NULL
						 : task_find_key(req->r, TASK_API_EXECD, op_id);
	if (t)
		return op_json(req, 200, operation_body(t, expires));
	if (now_ms() / 1000 >= expires)
		error_set(&err, 0, "operation_expired",
			  "operation_id is past its recovery window: the outcome is unknown");
	else
		error_set(&err, 0, "operation_not_found",
			  "no %s was created under this operation_id in this instance", kind);
	return op_fail(req, &err);
}

enum MHD_Result api_command_logs(struct http_req *req)
{
	struct task *t = find_command(req, req->param);
	if (!t)
		return http_failf(req, "NOT_FOUND", "command not found: %.64s", req->param);
	uint64_t cursor = 0;
	const char *c = http_query(req, "cursor");
	if (c && *c) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(c, &end, 10);
		if (*c == '-' || *end || errno)
			return http_failf(
				req, "INVALID_QUERY",
				"invalid query parameter 'cursor': must be a non-negative byte "
				"offset");
		cursor = v;
	}
	if (cursor > t->spool.next_off)
		cursor = t->spool.next_off;
	if (cursor < spool_first_off(&t->spool))
		cursor = spool_first_off(&t->spool); /* older output was not retained */
	struct spool_cursor cur;
	uint32_t skip;
	spool_seek_off(&t->spool, &cur, cursor, &skip);
	cleanup_buf struct buf out = {0};
	static char rbuf[SPOOL_MAX_REC];
	uint64_t next = cursor;
	while (out.len < LOGS_MAX) {
		struct spool_rec rec;
		int rc = spool_next(&t->spool, &cur, &rec, rbuf, NULL);
		if (rc <= 0)
			break;
		if (rec.type == SPOOL_EVENT)
			continue;
		buf_append(&out, rbuf + skip, rec.len - skip);
		next = rec.off + rec.len;
		skip = 0;
	}
	char hv[32];
	snprintf(hv, sizeof(hv), "%llu", (unsigned long long)next);
	return http_text(req, 200, "text/plain; charset=utf-8", out.data ? out.data : "", out.len,
			 "EXECD-COMMANDS-TAIL-CURSOR", hv);
}

enum MHD_Result api_session_create(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, true);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	const char *cwd = NULL;
	struct error err;
	if (request_parse_session_create(body, &cwd, &err) < 0)
		return http_fail(req, &err);
	struct session *s = session_create(req->r, cwd, &err);
	if (!s)
		return http_fail(req, &err);
	return http_json(req, 200, json_pack("{s:s}", "session_id", s->id));
}

enum MHD_Result api_session_run(struct http_req *req)
{
	struct session *s = is_hex_id(req->param) ? session_find(req->r, req->param) : NULL;
	if (!s)
		return http_failf(req, "SESSION_NOT_FOUND", "session %.64s not found", req->param);
	cleanup_json json_t *body = http_body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct task_spec spec;
	struct error err;
	if (request_parse_session_run(body, &spec, &err) < 0)
		return http_fail(req, &err);
	if (s->running)
		return http_failf(req, "SESSION_BUSY", "session %s is already running a command",
				  s->id);
	bool explicit_cwd = spec.cwd != NULL;
	if (!spec.cwd)
		spec.cwd = s->cwd;
	cleanup_free char *wrapped = session_wrap_command(spec.command, explicit_cwd);
	cleanup_close int in_fd = s->state_fd >= 0 ? dup(s->state_fd)
						   : session_memfd("session-state");
	/* The run reads the state through this descriptor (shared offset). */
	if (in_fd >= 0 && lseek(in_fd, 0, SEEK_SET) < 0)
		close(take_fd(in_fd));
	cleanup_close int out_fd = session_memfd("session-state-out");
	if (!wrapped || in_fd < 0 || out_fd < 0)
		return http_failf(req, "RUNTIME_ERROR", "cannot prepare the session run");
	spec.command = wrapped;
	spec.api = TASK_API_SESSION;
	spec.state_in_fd = in_fd;
	spec.state_out_fd = out_fd;
	struct task *t = task_start(req->r, &spec, &err);
	if (!t)
		return http_fail(req, &err);
	session_run_attach(s, t, take_fd(out_fd));
	return execd_stream_start(req, t, true, s->id, 0);
}

enum MHD_Result api_session_delete(struct http_req *req)
{
	struct session *s = is_hex_id(req->param) ? session_find(req->r, req->param) : NULL;
	if (!s)
		return http_failf(req, "CONTEXT_NOT_FOUND", "session %.64s not found", req->param);
	session_delete(req->r, s);
	return http_empty(req, 200);
}
