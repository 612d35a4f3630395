/* Capability `agent` (docs/design/model.md#the-agent-loop): a goal in natural language; the runner
 * asks the model (through the gateway) with one `bash` tool, runs each tool
 * call as a confined task in the task's working directory, feeds the result
 * back, and repeats until the model answers without a tool call or a limit
 * is hit. Events: message.delta, tool.call, tool.result, usage, then exit
 * or error. */
#pragma once
#include "task/task.h"

struct runner;
struct error;
struct conversation;

/* Called by engine_task_start (model/engine.h), which checked the model (set in
 * model_args_of(spec)) and spec->env. NULL with err set (RUNTIME_ERROR, or task_start_driven's).
 * conv (may be NULL): the conversation it continues or starts (model/conversation.h); the agent
 * holds it until it ends, then saves its bounded history there. */
struct task *agent_start(struct runner *r, const struct task_spec *spec, struct conversation *conv,
			 struct error *err);
/* The terminal exit of an agent task, whichever engine ran it (the built-in loop, or a CLI in
 * model/engine.c): the fields of summary (taken) and "answer", the final one (NULL: none). */
void agent_task_finish(struct task *t, enum task_status st, const char *limit, int exit_code,
		       json_t *summary, const char *answer);
