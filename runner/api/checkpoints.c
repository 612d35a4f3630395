/* /v1/checkpoints: workspace checkpoints, their diffs and restores
 * (profile/checkpoint.c; docs/design.md §12.1). The long operations answer
 * once their worker is done: the request waits suspended. */
#include "api/api.h"
#include "core/error.h"
#include "core/runner.h"
#include "profile/checkpoint.h"

typedef int (*start_fn)(struct runner *r, struct http_req *req, const char *id, struct error *e);

static enum MHD_Result waiting(struct http_req *req, start_fn fn)
{
	if (req->ctx) { /* resumed: the answer is ready */
		unsigned status;
		json_t *body = ckpt_answer(req, &status);
		if (!body)
			return http_failf(req, "RUNTIME_ERROR",
					  "the checkpoint operation left no answer");
		return http_json(req, status, body);
	}
	struct error e = {0};
	if (fn(req->r, req, req->param, &e) < 0)
		return http_fail(req, &e);
	return MHD_YES; /* suspended until the worker is done */
}

static int create(struct runner *r, struct http_req *req, const char *id, struct error *e)
{
	(void)id;
	return ckpt_create(r, req, e);
}

enum MHD_Result api_checkpoint_create(struct http_req *req)
{
	return waiting(req, create);
}

enum MHD_Result api_checkpoint_list(struct http_req *req)
{
	struct error e = {0};
	json_t *o = ckpt_list(req->r, &e);
	return o ? http_json(req, 200, o) : http_fail(req, &e);
}

enum MHD_Result api_checkpoint_get(struct http_req *req)
{
	struct error e = {0};
	json_t *o = ckpt_get(req->r, req->param, &e);
	return o ? http_json(req, 200, o) : http_fail(req, &e);
}

enum MHD_Result api_checkpoint_delete(struct http_req *req)
{
	return waiting(req, ckpt_delete);
}

enum MHD_Result api_checkpoint_diff(struct http_req *req)
{
	return waiting(req, ckpt_diff);
}

enum MHD_Result api_checkpoint_restore(struct http_req *req)
{
	return waiting(req, ckpt_restore);
}
