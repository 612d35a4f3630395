/* Per-task model budgets: see budget.h. */
#include "model/budget.h"

#include <stdio.h>

static bool tokens_spent(const struct budget *b)
{
	return b->max_tokens && (uint64_t)b->used.total_tokens >= b->max_tokens;
}

static bool requests_spent(const struct budget *b)
{
	return b->max_requests && b->requests >= b->max_requests;
}

bool budget_spent(const struct budget *b)
{
	return tokens_spent(b) || requests_spent(b);
}

bool budget_admit(struct budget *b, char *why, size_t whylen)
{
	if (tokens_spent(b)) {
		b->refused++;
		snprintf(why, whylen,
			 "the task's model budget is spent: %lld of max_tokens %llu used",
			 (long long)b->used.total_tokens, (unsigned long long)b->max_tokens);
		return false;
	}
	if (requests_spent(b)) {
		b->refused++;
		snprintf(why, whylen,
			 "the task's model budget is spent: %llu of max_model_requests %llu made",
			 (unsigned long long)b->requests, (unsigned long long)b->max_requests);
		return false;
	}
	b->requests++;
	return true;
}

void budget_charge(struct budget *b, const struct mu_usage *u)
{
	mu_usage_add(&b->used, u);
}

json_t *budget_usage_json(const struct budget *b)
{
	json_t *o = mu_usage_json(&b->used);
	json_object_set_new(o, "requests", json_integer((json_int_t)b->requests));
	if (b->unmetered)
		json_object_set_new(o, "unmetered_responses",
				    json_integer((json_int_t)b->unmetered));
	return o;
}

json_t *budget_json(const struct budget *b)
{
	if (!b->max_tokens && !b->max_requests)
		return NULL;
	int64_t over = b->max_tokens && (uint64_t)b->used.total_tokens > b->max_tokens
			       ? b->used.total_tokens - (int64_t)b->max_tokens
			       : 0;
	json_t *o =
		json_pack("{s:o,s:o,s:b,s:I,s:I}", "max_tokens",
			  b->max_tokens ? json_integer((json_int_t)b->max_tokens) : json_null(),
			  "max_model_requests",
			  b->max_requests ? json_integer((json_int_t)b->max_requests) : json_null(),
			  "exhausted", budget_spent(b), "refused", (json_int_t)b->refused,
			  "overshoot_tokens", (json_int_t)over);
	return o;
}
