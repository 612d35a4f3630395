/* The agent's context bound (runner/model/contextbound.c): the messages
 * shortened to fit --agent-context-max, in the order the design gives, and
 * the context length a gateway publishes for a model. */
#include "model/contextbound.h"

#include <stdlib.h>
#include <string.h>

#include "unit.h"

static json_t *msg(const char *role, size_t len, char fill)
{
	char *s = malloc(len + 1);
	memset(s, fill, len);
	s[len] = 0;
	json_t *m = json_pack("{s:s,s:s}", "role", role, "content", s);
	free(s);
	return m;
}

static size_t content_len(json_t *m, size_t i)
{
	return json_string_length(json_object_get(json_array_get(m, i), "content"));
}

TEST(fits_untouched)
{
	json_t *m = json_array();
	json_array_append_new(m, msg("system", 100, 's'));
	json_array_append_new(m, msg("user", 100, 'u'));
	CHECK(context_bound(m, 100000, 256) == 0);
	CHECK(content_len(m, 1) == 100);
	json_decref(m);
}

TEST(old_tool_output_goes_first)
{
	json_t *m = json_array();
	json_array_append_new(m, msg("system", 100, 's'));
	json_array_append_new(m, msg("user", 100, 'u'));
	for (int turn = 0; turn < 4; turn++) {
		json_array_append_new(m, msg("assistant", 50, 'a'));
		json_array_append_new(m, msg("tool", 20000, 't'));
	}
	unsigned n = context_bound(m, 30000, 256);
	CHECK(n >= 1);
	/* The oldest output is elided, with the marker that says so; the
	 * latest two turns, the system prompt and the goal stay whole. */
	CHECK(content_len(m, 3) < 1000);
	CHECK(strstr(json_string_value(json_object_get(json_array_get(m, 3), "content")),
		     "[elided by the runner:") != NULL);
	CHECK(content_len(m, 0) == 100 && content_len(m, 1) == 100);
	CHECK(content_len(m, 9) == 20000);
	json_decref(m);
}

TEST(model_context_from_the_list)
{
	json_t *list =
		json_pack("{s:[{s:s,s:i},{s:s,s:{s:i}}]}", "data", "id", "a", "context_length",
			  8192, "id", "b", "model_info", "max_input_tokens", 200000);
	CHECK(model_context_of(list, "a") == 8192);
	CHECK(model_context_of(list, "b") == 200000);
	CHECK(model_context_of(list, "c") == 0);
	json_decref(list);
}
