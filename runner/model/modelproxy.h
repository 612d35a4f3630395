/* The loopback model proxy for `chat` tasks (docs/design/model.md#loopback-model-proxy): a second
 * libmicrohttpd daemon on 127.0.0.1, driven by the same loop. A chat task
 * gets OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 and OPENAI_API_KEY=<a fresh
 * per-task token>; the proxy accepts only live tokens, forwards only the
 * allowlisted OpenAI paths to the gateway with the real key (or none in
 * vault mode), streams responses through unbuffered, and adds the task's
 * token usage to its exit event. The token dies with the task. */
#pragma once
#include <jansson.h>

#include "model/budget.h"
#include "model/tasktoken.h" /* modelproxy_watch */
#include "task/task.h"

struct runner;
struct error;

int modelproxy_start(struct runner *r, struct error *err);
unsigned modelproxy_port(struct runner *r);
/* Its limits, for GET /v1/hardening (null without a gateway). New reference. */
json_t *modelproxy_report(struct runner *r);
void modelproxy_stop(struct runner *r);
/* Reset: every task token dies now and every proxied call is cut. Returns
 * the live tokens revoked; *requests gets the calls cut. */
unsigned modelproxy_revoke_all(struct runner *r, unsigned *requests);
/* Start a chat task: task_start with the token in its environment. NULL
 * with err set (CAPABILITY_UNAVAILABLE, INVALID_REQUEST_BODY, task_start's). */
struct task *modelproxy_start_task(struct runner *r, const struct task_spec *spec,
				   struct error *err);
