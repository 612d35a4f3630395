/* The chat capability's per-task tokens: see tasktoken.h. */
#include "model/tasktoken.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/trail.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/runner.h"
#include "core/randomid.h"
#include "model/args.h"

void tasktoken_put(struct task_tokens *l, struct task_token *k)
{
	if (--k->refs)
		return;
	if (k->prev)
		k->prev->next = k->next;
	else
		l->head = k->next;
	if (k->next)
		k->next->prev = k->prev;
	audit_secret_remove(l->r, k->value);
	explicit_bzero(k->value, sizeof(k->value));
	free(k);
}

struct task_token *tasktoken_find(struct task_tokens *l, const char *v)
{
	struct task_token *found = NULL;
	/* Every live token is compared, in constant time each. */
	for (struct task_token *k = l->head; k; k = k->next)
		if (k->t && secret_equal(k->value, v))
			found = k;
	return found;
}

unsigned tasktoken_revoke_all(struct task_tokens *l)
{
	unsigned n = 0;
	for (struct task_token *k = l->head; k; k = k->next) {
		if (k->t)
			n++;
		k->t = NULL; /* tasktoken_find() skips it from now on */
	}
	return n;
}

void tasktoken_free_all(struct task_tokens *l)
{
	while (l->head) {
		l->head->refs = 1;
		tasktoken_put(l, l->head);
	}
}

static void on_task_finish(struct task *t, json_t *exit_ev);

static struct task_token *token_of(struct task *t)
{
	return t && t->on_finish == on_task_finish ? t->finish_arg : NULL;
}

void modelproxy_watch(struct task *t, const struct modelproxy_watch *w)
{
	struct task_token *k = token_of(t);
	if (k)
		k->watch = w;
}

/* The chat task ended: its token dies, its usage (and budget) goes into
 * the exit event. */
static void on_task_finish(struct task *t, json_t *exit_ev)
{
	struct task_token *k = t->finish_arg;
	json_object_set_new(exit_ev, "usage", budget_usage_json(&k->b));
	json_t *b = budget_json(&k->b);
	if (b)
		json_object_set_new(exit_ev, "budget", b);
	k->watch = NULL;
	k->t = NULL;
	t->finish_arg = NULL;
	/* Once the proxy stopped, its list (and the token with it) is gone. */
	if (t->r->modelproxy)
		tasktoken_put(k->list, k);
}

struct task *tasktoken_start_task(struct task_tokens *l, unsigned port,
				  const struct task_spec *spec, struct error *err)
{
	struct runner *r = l->r;
	struct task_token *k = calloc(1, sizeof(*k));
	char a[33], b[33];
	if (!k || random_id(a) < 0 || random_id(b) < 0) {
		free(k);
		error_set(err, 0, "RUNTIME_ERROR", "cannot make a task token");
		return NULL;
	}
	snprintf(k->value, sizeof(k->value), "fai-%s%s", a, b);
	audit_secret_add(r, k->value); /* a command line that holds it is masked */
	explicit_bzero(a, sizeof(a));
	explicit_bzero(b, sizeof(b));
	const struct model_args *args = model_args_of(spec);
	k->b.max_tokens = args->max_tokens ? args->max_tokens : r->cfg.task_max_tokens;
	k->b.max_requests = args->max_requests ? args->max_requests
					       : r->cfg.task_max_model_requests;
	char root[40], base[48];
	snprintf(root, sizeof(root), "http://127.0.0.1:%u", port);
	snprintf(base, sizeof(base), "%s/v1", root);
	/* The request's variables, then ours (they win). Each family's
	 * clients read their own (docs/design/model.md#what-the-chat-tasks-environment-holds); the
	 * token is the same everywhere. */
	cleanup_json json_t *env =
		spec->env && json_is_object(spec->env) ? json_deep_copy(spec->env) : json_object();
	json_object_set_new(env, "OPENAI_BASE_URL", json_string(base));
	json_object_set_new(env, "OPENAI_API_BASE", json_string(base));
	json_object_set_new(env, "OPENAI_API_KEY", json_string(k->value));
	/* Claude Code and the Anthropic SDKs add /v1/messages themselves. */
	json_object_set_new(env, "ANTHROPIC_BASE_URL", json_string(root));
	json_object_set_new(env, "ANTHROPIC_AUTH_TOKEN", json_string(k->value));
	/* The Gemini CLI and @google/genai add /v1beta/models/... */
	json_object_set_new(env, "GOOGLE_GEMINI_BASE_URL", json_string(root));
	json_object_set_new(env, "GEMINI_API_KEY", json_string(k->value));
	struct task_spec s = *spec;
	s.env = env;
	struct task *t = task_start(r, &s, err);
	json_object_clear(env);
	if (!t) {
		audit_secret_remove(r, k->value);
		explicit_bzero(k->value, sizeof(k->value));
		free(k);
		return NULL;
	}
	k->t = t;
	k->refs = 1;
	k->list = l;
	k->next = l->head;
	if (l->head)
		l->head->prev = k;
	l->head = k;
	t->on_finish = on_task_finish;
	t->finish_arg = k;
	return t;
}
