/* The EXECD_ENVS file of OpenSandbox (execd 1.2): extra environment for
 * execd's commands, one assignment a line, as the SDK's commands.set_env
 * appends them (KEY='value'); also `export KEY=...`, "..." and unquoted
 * values, # comments and blank lines, as a POSIX shell reads assignments
 * (no expansion). A pure parser: a line it cannot read is counted and
 * skipped, never fatal. Any task can write that file, so what it may set
 * is bounded (docs/design/wire.md#opensandbox-execd-12): names that change how a program loads
 * are refused, at most ENVFILE_MAX_VARS names are taken, and no variable
 * is longer than the kernel takes in an environment. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* Distinct names taken from one file; later names are skipped and counted
 * (a later line for a name already taken still replaces its value). A
 * shell imports every variable at start: 110,000 of them made each bash
 * take ~50 s to start. */
#define ENVFILE_MAX_VARS 1024
/* NAME=value at most this long: the kernel refuses a longer environment
 * string (MAX_ARG_STRLEN, 128 KiB with its NUL) and execve would fail
 * with E2BIG for every command. */
#define ENVFILE_MAX_ENTRY (128u * 1024 - 1)

struct envfile_result {
	unsigned vars;     /* assignments taken */
	unsigned errors;   /* lines skipped: not an assignment */
	unsigned refused;  /* assignments of a refused name (envfile_name_refused) */
	unsigned over;     /* assignments of a new name past ENVFILE_MAX_VARS */
	unsigned too_long; /* NAME=value over ENVFILE_MAX_ENTRY */
	unsigned first_error_line;
	char first_error[80];
	char first_refused[64]; /* the first refused name (cut) */
};

/* Sets each NAME in out (a JSON object; a later line wins). 0, or -1 when
 * out of memory. */
int envfile_parse(const char *data, size_t len, json_t *out, struct envfile_result *res);

/* A name the file may not set: one that makes a program load or run code
 * other than its own when it merely starts (the dynamic loader's LD_*, a
 * shell's startup file, an interpreter's module path or options...). */
bool envfile_name_refused(const char *name);

/* The environment of a process: each layer (a JSON object of strings; a
 * NULL layer is skipped) over the ones before it, as "NAME=value"
 * strings in a NULL-terminated array (free each and the array). Linear
 * in the number of variables. NULL when out of memory. */
char **envfile_envp(json_t *const *layers, size_t n);
