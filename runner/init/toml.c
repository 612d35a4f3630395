/* The TOML subset of execd's lifecycle.toml (config.h), read into the same JSON shape the
 * other transports use, so one checker (config.c) decides what a hook is. */
#include "init/config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/error.h"

#define BAD "INVALID_REQUEST_BODY"

/* What execd's lifecycle.toml needs: comments, [table], [a.b], [[array]],
 * bare and dotted keys, basic and literal strings (single line), integers,
 * booleans, arrays (may span lines) and inline tables. Nesting is bounded. */
struct toml {
	const char *p, *end;
	unsigned line;
	unsigned depth;
	struct error *err;
};

#define TOML_MAX_DEPTH 16

static int tfail(struct toml *t, const char *what)
{
	return error_set(t->err, 0, BAD, "lifecycle.toml line %u: %s", t->line, what);
}

static void skip_ws(struct toml *t)
{
	while (t->p < t->end && (*t->p == ' ' || *t->p == '\t'))
		t->p++;
}

/* Past c when it is the next byte. */
static bool eat(struct toml *t, char c)
{
	if (t->p >= t->end || *t->p != c)
		return false;
	t->p++;
	return true;
}

/* White space, comments and newlines (inside arrays). */
static void skip_all(struct toml *t)
{
	for (;;) {
		skip_ws(t);
		if (t->p < t->end && *t->p == '#') {
			while (t->p < t->end && *t->p != '\n')
				t->p++;
		}
		if (t->p < t->end && (*t->p == '\n' || *t->p == '\r')) {
			t->line += *t->p == '\n';
			t->p++;
			continue;
		}
		return;
	}
}

/* The rest of a line after a value or header: blanks and a comment only. */
static int end_of_line(struct toml *t)
{
	skip_ws(t);
	if (t->p < t->end && *t->p == '#')
		while (t->p < t->end && *t->p != '\n')
			t->p++;
	eat(t, '\r');
	if (t->p < t->end && *t->p != '\n')
		return tfail(t, "unexpected text after the value");
	if (t->p < t->end) {
		t->p++;
		t->line++;
	}
	return 0;
}

static bool bare_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-';
}

static void put_utf8(char *o, size_t *n, unsigned cp)
{
	if (cp < 0x80) {
		o[(*n)++] = (char)cp;
	} else if (cp < 0x800) {
		o[(*n)++] = (char)(0xc0 | (cp >> 6));
		o[(*n)++] = (char)(0x80 | (cp & 0x3f));
	} else {
		o[(*n)++] = (char)(0xe0 | (cp >> 12));
		o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[(*n)++] = (char)(0x80 | (cp & 0x3f));
	}
}

/* A quoted string at t->p (basic or literal), as a new JSON string. */
static json_t *tstring(struct toml *t)
{
	char q = *t->p++;
	const char *start = t->p;
	size_t cap = 0;
	while (start + cap < t->end && start[cap] != '\n')
		cap++;
	char *o = malloc(cap * 3 + 1);
	if (!o) {
		error_set(t->err, ENOMEM, NULL, "lifecycle.toml");
		return NULL;
	}
	size_t n = 0;
	for (;;) {
		if (t->p >= t->end || *t->p == '\n' || *t->p == '\r') {
			free(o);
			tfail(t, "unterminated string");
			return NULL;
		}
		char c = *t->p++;
		if (c == q)
			break;
		if (c == 0) {
			free(o);
			tfail(t, "NUL in a string");
			return NULL;
		}
		if (q == '\'' || c != '\\') {
			o[n++] = c;
			continue;
		}
		if (t->p >= t->end)
			continue; /* the loop reports it */
		char e = *t->p++;
		const char *map = "\"\"\\\\n\nt\tr\rb\bf\f";
		const char *m = NULL;
		for (const char *x = map; *x; x += 2)
			if (*x == e)
				m = x;
		if (m) {
			o[n++] = m[1];
		} else if (e == 'u' && t->end - t->p >= 4) {
			unsigned cp = 0;
			for (int i = 0; i < 4; i++) {
				char h = *t->p++;
				unsigned d = h >= '0' && h <= '9'   ? (unsigned)(h - '0')
					     : h >= 'a' && h <= 'f' ? (unsigned)(h - 'a' + 10)
					     : h >= 'A' && h <= 'F' ? (unsigned)(h - 'A' + 10)
								    : 16;
				if (d == 16) {
					free(o);
					tfail(t, "bad \\u escape");
					return NULL;
				}
				cp = cp * 16 + d;
			}
			if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff)) {
				free(o);
				tfail(t, "\\u escape of NUL or a surrogate");
				return NULL;
			}
			put_utf8(o, &n, cp);
		} else {
			free(o);
			tfail(t, "unknown escape in a string");
			return NULL;
		}
	}
	json_t *s = json_stringn(o, n);
	free(o);
	if (s && !json_string_value(s)) {
		json_decref(s);
		s = NULL;
	}
	if (!s)
		tfail(t, "string is not valid");
	return s;
}

static json_t *tvalue(struct toml *t);

static json_t *tinteger(struct toml *t)
{
	const char *s = t->p;
	bool neg = false;
	if (t->p < t->end && (*t->p == '+' || *t->p == '-'))
		neg = *t->p++ == '-';
	long long v = 0;
	unsigned digits = 0;
	while (t->p < t->end && ((*t->p >= '0' && *t->p <= '9') || *t->p == '_')) {
		if (*t->p != '_') {
			if (v > (1LL << 53)) {
				tfail(t, "integer too large");
				return NULL;
			}
			v = v * 10 + (*t->p - '0');
			digits++;
		}
		t->p++;
	}
	if (!digits || (t->p < t->end && bare_char(*t->p))) {
		t->p = s;
		tfail(t, "expected a value (string, integer, boolean, array or inline table)");
		return NULL;
	}
	return json_integer(neg ? -v : v);
}

static int tkey(struct toml *t, char *out, size_t size)
{
	skip_ws(t);
	size_t n = 0;
	if (t->p < t->end && (*t->p == '"' || *t->p == '\'')) {
		json_t *s = tstring(t);
		if (!s)
			return -1;
		snprintf(out, size, "%s", json_string_value(s));
		n = json_string_length(s);
		json_decref(s);
		if (!n || n >= size)
			return tfail(t, "bad quoted key");
		return 0;
	}
	while (t->p < t->end && bare_char(*t->p) && n + 1 < size)
		out[n++] = *t->p++;
	out[n] = 0;
	if (!n || (t->p < t->end && bare_char(*t->p)))
		return tfail(t, "expected a key");
	return 0;
}

/* a.b.c: the table that holds the last part (made as needed); the last
 * part in last. A key naming an array of tables means its last element. */
static json_t *tdotted(struct toml *t, json_t *root, char *last, size_t size, bool define_last)
{
	json_t *cur = root;
	for (;;) {
		if (tkey(t, last, size) < 0)
			return NULL;
		skip_ws(t);
		if (!eat(t, '.'))
			break;
		json_t *next = json_object_get(cur, last);
		if (json_is_array(next) && json_array_size(next))
			next = json_array_get(next, json_array_size(next) - 1);
		if (!next) {
			next = json_object();
			if (!next || json_object_set_new(cur, last, next) < 0) {
				tfail(t, "out of memory");
				return NULL;
			}
		}
		if (!json_is_object(next)) {
			tfail(t, "a dotted key goes through a value that is not a table");
			return NULL;
		}
		cur = next;
	}
	(void)define_last;
	return cur;
}

static json_t *tinline(struct toml *t)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	t->p++; /* { */
	skip_ws(t);
	if (eat(t, '}'))
		return o;
	for (;;) {
		char key[128];
		json_t *tab = tdotted(t, o, key, sizeof(key), true);
		if (!tab)
			goto fail;
		skip_ws(t);
		if (!eat(t, '=')) {
			tfail(t, "expected '=' in an inline table");
			goto fail;
		}
		skip_ws(t);
		if (json_object_get(tab, key)) {
			tfail(t, "a key is defined twice");
			goto fail;
		}
		json_t *v = tvalue(t);
		if (!v || json_object_set_new(tab, key, v) < 0)
			goto fail;
		skip_ws(t);
		if (eat(t, ','))
			continue;
		if (eat(t, '}'))
			return o;
		tfail(t, "expected ',' or '}' in an inline table");
		goto fail;
	}
fail:
	json_decref(o);
	return NULL;
}

static json_t *tarray(struct toml *t)
{
	json_t *a = json_array();
	if (!a)
		return NULL;
	t->p++; /* [ */
	for (;;) {
		skip_all(t);
		if (eat(t, ']'))
			return a;
		json_t *v = tvalue(t);
		if (!v || json_array_append_new(a, v) < 0)
			goto fail;
		skip_all(t);
		if (eat(t, ','))
			continue;
		if (eat(t, ']'))
			return a;
		tfail(t, "expected ',' or ']' in an array");
		goto fail;
	}
fail:
	json_decref(a);
	return NULL;
}

static json_t *tvalue(struct toml *t)
{
	if (t->p >= t->end) {
		tfail(t, "a value is missing");
		return NULL;
	}
	if (++t->depth > TOML_MAX_DEPTH) {
		tfail(t, "nested too deep");
		return NULL;
	}
	json_t *v;
	char c = *t->p;
	if (c == '"' || c == '\'') {
		if (t->end - t->p >= 3 && t->p[1] == c && t->p[2] == c) {
			tfail(t, "multi-line strings are not supported");
			v = NULL;
		} else {
			v = tstring(t);
		}
	} else if (c == '[') {
		v = tarray(t);
	} else if (c == '{') {
		v = tinline(t);
	} else if ((size_t)(t->end - t->p) >= 4 && !memcmp(t->p, "true", 4) &&
		   !((size_t)(t->end - t->p) > 4 && bare_char(t->p[4]))) {
		t->p += 4;
		v = json_true();
	} else if ((size_t)(t->end - t->p) >= 5 && !memcmp(t->p, "false", 5) &&
		   !((size_t)(t->end - t->p) > 5 && bare_char(t->p[5]))) {
		t->p += 5;
		v = json_false();
	} else {
		v = tinteger(t);
	}
	t->depth--;
	return v;
}

/* A table header, "[a.b]" or "[[a.b]]" (t->p on its '['): *cur becomes the table that the
 * key = value lines after it fill. */
static int ttable(struct toml *t, json_t *root, json_t **cur)
{
	bool array = t->end - t->p >= 2 && t->p[1] == '[';
	t->p += array ? 2 : 1;
	char key[128];
	json_t *parent = tdotted(t, root, key, sizeof(key), true);
	if (!parent)
		return -1;
	skip_ws(t);
	if (t->p >= t->end || *t->p != ']' || (array && (t->end - t->p < 2 || t->p[1] != ']')))
		return tfail(t, "expected ']' after a table name");
	t->p += array ? 2 : 1;
	if (end_of_line(t) < 0)
		return -1;
	json_t *ex = json_object_get(parent, key);
	cleanup_json json_t *tab = json_object();
	if (!tab)
		return tfail(t, "out of memory");
	if (!array) {
		if (ex)
			return tfail(t, "a table is defined twice");
		json_object_set(parent, key, tab);
		*cur = tab;
		return 0;
	}
	if (!ex) {
		ex = json_array();
		if (!ex || json_object_set_new(parent, key, ex) < 0)
			return tfail(t, "out of memory");
	}
	if (!json_is_array(ex) || json_array_size(ex) >= 64)
		return tfail(t, "[[table]] names a key that is not an array of tables");
	json_array_append(ex, tab);
	*cur = tab;
	return 0;
}

/* "key = value" into cur. */
static int tkeyval(struct toml *t, json_t *cur)
{
	char key[128];
	json_t *tab = tdotted(t, cur, key, sizeof(key), true);
	if (!tab)
		return -1;
	skip_ws(t);
	if (!eat(t, '='))
		return tfail(t, "expected '=' after a key");
	skip_ws(t);
	if (json_object_get(tab, key))
		return tfail(t, "a key is defined twice");
	json_t *v = tvalue(t);
	if (!v)
		return -1;
	if (json_object_set_new(tab, key, v) < 0)
		return tfail(t, "out of memory");
	return end_of_line(t);
}

json_t *toml_to_json(const char *text, size_t len, struct error *err)
{
	struct toml t = {.p = text, .end = text + len, .line = 1, .err = err};
	json_t *root = json_object();
	if (!root) {
		error_set(err, ENOMEM, NULL, "lifecycle.toml");
		return NULL;
	}
	json_t *cur = root; /* borrowed: root holds every table */
	for (;;) {
		skip_all(&t);
		if (t.p >= t.end)
			return root;
		if ((*t.p == '[' ? ttable(&t, root, &cur) : tkeyval(&t, cur)) < 0)
			break;
	}
	json_decref(root);
	return NULL;
}
