/* fuzz_envfile: the EXECD_ENVS file's parser (runner/task/envfile.c), whose
 * input a task can write (the SDK's set_env appends to it from a command).
 *
 * Input: the file's bytes. Checked beyond the sanitizers: every variable
 * taken has a valid name (NAME = [A-Za-z_][A-Za-z0-9_]*, at most 256 bytes)
 * and a string value without NUL, is not a refused name
 * (envfile_name_refused) and NAME=value fits ENVFILE_MAX_ENTRY; at most
 * ENVFILE_MAX_VARS names; vars + skipped lines + refused + over the bounds
 * never exceed the number of lines; a skipped line names a line number
 * inside the input; parsing the input again gives the same result (no
 * hidden state); envfile_envp makes one NAME=value string per name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "task/envfile.h"

static int valid_name(const char *s)
{
	size_t n = strlen(s);
	if (!n || n > 256)
		return 0;
	if (!((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *a = json_object(), *b = json_object();
	if (!a || !b)
		abort();
	struct envfile_result ra, rb;
	if (envfile_parse((const char *)data, size, a, &ra) < 0 ||
	    envfile_parse((const char *)data, size, b, &rb) < 0)
		abort(); /* out of memory is not expected at these sizes */
	size_t lines = 1;
	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	if ((size_t)ra.vars + ra.errors + ra.refused + ra.over + ra.too_long > lines)
		abort();
	if (json_object_size(a) > ENVFILE_MAX_VARS)
		abort();
	if (ra.errors && (ra.first_error_line < 1 || ra.first_error_line > lines))
		abort();
	if (ra.vars != rb.vars || ra.errors != rb.errors || ra.refused != rb.refused ||
	    ra.over != rb.over || ra.too_long != rb.too_long || !json_equal(a, b))
		abort();
	const char *k;
	json_t *v;
	json_object_foreach(a, k, v) {
		if (!valid_name(k) || !json_is_string(v) ||
		    strlen(json_string_value(v)) != json_string_length(v) ||
		    envfile_name_refused(k) ||
		    strlen(k) + 1 + json_string_length(v) > ENVFILE_MAX_ENTRY)
			abort();
	}
	json_t *layers[2] = {a, b};
	char **env = envfile_envp(layers, 2);
	if (!env)
		abort();
	size_t n = 0;
	for (; env[n]; n++) {
		const char *eq = strchr(env[n], '=');
		if (!eq)
			abort();
		json_t *want = json_object_getn(a, env[n], (size_t)(eq - env[n]));
		if (!want || strcmp(eq + 1, json_string_value(want)))
			abort();
		free(env[n]);
	}
	free(env);
	if (n != json_object_size(a))
		abort();
	json_decref(a);
	json_decref(b);
	return 0;
}
