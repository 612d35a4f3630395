/* A task's model budget (docs/design/model.md#usage-and-budgets): what its model calls used,
 * summed over every route and format, and its limits. One per task that
 * can call a model: a chat task's proxy token, an agent task. Pure. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "model/usage.h"

/* Output tokens a metered call holds against max_tokens while it runs (on
 * top of its input's estimate): what an answer may cost before the proxy
 * learns what it did cost (docs/design/model.md#usage-and-budgets). */
#define BUDGET_OUT_HOLD 4096
/* Bytes per token of an estimate: a request's JSON, or an answer's bytes
 * with their SSE framing (several times its text's tokens: errs high). */
#define BUDGET_BYTES_PER_TOKEN 4

struct budget {
	uint64_t max_tokens;   /* total_tokens over all calls; 0 = unlimited */
	uint64_t max_requests; /* model calls started; 0 = unlimited */
	struct mu_usage used;
	uint64_t reserved;  /* tokens held by metered calls in flight */
	uint64_t requests;  /* calls admitted (sent on, or failed on the way) */
	uint64_t refused;   /* calls refused because the budget was spent */
	uint64_t held_back; /* calls refused while calls in flight held the rest */
	uint64_t unmetered; /* metered-route answers that reported no usage */
	uint64_t estimated; /* calls charged (wholly or in part) by estimate */
};

enum budget_verdict {
	BUDGET_ADMIT,
	BUDGET_SPENT, /* used >= a limit: refused for good */
	BUDGET_HELD,  /* not spent, but calls in flight hold the rest: retry later */
};

/* Whether the budget is spent: no new call may start. */
bool budget_spent(const struct budget *b);
/* A call wants to start, holding `hold` tokens until budget_settle (0 for
 * a call that is not metered): admitted (counted, and held) while used +
 * reserved < max_tokens; else refused (counted) with why filled. */
enum budget_verdict budget_admit(struct budget *b, uint64_t hold, char *why, size_t whylen);
/* A held call grew (its body's estimate went past what it holds). */
void budget_hold_more(struct budget *b, uint64_t more);
/* A held call ended: its hold is released and u charged. */
void budget_settle(struct budget *b, uint64_t hold, const struct mu_usage *u);
void budget_charge(struct budget *b, const struct mu_usage *u);
/* The tokens `bytes` of JSON or SSE stand for (rounded up). */
uint64_t budget_tokens_of(uint64_t bytes);
/* What a call whose answer did not report its whole usage is charged: the
 * usage it reported (reported NULL: none, then its input is estimated
 * from the request's in_bytes), plus the answer bytes that came after the
 * last report (out_after) as output. */
void budget_estimate(struct mu_usage *out, const struct mu_usage *reported, uint64_t in_bytes,
		     uint64_t out_after);
/* The exit event's "usage" ({...mu_usage_json, requests, and when not 0
 * unmetered_responses, estimated_responses}) and "budget"
 * ({max_tokens, max_model_requests, exhausted, refused, overshoot_tokens},
 * or NULL when unlimited). New references. */
json_t *budget_usage_json(const struct budget *b);
json_t *budget_json(const struct budget *b);
