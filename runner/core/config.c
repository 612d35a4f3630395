/* Command line and environment into struct runner_config: every option has an
 * environment variable, the command line wins (the table: config_options.c).
 * A bad value is one message naming the option, or the variable it came from,
 * the value and what is expected (main prints it and exits 2). */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_internal.h"
#include "core/error.h"
#include "core/version.h"

/* ---- one value of one option, by the option's type ---- */

static int parse_listen(const struct src *src, struct runner_config *cfg, const char *val)
{
	const char *colon;
	char host[64];
	if (val[0] == '[') {
		const char *close = strchr(val, ']');
		if (!close || close[1] != ':')
			return config_bad(src, "listen", val, "expected [IPv6]:PORT");
		size_t n = (size_t)(close - val - 1);
		if (n >= sizeof(host))
			return config_bad(src, "listen", val, "address too long");
		memcpy(host, val + 1, n);
		host[n] = 0;
		colon = close + 1;
		struct in6_addr a6;
		if (inet_pton(AF_INET6, host, &a6) != 1)
			return config_bad(src, "listen", val, "not a numeric IPv6 address");
	} else {
		colon = strrchr(val, ':');
		if (!colon)
			return config_bad(src, "listen", val, "expected ADDR:PORT");
		size_t n = (size_t)(colon - val);
		if (n == 0 || n >= sizeof(host))
			return config_bad(src, "listen", val, "missing or too long address");
		memcpy(host, val, n);
		host[n] = 0;
		struct in_addr a4;
		if (inet_pton(AF_INET, host, &a4) != 1)
			return config_bad(src, "listen", val, "not a numeric IPv4 address");
	}
	uint64_t port;
	if (config_parse_u64(colon + 1, &port) < 0 || port > 65535)
		return config_bad(src, "listen", val, "port must be a number 0-65535");
	snprintf(cfg->listen_host, sizeof(cfg->listen_host), "%s", host);
	cfg->listen_port = (unsigned)port;
	return 0;
}

static int parse_user(const struct src *src, struct runner_config *cfg, const char *val)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", val);
	char *colon = strchr(buf, ':');
	uint64_t uid, gid;
	if (colon)
		*colon = 0;
	if (config_parse_u64(buf, &uid) < 0 || uid > 0xfffffffe)
		return config_bad(src, "task-user", val, "expected numeric UID[:GID]");
	gid = uid;
	if (colon && (config_parse_u64(colon + 1, &gid) < 0 || gid > 0xfffffffe))
		return config_bad(src, "task-user", val, "expected numeric UID[:GID]");
	cfg->task_uid = (uid_t)uid;
	cfg->task_gid = (gid_t)gid;
	return 0;
}

/* LO-HI: the uids/gids requests may ask for (see core/ids.h). */
static int parse_id_range(const struct src *src, struct runner_config *cfg, const char *val)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", val);
	char *dash = strchr(buf, '-');
	uint64_t lo, hi;
	if (!dash)
		return config_bad(src, "task-id-range", val, "expected LO-HI, e.g. 1000-60000");
	*dash = 0;
	if (config_parse_u64(buf, &lo) < 0 || config_parse_u64(dash + 1, &hi) < 0 ||
	    hi > 0xfffffffe)
		return config_bad(src, "task-id-range", val,
				  "expected LO-HI, numbers up to 4294967294");
	if (lo == 0 || lo > hi)
		return config_bad(src, "task-id-range", val,
				  "LO must be 1..HI (uid 0 only with --allow-root-tasks)");
	cfg->task_id_lo = (uint32_t)lo;
	cfg->task_id_hi = (uint32_t)hi;
	return 0;
}

/* "max", "QUOTA", "max PERIOD" or "QUOTA PERIOD" (microseconds; the
 * kernel's bounds: QUOTA >= 1000, PERIOD 1000..1000000). Plain "max" is what
 * a new cgroup has already: nothing to write (NULL), so the default needs
 * no cpu controller. */
static int parse_cpu_max(const struct src *src, const char *opt, const char *val, const char **out)
{
	char quota[32];
	const char *sp = strchr(val, ' ');
	size_t qlen = sp ? (size_t)(sp - val) : strlen(val);
	uint64_t q = 0, period = 100000;
	if (qlen == 0 || qlen >= sizeof(quota))
		return config_bad(src, opt, val, "expected \"QUOTA PERIOD\", QUOTA or max");
	memcpy(quota, val, qlen);
	quota[qlen] = 0;
	bool is_max = !strcmp(quota, "max");
	if (!is_max && (config_parse_u64(quota, &q) < 0 || q < 1000))
		return config_bad(src, opt, val,
				  "QUOTA must be max or a number of microseconds >= 1000");
	if (sp && (config_parse_u64(sp + 1, &period) < 0 || period < 1000 || period > 1000000))
		return config_bad(src, opt, val, "PERIOD must be 1000..1000000 microseconds");
	*out = is_max && !sp ? NULL : val;
	return 0;
}

/* A proxy URL as libcurl takes it, with a scheme said: http, https, socks4,
 * socks4a, socks5 or socks5h, and a host. */
static int parse_proxy(const struct src *src, const char *opt, const char *val)
{
	static const char *const schemes[] = {"http",    "https",  "socks4",
					      "socks4a", "socks5", "socks5h"};
	CURLU *u = curl_url();
	if (!u)
		return config_bad(src, opt, val, "out of memory");
	char *scheme = NULL, *host = NULL;
	int rc = 0;
	if (curl_url_set(u, CURLUPART_URL, val, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host) {
		rc = config_bad(src, opt, val, "expected a proxy URL, e.g. http://proxy:3128");
	} else {
		rc = config_bad(src, opt, val,
				"the scheme must be http, https, socks4, socks4a, socks5 or "
				"socks5h");
		for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
			if (!strcmp(scheme, schemes[i]))
				rc = 0;
	}
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return rc;
}

/* Colon-separated absolute paths, none empty. */
static int parse_roots(const struct src *src, const char *opt, const char *val)
{
	for (const char *p = val;;) {
		size_t n = strcspn(p, ":");
		if (n == 0)
			return config_bad(src, opt, val, "an empty entry (expected /A:/B)");
		if (p[0] != '/')
			return config_bad(src, opt, val, "every entry must be an absolute path");
		if (!p[n])
			return 0;
		p += n + 1;
	}
}

/* NAME=PATH[,NAME=PATH...]: a lower-case name and an absolute path each. */
static int parse_engines(const struct src *src, struct runner_config *cfg, const char *val)
{
	const char *p = val;
	while (*p) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', n);
		if (!eq || eq == p || eq + 1 == p + n || eq[1] != '/')
			return config_bad(src, "agent-engine", val, "expected NAME=/absolute/path");
		for (const char *c = p; c < eq; c++)
			if (!((*c >= 'a' && *c <= 'z') || *c == '-'))
				return config_bad(src, "agent-engine", val,
						  "an engine name is lower-case letters and '-'");
		if (cfg->n_agent_engines == AGENT_ENGINES_MAX)
			return config_bad(src, "agent-engine", val, "at most 8 engines");
		char *one = strndup(p, n);
		if (!one)
			return error_set(src->err, ENOMEM, NULL, "--agent-engine");
		cfg->agent_engine[cfg->n_agent_engines++] = one;
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
}

/* The string types are kept as given once checked; the others are converted. */
static int config_apply(const struct src *src, struct runner_config *cfg, const struct opt_def *o,
			const char *val)
{
	char *base = (char *)cfg;
	uint64_t v;
	switch (o->type) {
	case OPT_STR:
		if (!*val)
			return config_bad(src, o->name, val, "must not be empty");
		break;
	case OPT_U64:
		if (config_parse_u64(val, &v) < 0)
			return config_bad(src, o->name, val, "not a non-negative integer");
		*(uint64_t *)(base + o->off) = v;
		return 0;
	case OPT_UINT:
		if (config_parse_u64(val, &v) < 0 || v == 0 || v > 1000000)
			return config_bad(src, o->name, val, "not an integer in 1..1000000");
		*(unsigned *)(base + o->off) = (unsigned)v;
		return 0;
	case OPT_BOOL:
		/* on/off too: execd's EXECD_RUNTIME_INIT and EXECD_INIT take them. */
		if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "yes") ||
		    !strcmp(val, "on"))
			*(bool *)(base + o->off) = true;
		else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "no") ||
			 !strcmp(val, "off") || !*val)
			*(bool *)(base + o->off) = false;
		else
			return config_bad(src, o->name, val,
					  "expected 1/0, true/false, yes/no or on/off");
		return 0;
	case OPT_LISTEN:
		return parse_listen(src, cfg, val);
	case OPT_USER:
		return parse_user(src, cfg, val);
	case OPT_TOKEN_FILE:
		return config_read_secret(src, &cfg->token, &cfg->token_file, o->name, val);
	case OPT_KEY_FILE:
		return config_read_secret(src, &cfg->gateway_key, &cfg->key_file, o->name, val);
	case OPT_ID_RANGE:
		return parse_id_range(src, cfg, val);
	case OPT_NETWORK:
		if (strcmp(val, "full") && strcmp(val, "none"))
			return config_bad(src, o->name, val, "expected full or none");
		*(bool *)(base + o->off) = !strcmp(val, "none");
		return 0;
	case OPT_ENGINE:
		return parse_engines(src, cfg, val);
	case OPT_PORT:
		if (config_parse_u64(val, &v) < 0 || v > 65535)
			return config_bad(src, o->name, val, "not a port number 0-65535");
		*(unsigned *)(base + o->off) = (unsigned)v;
		return 0;
	case OPT_PATH:
		if (val[0] != '/')
			return config_bad(src, o->name, val, "must be an absolute path");
		break;
	case OPT_CPU_MAX:
		return parse_cpu_max(src, o->name, val, (const char **)(base + o->off));
	case OPT_PROXY:
		if (parse_proxy(src, o->name, val) < 0)
			return -1;
		break;
	case OPT_ROOTS:
		if (parse_roots(src, o->name, val) < 0)
			return -1;
		break;
	}
	*(const char **)(base + o->off) = val;
	return 0;
}

/* ---- the defaults, the environment, the command line ---- */

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
 * to mean another option when one is added (docs/design/architecture.md#options-one-set-of-rules).
 * text is the argument as given ("--name" or "--name=value"). */
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
 * them (docs/design/audit.md#the-metrics-over-otlp): variables only, checked here so a typo
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
