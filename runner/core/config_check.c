/* The checks made once every option is known: bounds that the option's type
 * does not hold, and the checks that need more than one option. One table, in
 * the order they run: with several problems the first is told. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <string.h>

#include "core/config_internal.h"
#include "core/error.h"

static bool given(const struct runner_config *cfg, const char *opt)
{
	for (size_t i = 0; i < config_n_opts; i++)
		if (!strcmp(config_opts[i].name, opt))
			return cfg->origin[i] != FROM_DEFAULT;
	return false;
}

/* A value out of bounds, named as it was given. */
static int out_of_bounds(const struct runner_config *cfg, const char *opt, uint64_t v,
			 const char *why, struct error *err)
{
	struct src s = config_src(cfg, opt, err);
	return config_bad_num(&s, opt, v, why);
}

/* The gateway URL: http or https, a host, no credentials, no query or
 * fragment (paths are appended to it). */
static int gateway_base_url(const struct src *src, const char *opt, const char *url)
{
	CURLU *u = curl_url();
	if (!u)
		return config_bad(src, opt, url, "out of memory");
	int rc = 0;
	char *scheme = NULL, *host = NULL, *user = NULL, *query = NULL, *frag = NULL;
	if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
		rc = config_bad(src, opt, url, "not a valid absolute URL");
		goto out;
	}
	curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
	curl_url_get(u, CURLUPART_HOST, &host, 0);
	curl_url_get(u, CURLUPART_USER, &user, 0);
	curl_url_get(u, CURLUPART_QUERY, &query, 0);
	curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0);
	if (!scheme || (strcmp(scheme, "http") && strcmp(scheme, "https")))
		rc = config_bad(src, opt, url, "the scheme must be http or https");
	else if (!host || !*host)
		rc = config_bad(src, opt, url, "no host");
	else if (user)
		rc = config_bad(src, opt, "(redacted)",
				"credentials in the URL are not allowed (use FORCEAI_GATEWAY_KEY)");
	else if (query || frag)
		rc = config_bad(src, opt, url, "no query or fragment allowed");
out:
	curl_free(scheme);
	curl_free(host);
	curl_free(user);
	curl_free(query);
	curl_free(frag);
	curl_url_cleanup(u);
	return rc;
}

/* An extra listener's ADDR:PORT: the same form as --listen's IPv4 one, checked here so a bad
 * value is a usage error (the listener itself starts in main). */
static int listen_addr(const struct src *s, const char *name, const char *v)
{
	const char *colon = strrchr(v, ':');
	char host[64];
	struct in_addr a4;
	uint64_t port;
	size_t n = colon ? (size_t)(colon - v) : 0;
	if (!colon || !n || n >= sizeof(host))
		return config_bad(s, name, v, "expected ADDR:PORT");
	memcpy(host, v, n);
	host[n] = 0;
	if (inet_pton(AF_INET, host, &a4) != 1)
		return config_bad(s, name, v, "not a numeric IPv4 address");
	if (config_parse_u64(colon + 1, &port) < 0 || port > 65535)
		return config_bad(s, name, v, "port must be 0..65535");
	return 0;
}

/* The output kept per task holds at least four stream windows. Name the
 * one the user set (both: the window). */
static int check_log_window(const struct runner_config *cfg, struct error *err)
{
	if (cfg->stream_window <= cfg->task_log_max / 4)
		return 0;
	char why[160];
	if (given(cfg, "stream-window")) {
		snprintf(why, sizeof(why), "must be at most task-log-max/4 (%llu)",
			 (unsigned long long)(cfg->task_log_max / 4));
		return out_of_bounds(cfg, "stream-window", cfg->stream_window, why, err);
	}
	snprintf(why, sizeof(why),
		 "must be at least 4 x --stream-window (%llu, its default): %llu; or "
		 "lower --stream-window",
		 (unsigned long long)cfg->stream_window,
		 (unsigned long long)cfg->stream_window * 4);
	return out_of_bounds(cfg, "task-log-max", cfg->task_log_max, why, err);
}

static int check_root_user(const struct runner_config *cfg, struct error *err)
{
	if (cfg->task_uid == 0 && !cfg->allow_root_tasks)
		return out_of_bounds(cfg, "task-user", 0, "uid 0 needs --allow-root-tasks", err);
	return 0;
}

static int abs_path(const struct src *s, const char *opt, const char *v)
{
	return v[0] == '/' ? 0 : config_bad(s, opt, v, "must be an absolute path");
}

static int http_url(const struct src *s, const char *opt, const char *v)
{
	if (strncmp(v, "http://", 7) && strncmp(v, "https://", 8))
		return config_bad(s, opt, v, "the scheme must be http or https");
	return 0;
}

/* Each allowed Origin is "*" or scheme://host[:port], exactly as browsers send it. */
static int origins(const struct src *s, const char *opt, const char *list)
{
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ",");
		char one[256];
		snprintf(one, sizeof(one), "%.*s", (int)(n < 255 ? n : 255), p);
		char *o = one + strspn(one, " \t");
		for (size_t k = strlen(o); k && (o[k - 1] == ' ' || o[k - 1] == '\t'); k--)
			o[k - 1] = 0;
		const char *h = !strncmp(o, "http://", 7)    ? o + 7
				: !strncmp(o, "https://", 8) ? o + 8
							     : NULL;
		if (strcmp(o, "*") && (!h || !*h || strpbrk(h, "/?# \t") || n >= 255))
			return config_bad(s, opt, list,
					  "each entry must be * or http(s)://host[:port]");
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
}

/* A bound on a number (lo..hi), a check of a string option when it is set
 * (str), or one that needs more than one option (fn). */
struct check {
	const char *opt;
	size_t off;    /* of the field, into struct runner_config */
	size_t size;   /* of the field: uint64_t or unsigned */
	bool if_given; /* only a value given is checked (its default is "unset") */
	uint64_t lo, hi;
	const char *why;
	int (*str)(const struct src *s, const char *opt, const char *v);
	int (*fn)(const struct runner_config *cfg, struct error *err);
};

/* clang-format off */
#define FIELD(f) OFF(f), sizeof(((struct runner_config *)0)->f)
#define RANGE(opt, f, lo, hi, why) {opt, FIELD(f), false, lo, hi, why, NULL, NULL}
#define AT_LEAST(opt, f, lo, why) RANGE(opt, f, lo, UINT64_MAX, why)
/* "0 = none" where none is possible; where it is not, 0 is refused. */
#define NOT_ZERO(opt, f, why) {opt, FIELD(f), true, 1, UINT64_MAX, why, NULL, NULL}
#define STRING(opt, f, check) {opt, FIELD(f), .str = check}
#define CHECK(f) {.fn = f}
/* clang-format on */

static const struct check checks[] = {
	RANGE("grace-ms", grace_ms, 0, 3600000, "must be at most 3600000"),
	AT_LEAST("task-log-max", task_log_max, 65536, "must be at least 65536"),
	AT_LEAST("stream-window", stream_window, 4096, "must be at least 4096"),
	CHECK(check_log_window),
	AT_LEAST("max-body", max_body, 1024, "must be at least 1024"),
	RANGE("header-deadline-ms", header_deadline_ms, 100, 600000, "must be 100..600000"),
	NOT_ZERO("gateway-connect-timeout-ms", gateway_connect_timeout_ms,
		 "must be at least 1 (a connection attempt always has a time limit)"),
	NOT_ZERO("reset-snapshot-max", reset_snapshot_max, "must be at least 1"),
	NOT_ZERO("checkpoint-max-bytes", checkpoint_max_bytes, "must be at least 1"),
	RANGE("checkpoint-max-watches", checkpoint_max_watches, 1, 10000000, "must be 1..10000000"),
	NOT_ZERO("limit-nproc", rlimit_nproc,
		 "must be at least 1 (leave it unset for the built-in default)"),
	NOT_ZERO("limit-nofile", rlimit_nofile,
		 "must be at least 1 (leave it unset for the built-in default)"),
	CHECK(check_root_user),
	STRING("gateway-url", gateway_url, gateway_base_url),
	RANGE("agent-max-steps", agent_max_steps, 1, 10000, "must be 1..10000"),
	RANGE("agent-output-max", agent_output_max, 256, 1048576, "must be 256..1048576"),
	RANGE("mcp-max-body", mcp_max_body, 1024, 64ULL << 20, "must be from 1024 to 67108864"),
	STRING("mcp-servers", mcp_servers, abs_path),
	STRING("mcp-allowed-origins", mcp_allowed_origins, origins),
	AT_LEAST("mcp-max-sessions", mcp_max_sessions, 1, "must be at least 1"),
	AT_LEAST("mcp-max-inflight", mcp_max_inflight, 1, "must be at least 1"),
	STRING("otlp-endpoint", otlp_endpoint, http_url),
	RANGE("audit-rate", audit_rate, 10, 1000000, "must be 10..1000000 (events per second)"),
	RANGE("audit-ring-max", audit_ring_max, 65536, 1ULL << 30,
	      "must be 65536..1073741824 (bytes)"),
	RANGE("agent-context-max", agent_context_max, 16384, 64ULL << 20,
	      "must be 16384..67108864 (bytes)"),
	RANGE("code-max-contexts", code_max_contexts, 1, 1024, "must be 1..1024"),
	RANGE("code-result-max", code_result_max, 65536, 256ULL << 20,
	      "must be 65536..268435456 (bytes)"),
	STRING("code-interpreter-listen", code_interpreter_listen, listen_addr),
	STRING("envd-listen", envd_listen, listen_addr),
	AT_LEAST("code-output-max", code_output_max, 1, "must be at least 1 (bytes)"),
};

int config_check_values(const struct runner_config *cfg, struct error *err)
{
	for (const struct check *c = checks; c < checks + sizeof(checks) / sizeof(checks[0]); c++) {
		if (c->fn) {
			if (c->fn(cfg, err) < 0)
				return -1;
			continue;
		}
		const char *p = (const char *)cfg + c->off;
		struct src s = config_src(cfg, c->opt, err);
		if (c->str) {
			const char *v = *(const char *const *)p;
			if (v && c->str(&s, c->opt, v) < 0)
				return -1;
			continue;
		}
		uint64_t v = c->size == sizeof(uint64_t) ? *(const uint64_t *)p
							 : *(const unsigned *)p;
		if ((v < c->lo || v > c->hi) && (!c->if_given || given(cfg, c->opt)))
			return config_bad_num(&s, c->opt, v, c->why);
	}
	return 0;
}
