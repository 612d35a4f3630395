/* The chat capability's per-task tokens (docs/design/model.md#loopback-model-proxy,
 * design/model.md#wire-formats-one-module-per-format): a chat or agent task is started with a fresh
 * token in its environment (each model family's variables), which the model proxy
 * (model/modelproxy.c) accepts while the task lives; the token carries the task's budget and usage,
 * which go into its exit event, and dies with the task. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

#include "model/budget.h"
#include "task/task.h"

struct runner;
struct error;

/* An agent engine's view of its CLI's model calls (model/engine.c,
 * docs/design/model.md#one-event-vocabulary-from-a-pure-parser-per-cli): the task's budget after a
 * call ended with usage, and when a call was refused because it is spent (the proxy answered 429
 * budget_exceeded; nothing reached the gateway). */
struct modelproxy_watch {
	void (*usage)(void *arg, const struct budget *b);
	void (*refused)(void *arg, const struct budget *b);
	void *arg;
};
/* t: a chat task of modelproxy_start_task; w NULL stops watching (w outlives the watch). */
void modelproxy_watch(struct task *t, const struct modelproxy_watch *w);

struct task_token {
	char value[72];
	struct task *t;                       /* NULL once the task finished: the token is dead */
	struct budget b;                      /* usage and limits, every route and format */
	unsigned inflight;                    /* requests using it now (the proxy's limit) */
	unsigned refs;                        /* the task + requests in flight */
	const struct modelproxy_watch *watch; /* an agent engine's, or NULL */
	struct task_tokens *list;
	struct task_token *next, *prev;
};

/* The tokens of one model proxy (it holds the list). */
struct task_tokens {
	struct runner *r;
	struct task_token *head;
};

/* A chat task: task_start with a new token and the proxy's base URLs
 * (127.0.0.1:port) in its environment. NULL with err set. */
struct task *tasktoken_start_task(struct task_tokens *l, unsigned port,
				  const struct task_spec *spec, struct error *err);
/* The live token of value v (every one compared in constant time), or NULL. */
struct task_token *tasktoken_find(struct task_tokens *l, const char *v);
/* A reference dropped: the last one frees the token (wiped). */
void tasktoken_put(struct task_tokens *l, struct task_token *k);
/* Every token dies now (tasktoken_find skips it): the live ones' count. */
unsigned tasktoken_revoke_all(struct task_tokens *l);
/* Every token freed, whatever holds it (the proxy stops). */
void tasktoken_free_all(struct task_tokens *l);
