/* http/body.c: the one JSON body reader and typed getters. Each refusal is
 * INVALID_REQUEST_BODY in the schemas' words (the messages the routes answered before). */
#include "http/body.h"

#include "core/error.h"
#include "unit.h"

static json_t *obj(const char *js)
{
	return json_loads(js, JSON_ALLOW_NUL, NULL); /* as a test of the NUL check */
}

TEST(body_parse_object_and_array)
{
	struct error e = {0};
	json_t *j = http_parse_json_object("{\"a\":1}", 7, false, &e);
	CHECK(json_is_object(j));
	json_decref(j);
	j = http_parse_json_object("", 0, true, &e);
	CHECK(json_is_object(j) && !json_object_size(j));
	json_decref(j);
	CHECK(!http_parse_json_object("", 0, false, &e));
	CHECK_STR(e.code, "INVALID_REQUEST_BODY");
	CHECK_STR(e.msg, "the request body must be a JSON object");
	CHECK(!http_parse_json_object("[1]", 3, false, &e));
	CHECK_STR(e.msg, "the request body must be a JSON object");
	/* Duplicate keys are refused: which one a handler read would be a guess. */
	CHECK(!http_parse_json_object("{\"a\":1,\"a\":2}", 13, false, &e));
	CHECK(!strncmp(e.msg, "invalid JSON at line 1 column", 29));
	const struct http_json_opts array = {.array = true};
	j = http_parse_json("[1]", 3, &array, &e);
	CHECK(json_is_array(j));
	json_decref(j);
	CHECK(!http_parse_json("{}", 2, &array, &e));
	CHECK_STR(e.msg, "the request body must be a JSON array");
	CHECK(!http_parse_json("", 0, &array, &e));
	CHECK_STR(e.msg, "the request body must be a JSON array");
}

/* The files routes' reading (api/files.c): execd's words before a syntax error only. */
TEST(body_parse_syntax_prefix)
{
	struct error e = {0};
	struct http_json_opts o = {.array = true, .syntax_prefix = "error parsing request, "};
	json_t *j = http_parse_json("[1]", 3, &o, &e);
	CHECK(json_is_array(j));
	json_decref(j);
	CHECK(!http_parse_json("[1", 2, &o, &e));
	CHECK_STR(e.code, "INVALID_REQUEST_BODY");
	CHECK(!strncmp(e.msg, "error parsing request, invalid JSON at line 1 column", 52));
	CHECK(!http_parse_json("", 0, &o, &e));
	CHECK_STR(e.msg, "the request body must be a JSON array");
	CHECK(!http_parse_json("{}", 2, &o, &e));
	CHECK_STR(e.msg, "the request body must be a JSON array");
	o.array = false;
	CHECK(!http_parse_json("{\"a\":1,\"a\":2}", 13, &o, &e));
	CHECK(!strncmp(e.msg, "error parsing request, invalid JSON at line 1 column", 52));
	CHECK(!http_parse_json("", 0, &o, &e));
	CHECK_STR(e.msg, "the request body must be a JSON object");
	/* No prefix: the other routes' words, unchanged. */
	o.syntax_prefix = NULL;
	CHECK(!http_parse_json("{", 1, &o, &e));
	CHECK(!strncmp(e.msg, "invalid JSON at line", 20));
}

TEST(body_str_wording)
{
	json_t *o = obj("{\"s\":\"x\",\"n\":5,\"z\":null,\"nul\":\"a\\u0000b\",\"e\":\"\"}");
	struct error e = {0};
	const char *s = "untouched";
	CHECK(body_str(o, "s", true, &s, &e) == 0 && s && !strcmp(s, "x"));
	CHECK(body_str(o, "e", true, &s, &e) == 0 && s && !*s); /* empty is a value */
	CHECK(body_str(o, "z", false, &s, &e) == 0 && !s);      /* null is absent */
	CHECK(body_str(o, "missing", false, &s, &e) == 0 && !s);
	CHECK(body_str(o, "z", true, &s, &e) < 0);
	CHECK_STR(e.msg, "field 'z' is required");
	CHECK(body_str(o, "n", false, &s, &e) < 0 && !s);
	CHECK_STR(e.code, "INVALID_REQUEST_BODY");
	CHECK_STR(e.msg, "field 'n' must be a string");
	CHECK(body_str(o, "nul", false, &s, &e) < 0 && !s);
	CHECK_STR(e.msg, "field 'nul' contains a NUL byte");
	json_decref(o);
}

TEST(body_uint_and_bool_wording)
{
	json_t *o = obj(
		"{\"t\":7,\"neg\":-1,\"big\":8,\"f\":1.5,\"b\":true,\"bs\":\"true\",\"z\":null}");
	struct error e = {0};
	bool has = true, b = false;
	uint64_t v = 0;
	CHECK(body_uint(o, "t", 7, &has, &v, &e) == 0 && has && v == 7);
	CHECK(body_uint(o, "z", 7, &has, &v, &e) == 0 && !has);
	CHECK(body_uint(o, "neg", 7, &has, &v, &e) < 0 && !has);
	CHECK_STR(e.msg, "field 'neg' must be an integer between 0 and 7");
	CHECK(body_uint(o, "big", 7, &has, &v, &e) < 0);
	CHECK(body_uint(o, "f", 7, &has, &v, &e) < 0);
	CHECK_STR(e.code, "INVALID_REQUEST_BODY");
	CHECK(body_bool(o, "b", &has, &b, &e) == 0 && has && b);
	CHECK(body_bool(o, "z", &has, &b, &e) == 0 && !has);
	CHECK(body_bool(o, "bs", &has, &b, &e) < 0 && !has);
	CHECK_STR(e.msg, "field 'bs' must be a boolean");
	json_decref(o);
}
