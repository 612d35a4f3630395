#include "task/envfile.h"

#include <string.h>

#include "unit.h"

static const char *get(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

/* The lines OpenSandbox's SDK appends (KEY='value', a ' as '\''), and what
 * a person writes by hand. */
TEST(envfile_sdk_and_shell_forms)
{
	const char *in = "FOO='from file'\n"
			 "Q='it'\\''s'\n"
			 "export BAZ=\"a \\\"b\\\" \\$c\"\n"
			 "  # a comment\n"
			 "\n"
			 "PLAIN=x\\ y # trailing comment\n"
			 "MULTI='one\ntwo'\n"
			 "EMPTY=\n"
			 "FOO=later-wins\n";
	json_t *o = json_object();
	struct envfile_result res;
	CHECK(envfile_parse(in, strlen(in), o, &res) == 0);
	CHECK(res.errors == 0);
	CHECK(res.vars == 7);
	CHECK_STR(get(o, "FOO"), "later-wins");
	CHECK_STR(get(o, "Q"), "it's");
	CHECK_STR(get(o, "BAZ"), "a \"b\" $c");
	CHECK_STR(get(o, "PLAIN"), "x y");
	CHECK_STR(get(o, "MULTI"), "one\ntwo");
	CHECK_STR(get(o, "EMPTY"), "");
	json_decref(o);
}

/* A bad line is counted and skipped; the lines after it still count (an
 * unterminated quote does not swallow them). */
TEST(envfile_errors_are_local)
{
	const char *in = "A=1\n"
			 "no equals here\n"
			 "B=\"unterminated\n"
			 "1BAD=x\n"
			 "C='ok'\n"
			 "D='x' junk\n"
			 "E=nul\\";
	json_t *o = json_object();
	struct envfile_result res;
	CHECK(envfile_parse(in, strlen(in), o, &res) == 0);
	CHECKF(res.errors == 5, "errors %u", res.errors);
	CHECK(res.first_error_line == 2);
	CHECK_STR(get(o, "A"), "1");
	CHECK_STR(get(o, "C"), "ok");
	CHECK(!json_object_get(o, "B") && !json_object_get(o, "D") && !json_object_get(o, "E"));
	json_decref(o);
	/* A NUL inside a value: refused, not truncated. */
	const char nul[] = "N='a\0b'\nM=1\n";
	o = json_object();
	CHECK(envfile_parse(nul, sizeof(nul) - 1, o, &res) == 0);
	CHECK(res.errors == 1 && !json_object_get(o, "N"));
	CHECK_STR(get(o, "M"), "1");
	json_decref(o);
}
