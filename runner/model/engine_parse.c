/* The engines' dispatch: each CLI's command line and line parser by kind
 * (see engine_events.h). Apart from engine_events.c so that the CLIs' files
 * build on the shared parts and this builds on them. Pure. */
#include <string.h>

#include "model/engine_events.h"

int engine_command(enum engine_kind k, const struct engine_run *run, json_t *argv, json_t *env)
{
	if (!run->path || !run->base_url)
		return -1;
	/* The CLI's output chose it: never an option, never a second word. */
	if (run->session && *run->session && !engine_session_ok(run->session))
		return -1;
	switch (k) {
	case ENGINE_CODEX:
		return codex_command(run, argv, env);
	case ENGINE_CLAUDE:
		return claude_command(run, argv, env);
	default:
		return -1;
	}
}

void engine_parser_line(struct engine_parser *p, const char *line, size_t len)
{
	p->lines++;
	while (len && (line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	if (!len)
		return; /* blank lines carry nothing */
	json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
	if (!o || !json_is_object(o) || !json_is_string(json_object_get(o, "type"))) {
		if (!o)
			p->invalid++;
		engine_emit_raw(p, line, len, o);
		json_decref(o);
		return;
	}
	/* Each parser passes on what it does not map (engine_pass). */
	p->cur_line = line;
	p->cur_len = len;
	if (p->kind == ENGINE_CODEX)
		codex_parse(p, o);
	else if (p->kind == ENGINE_CLAUDE)
		claude_parse(p, o);
	else
		engine_emit_raw(p, line, len, o);
	p->cur_line = NULL;
	p->cur_len = 0;
	json_decref(o);
}
