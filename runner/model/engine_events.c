/* The engines' shared pure parts: see engine_events.h. */
#include "model/engine_events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/utf8.h"
#include "core/jsonesc.h"

static const char *const kind_names[ENGINE_KINDS] = {"builtin", "codex", "claude-code"};
static const char *const kind_commands[ENGINE_KINDS] = {NULL, "codex", "claude"};

enum engine_kind engine_kind_of(const char *name)
{
	for (int k = 0; k < ENGINE_KINDS; k++)
		if (name && !strcmp(name, kind_names[k]))
			return (enum engine_kind)k;
	return ENGINE_KINDS;
}

const char *engine_kind_name(enum engine_kind k)
{
	return k < ENGINE_KINDS ? kind_names[k] : "unknown";
}

const char *engine_default_command(enum engine_kind k)
{
	return k < ENGINE_KINDS ? kind_commands[k] : NULL;
}

void engine_parser_init(struct engine_parser *p, enum engine_kind k, engine_emit_fn emit, void *arg)
{
	memset(p, 0, sizeof(*p));
	p->kind = k;
	p->emit = emit;
	p->arg = arg;
}

void engine_parser_free(struct engine_parser *p)
{
	free(p->answer);
	p->answer = NULL;
}

/* A JSON string of any bytes: invalid UTF-8 becomes U+FFFD. */
static json_t *lossy_string(const char *s, size_t len)
{
	struct buf lit = {0};
	json_t *v = NULL;
	if (buf_append_json_str(&lit, s, len) == 0)
		v = json_loadb(lit.data, lit.len, JSON_DECODE_ANY, NULL);
	buf_free(&lit);
	return v ? v : json_string("");
}

void engine_emit_raw(struct engine_parser *p, const char *line, size_t len, json_t *parsed)
{
	json_t *ev = json_object();
	if (parsed && len <= ENGINE_RAW_MAX) {
		json_object_set(ev, "raw", parsed);
	} else {
		bool cut = len > ENGINE_RAW_MAX;
		size_t n = cut ? ENGINE_RAW_MAX : len;
		/* Cut at a character boundary so the text stays whole. */
		if (cut)
			n -= utf8_incomplete_tail((const unsigned char *)line, n);
		json_object_set_new(ev, "raw", lossy_string(line, n));
		if (!parsed)
			json_object_set_new(ev, "invalid_json", json_true());
		if (cut) {
			json_object_set_new(ev, "truncated", json_true());
			json_object_set_new(ev, "bytes", json_integer((json_int_t)len));
		}
	}
	p->emit(p->arg, "engine.event", ev);
	json_decref(ev);
}

struct engine_track *engine_track_get(struct engine_parser *p, const char *id, bool add)
{
	if (!id)
		return NULL;
	for (unsigned i = 0; i < ENGINE_TRACK; i++)
		if (p->track[i].id[0] && !strcmp(p->track[i].id, id))
			return &p->track[i];
	if (!add)
		return NULL;
	/* The oldest slot goes: a call that old has long been answered. */
	struct engine_track *t = &p->track[p->next_track++ % ENGINE_TRACK];
	memset(t, 0, sizeof(*t));
	snprintf(t->id, sizeof(t->id), "%s", id);
	return t;
}

void engine_set_answer(struct engine_parser *p, const char *text)
{
	char *s = strdup(text ? text : "");
	if (!s)
		return;
	free(p->answer);
	p->answer = s;
}

void engine_set_error(struct engine_parser *p, const char *msg)
{
	snprintf(p->error, sizeof(p->error), "%s", msg && *msg ? msg : "the engine failed");
}

void engine_emit_output(struct engine_parser *p, const char *id, const char *text, size_t len)
{
	if (!len)
		return;
	json_t *ev = json_pack("{s:s,s:s,s:s%}", "id", id, "stream", "stdout", "text", text, len);
	if (ev)
		p->emit(p->arg, "tool.result", ev);
	json_decref(ev);
}

void engine_pass(struct engine_parser *p, json_t *o)
{
	engine_emit_raw(p, p->cur_line, p->cur_len, o);
}

const char *engine_str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

void engine_emit(struct engine_parser *p, const char *name, json_t *ev)
{
	if (ev)
		p->emit(p->arg, name, ev);
	json_decref(ev);
}

bool engine_session_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (!n || n > 127 || s[0] == '-' || s[0] == '_')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_'))
			return false;
	}
	return true;
}
