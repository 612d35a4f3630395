/* Command line and environment into struct runner_config: every option has an
 * environment variable, the command line wins (the table: config_options.c). A
 * usage error is one message naming the problem (main prints it and exits 2). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_internal.h"
#include "core/error.h"
#include "core/version.h"

/* The options whose default the runner may replace when it is not root
 * (task user, state dir) need to know they were given. */
static void note_given(struct runner_config *cfg, const struct opt_def *o)
{
	if (o->type == OPT_USER)
		cfg->task_user_set = true;
	else if (o->type == OPT_PATH && o->off == OFF(state_dir))
		cfg->state_dir_set = true;
	else if (o->type == OPT_NETWORK)
		cfg->exec_network_set = true;
}

/* Remove a secret from this process's environment, including the bytes of
 * the initial environment block that /proc/PID/environ shows. */
static char *take_secret_env(const char *name)
{
	extern char **environ;
	size_t nlen = strlen(name);
	char *copy = NULL;
	for (char **e = environ; e && *e; e++) {
		if (!strncmp(*e, name, nlen) && (*e)[nlen] == '=') {
			char *v = *e + nlen + 1;
			if (!copy)
				copy = strdup(v);
			explicit_bzero(v, strlen(v));
		}
	}
	unsetenv(name);
	return copy;
}

/* The long options that begin with name[0..n): "--a, --b" in buf. */
static unsigned prefix_matches(const struct option *lopts, const char *name, size_t n, char *buf,
			       size_t size)
{
	unsigned count = 0;
	size_t len = 0;
	buf[0] = 0;
	for (const struct option *o = lopts; o->name; o++) {
		if (strncmp(o->name, name, n))
			continue;
		int w = snprintf(buf + len, size - len, "%s--%s", count ? ", " : "", o->name);
		if (w > 0 && (size_t)w < size - len)
			len += (size_t)w;
		count++;
	}
	return count;
}

/* getopt_long takes any unique prefix of a long option: "--gateway-key sk-x"
 * would be read as --gateway-key-file, "--gateway" fail as unknown. Options
 * are spelled in full instead: an abbreviation that works today could come
 * to mean another option when one is added (docs/design.md §2.7). text is
 * the argument as given ("--name" or "--name=value"). */
static int not_in_full(const struct option *lopts, const char *text, const char *full,
		       struct error *err)
{
	if (strncmp(text, "--", 2))
		return 0;
	const char *name = text + 2;
	size_t n = strcspn(name, "=");
	if (full && strlen(full) == n && !strncmp(name, full, n))
		return 0;
	char cands[512];
	unsigned k = prefix_matches(lopts, name, n, cands, sizeof(cands));
	if (k == 0)
		return error_set(err, 0, NULL, "unknown option '--%.*s' (see --help)", (int)n,
				 name);
	return error_set(err, 0, NULL,
			 "unknown option '--%.*s': options are spelled in full, no abbreviations; "
			 "%s %s%s",
			 (int)n, name, k == 1 ? "did you mean" : "options beginning so:", cands,
			 k == 1 ? "?" : "");
}

/* The metrics exporter's standard OpenTelemetry variables, as execd reads
 * them (docs/design.md §13.8): variables only, checked here so a typo
 * stops the start rather than silently exporting nothing. */
static int otel_metrics_env(struct runner_config *cfg, struct error *err)
{
	const char *url = getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
	cfg->otlp_metrics_interval_ms = 60000; /* the OpenTelemetry SDKs' default */
	if (!url || !*url)
		return 0;
	struct src s = {.env = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", .err = err};
	if ((strncmp(url, "http://", 7) || !url[7]) && (strncmp(url, "https://", 8) || !url[8]))
		return config_bad(&s, "", url, "the scheme must be http or https");
	cfg->otlp_metrics_endpoint = url;
	const char *iv = getenv("OTEL_METRIC_EXPORT_INTERVAL");
	if (iv && *iv) {
		char *end;
		errno = 0;
		unsigned long long ms = strtoull(iv, &end, 10);
		struct src si = {.env = "OTEL_METRIC_EXPORT_INTERVAL", .err = err};
		if (errno || *end || *iv == '-' || ms < 100 || ms > 86400000)
			return config_bad(&si, "", iv, "must be 100..86400000 (milliseconds)");
		cfg->otlp_metrics_interval_ms = ms;
	}
	return 0;
}

/* --help and --version work whatever the environment holds. */
static bool help_or_version(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			config_usage(stdout);
			return true;
		}
		if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
			printf("forceai-runner %s\n", FORCEAI_RUNNER_VERSION);
			return true;
		}
	}
	return false;
}

static int apply_defaults(struct runner_config *cfg, struct error *err)
{
	struct src cli = {.err = err};
	for (size_t i = 0; i < config_n_opts; i++)
		if (config_opts[i].def &&
		    config_apply(&cli, cfg, &config_opts[i], config_opts[i].def))
			return -1;
	return 0;
}

/* A bad value is noted in env_bad, and told only once we know the command
 * line does not replace it. */
static void apply_env(struct runner_config *cfg, bool *env_bad)
{
	for (size_t i = 0; i < config_n_opts; i++) {
		const char *val = getenv(config_opts[i].env);
		if (!val)
			continue;
		struct error ignored;
		struct src env = {.env = config_opts[i].env, .err = &ignored};
		if (config_apply(&env, cfg, &config_opts[i], val))
			env_bad[i] = true;
		else
			note_given(cfg, &config_opts[i]);
		cfg->origin[i] = FROM_ENV;
	}
}

/* The token and the gateway key given as variables: read once, then gone
 * from the environment (tasks get a clean environment anyway; /proc/1/environ
 * must not show them). A file option wins. */
static void take_env_secrets(struct runner_config *cfg)
{
	char *tok = take_secret_env("EXECD_ACCESS_TOKEN");
	if (tok && *tok && !cfg->token)
		cfg->token = tok;
	else
		free(tok);
	char *key = take_secret_env("FORCEAI_GATEWAY_KEY");
	if (key && *key && !cfg->gateway_key) {
		cfg->gateway_key = key;
	} else if (key) {
		explicit_bzero(key, strlen(key));
		free(key);
	}
}

/* The options of the command line only: what to do rather than how to run. */
static const struct option cli_only[] = {
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{"ping", no_argument, NULL, 'P'},
	{"verify-audit", required_argument, NULL, 'A'},
	{"audit-head", required_argument, NULL, 'H'},
	{0},
};
#define N_CLI_ONLY (sizeof(cli_only) / sizeof(cli_only[0]))

/* getopt_long's table: the option table's (val 1000 + index), then cli_only. */
static void long_options(struct option *lopts)
{
	for (size_t i = 0; i < config_n_opts; i++) {
		lopts[i].name = config_opts[i].name;
		/* --flag or --flag=VALUE (1/0, true/false, yes/no) */
		lopts[i].has_arg = config_opts[i].type == OPT_BOOL ? optional_argument
								   : required_argument;
		lopts[i].flag = NULL;
		lopts[i].val = 1000 + (int)i;
	}
	memcpy(lopts + config_n_opts, cli_only, sizeof(cli_only));
}

/* 1: --help or --version was printed. */
static int apply_cli_only(struct runner_config *cfg, int c)
{
	switch (c) {
	case 'h':
		config_usage(stdout);
		return 1;
	case 'V':
		printf("forceai-runner %s\n", FORCEAI_RUNNER_VERSION);
		return 1;
	case 'P':
		cfg->ping = true;
		break;
	case 'A':
		cfg->verify_audit = optarg;
		break;
	case 'H':
		/* Its form is checked by audit/verify.c, above core. */
		cfg->audit_head = optarg;
		break;
	}
	return 0;
}

/* getopt_long's '?' or ':': an unknown option, an abbreviation, a value missing. */
static int argv_error(const struct option *lopts, int c, char **argv, struct error *err)
{
	const char *arg = argv[optind - 1];
	if (optopt && optopt < 1000)
		return error_set(err, 0, NULL, "unknown option '-%c' (see --help)", optopt);
	if (optopt >= 1000 && optopt < 1000 + (int)config_n_opts &&
	    not_in_full(lopts, arg, config_opts[optopt - 1000].name, err) < 0)
		return -1;
	if (c == ':' || (optopt >= 1000))
		return error_set(err, 0, NULL, "option '%s' needs a value", arg);
	not_in_full(lopts, arg, NULL, err);
	if (strncmp(arg, "--", 2))
		error_set(err, 0, NULL, "unknown option '%s' (see --help)", arg);
	return -1;
}

/* The command line over the defaults and the environment: 0, 1 when --help
 * or --version was printed, -1 on a usage error. */
static int parse_argv(struct runner_config *cfg, int argc, char **argv, bool *env_bad,
		      struct error *err)
{
	struct src cli = {.err = err};
	struct option lopts[CONFIG_MAX_OPTS + N_CLI_ONLY];
	long_options(lopts);
	opterr = 0;
	int c, li = -1;
	/* "+" stops at the first non-option, so "-- CMD -x" reaches CMD. */
	while ((c = getopt_long(argc, argv, "+hV", lopts, &li)) != -1) {
		if (li >= 0) {
			/* The option's own argument: the one before its value when the
			 * value came as the next argument. */
			const char *text = optarg && optind >= 2 && optarg == argv[optind - 1]
						   ? argv[optind - 2]
						   : argv[optind - 1];
			if (not_in_full(lopts, text, lopts[li].name, err) < 0)
				return -1;
			li = -1;
		}
		if (c == '?' || c == ':')
			return argv_error(lopts, c, argv, err);
		if (c < 1000) {
			if (apply_cli_only(cfg, c))
				return 1;
			continue;
		}
		const struct opt_def *o = &config_opts[c - 1000];
		if (config_apply(&cli, cfg, o, o->type == OPT_BOOL && !optarg ? "1" : optarg))
			return -1;
		note_given(cfg, o);
		env_bad[c - 1000] = false;
		cfg->origin[c - 1000] = FROM_CLI;
	}
	return 0;
}

/* A bad variable the command line did not replace; then what follows the options. */
static int env_and_rest(struct runner_config *cfg, const bool *env_bad, int argc, char **argv,
			struct error *err)
{
	for (size_t i = 0; i < config_n_opts; i++) {
		if (env_bad[i]) {
			struct src env = {.env = config_opts[i].env, .err = err};
			if (!config_apply(&env, cfg, &config_opts[i], getenv(config_opts[i].env)))
				error_set(err, 0, NULL, "invalid %s", config_opts[i].env);
			return -1;
		}
	}
	if (optind < argc) {
		if (strcmp(argv[optind - 1], "--") != 0)
			return error_set(err, 0, NULL,
					 "unexpected argument '%s' (put the main command after --)",
					 argv[optind]);
		cfg->main_argv = &argv[optind];
	}
	return 0;
}

/* What needs every option known: the checks, and the defaults that depend on others. */
static int finish(struct runner_config *cfg, struct error *err)
{
	if (cfg->audit_head && !cfg->verify_audit)
		return error_set(err, 0, NULL,
				 "--audit-head is the head --verify-audit checks a trail against: "
				 "give --verify-audit FILE too");
	if (config_check_values(cfg, err) < 0 || otel_metrics_env(cfg, err) < 0 ||
	    config_check_secrets(cfg, err) < 0)
		return -1;
	if (cfg->gateway_key && !cfg->gateway_url)
		fprintf(stderr,
			"forceai-runner: warning: a gateway key is set but no --gateway-url\n");
	/* Vault mode: whoever reaches the gateway is authenticated (a sidecar
	 * adds the key), so an exec task with IP sockets could call models
	 * ungoverned. Only an explicit --exec-network full allows that. */
	if (cfg->gateway_url && !cfg->gateway_key && !cfg->exec_network_set)
		cfg->exec_network_none = true;
	if (cfg->one_shot && cfg->main_argv)
		return error_set(err, 0, NULL,
				 "--one-shot and a main command (-- CMD) both decide the exit "
				 "status: use one");
	return 0;
}

/* Defaults first, then the environment, then the command line. A bad
 * environment value only counts if the command line does not replace it. */
int config_parse(struct runner_config *cfg, int argc, char **argv, struct error *err)
{
	memset(cfg, 0, sizeof(*cfg));
	if (help_or_version(argc, argv))
		return 1;
	bool env_bad[CONFIG_MAX_OPTS] = {false};
	if (apply_defaults(cfg, err) < 0)
		return -1;
	apply_env(cfg, env_bad);
	take_env_secrets(cfg);
	int rc = parse_argv(cfg, argc, argv, env_bad, err);
	if (rc != 0)
		return rc;
	if (env_and_rest(cfg, env_bad, argc, argv, err) < 0)
		return -1;
	return finish(cfg, err);
}

void config_free(struct runner_config *cfg)
{
	for (unsigned i = 0; i < cfg->n_agent_engines; i++)
		free((char *)cfg->agent_engine[i]);
	cfg->n_agent_engines = 0;
	if (cfg->gateway_key) {
		explicit_bzero(cfg->gateway_key, strlen(cfg->gateway_key));
		free(cfg->gateway_key);
		cfg->gateway_key = NULL;
	}
	if (cfg->token) {
		explicit_bzero(cfg->token, strlen(cfg->token));
		free(cfg->token);
		cfg->token = NULL;
	}
}
