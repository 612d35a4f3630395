/* fuzz_engines: the agent engines' JSONL parsers (runner/model/engine_*.c).
 *
 * Input: byte 0 picks the engine (even: codex, odd: claude-code); the rest
 * is the CLI's stdout, split into lines at '\n' and fed line by line.
 *
 * Checked: every event has a name of the vocabulary (message.delta, message,
 * tool.call, tool.result, engine.event) and an object that serializes (so
 * valid UTF-8 JSON reaches the spool); tool.call and tool.result carry a
 * string id; engine.event carries raw; a parser never says both done and
 * failed; the session id is a terminated string; the same input gives the
 * same events twice (no hidden state between parsers). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/engine_events.h"

struct sink {
	unsigned long events;
	unsigned long bytes;
	unsigned long hash;
};

static void on_emit(void *arg, const char *name, json_t *data)
{
	struct sink *s = arg;
	static const char *const ok[] = {"message.delta", "message", "tool.call", "tool.result",
					 "engine.event"};
	int known = 0;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		known |= !strcmp(name, ok[i]);
	if (!known || !json_is_object(data)) {
		fprintf(stderr, "bad event %s\n", name);
		abort();
	}
	if ((!strcmp(name, "tool.call") || !strcmp(name, "tool.result")) &&
	    !json_is_string(json_object_get(data, "id"))) {
		fprintf(stderr, "%s without an id\n", name);
		abort();
	}
	if (!strcmp(name, "engine.event") && !json_object_get(data, "raw") &&
	    !json_object_get(data, "stderr")) {
		fprintf(stderr, "engine.event without raw\n");
		abort();
	}
	char *s_ = json_dumps(data, JSON_COMPACT | JSON_ENSURE_ASCII);
	if (!s_) {
		fprintf(stderr, "%s does not serialize\n", name);
		abort();
	}
	s->events++;
	for (char *c = s_; *c; c++)
		s->hash = s->hash * 131 + (unsigned char)*c;
	s->bytes += strlen(s_);
	free(s_);
}

static void run(enum engine_kind k, const char *p, size_t n, struct sink *s)
{
	struct engine_parser ep;
	engine_parser_init(&ep, k, on_emit, s);
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || p[i] == '\n') {
			/* A copy of exactly the line, so ASan sees any read past it. */
			size_t len = i - start;
			char *line = malloc(len ? len : 1);
			memcpy(line, p + start, len);
			engine_parser_line(&ep, line, len);
			free(line);
			start = i + 1;
		}
	}
	if (ep.done && ep.failed)
		abort();
	if (memchr(ep.session, 0, sizeof(ep.session)) == NULL)
		abort();
	s->hash ^= ep.done * 7 + ep.failed * 13 + ep.hit_max_turns * 17 + ep.tool_calls;
	engine_parser_free(&ep);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	enum engine_kind k = (data[0] & 1) ? ENGINE_CLAUDE : ENGINE_CODEX;
	struct sink a = {0}, b = {0};
	run(k, (const char *)data + 1, size - 1, &a);
	run(k, (const char *)data + 1, size - 1, &b);
	if (a.events != b.events || a.bytes != b.bytes || a.hash != b.hash) {
		fprintf(stderr, "the same input gave different events\n");
		abort();
	}
	return 0;
}
