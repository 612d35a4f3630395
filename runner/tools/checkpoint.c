/* checkpoint_create, checkpoint_diff, checkpoint_restore: workspace checkpoints
 * (checkpoint/checkpoint.c, docs/design/checkpoints.md#checkpoints-undo-for-agents) as tools, so an
 * agent can undo what it did. The operation runs in the checkpoints' worker; the call ends when it
 * answers. */
#include <string.h>

#include "core/error.h"
#include "checkpoint/checkpoint.h"
#include "tools/internal.h"

#define TEXT_MAX 262144 /* of an answer (a diff with patches): head and tail */

static void release(struct tool_call *c)
{
	if (c->state) /* cancelled while the worker runs: it ends, unheard */
		checkpoint_forget_waiter(c->r, c);
	c->state = NULL;
}

static void on_done(void *arg, unsigned status, json_t *body)
{
	struct tool_call *c = arg;
	c->state = NULL;
	const char *code = json_string_value(json_object_get(body, "code"));
	const char *msg = json_string_value(json_object_get(body, "message"));
	c->res.is_error = status >= 400;
	if (c->res.is_error && code && msg && !json_object_get(body, "changes")) {
		tool_result_fail(&c->res, "%s: %s", code, msg);
	} else {
		char *s = json_dumps(body, JSON_COMPACT);
		struct tool_outcap o;
		tool_outcap_init(&o, c->ctx.output_max ? c->ctx.output_max : TEXT_MAX);
		if (s)
			tool_outcap_add(&o, s, strlen(s));
		tool_outcap_render(&o, &c->res.text);
		tool_outcap_free(&o);
		free(s);
	}
	json_decref(body);
	tool_call_finish(c);
}

static int start(struct tool_call *c, enum checkpoint_op op, const char *id, json_t *args)
{
	struct error e = {0};
	int rc = checkpoint_start(c->r, op, CHECKPOINT_FOR_TASK, id, args, on_done, c, &e);
	json_decref(args);
	if (rc < 0)
		return tool_result_fail(&c->res, "%s: %s", error_code(&e), e.msg);
	c->state = c;
	c->release = release;
	return 1;
}

int tool_checkpoint_create(struct tool_call *c, json_t *args)
{
	return start(c, CHECKPOINT_CREATE, NULL, json_incref(args));
}

int tool_checkpoint_diff(struct tool_call *c, json_t *args)
{
	const char *id, *to = NULL;
	size_t len;
	bool patch = false;
	if (tool_arg_str(c, args, "id", true, &id, &len) < 0 ||
	    tool_arg_str(c, args, "to", false, &to, &len) < 0 ||
	    tool_arg_bool(c, args, "patch", &patch) < 0)
		return 0;
	return start(c, CHECKPOINT_DIFF, id, json_pack("{s:s?,s:b}", "to", to, "patch", patch));
}

int tool_checkpoint_restore(struct tool_call *c, json_t *args)
{
	const char *id;
	size_t len;
	bool stop = false;
	if (tool_arg_str(c, args, "id", true, &id, &len) < 0 ||
	    tool_arg_bool(c, args, "stop_tasks", &stop) < 0)
		return 0;
	return start(c, CHECKPOINT_RESTORE, id, json_pack("{s:b}", "stop_tasks", stop));
}
