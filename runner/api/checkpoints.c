/* /v1/checkpoints: workspace checkpoints, their diffs and restores
 * (checkpoint/checkpoint.c; docs/design/checkpoints.md#checkpoints-undo-for-agents). The long
 * operations answer once their worker is done: the request waits suspended. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "core/error.h"
#include "core/runner.h"
#include "checkpoint/checkpoint.h"

struct checkpoint_wait {
	struct runner *r;
	bool waiting;
	json_t *body;
	unsigned status;
};

static void wait_free(struct http_req *req)
{
	struct checkpoint_wait *w = req->ctx;
	if (w->waiting)
		checkpoint_forget_waiter(w->r, req);
	json_decref(w->body);
	free(w);
	req->ctx = NULL;
}

static void on_done(void *arg, unsigned status, json_t *body)
{
	struct http_req *req = arg;
	struct checkpoint_wait *w = req->ctx;
	w->waiting = false;
	w->body = body;
	w->status = status;
	http_req_resume(req);
}

/* Start op for req (args borrowed), or answer its result once resumed. */
static enum MHD_Result run(struct http_req *req, enum checkpoint_op op, json_t *args)
{
	struct checkpoint_wait *w = calloc(1, sizeof(*w));
	if (!w)
		return http_failf(req, "RUNTIME_ERROR", "out of memory");
	w->r = req->r;
	w->waiting = true;
	req->ctx = w;
	req->ctx_free = wait_free;
	struct error e = {0};
	if (checkpoint_start(req->r, op, CHECKPOINT_FOR_GATEWAY, req->param, args, on_done, req,
			     &e) < 0) {
		w->waiting = false;
		return http_fail(req, &e);
	}
	http_req_suspend(req);
	return MHD_YES; /* until the worker is done */
}

static enum MHD_Result resumed(struct http_req *req)
{
	struct checkpoint_wait *w = req->ctx;
	if (!w->body)
		return http_failf(req, "RUNTIME_ERROR", "the checkpoint operation left no answer");
	json_t *b = w->body;
	w->body = NULL;
	return http_json(req, w->status, b);
}

/* op with the request's JSON object body (allow_empty: none is {}). */
static enum MHD_Result run_body(struct http_req *req, enum checkpoint_op op, bool allow_empty)
{
	struct error e = {0};
	json_t *body = http_parse_json_object(req->body, req->body_len, allow_empty, &e);
	if (!body)
		return http_fail(req, &e);
	enum MHD_Result rc = run(req, op, body);
	json_decref(body);
	return rc;
}

/* A body is required ({} for the defaults): a checkpoint of every writable root is long
 * work, not what an empty POST should start. */
enum MHD_Result api_checkpoint_create(struct http_req *req)
{
	return req->ctx ? resumed(req) : run_body(req, CHECKPOINT_CREATE, false);
}

enum MHD_Result api_checkpoint_list(struct http_req *req)
{
	struct error e = {0};
	json_t *o = checkpoint_list(req->r, &e);
	return o ? http_json(req, 200, o) : http_fail(req, &e);
}

enum MHD_Result api_checkpoint_get(struct http_req *req)
{
	struct error e = {0};
	json_t *o = checkpoint_get(req->r, req->param, &e);
	return o ? http_json(req, 200, o) : http_fail(req, &e);
}

enum MHD_Result api_checkpoint_delete(struct http_req *req)
{
	return req->ctx ? resumed(req) : run(req, CHECKPOINT_DELETE, NULL);
}

enum MHD_Result api_checkpoint_diff(struct http_req *req)
{
	if (req->ctx)
		return resumed(req);
	const char *to = http_query(req, "to");
	const char *patch = http_query(req, "patch");
	if (patch && strcmp(patch, "0") && strcmp(patch, "1") && strcmp(patch, "true") &&
	    strcmp(patch, "false"))
		return http_failf(req, "INVALID_QUERY", "patch must be 0 or 1");
	json_t *args = json_pack("{s:s?,s:b}", "to", to && *to ? to : NULL, "patch",
				 patch && (!strcmp(patch, "1") || !strcmp(patch, "true")));
	enum MHD_Result rc = run(req, CHECKPOINT_DIFF, args);
	json_decref(args);
	return rc;
}

enum MHD_Result api_checkpoint_restore(struct http_req *req)
{
	return req->ctx ? resumed(req) : run_body(req, CHECKPOINT_RESTORE, true);
}
