/* What a client asks of a model task beyond its process: the native API's fields "model",
 * "engine", "conversation", "max_steps", "max_tokens" and "max_model_requests", read by
 * api/tasks.c and used by the model layer (model/engine.c, model/agent.c,
 * model/tasktoken.c). The task engine carries them as an opaque pointer (task_spec.cap_args)
 * and knows nothing of models, tokens or budgets. */
#pragma once
#include <stdint.h>

#include "task/task.h"

struct model_args {
	const char *model;        /* NULL = the configured default */
	const char *engine;       /* agent: NULL = builtin */
	const char *conversation; /* agent: the conversation to continue (NULL = new) */
	uint64_t max_steps;       /* agent: 0 = the configured default */
	/* The task's model budget (model/budget.h): 0 = the configured default. */
	uint64_t max_tokens;   /* model tokens, all calls together */
	uint64_t max_requests; /* model calls ("max_model_requests") */
};

/* Those of spec (none given: all defaults). */
static inline const struct model_args *model_args_of(const struct task_spec *spec)
{
	static const struct model_args none;
	return spec->cap_args ? (const struct model_args *)spec->cap_args : &none;
}
