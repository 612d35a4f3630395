/* What a client asks of a model task beyond its process: the native API's fields "model",
 * "engine", "conversation" and "max_steps", read by api/native.c and used by the model layer
 * (model/engine.c, model/agent.c). The task engine carries them as an opaque pointer
 * (task_spec.cap_args). */
#pragma once
#include <stdint.h>

#include "task/task.h"

struct model_args {
	const char *model;        /* NULL = the configured default */
	const char *engine;       /* agent: NULL = builtin */
	const char *conversation; /* agent: the conversation to continue (NULL = new) */
	uint64_t max_steps;       /* agent: 0 = the configured default */
};

/* Those of spec (none given: all defaults). */
static inline const struct model_args *model_args_of(const struct task_spec *spec)
{
	static const struct model_args none;
	return spec->cap_args ? (const struct model_args *)spec->cap_args : &none;
}
