/* Agent engines' pure parts (docs/design/model.md#agent-engines-finding-an-engine): for each
 * coding-agent CLI, the command line that runs it and a parser of its JSONL output that maps every
 * line onto the built-in loop's event vocabulary (design/wire.md#native-task-api): message.delta,
 * message, tool.call, tool.result, plus what ends the run. A line that does
 * not map is passed on as engine.event {raw}. No loop, no runner state: one
 * line in, zero or more events out through the emit callback; unit-tested and
 * fuzzed (tests/unit/test_engines.c, tests/fuzz/fuzz_engines.c). */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

enum engine_kind { ENGINE_BUILTIN, ENGINE_CODEX, ENGINE_CLAUDE, ENGINE_KINDS };

/* "builtin", "codex", "claude-code"; ENGINE_KINDS for anything else. */
enum engine_kind engine_kind_of(const char *name);
const char *engine_kind_name(enum engine_kind k);
/* The executable looked up on PATH when no --agent-engine names one. */
const char *engine_default_command(enum engine_kind k);

/* How one run is asked for (every string borrowed). */
struct engine_run {
	const char *path;     /* the CLI */
	const char *model;    /* may be NULL: the CLI's default */
	const char *base_url; /* the model proxy, e.g. http://127.0.0.1:PORT/v1 */
	const char *session;  /* the CLI's session to resume, or NULL */
	unsigned max_turns;   /* passed to CLIs that have such a limit (0: none) */
};

/* The argv of a run (a JSON array of strings; the goal is not in it: the
 * command line ends with "$FORCEAI_AGENT_GOAL", which the caller's shell
 * expands) and the environment it adds (object of strings). 0, or -1 when
 * a string is not valid. */
int engine_command(enum engine_kind k, const struct engine_run *run, json_t *argv, json_t *env);

/* Whether a CLI's session id may go on its command line: 1 to 127 of
 * [A-Za-z0-9_-] (Codex's thread ids and Claude Code's session ids are
 * UUIDs), starting with a letter or digit, so it is never read as an
 * option. The parsers keep no other, and engine_command refuses one. */
bool engine_session_ok(const char *s);

/* Called for every event (data borrowed: copy what you keep). */
typedef void (*engine_emit_fn)(void *arg, const char *name, json_t *data);

#define ENGINE_RAW_MAX 16384 /* a longer line is passed on cut, with "truncated" */
#define ENGINE_TRACK 64      /* tool calls whose live output is followed at once */

struct engine_track {
	char id[96];
	size_t emitted; /* output bytes already sent as live tool.result */
	bool called;    /* tool.call sent */
};

struct engine_parser {
	enum engine_kind kind;
	engine_emit_fn emit;
	void *arg;
	/* What the stream said so far. */
	char session[128];   /* the CLI's own conversation id ("" until known) */
	char *answer;        /* the last complete assistant message (malloc'd) */
	bool done;           /* a record that ends the run successfully */
	bool failed;         /* a record that ends the run with an error */
	bool hit_max_turns;  /* the CLI stopped at its own turn limit */
	char error[512];     /* the CLI's message for failed (or the last error) */
	unsigned tool_calls; /* tool.call events sent */
	unsigned lines, invalid;
	struct engine_track track[ENGINE_TRACK];
	unsigned next_track;
	const char *cur_line; /* the line being parsed */
	size_t cur_len;
};

void engine_parser_init(struct engine_parser *p, enum engine_kind k, engine_emit_fn emit,
			void *arg);
/* One line of the CLI's stdout (without its terminator). */
void engine_parser_line(struct engine_parser *p, const char *line, size_t len);
void engine_parser_free(struct engine_parser *p);

/* Shared by the engines' files (engine_events.c). */
void engine_emit_raw(struct engine_parser *p, const char *line, size_t len, json_t *parsed);
/* engine.event {raw} of the line being parsed (o: its parsed form). */
void engine_pass(struct engine_parser *p, json_t *o);
/* o[k] as a string, or NULL. */
const char *engine_str(json_t *o, const char *k);
/* Sends ev (when not NULL) as event name and drops the reference. */
void engine_emit(struct engine_parser *p, const char *name, json_t *ev);
struct engine_track *engine_track_get(struct engine_parser *p, const char *id, bool add);
void engine_set_answer(struct engine_parser *p, const char *text);
void engine_set_error(struct engine_parser *p, const char *msg);
/* tool.result live output {id, stream, text} of a valid-UTF-8 string. */
void engine_emit_output(struct engine_parser *p, const char *id, const char *text, size_t len);
void codex_parse(struct engine_parser *p, json_t *o);
void claude_parse(struct engine_parser *p, json_t *o);
int codex_command(const struct engine_run *run, json_t *argv, json_t *env);
int claude_command(const struct engine_run *run, json_t *argv, json_t *env);
