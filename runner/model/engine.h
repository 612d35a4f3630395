/* Agent engines (docs/design/model.md#agent-engines-finding-an-engine): the `engine` of an `agent`
 * task. `builtin` is the runner's own loop (model/agent.c); `codex` and `claude-code` run a
 * coding-agent CLI as a confined chat task (per-task model token, the loopback proxy) and map its
 * JSONL onto the built-in loop's events (model/engine_events.h). Every engine has the same limits
 * (max_steps, max_tokens, timeout_ms, DELETE) and a conversation that a later task may continue. */
#pragma once
#include <jansson.h>

#include "model/engine_events.h"
#include "task/task.h"

struct runner;
struct error;

/* Start an agent task with the engine of its model_args (model/args.h; NULL: builtin), new or
 * continuing its conversation. NULL with err set: UNKNOWN_ENGINE, ENGINE_NOT_FOUND (the path looked
 * up), CONVERSATION_NOT_FOUND/BUSY/MISMATCH, NO_MODEL, or what the task engine says. */
struct task *engine_task_start(struct runner *r, const struct task_spec *spec, struct error *err);
/* agent: engine_task_start; it takes "engine" and "conversation", no input, and keeps its
 * changes by default; the audit trail's door "agent". */
extern const struct task_capability model_cap_agent;

/* GET /v1/agent/engines: [{name, available, path, source, version}] (new reference). */
json_t *engines_report(struct runner *r);
/* Start-up: every --agent-engine names a known CLI engine (-1 with err). */
int engines_check_config(struct runner *r, struct error *err);
