/* The agent's conversation kept within the model's context (docs/design.md
 * design/model.md#the-agent-loop): what a gateway says the context is, and the messages shortened
 * to fit. Pure: jansson only, no I/O, no runner state. */
#pragma once
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Shorten the messages (an OpenAI messages array) until they and overhead
 * bytes fit in limit: tool outputs first (oldest first), then long
 * assistant text and tool arguments, then the latest turns' outputs but
 * the last; the system prompt and the goals (user messages) stay. Older
 * turns are dropped whole as the last resort. The messages shortened. */
unsigned context_bound(json_t *messages, size_t limit, size_t overhead);
/* The context length a gateway publishes for the model in its GET /models
 * list, in tokens (0: none). Field names differ: context_length
 * (OpenRouter, LM Studio), context_window, max_model_len (vLLM),
 * max_input_tokens (LiteLLM's model info). */
uint64_t model_context_of(json_t *list, const char *model);
