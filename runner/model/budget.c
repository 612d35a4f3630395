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

enum budget_verdict budget_admit(struct budget *b, uint64_t hold, char *why, size_t whylen)
{
	if (tokens_spent(b)) {
		b->refused++;
		snprintf(why, whylen,
			 "the task's model budget is spent: %lld of max_tokens %llu used",
			 (long long)b->used.total_tokens, (unsigned long long)b->max_tokens);
		return BUDGET_SPENT;
	}
	if (requests_spent(b)) {
		b->refused++;
		snprintf(why, whylen,
			 "the task's model budget is spent: %llu of max_model_requests %llu made",
			 (unsigned long long)b->requests, (unsigned long long)b->max_requests);
		return BUDGET_SPENT;
	}
	/* What calls in flight may still cost counts as spent until they end:
	 * concurrent calls cannot all start on the same remainder. A call
	 * that holds nothing (not metered) only needs the budget unspent. */
	if (hold && b->max_tokens &&
	    (uint64_t)b->used.total_tokens + b->reserved >= b->max_tokens) {
		b->held_back++;
		snprintf(why, whylen,
			 "the task's model budget is held by its calls in flight: %lld of "
			 "max_tokens %llu used, %llu held until they end; retry then",
			 (long long)b->used.total_tokens, (unsigned long long)b->max_tokens,
			 (unsigned long long)b->reserved);
		return BUDGET_HELD;
	}
	b->requests++;
	b->reserved += hold;
	return BUDGET_ADMIT;
}

void budget_hold_more(struct budget *b, uint64_t more)
{
	b->reserved += more;
}

void budget_charge(struct budget *b, const struct mu_usage *u)
{
	mu_usage_add(&b->used, u);
}

void budget_settle(struct budget *b, uint64_t hold, const struct mu_usage *u)
{
	b->reserved -= hold < b->reserved ? hold : b->reserved;
	if (u)
		budget_charge(b, u);
}

uint64_t budget_tokens_of(uint64_t bytes)
{
	return bytes / BUDGET_BYTES_PER_TOKEN + (bytes % BUDGET_BYTES_PER_TOKEN != 0);
}

void budget_estimate(struct mu_usage *out, const struct mu_usage *reported, uint64_t in_bytes,
		     uint64_t out_after)
{
	struct mu_usage u = {0};
	if (reported)
		u = *reported;
	else
		u.prompt_tokens = (int64_t)budget_tokens_of(in_bytes);
	/* in_bytes and out_after are bounded by the proxy's limits (8 MiB of
	 * body, gateway_timeout of answer): far from overflowing. */
	int64_t extra = (int64_t)budget_tokens_of(out_after);
	u.completion_tokens += extra;
	/* The gateway's total when it is larger (Gemini's thoughts), as in a
	 * reported usage; else the sum. */
	int64_t sum = u.prompt_tokens + u.completion_tokens;
	int64_t gw_total = reported ? reported->total_tokens + extra : 0;
	u.total_tokens = gw_total > sum ? gw_total : sum;
	*out = u;
}

json_t *budget_usage_json(const struct budget *b)
{
	json_t *o = mu_usage_json(&b->used);
	json_object_set_new(o, "requests", json_integer((json_int_t)b->requests));
	if (b->unmetered)
		json_object_set_new(o, "unmetered_responses",
				    json_integer((json_int_t)b->unmetered));
	if (b->estimated)
		json_object_set_new(o, "estimated_responses",
				    json_integer((json_int_t)b->estimated));
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
	if (o && b->held_back)
		json_object_set_new(o, "held_back", json_integer((json_int_t)b->held_back));
	return o;
}
