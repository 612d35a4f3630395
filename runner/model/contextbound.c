/* The agent's context bound (--agent-context-max): see contextbound.h. */
#include "model/contextbound.h"

#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"

static size_t msg_size(json_t *m)
{
	char *s = json_dumps(m, JSON_COMPACT);
	size_t n = s ? strlen(s) + 1 : 0;
	free(s);
	return n;
}

/* Replace a long string field by a marker; the bytes saved. */
static size_t elide(json_t *obj, const char *key, const char *what, size_t keep)
{
	json_t *v = json_object_get(obj, key);
	if (!json_is_string(v) || json_string_length(v) <= keep + 160)
		return 0;
	size_t len = json_string_length(v);
	if (strstr(json_string_value(v), "[elided by the runner:"))
		return 0;
	char *head = keep ? strndup(json_string_value(v), keep) : strdup("");
	if (!head)
		return 0;
	/* Keep whole characters: a cut inside one is not valid UTF-8. */
	size_t hl = strlen(head);
	hl -= utf8_incomplete_tail((const unsigned char *)head, hl);
	head[hl] = 0;
	json_t *nv = json_sprintf("%s[elided by the runner: %zu bytes of %s; the conversation is "
				  "kept under --agent-context-max]",
				  head, len - hl, what);
	free(head);
	if (!nv)
		return 0;
	size_t nl = json_string_length(nv);
	json_object_set_new(obj, key, nv);
	return len > nl ? len - nl : 0;
}

unsigned context_bound(json_t *m, size_t limit, size_t overhead)
{
	unsigned elided = 0;
	limit = limit > overhead + 1024 ? limit - overhead : 1024;
	size_t n = json_array_size(m), total = 0;
	for (size_t i = 0; i < n; i++)
		total += msg_size(json_array_get(m, i));
	if (total <= limit)
		return 0;
	/* The latest two assistant turns (and their results) are protected. */
	size_t keep_from = n, seen = 0;
	for (size_t i = n; i-- > 1 && seen < 2;) {
		const char *role = json_string_value(json_object_get(json_array_get(m, i), "role"));
		if (role && !strcmp(role, "assistant")) {
			keep_from = i;
			seen++;
		}
	}
	for (int pass = 0; pass < 3 && total > limit; pass++) {
		size_t end = pass < 2 ? keep_from : (n ? n - 1 : 0);
		for (size_t i = 1; i < end && total > limit; i++) {
			json_t *msg = json_array_get(m, i);
			const char *role = json_string_value(json_object_get(msg, "role"));
			size_t saved = 0;
			if (role && !strcmp(role, "tool") && pass != 1) {
				saved = elide(msg, "content", "tool output", pass == 2 ? 512 : 0);
			} else if (role && !strcmp(role, "assistant") && pass == 1) {
				saved = elide(msg, "content", "assistant text", 256);
				size_t j;
				json_t *tc;
				json_array_foreach(json_object_get(msg, "tool_calls"), j, tc)
					saved += elide(json_object_get(tc, "function"), "arguments",
						       "tool arguments", 0);
			}
			if (saved) {
				elided++;
				total -= saved < total ? saved : total;
			}
		}
	}
	/* Whole old turns: an assistant message and the results after it. */
	while (total > limit) {
		size_t i = 1;
		while (i < n &&
		       strcmp(json_string_value(json_object_get(json_array_get(m, i), "role"))
				      ?: "",
			      "assistant"))
			i++;
		size_t j = i + 1;
		while (j < n &&
		       !strcmp(json_string_value(json_object_get(json_array_get(m, j), "role"))
				       ?: "",
			       "tool"))
			j++;
		if (i >= n || j >= n - 1 || i >= keep_from)
			break; /* nothing old is left to drop */
		for (size_t k = i; k < j; k++) {
			size_t sz = msg_size(json_array_get(m, i));
			total -= sz < total ? sz : total;
			json_array_remove(m, i);
			elided++;
		}
		n = json_array_size(m);
		keep_from -= keep_from > j - i ? j - i : keep_from;
	}
	return elided;
}

uint64_t model_context_of(json_t *list, const char *model)
{
	static const char *const keys[] = {"context_length", "context_window", "max_model_len",
					   "max_input_tokens", "max_context_length"};
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(list, "data"), i, m) {
		const char *id = json_string_value(json_object_get(m, "id"));
		if (!id || strcmp(id, model))
			continue;
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			json_t *v = json_object_get(m, keys[k]);
			if (!v)
				v = json_object_get(json_object_get(m, "model_info"), keys[k]);
			if (json_is_integer(v) && json_integer_value(v) > 0)
				return (uint64_t)json_integer_value(v);
		}
	}
	return 0;
}
