/* A task's model budget (docs/design.md §17.4): what its model calls used,
 * summed over every route and format, and its limits. One per task that
 * can call a model: a chat task's proxy token, an agent task. Pure. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "model/usage.h"

struct budget {
	uint64_t max_tokens;   /* total_tokens over all calls; 0 = unlimited */
	uint64_t max_requests; /* model calls started; 0 = unlimited */
	struct mu_usage used;
	uint64_t requests;  /* calls that went to the gateway */
	uint64_t refused;   /* calls refused because the budget was spent */
	uint64_t unmetered; /* metered-route answers that reported no usage */
};

/* Whether the budget is spent: no new call may start. */
bool budget_spent(const struct budget *b);
/* A call wants to start: true and counted, or false (refused, counted)
 * with why filled ("the task's token budget of N is spent (M used)"). */
bool budget_admit(struct budget *b, char *why, size_t whylen);
void budget_charge(struct budget *b, const struct mu_usage *u);
/* The exit event's "usage" ({...mu_usage_json, requests}) and "budget"
 * ({max_tokens, max_model_requests, exhausted, refused, overshoot_tokens},
 * or NULL when unlimited). New references. */
json_t *budget_usage_json(const struct budget *b);
json_t *budget_json(const struct budget *b);
