/* An execution's events in the client's flavor: execd's SSE (blank-line separated JSON)
 * or E2B's NDJSON, each with a timestamp. */
#include <stdlib.h>
#include <string.h>

#include "code/internal.h"
#include "core/buf.h"
#include "core/cleanup.h"
#include "core/jsonesc.h"
#include "core/log.h"

static void ev_open(struct code_exec *x, const char *type)
{
	struct buf *o = &x->hs.out;
	buf_append_lit(o, "{\"type\":\"");
	buf_append_str(o, type);
	buf_append_lit(o, "\"");
}

static void ev_close(struct code_exec *x)
{
	struct buf *o = &x->hs.out;
	buf_append_lit(o, ",\"timestamp\":");
	buf_append_u64(o, now_ms());
	buf_append_str(o, x->flavor == CODE_EXECD ? "}\n\n" : "}\n");
	x->last_event_mono = monotonic_ms();
}

static void ev_key(struct code_exec *x, const char *key)
{
	buf_append_lit(&x->hs.out, ",\"");
	buf_append_str(&x->hs.out, key);
	buf_append_lit(&x->hs.out, "\":");
}

static void ev_json(struct code_exec *x, json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (s) {
		buf_append_str(&x->hs.out, s);
		free(s);
	} else {
		buf_append_lit(&x->hs.out, "null");
	}
}

void code_ev_text(struct code_exec *x, const char *type, const char *s, size_t len)
{
	ev_open(x, type);
	ev_key(x, "text");
	buf_append_json_str(&x->hs.out, s, len);
	ev_close(x);
}

/* E2B's names for the MIME types (its SDK's Result fields). */
static const char *e2b_format(const char *mime)
{
	static const char *const map[][2] = {
		{"text/plain", "text"},        {"text/html", "html"},
		{"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
		{"image/png", "png"},          {"image/jpeg", "jpeg"},
		{"application/pdf", "pdf"},    {"text/latex", "latex"},
		{"application/json", "json"},  {"application/javascript", "javascript"},
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (!strcmp(mime, map[i][0]))
			return map[i][1];
	return mime;
}

void code_ev_result(struct code_exec *x, json_t *data, bool main_result)
{
	ev_open(x, "result");
	if (x->flavor == CODE_EXECD) {
		ev_key(x, "results");
		ev_json(x, data);
	} else {
		ev_key(x, "is_main_result");
		buf_append_str(&x->hs.out, main_result ? "true" : "false");
		const char *mime;
		json_t *v;
		json_object_foreach(data, mime, v) {
			ev_key(x, e2b_format(mime));
			ev_json(x, v);
		}
	}
	ev_close(x);
}

void code_ev_error(struct code_exec *x, const char *ename, const char *evalue, json_t *tb)
{
	ev_open(x, "error");
	struct buf *o = &x->hs.out;
	if (x->flavor == CODE_EXECD) {
		ev_key(x, "error");
		buf_append_lit(o, "{\"ename\":");
		buf_append_json_str(o, ename, strlen(ename));
		buf_append_lit(o, ",\"evalue\":");
		buf_append_json_str(o, evalue, strlen(evalue));
		buf_append_lit(o, ",\"traceback\":");
		if (tb)
			ev_json(x, tb);
		else
			buf_append_lit(o, "[]");
		buf_append_lit(o, "}");
	} else {
		ev_key(x, "name");
		buf_append_json_str(o, ename, strlen(ename));
		ev_key(x, "value");
		buf_append_json_str(o, evalue, strlen(evalue));
		/* E2B's traceback is one string. */
		cleanup_buf struct buf t = {0};
		size_t i;
		json_t *line;
		json_array_foreach(tb, i, line) {
			if (i)
				buf_append_lit(&t, "\n");
			if (json_is_string(line))
				buf_append(&t, json_string_value(line), json_string_length(line));
		}
		ev_key(x, "traceback");
		buf_append_json_str(o, t.data ? t.data : "", t.len);
	}
	ev_close(x);
}

void code_ev_count(struct code_exec *x, json_int_t n)
{
	ev_open(x, x->flavor == CODE_EXECD ? "execution_count" : "number_of_executions");
	ev_key(x, "execution_count");
	buf_append_u64(&x->hs.out, (uint64_t)n);
	ev_close(x);
}

void code_ev_complete(struct code_exec *x)
{
	if (x->flavor == CODE_EXECD) {
		ev_open(x, "execution_complete");
		ev_key(x, "execution_time");
		buf_append_u64(&x->hs.out, monotonic_ms() - x->start_mono);
	} else {
		ev_open(x, "end_of_execution");
	}
	ev_close(x);
	x->finished = true;
}
