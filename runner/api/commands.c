/* execd's GET /command: the inventory of commands (execd's and code executions), newest
 * first, paged by an opaque cursor; wire compatible with
 * components/execd/pkg/web/controller/command_inventory_test.go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "core/base64.h"
#include "core/cleanup.h"
#include "core/log.h"
#include "core/randomid.h"
#include "core/runner.h"
#include "core/signame.h"
#include "task/task.h"

#define INVENTORY_DEFAULT_LIMIT 50
#define INVENTORY_MAX_LIMIT 100
#define STR_(x) #x
#define STR(x) STR_(x)

/* Go's url.QueryUnescape: '+' is a space, %XX two hex digits. */
static int query_unescape(const char *s, size_t n, char *out, size_t outsz)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (ch == '%') {
			if (i + 2 >= n)
				return -1;
			int hi = hex_value((unsigned char)s[i + 1]),
			    lo = hex_value((unsigned char)s[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			ch = (char)(hi * 16 + lo);
			i += 2;
		} else if (ch == '+') {
			ch = ' ';
		}
		if (o + 1 >= outsz)
			return -1;
		out[o++] = ch;
	}
	out[o] = 0;
	return (int)o;
}

static bool blank(const char *s)
{
	return s[strspn(s, " \t\r\n\v\f")] == 0;
}

/* execd's message, and which parameter and what it takes (the first problem found). */
static const char *const whys[] = {
	"invalid query parameter 'running': true or false",
	("invalid query parameter 'limit': a number from 1 to " STR(INVENTORY_MAX_LIMIT)),
	"invalid query parameter 'cursor'",
};
static const char *const twice[] = {
	"invalid query parameter 'running': given twice",
	"invalid query parameter 'limit': given twice",
	"invalid query parameter 'cursor': given twice",
};

struct list_query {
	int *running;
	unsigned *limit;
	char *cursor;
	size_t cursor_size;
	bool invalid, empty_cursor, seen[3];
	const char *why; /* the first problem named (NULL: none yet) */
};

static void query_problem(struct list_query *q, const char *why)
{
	q->invalid = true;
	if (!q->why)
		q->why = why;
}

/* k: 0 running, 1 limit, 2 cursor; value not blank. */
static void query_value(struct list_query *q, int k, const char *value)
{
	if (k == 0) {
		if (!strcmp(value, "true") || !strcmp(value, "false"))
			*q->running = value[0] == 't';
		else
			query_problem(q, whys[0]);
	} else if (k == 1) {
		size_t dl = strspn(value, "0123456789");
		if (!dl || value[dl] || dl > 3 || atoi(value) < 1 ||
		    atoi(value) > INVENTORY_MAX_LIMIT)
			query_problem(q, whys[1]);
		else
			*q->limit = (unsigned)atoi(value);
	} else {
		snprintf(q->cursor, q->cursor_size, "%s", value);
		if (strlen(value) >= q->cursor_size)
			query_problem(q, NULL);
	}
}

/* One component of the query, "key=value" (p, n bytes), still escaped. */
static void query_component(struct list_query *q, const char *p, size_t n)
{
	char comp[2048], key[2048], value[2048];
	if (n == 0 || n >= sizeof(comp)) {
		query_problem(q, NULL);
		return;
	}
	memcpy(comp, p, n);
	comp[n] = 0;
	char *eq = strchr(comp, '=');
	if (eq)
		*eq = 0;
	if (query_unescape(comp, strlen(comp), key, sizeof(key)) < 0 ||
	    query_unescape(eq ? eq + 1 : "", eq ? strlen(eq + 1) : 0, value, sizeof(value)) < 0) {
		query_problem(q, NULL);
		return;
	}
	if (!strcmp(key, "cursor") && (!eq || blank(value))) {
		q->empty_cursor = true;
		return;
	}
	int k = !strcmp(key, "running")  ? 0
		: !strcmp(key, "limit")  ? 1
		: !strcmp(key, "cursor") ? 2
					 : -1;
	if (k < 0 || !eq || q->seen[k]) {
		query_problem(q, k < 0 ? "invalid query parameter: GET /command takes running, "
					 "limit and cursor"
				 : q->seen[k] ? twice[k]
					      : whys[k]);
		return;
	}
	q->seen[k] = true;
	if (blank(value))
		query_problem(q, whys[k]);
	else
		query_value(q, k, value);
}

/* execd's GET /command query (raw query string, NULL = none): 0, or -1 with execd's message
 * ("invalid query parameter", "invalid cursor"), then which parameter and what it takes.
 * running: -1 all, 0 finished, 1 running. */
static int parse_list_query(const char *raw, int *running, unsigned *limit, char *cursor,
			    size_t cursor_size, const char **msg)
{
	*running = -1;
	*limit = INVENTORY_DEFAULT_LIMIT;
	cursor[0] = 0;
	*msg = NULL;
	struct list_query q = {.running = running,
			       .limit = limit,
			       .cursor = cursor,
			       .cursor_size = cursor_size};
	for (const char *p = raw && *raw ? raw : NULL; p;) {
		const char *amp = strchr(p, '&');
		query_component(&q, p, amp ? (size_t)(amp - p) : strlen(p));
		p = amp ? amp + 1 : NULL;
	}
	if (q.empty_cursor || q.invalid) {
		*msg = q.empty_cursor ? "invalid cursor"
		       : q.why        ? q.why
				      : "invalid query parameter";
		return -1;
	}
	return 0;
}

/* Cursor: the filter, the started time and id of the last entry given,
 * as "<r|t|a><16 hex><32 hex>"; opaque to clients. */
static void cursor_encode(char out[50], int running, uint64_t started, const char *id)
{
	snprintf(out, 50, "%c%016llx%s",
		 running < 0 ? 'a'
		 : running   ? 'r'
			     : 't',
		 (unsigned long long)started, id);
}

static int cursor_decode(const char *s, int running, uint64_t *started, char id[33])
{
	char want = running < 0 ? 'a' : running ? 'r' : 't';
	if (strlen(s) != 49 || s[0] != want)
		return -1;
	uint64_t v = 0;
	for (int i = 1; i <= 16; i++) {
		int h = hex_value((unsigned char)s[i]);
		if (h < 0 || (s[i] >= 'A' && s[i] <= 'F'))
			return -1;
		v = v << 4 | (uint64_t)h;
	}
	if (!is_hex_id(s + 17))
		return -1;
	*started = v;
	memcpy(id, s + 17, 33);
	return 0;
}

/* Newest first; equal start times by id, descending. */
static int cmp_desc(const void *a, const void *b)
{
	const struct task *x = *(struct task *const *)a, *y = *(struct task *const *)b;
	if (x->started_ms != y->started_ms)
		return x->started_ms > y->started_ms ? -1 : 1;
	return -strcmp(x->id, y->id);
}

/* The answer, JSON with Cache-Control: no-store as execd sends it; j is taken. */
static enum MHD_Result inventory_send(struct http_req *req, unsigned status, json_t *j)
{
	cleanup_free char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return MHD_NO;
	return http_text(req, status, "application/json", s, strlen(s), "Cache-Control",
			 "no-store");
}

static enum MHD_Result inventory_error(struct http_req *req, unsigned status, const char *code,
				       const char *msg)
{
	return inventory_send(req, status, json_pack("{s:s,s:s}", "code", code, "message", msg));
}

void api_command_end_fields(json_t *o, struct task *t)
{
	char finished[40];
	if (o && t->finished) {
		iso_time_ms(finished, sizeof(finished), t->finished_ms);
		json_object_set_new(o, "finished_at", json_string(finished));
		json_object_set_new(o, "exit_code", json_integer(t->exit_code));
		if (t->exit_code != 0) {
			char e[64];
			if (t->term_signal)
				snprintf(e, sizeof(e), "signal: %s", signal_name(t->term_signal));
			else
				snprintf(e, sizeof(e), "exit status %d", t->exit_code);
			json_object_set_new(o, "error", json_string(e));
		}
	}
	json_t *left = task_left_behind_json(t);
	if (left)
		json_object_set_new(o, "left_behind", left);
}

static json_t *command_json(struct task *t)
{
	char started[40];
	iso_time_ms(started, sizeof(started), t->started_ms);
	json_t *o = json_pack("{s:s,s:b,s:b,s:s}", "session", t->id, "running", !t->finished,
			      "background", t->background, "started_at", started);
	api_command_end_fields(o, t);
	return o;
}

enum MHD_Result api_command_list(struct http_req *req)
{
	int running;
	unsigned limit;
	char cursor[256];
	const char *msg;
	if (parse_list_query(req->raw_query, &running, &limit, cursor, sizeof(cursor), &msg) < 0)
		return inventory_error(req, 400, "INVALID_QUERY", msg);
	uint64_t c_started = 0;
	char c_id[33] = "";
	bool has_cursor = cursor[0] != 0;
	if (has_cursor && cursor_decode(cursor, running, &c_started, c_id) < 0)
		return inventory_error(req, 400, "INVALID_QUERY", "invalid cursor");

	size_t n = 0, cap = 0;
	cleanup_free struct task **list = NULL;
	for (struct task *t = req->r->tasks->head; t; t = t->next) {
		if (t->api != TASK_API_EXECD && t->api != TASK_API_CODE)
			continue;
		if (running >= 0 && (running == 1) == t->finished)
			continue;
		if (has_cursor && (t->started_ms > c_started ||
				   (t->started_ms == c_started && strcmp(t->id, c_id) >= 0)))
			continue; /* at or before the cursor in this order */
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct task **nl = realloc(list, ncap * sizeof(*nl));
			if (!nl)
				return inventory_error(req, 500, "RUNTIME_ERROR", "out of memory");
			list = nl;
			cap = ncap;
		}
		list[n++] = t;
	}
	if (n)
		qsort(list, n, sizeof(*list), cmp_desc);
	json_t *arr = json_array();
	size_t shown = n < limit ? n : limit;
	for (size_t i = 0; i < shown; i++)
		json_array_append_new(arr, command_json(list[i]));
	json_t *pag = json_pack("{s:I}", "limit", (json_int_t)limit);
	if (n > shown) {
		char next[50];
		cursor_encode(next, running, list[shown - 1]->started_ms, list[shown - 1]->id);
		json_object_set_new(pag, "nextCursor", json_string(next));
	}
	return inventory_send(req, 200, json_pack("{s:o,s:o}", "commands", arr, "pagination", pag));
}
