/* The limits a model task (agent, and the chat task of a CLI engine) ends at. Each is the
 * status its record then shows: the model layer ends the task with TS_LIMIT and one of these
 * names (task/task.h: task_driven_finish, task.end_reason); the task engine knows none. */
#pragma once

#define MODEL_LIMIT_STEPS "max_steps"             /* the agent's steps (a CLI's turns) */
#define MODEL_LIMIT_TOKENS "max_tokens"           /* model tokens, all calls together */
#define MODEL_LIMIT_REQUESTS "max_model_requests" /* model calls */
