#include "task/envfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Names that change how a program loads are refused (counted, the first
 * named); ordinary ones, PATH and harmless PYTHON* switches are taken. */
TEST(envfile_refused_names)
{
	const char *in = "BASH_ENV=/tmp/x.sh\n"
			 "LD_PRELOAD=/tmp/x.so\n"
			 "LD_LIBRARY_PATH=/tmp\n"
			 "NODE_OPTIONS='--require /tmp/x.js'\n"
			 "PYTHONPATH=/tmp/py\n"
			 "PYTHONSTARTUP=/tmp/s.py\n"
			 "PERL5OPT=-Mx\n"
			 "RUBYOPT=-rx\n"
			 "GCONV_PATH=/tmp\n"
			 "GIT_CONFIG_COUNT=1\n"
			 "ENV=/tmp/x.sh\n"
			 "PATH=/opt/bin:/usr/bin\n"
			 "PYTHONUNBUFFERED=1\n"
			 "LDFLAGS=-O2\n"
			 "ORDINARY='yes'\n";
	json_t *o = json_object();
	struct envfile_result res;
	CHECK(envfile_parse(in, strlen(in), o, &res) == 0);
	CHECKF(res.refused == 11, "refused %u", res.refused);
	CHECK_STR(res.first_refused, "BASH_ENV");
	CHECK(res.errors == 0 && res.vars == 4);
	CHECK_STR(get(o, "PATH"), "/opt/bin:/usr/bin");
	CHECK_STR(get(o, "PYTHONUNBUFFERED"), "1");
	CHECK_STR(get(o, "LDFLAGS"), "-O2");
	CHECK_STR(get(o, "ORDINARY"), "yes");
	CHECK(json_object_size(o) == 4);
	json_decref(o);
	CHECK(envfile_name_refused("LD_AUDIT") && envfile_name_refused("PYTHONHOME") &&
	      envfile_name_refused("PERL5LIB") && envfile_name_refused("LUA_INIT") &&
	      envfile_name_refused("JAVA_TOOL_OPTIONS") && envfile_name_refused("OPENSSL_CONF"));
	CHECK(!envfile_name_refused("HOME") && !envfile_name_refused("LANG") &&
	      !envfile_name_refused("PYTHONDONTWRITEBYTECODE") &&
	      !envfile_name_refused("EXECD_ENVS"));
}

/* At most ENVFILE_MAX_VARS names: later new names are counted and
 * skipped, a later line for a name taken still replaces it; a variable
 * longer than the kernel takes is skipped. */
TEST(envfile_bounds)
{
	size_t n = 3000, cap = n * 16 + 64;
	char *in = malloc(cap);
	CHECK(in != NULL);
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(in + len, cap - len, "V%zu=%zu\n", i, i);
	len += (size_t)snprintf(in + len, cap - len, "V0=again\n");
	json_t *o = json_object();
	struct envfile_result res;
	CHECK(envfile_parse(in, len, o, &res) == 0);
	CHECK(json_object_size(o) == ENVFILE_MAX_VARS);
	CHECKF(res.over == n - ENVFILE_MAX_VARS, "over %u", res.over);
	CHECK_STR(get(o, "V0"), "again");
	CHECK(!json_object_get(o, "V2999"));
	json_decref(o);
	free(in);

	size_t big = ENVFILE_MAX_ENTRY + 10;
	char *line = malloc(big + 16);
	CHECK(line != NULL);
	memcpy(line, "BIG=", 4);
	memset(line + 4, 'x', big);
	memcpy(line + 4 + big, "\nOK=1\n", 6);
	o = json_object();
	CHECK(envfile_parse(line, big + 10, o, &res) == 0);
	CHECK(res.too_long == 1 && !json_object_get(o, "BIG"));
	CHECK_STR(get(o, "OK"), "1");
	/* Exactly at the bound: taken. */
	json_object_clear(o);
	size_t fit = ENVFILE_MAX_ENTRY - 4;
	memset(line + 4, 'y', fit);
	CHECK(envfile_parse(line, 4 + fit, o, &res) == 0);
	CHECK(res.too_long == 0 && json_string_length(json_object_get(o, "BIG")) == fit);
	json_decref(o);
	free(line);
}

static char *find(char **env, const char *name)
{
	size_t n = strlen(name);
	char *hit = NULL;
	int count = 0;
	for (char **p = env; *p; p++)
		if (!strncmp(*p, name, n) && (*p)[n] == '=') {
			hit = *p + n + 1;
			count++;
		}
	return count == 1 ? hit : NULL;
}

/* The merge: later layers win, each name once, NULL layers skipped. */
TEST(envfile_envp_layers)
{
	json_t *a = json_pack("{s:s,s:s,s:s}", "PATH", "/bin", "HOME", "/root", "A", "1");
	json_t *b = json_pack("{s:s,s:s}", "A", "2", "B", "x=y");
	json_t *layers[3] = {a, NULL, b};
	char **env = envfile_envp(layers, 3);
	CHECK(env != NULL);
	size_t n = 0;
	while (env[n])
		n++;
	CHECK(n == 4);
	CHECK_STR(find(env, "A"), "2");
	CHECK_STR(find(env, "B"), "x=y");
	CHECK_STR(find(env, "PATH"), "/bin");
	CHECK_STR(find(env, "HOME"), "/root");
	for (size_t i = 0; i < n; i++)
		free(env[i]);
	free(env);
	json_decref(a);
	json_decref(b);
}

static double merge_seconds(int n)
{
	json_t *a = json_object(), *b = json_object();
	char name[32];
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "N%d", i);
		json_object_set_new(a, name, json_string("a"));
		snprintf(name, sizeof(name), "N%d", i + n / 2);
		json_object_set_new(b, name, json_string("b"));
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	json_t *layers[2] = {a, b};
	char **env = envfile_envp(layers, 2);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(env != NULL);
	size_t k = 0;
	while (env && env[k])
		k++;
	CHECKF(k == (size_t)n + (size_t)n / 2, "n %zu", k);
	snprintf(name, sizeof(name), "N%d", n / 2);
	CHECK_STR(find(env, name), "b");
	CHECK_STR(find(env, "N1"), "a");
	for (size_t i = 0; i < k; i++)
		free(env[i]);
	free(env);
	json_decref(a);
	json_decref(b);
	return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}

/* Linear: four times the variables cost about four times as much (a
 * list searched for each name cost sixteen; under valgrind too, where
 * absolute times mean little). */
TEST(envfile_envp_linear)
{
	double small = merge_seconds(20000), large = merge_seconds(80000);
	CHECKF(large < small * 9 + 0.05, "20,000: %.3f s, 80,000: %.3f s", small, large);
}
