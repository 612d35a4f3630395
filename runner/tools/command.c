/* run_command: a command run as a confined task (task/task.h) of its own, not visible in
 * any task API; its output is kept bounded (head and tail, internal.h) per stream and
 * interleaved, and handed on as it comes to a caller that streams it (progress, events). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "checkpoint/checkpoint.h"
#include "task/env.h"
#include "task/task.h"
#include "tools/internal.h"

#define COMMAND_TIMEOUT_MAX (7ULL * 24 * 3600 * 1000)

static void command_stop(struct tool_call *c)
{
	if (c->checkpoint_waiting) /* cancelled while a checkpoint runs: it ends, unheard */
		checkpoint_forget_waiter(c->r, c);
	c->checkpoint_waiting = false;
	json_decref(c->cmd_args);
	c->cmd_args = NULL;
	if (c->rd_attached) {
		task_reader_detach(&c->rd);
		c->rd_attached = false;
	}
	if (c->child) {
		if (!c->child->finished)
			task_kill(c->child, TS_CANCELLED);
		c->child = NULL;
	}
	tool_outcap_free(&c->all);
	tool_outcap_free(&c->out);
	tool_outcap_free(&c->err);
}

/* What the seccomp policy refused the command, for the agent to change course on: "denied"
 * in the structured result, a line in the text ("refused by the seccomp policy: ptrace (3)"). */
static void denied_note(const struct task *t, struct tool_result *res)
{
	if (!t->denied || !res->structured)
		return;
	json_object_set(res->structured, "denied", t->denied);
	buf_append_lit(&res->text, "refused by the seccomp policy (EPERM):");
	const char *name;
	json_t *n;
	json_object_foreach(t->denied, name, n)
		buf_appendf(&res->text, " %s (%lld)", name, (long long)json_integer_value(n));
	buf_append_lit(&res->text, "\n");
}

static void result(struct tool_call *c)
{
	struct task *t = c->child;
	struct tool_result *res = &c->res;
	const char *status = task_status_name(t->status);
	res->ran = true;
	res->exit_code = t->exit_code;
	res->status = status;
	res->output_bytes = c->all.total;
	res->truncated = tool_outcap_truncated(&c->all);
	res->duration_ms = now_ms() - c->started_ms;
	res->is_error = t->exit_code != 0 || t->status != TS_SUCCEEDED;
	bool plain = t->status == TS_SUCCEEDED || t->status == TS_FAILED;
	buf_appendf(&res->text, "exit_code: %d%s%s\n", t->exit_code,
		    plain ? "" : "\nstatus: ", plain ? "" : status);
	tool_outcap_render(&c->all, &res->text);
	struct buf o = {0}, e = {0};
	tool_outcap_render(&c->out, &o);
	tool_outcap_render(&c->err, &e);
	res->structured = json_pack("{s:i,s:o,s:o,s:s,s:I,s:b}", "exit_code", t->exit_code,
				    "stdout", tool_json_text(o.data, o.len), "stderr",
				    tool_json_text(e.data, e.len), "status", status, "duration_ms",
				    (json_int_t)res->duration_ms, "truncated",
				    res->truncated || tool_outcap_truncated(&c->out) ||
					    tool_outcap_truncated(&c->err));
	buf_free(&o);
	buf_free(&e);
	denied_note(t, res);
}

static void changes_failed(struct tool_call *c, const struct error *e)
{
	json_object_set_new(c->res.structured, "changes",
			    json_pack("{s:s,s:s}", "checkpoint", c->checkpoint_id, "error",
				      e->msg));
	buf_appendf(&c->res.text, "\n[changes unknown: %s]\n", e->msg);
}

/* The diff's answer as {checkpoint, added, modified, deleted (paths, at most
 * CHECKPOINT_CHANGES_LISTED each), counts}; concurrent tasks in the tree show too (the diff says
 * the tree changed, not who changed it). */
static void on_diff(void *arg, unsigned status, json_t *body)
{
	struct tool_call *c = arg;
	c->checkpoint_waiting = false;
	if (status != 200) {
		struct error e = {0};
		error_set(&e, 0, NULL, "%s", json_string_value(json_object_get(body, "message")));
		changes_failed(c, &e);
	} else {
		json_t *lists[3];
		checkpoint_change_lists(body, lists);
		json_t *counts = json_object_get(body, "counts");
		json_object_set_new(c->res.structured, "changes",
				    json_pack("{s:s,s:o,s:o,s:o,s:O,s:O}", "checkpoint",
					      c->checkpoint_id, "added", lists[0], "modified",
					      lists[1], "deleted", lists[2], "counts", counts,
					      "truncated", json_object_get(body, "truncated")));
		buf_appendf(
			&c->res.text,
			"\n[changes since checkpoint %s: %lld added, %lld modified, %lld deleted]\n",
			c->checkpoint_id,
			(long long)json_integer_value(json_object_get(counts, "added")),
			(long long)json_integer_value(json_object_get(counts, "modified")),
			(long long)json_integer_value(json_object_get(counts, "deleted")));
	}
	json_decref(body);
	tool_call_finish(c);
}

static void on_wake(struct task_reader *rd)
{
	struct tool_call *c = (struct tool_call *)((char *)rd - offsetof(struct tool_call, rd));
	static char rbuf[SPOOL_MAX_REC];
	struct spool_rec rec;
	int rc = 0;
	for (;;) {
		/* A caller with no room leaves the rest in the spool (tools.h: room). */
		if (c->ops && c->ops->room && !c->ops->room(c->arg))
			return;
		if ((rc = task_reader_next(rd, &rec, rbuf)) != 1)
			break;
		if (rec.type == SPOOL_EVENT)
			continue;
		bool is_out = rec.type == SPOOL_STDOUT;
		tool_outcap_add(&c->all, rbuf, rec.len);
		tool_outcap_add(is_out ? &c->out : &c->err, rbuf, rec.len);
		/* (output must not cancel the call: it is used right after.) */
		if (c->ops && c->ops->output)
			c->ops->output(c->arg, is_out ? 1 : 2, rbuf, rec.len);
	}
	if (rc < 0)
		log_errno("reading a tool command's output failed", -rc, c->child->id);
	if (!task_reader_at_end(rd))
		return;
	task_reader_detach(rd);
	c->rd_attached = false;
	result(c);
	c->child = NULL;
	if (c->changes) {
		/* What the command changed: the checkpoint taken before, against
		 * the tree now. */
		struct error e = {0};
		json_t *a = json_object();
		c->checkpoint_waiting = checkpoint_start(c->r, CHECKPOINT_DIFF, CHECKPOINT_FOR_TASK,
							 c->checkpoint_id, a, on_diff, c, &e) == 0;
		json_decref(a);
		if (c->checkpoint_waiting)
			return;
		changes_failed(c, &e);
	}
	tool_call_finish(c);
}

void tool_call_resume(struct tool_call *c)
{
	if (c && c->rd_attached)
		on_wake(&c->rd);
}

static int start_command(struct tool_call *c, json_t *args);

/* The checkpoint before the command is taken: the command starts. */
static void on_created(void *arg, unsigned status, json_t *body)
{
	struct tool_call *c = arg;
	c->checkpoint_waiting = false;
	const char *id = json_string_value(json_object_get(body, "id"));
	if (status != 201 || !id) {
		tool_result_fail(&c->res, "changes: the checkpoint before the command failed: %s",
				 json_string_value(json_object_get(body, "message")));
		json_decref(body);
		tool_call_finish(c);
		return;
	}
	snprintf(c->checkpoint_id, sizeof(c->checkpoint_id), "%s", id);
	json_decref(body);
	json_t *args = c->cmd_args;
	c->cmd_args = NULL;
	int rc = start_command(c, args);
	json_decref(args);
	if (rc == 0)
		tool_call_finish(c);
}

int tool_run_command(struct tool_call *c, json_t *args)
{
	bool changes = false, kill = false;
	if (tool_arg_bool(c, args, "changes", &changes) < 0 ||
	    tool_arg_bool(c, args, "kill_tree_on_exit", &kill) < 0)
		return 0;
	c->release = command_stop;
	if (!changes)
		return start_command(c, args);
	/* A checkpoint first (the command must not run before it is
	 * taken); the arguments are checked when the command starts. */
	c->changes = true;
	c->cmd_args = json_incref(args);
	json_t *a = json_pack("{s:s}", "label", "run_command");
	struct error e = {0};
	int rc = checkpoint_start(c->r, CHECKPOINT_CREATE, CHECKPOINT_FOR_TASK, NULL, a, on_created,
				  c, &e);
	json_decref(a);
	if (rc < 0)
		return tool_result_fail(&c->res, "changes: %s: %s", error_code(&e), e.msg);
	c->checkpoint_waiting = true;
	return 1;
}

static int start_command(struct tool_call *c, json_t *args)
{
	const char *command, *cwd;
	size_t clen;
	uint64_t timeout = 0;
	if (tool_arg_str(c, args, "command", true, &command, &clen) < 0 ||
	    tool_arg_str(c, args, "cwd", false, &cwd, NULL) < 0 ||
	    tool_arg_uint(c, args, "timeout_ms", COMMAND_TIMEOUT_MAX, &timeout) < 0)
		return 0;
	if (!clen || strlen(command) != clen)
		return tool_result_fail(
			&c->res, "argument 'command' must be a non-empty string without NUL bytes");
	json_t *env = json_object_get(args, "env");
	if (env && json_is_null(env))
		env = NULL;
	struct error err;
	if (env && env_validate(env, &err) < 0)
		return tool_result_fail(&c->res, "argument 'env': %s", err.msg);
	if (!env)
		env = c->ctx.env;
	tool_outcap_init(&c->all, c->ctx.output_max);
	tool_outcap_init(&c->out, c->ctx.output_max);
	tool_outcap_init(&c->err, c->ctx.output_max);
	struct task_spec spec = {.api = TASK_API_TOOL,
				 .command = command,
				 .cwd = cwd ? cwd : c->ctx.cwd,
				 .env = env,
				 .timeout_ms = timeout,
				 .has_timeout = timeout > 0,
				 .cap = &task_cap_exec,
				 .network = c->ctx.network,
				 .state_in_fd = -1,
				 .state_out_fd = -1,
				 .tool_command = true};
	bool kill = false;
	(void)tool_arg_bool(c, args, "kill_tree_on_exit", &kill); /* checked in tool_run_command */
	spec.kill_tree_on_exit = kill;
	c->started_ms = now_ms();
	struct task *t = task_start(c->r, &spec, &err);
	if (!t)
		return tool_result_fail(&c->res, "%s", err.msg);
	c->child = t;
	memset(&c->rd, 0, sizeof(c->rd));
	c->rd.wake = on_wake;
	task_reader_attach(t, &c->rd, true);
	c->rd_attached = true;
	/* What is there already is read on the next wake: done() must not run from here. */
	return 1;
}
