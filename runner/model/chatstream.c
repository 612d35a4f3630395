/* OpenAI Chat Completions streaming parser: see chatstream.h. */
#include "model/chatstream.h"

#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/utf8.h"
#include "model/usage.h"

const char *cs_result_code(enum cs_result r)
{
	switch (r) {
	case CS_RUNNING:
		return "running";
	case CS_OK:
		return "ok";
	case CS_ERR_MALFORMED:
		return "malformed_stream";
	case CS_ERR_STREAM:
		return "stream_error";
	case CS_ERR_BUDGET:
		return "budget_exceeded";
	case CS_ERR_RATE_LIMITED:
		return "rate_limited";
	case CS_ERR_UNAUTHORIZED:
		return "unauthorized";
	case CS_ERR_FORBIDDEN:
		return "forbidden";
	case CS_ERR_MODEL:
		return "model_not_found";
	case CS_ERR_BAD_REQUEST:
		return "bad_request";
	case CS_ERR_SERVER:
		return "gateway_error";
	}
	return "unknown";
}

void chatstream_init(struct chatstream *cs, void (*on_text)(void *, const char *, size_t),
		     void *arg)
{
	memset(cs, 0, sizeof(*cs));
	cs->on_text = on_text;
	cs->arg = arg;
	cs->http_status = 200;
}

void chatstream_free(struct chatstream *cs)
{
	buf_free(&cs->line);
	buf_free(&cs->data);
	buf_free(&cs->errbody);
	buf_free(&cs->text);
	for (unsigned i = 0; i < CS_MAX_TOOL_CALLS; i++) {
		buf_free(&cs->tools[i].id);
		buf_free(&cs->tools[i].name);
		buf_free(&cs->tools[i].args);
	}
}

void chatstream_status(struct chatstream *cs, long http_status)
{
	cs->http_status = http_status;
}

static enum cs_result fail(struct chatstream *cs, enum cs_result r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static enum cs_result fail(struct chatstream *cs, enum cs_result r, const char *fmt, ...)
{
	if (cs->result != CS_RUNNING)
		return cs->result;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cs->message, sizeof(cs->message), fmt, ap);
	va_end(ap);
	cs->result = r;
	return r;
}

/* Printable, single-line copy of untrusted text. */
static void clean_copy(char *dst, size_t dstlen, const char *src, size_t len)
{
	size_t o = 0;
	for (size_t i = 0; i < len && o + 1 < dstlen; i++) {
		unsigned char c = (unsigned char)src[i];
		dst[o++] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
	}
	while (o && dst[o - 1] == ' ')
		o--;
	dst[o] = 0;
	/* Do not end inside a UTF-8 sequence. */
	size_t tail = utf8_incomplete_tail((const unsigned char *)dst, o);
	dst[o - tail] = 0;
}

static bool ci_contains(const char *hay, const char *needle)
{
	return hay && strcasestr(hay, needle) != NULL;
}

static bool is_budget(const char *type, const char *code, const char *msg)
{
	if ((type && !strcasecmp(type, "budget_exceeded")) ||
	    (code && !strcasecmp(code, "budget_exceeded")))
		return true;
	/* LiteLLM's messages: "Budget has been exceeded!", "ExceededBudget",
	 * "ExceededTokenBudget", "Max budget limit reached.", "over budget". */
	return ci_contains(msg, "budget has been exceeded") || ci_contains(msg, "exceededbudget") ||
	       ci_contains(msg, "exceededtokenbudget") ||
	       ci_contains(msg, "budget limit reached") || ci_contains(msg, "over budget") ||
	       ci_contains(msg, "budget exceeded");
}

static bool is_model_error(long status, const char *type, const char *code, const char *msg)
{
	if ((code && !strcasecmp(code, "model_not_found")) ||
	    (type && !strcasecmp(type, "model_not_found")))
		return true;
	if (status != 400 && status != 404)
		return false;
	return ci_contains(msg, "invalid model") || ci_contains(msg, "no such model") ||
	       ci_contains(msg, "unknown model") ||
	       (ci_contains(msg, "model") &&
		(ci_contains(msg, "does not exist") || ci_contains(msg, "not found")));
}

/* The pieces of an OpenAI/LiteLLM error object: {"error": {"message",
 * "type", "code"}} or {"error": "text"} or {"detail": ...}. */
static bool error_parts(json_t *j, const char **msg, const char **type, const char **code,
			char *codebuf, size_t codelen)
{
	*msg = *type = *code = NULL;
	json_t *e = json_object_get(j, "error");
	if (!e)
		e = json_object_get(j, "detail");
	if (!e)
		return false;
	if (json_is_string(e)) {
		*msg = json_string_value(e);
		return true;
	}
	if (!json_is_object(e))
		return false;
	json_t *m = json_object_get(e, "message");
	if (json_is_string(m))
		*msg = json_string_value(m);
	else if (json_is_object(m) && json_is_string(json_object_get(m, "error")))
		*msg = json_string_value(json_object_get(m, "error"));
	json_t *t = json_object_get(e, "type");
	if (json_is_string(t))
		*type = json_string_value(t);
	json_t *c = json_object_get(e, "code");
	if (json_is_string(c)) {
		*code = json_string_value(c);
	} else if (json_is_integer(c)) {
		snprintf(codebuf, codelen, "%lld", (long long)json_integer_value(c));
		*code = codebuf;
	}
	return true;
}

/* The class an error's HTTP status gives it; below 400, below_400. */
static enum cs_result by_status(long status, enum cs_result below_400)
{
	switch (status) {
	case 401:
		return CS_ERR_UNAUTHORIZED;
	case 403:
		return CS_ERR_FORBIDDEN;
	case 429:
		return CS_ERR_RATE_LIMITED;
	}
	if (status >= 500)
		return CS_ERR_SERVER;
	return status >= 400 ? CS_ERR_BAD_REQUEST : below_400;
}

static enum cs_result classify_json(long status, json_t *j, char *msg, size_t msglen, bool *found)
{
	const char *m, *type, *code;
	char codebuf[32];
	*found = error_parts(j, &m, &type, &code, codebuf, sizeof(codebuf));
	if (!*found)
		return CS_ERR_MALFORMED;
	if (m)
		clean_copy(msg, msglen, m, strlen(m));
	else if (type)
		clean_copy(msg, msglen, type, strlen(type));
	else
		snprintf(msg, msglen, "HTTP %ld", status);
	if (is_budget(type, code, m))
		return CS_ERR_BUDGET;
	if (is_model_error(status, type, code, m))
		return CS_ERR_MODEL;
	/* An error object under a 2xx/3xx: a stream-level error. */
	return by_status(status, CS_ERR_STREAM);
}

/* Classify an error body (JSON or not) for the given status; fills msg. */
static enum cs_result chatstream_classify(long status, const char *body, size_t len, char *msg,
					  size_t msglen)
{
	json_t *j = len ? json_loadb(body, len, 0, NULL) : NULL;
	bool found = false;
	enum cs_result r = CS_ERR_MALFORMED;
	if (j && json_is_object(j))
		r = classify_json(status, j, msg, msglen, &found);
	json_decref(j);
	if (found)
		return r;
	/* Not JSON (a text/plain or HTML page from a proxy): its text is the
	 * message. */
	if (len)
		clean_copy(msg, msglen, body, len > 300 ? 300 : len);
	if (!len || !*msg)
		snprintf(msg, msglen, "HTTP %ld with no message", status);
	if (is_budget(NULL, NULL, msg))
		return CS_ERR_BUDGET;
	if (is_model_error(status, NULL, NULL, msg))
		return CS_ERR_MODEL;
	return by_status(status, CS_ERR_MALFORMED);
}

int64_t chatstream_retry_ms(enum cs_result r, unsigned attempt, const char *retry_after)
{
	unsigned max;
	int64_t base;
	if (r == CS_ERR_RATE_LIMITED) {
		max = 5;
		base = 1000;
	} else if (r == CS_ERR_SERVER) {
		max = 2;
		base = 500;
	} else {
		return -1;
	}
	if (attempt == 0 || attempt > max)
		return -1;
	if (retry_after) {
		/* Delta-seconds (possibly fractional); HTTP dates fall back to
		 * the backoff. */
		char *end;
		double s = strtod(retry_after, &end);
		while (*end == ' ' || *end == '\t')
			end++;
		if (end != retry_after && !*end && s >= 0 && s <= 3600)
			return (int64_t)(s * 1000) > 60000 ? 60000 : (int64_t)(s * 1000);
	}
	int64_t d = base << (attempt - 1);
	return d > 16000 ? 16000 : d;
}

static bool usage_from_json(json_t *obj, struct cs_usage *u)
{
	json_t *us = json_object_get(obj, "usage");
	if (!json_is_object(us)) {
		json_t *resp = json_object_get(obj, "response"); /* Responses API events */
		us = json_is_object(resp) ? json_object_get(resp, "usage") : NULL;
		if (!json_is_object(us))
			return false;
	}
	json_t *p = json_object_get(us, "prompt_tokens");
	if (!json_is_integer(p))
		p = json_object_get(us, "input_tokens");
	json_t *c = json_object_get(us, "completion_tokens");
	if (!json_is_integer(c))
		c = json_object_get(us, "output_tokens");
	json_t *t = json_object_get(us, "total_tokens");
	if (!json_is_integer(p) && !json_is_integer(c) && !json_is_integer(t))
		return false;
	u->prompt_tokens = json_is_integer(p) ? json_integer_value(p) : 0;
	u->completion_tokens = json_is_integer(c) ? json_integer_value(c) : 0;
	u->total_tokens = json_is_integer(t) ? json_integer_value(t)
					     : u->prompt_tokens + u->completion_tokens;
	if (u->prompt_tokens < 0 || u->completion_tokens < 0 || u->total_tokens < 0)
		return false;
	return true;
}

static int append_str(struct chatstream *cs, struct buf *b, json_t *s)
{
	size_t n = json_string_length(s);
	if (n == 0)
		return 0;
	if (b->len + n > CS_MAX_TEXT) {
		fail(cs, CS_ERR_MALFORMED, "the model's response is over %u bytes", CS_MAX_TEXT);
		return -1;
	}
	if (buf_append(b, json_string_value(s), n) < 0) {
		fail(cs, CS_ERR_MALFORMED, "out of memory");
		return -1;
	}
	return 0;
}

static int take_tool_calls(struct chatstream *cs, json_t *arr)
{
	if (!arr || json_is_null(arr))
		return 0;
	if (!json_is_array(arr)) {
		fail(cs, CS_ERR_MALFORMED, "tool_calls is not an array");
		return -1;
	}
	size_t i;
	json_t *tc;
	json_array_foreach(arr, i, tc) {
		if (!json_is_object(tc)) {
			fail(cs, CS_ERR_MALFORMED, "a tool call is not an object");
			return -1;
		}
		json_t *ix = json_object_get(tc, "index");
		json_int_t idx = ix ? (json_is_integer(ix) ? json_integer_value(ix) : -1)
				    : (json_int_t)i;
		if (idx < 0 || idx >= CS_MAX_TOOL_CALLS) {
			fail(cs, CS_ERR_MALFORMED, "tool call index out of range");
			return -1;
		}
		struct cs_tool_call *t = &cs->tools[idx];
		t->used = true;
		if ((unsigned)idx + 1 > cs->n_tools)
			cs->n_tools = (unsigned)idx + 1;
		json_t *id = json_object_get(tc, "id");
		if (json_is_string(id) && json_string_length(id) && !t->id.len &&
		    append_str(cs, &t->id, id) < 0)
			return -1;
		json_t *fn = json_object_get(tc, "function");
		if (fn && !json_is_object(fn)) {
			fail(cs, CS_ERR_MALFORMED, "tool call function is not an object");
			return -1;
		}
		json_t *name = json_object_get(fn, "name");
		if (json_is_string(name) && append_str(cs, &t->name, name) < 0)
			return -1;
		json_t *args = json_object_get(fn, "arguments");
		if (json_is_string(args) && append_str(cs, &t->args, args) < 0)
			return -1;
	}
	return 0;
}

/* A whole (non-streamed) message: {"content", "tool_calls": [{id, function}]}. */
static int take_message(struct chatstream *cs, json_t *msg)
{
	json_t *content = json_object_get(msg, "content");
	if (json_is_string(content) && json_string_length(content)) {
		if (append_str(cs, &cs->text, content) < 0)
			return -1;
		if (cs->on_text)
			cs->on_text(cs->arg, json_string_value(content),
				    json_string_length(content));
	}
	return take_tool_calls(cs, json_object_get(msg, "tool_calls"));
}

static void take_chunk(struct chatstream *cs, json_t *j)
{
	const char *m, *type, *code;
	char codebuf[32];
	if (json_object_get(j, "error") &&
	    error_parts(j, &m, &type, &code, codebuf, sizeof(codebuf))) {
		char msg[sizeof(cs->message)];
		bool found;
		enum cs_result r = classify_json(200, j, msg, sizeof(msg), &found);
		if (r != CS_ERR_BUDGET && r != CS_ERR_MODEL)
			r = CS_ERR_STREAM;
		fail(cs, r, "%s", msg);
		return;
	}
	cs->got_chunk = true;
	json_t *model = json_object_get(j, "model");
	if (json_is_string(model) && !cs->model[0])
		clean_copy(cs->model, sizeof(cs->model), json_string_value(model),
			   json_string_length(model));
	struct cs_usage u;
	if (usage_from_json(j, &u)) {
		cs->usage = u;
		cs->has_usage = true;
	}
	json_t *choices = json_object_get(j, "choices");
	if (!choices || json_is_null(choices))
		return;
	if (!json_is_array(choices)) {
		fail(cs, CS_ERR_MALFORMED, "choices is not an array");
		return;
	}
	size_t i;
	json_t *ch;
	json_array_foreach(choices, i, ch) {
		if (!json_is_object(ch)) {
			fail(cs, CS_ERR_MALFORMED, "a choice is not an object");
			return;
		}
		json_t *ix = json_object_get(ch, "index");
		if (ix && (!json_is_integer(ix) || json_integer_value(ix) != 0))
			continue; /* n > 1 is never asked for: only choice 0 counts */
		json_t *fr = json_object_get(ch, "finish_reason");
		if (json_is_string(fr))
			clean_copy(cs->finish_reason, sizeof(cs->finish_reason),
				   json_string_value(fr), json_string_length(fr));
		json_t *delta = json_object_get(ch, "delta");
		if (!delta) {
			json_t *msg = json_object_get(ch, "message");
			if (json_is_object(msg))
				take_message(cs, msg);
			continue;
		}
		if (json_is_null(delta))
			continue;
		if (!json_is_object(delta)) {
			fail(cs, CS_ERR_MALFORMED, "delta is not an object");
			return;
		}
		json_t *content = json_object_get(delta, "content");
		if (json_is_string(content) && json_string_length(content)) {
			if (append_str(cs, &cs->text, content) < 0)
				return;
			if (cs->on_text)
				cs->on_text(cs->arg, json_string_value(content),
					    json_string_length(content));
		} else if (content && !json_is_null(content) && !json_is_string(content)) {
			fail(cs, CS_ERR_MALFORMED, "delta content is not a string");
			return;
		}
		if (take_tool_calls(cs, json_object_get(delta, "tool_calls")) < 0)
			return;
	}
}

static void dispatch(struct chatstream *cs)
{
	if (!cs->have_data)
		return;
	cs->have_data = false;
	const char *d = cs->data.data ? cs->data.data : "";
	size_t n = cs->data.len;
	if (cs->got_done) {
		cs->data.len = 0;
		return; /* nothing counts after [DONE] */
	}
	if (n == 6 && !memcmp(d, "[DONE]", 6)) {
		cs->got_done = true;
	} else {
		json_error_t jerr;
		json_t *j = json_loadb(d, n, 0, &jerr);
		if (!j || !json_is_object(j)) {
			char snip[64];
			clean_copy(snip, sizeof(snip), d, n > 40 ? 40 : n);
			fail(cs, CS_ERR_MALFORMED, "a stream chunk is not a JSON object: '%s'",
			     snip);
		} else {
			take_chunk(cs, j);
		}
		json_decref(j);
	}
	cs->data.len = 0;
}

static void on_line(struct chatstream *cs, const char *l, size_t n)
{
	if (n == 0) {
		dispatch(cs);
		return;
	}
	if (l[0] == ':')
		return; /* comment / keep-alive */
	size_t flen, vlen;
	const char *v;
	mu_sse_field(l, n, &flen, &v, &vlen);
	if (flen != 4 || memcmp(l, "data", 4))
		return; /* event:, id:, retry: are not used by this API */
	if (cs->have_data && buf_append(&cs->data, "\n", 1) < 0) {
		fail(cs, CS_ERR_MALFORMED, "out of memory");
		return;
	}
	if (cs->data.len + vlen > CS_MAX_LINE) {
		fail(cs, CS_ERR_MALFORMED, "a stream event is over %u bytes", CS_MAX_LINE);
		return;
	}
	if (vlen && buf_append(&cs->data, v, vlen) < 0)
		fail(cs, CS_ERR_MALFORMED, "out of memory");
	cs->have_data = true;
}

/* SSE lines end with \n, \r\n or \r. A \r at the end of one piece and a \n
 * at the start of the next are one terminator: after_cr remembers it. */
static void feed_sse(struct chatstream *cs, const char *p, size_t n)
{
	for (size_t i = 0; i < n && cs->result == CS_RUNNING; i++) {
		char c = p[i];
		if (cs->after_cr) {
			cs->after_cr = false;
			if (c == '\n')
				continue;
		}
		if (c == '\n' || c == '\r') {
			on_line(cs, cs->line.data ? cs->line.data : "", cs->line.len);
			cs->line.len = 0;
			cs->after_cr = c == '\r';
			continue;
		}
		/* Copy the run up to the next terminator in one go. */
		size_t j = i;
		while (j < n && p[j] != '\n' && p[j] != '\r')
			j++;
		if (cs->line.len + (j - i) > CS_MAX_LINE) {
			fail(cs, CS_ERR_MALFORMED, "a stream line is over %u bytes", CS_MAX_LINE);
			return;
		}
		if (buf_append(&cs->line, p + i, j - i) < 0) {
			fail(cs, CS_ERR_MALFORMED, "out of memory");
			return;
		}
		i = j - 1;
	}
}

enum cs_result chatstream_feed(struct chatstream *cs, const char *p, size_t n)
{
	if (cs->result != CS_RUNNING)
		return cs->result;
	cs->bytes += n;
	if (cs->http_status != 200) {
		size_t room = CS_MAX_ERR_BODY - cs->errbody.len;
		if (n > room)
			n = room;
		if (n && buf_append(&cs->errbody, p, n) < 0)
			fail(cs, CS_ERR_MALFORMED, "out of memory");
		return cs->result;
	}
	feed_sse(cs, p, n);
	return cs->result;
}

static void finish_tools(struct chatstream *cs)
{
	for (unsigned i = 0; i < cs->n_tools; i++) {
		struct cs_tool_call *t = &cs->tools[i];
		if (!t->used) {
			fail(cs, CS_ERR_MALFORMED, "tool call index %u is missing", i);
			return;
		}
		if (!t->name.len) {
			fail(cs, CS_ERR_MALFORMED, "tool call %u has no function name", i);
			return;
		}
		/* NUL-terminate for the consumer (buf keeps no terminator). */
		if (buf_append(&t->args, "", 1) < 0 || buf_append(&t->name, "", 1) < 0 ||
		    buf_append(&t->id, "", 1) < 0) {
			fail(cs, CS_ERR_MALFORMED, "out of memory");
			return;
		}
		t->args.len--;
		t->name.len--;
		t->id.len--;
	}
}

enum cs_result chatstream_eof(struct chatstream *cs)
{
	if (cs->result != CS_RUNNING)
		return cs->result;
	if (cs->http_status != 200) {
		char msg[sizeof(cs->message)];
		enum cs_result r = chatstream_classify(cs->http_status, cs->errbody.data,
						       cs->errbody.len, msg, sizeof(msg));
		if (r == CS_ERR_MALFORMED)
			r = CS_ERR_BAD_REQUEST; /* e.g. a 3xx: redirects are not followed */
		return fail(cs, r, "%s", msg);
	}
	/* A final line without its terminator still counts. */
	if (cs->line.len) {
		on_line(cs, cs->line.data, cs->line.len);
		cs->line.len = 0;
	}
	if (cs->result == CS_RUNNING)
		dispatch(cs);
	if (cs->result != CS_RUNNING)
		return cs->result;
	if (!cs->got_done) {
		/* A plain JSON document where a stream was expected: an error
		 * object is honoured, a whole completion is not a stream. */
		if (!cs->got_chunk && cs->bytes == 0)
			return fail(cs, CS_ERR_MALFORMED, "the gateway sent an empty response");
		return fail(cs, CS_ERR_MALFORMED,
			    "the stream ended without data: [DONE] (truncated response)");
	}
	finish_tools(cs);
	if (cs->result != CS_RUNNING)
		return cs->result;
	cs->result = CS_OK;
	return CS_OK;
}
