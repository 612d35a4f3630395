/* What the files of the configuration share (not for use outside core/config*.c):
 * config_options.c  the option table, --help, a problem told by option or variable
 * config.c          argv and environment into the struct, value by value (config_parse)
 * config_check.c    the checks made once every option is known (bounds, pairs)
 * config_files.c    the files options name: secrets (read, owner and mode), files read at start */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"

enum opt_type {
	OPT_STR,
	OPT_U64,
	OPT_UINT,
	OPT_BOOL,
	OPT_LISTEN,
	OPT_USER,
	OPT_TOKEN_FILE,
	OPT_KEY_FILE,
	OPT_PORT,
	OPT_ID_RANGE,
	OPT_NETWORK,
	OPT_PATH,    /* an absolute path */
	OPT_CPU_MAX, /* cgroup v2 cpu.max: "max", "QUOTA", "max PERIOD" or "QUOTA PERIOD" */
	OPT_PROXY,   /* a proxy URL: http, https or socks */
	OPT_ROOTS,   /* colon-separated absolute paths */
	OPT_ENGINE,
};

struct opt_def {
	const char *name; /* long option */
	const char *env;
	enum opt_type type;
	size_t off; /* into struct runner_config */
	const char *def;
	const char *help;
};

#define OFF(f) offsetof(struct runner_config, f)

extern const struct opt_def config_opts[];
extern const size_t config_n_opts;
/* --help, in docs/configuration.md's groups and order. */
void config_usage(FILE *out);

/* Where each option's value came from (cfg->origin): the checks made once
 * every option is known name the option, or the variable when it came from there. */
enum origin { FROM_DEFAULT, FROM_ENV, FROM_CLI };

/* Where the value being applied comes from, for messages, and where a
 * problem goes. */
struct src {
	const char *env; /* the environment variable, or NULL: the command line */
	struct error *err;
};

/* "invalid --OPT 'VAL': WHY" (or "invalid VARIABLE ..."); returns -1. */
int config_bad(const struct src *src, const char *opt, const char *val, const char *why);
int config_bad_num(const struct src *src, const char *opt, uint64_t val, const char *why);
/* The source of option opt's current value, as cfg->origin says. */
struct src config_src(const struct runner_config *cfg, const char *opt, struct error *err);
int config_parse_u64(const char *s, uint64_t *out);

/* config_files.c: a secret's first line from the file at path into *dst, its owner and mode
 * into sf; and after parsing, that no task can read it. */
int config_read_secret(const struct src *src, char **dst, struct secret_file *sf, const char *opt,
		       const char *path);
int config_check_secrets(const struct runner_config *cfg, struct error *err);
/* config_check.c: bounds, and the checks that need more than one option. */
int config_check_values(const struct runner_config *cfg, struct error *err);
