/* The EXECD_ENVS file of OpenSandbox (execd 1.2): extra environment for
 * every command, one assignment a line, as the SDK's commands.set_env
 * appends them (KEY='value'); also `export KEY=...`, "..." and unquoted
 * values, # comments and blank lines, as a POSIX shell reads assignments
 * (no expansion). A pure parser: a line it cannot read is counted and
 * skipped, never fatal. */
#pragma once
#include <stddef.h>

#include <jansson.h>

struct envfile_result {
	unsigned vars;   /* assignments taken */
	unsigned errors; /* lines skipped */
	unsigned first_error_line;
	char first_error[80];
};

/* Sets each NAME in out (a JSON object; a later line wins). 0, or -1 when
 * out of memory. */
int envfile_parse(const char *data, size_t len, json_t *out, struct envfile_result *res);
