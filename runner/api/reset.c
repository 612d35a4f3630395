/* POST /v1/reset (the `pooled` profile): answered once the reset is done,
 * with what it removed and how long it took; see profile/reset.c. */
#include "api/api.h"
#include "audit/trail.h"
#include "core/error.h"
#include "core/runner.h"
#include "profile/reset.h"

enum MHD_Result api_reset(struct http_req *req)
{
	if (req->ctx) { /* resumed: the answer is ready */
		unsigned status;
		json_t *body = reset_answer(req, &status);
		if (!body)
			return http_error(req, 500, "RUNTIME_ERROR", "the reset left no answer");
		/* The tenant's trail ends here: its last hash in the answer. */
		if (status < 300)
			json_object_set_new(body, "audit", audit_chain_restart(req->r, body));
		return http_json(req, status, body);
	}
	struct error e = {0};
	if (reset_start(req->r, req, &e) < 0)
		return http_fail(req, &e);
	return MHD_YES; /* suspended until the reset is done */
}
