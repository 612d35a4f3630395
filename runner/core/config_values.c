/* One value of one option into struct runner_config, by the option's type
 * (config_internal.h): a bad value is one message naming the option, or the
 * variable it came from, the value and what is expected. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_internal.h"
#include "core/error.h"

int config_bad(const struct src *src, const char *opt, const char *val, const char *why)
{
	if (src->env)
		return error_set(src->err, 0, NULL, "invalid %s '%s': %s", src->env, val, why);
	return error_set(src->err, 0, NULL, "invalid --%s '%s': %s", opt, val, why);
}

int config_bad_num(const struct src *src, const char *opt, uint64_t val, const char *why)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)val);
	return config_bad(src, opt, buf, why);
}

struct src config_src(const struct runner_config *cfg, const char *opt, struct error *err)
{
	for (size_t i = 0; i < config_n_opts; i++)
		if (!strcmp(config_opts[i].name, opt))
			return (struct src){.env = cfg->origin[i] == FROM_ENV ? config_opts[i].env
									      : NULL,
					    .err = err};
	return (struct src){.err = err};
}

int config_parse_u64(const char *s, uint64_t *out)
{
	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

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
int config_apply(const struct src *src, struct runner_config *cfg, const struct opt_def *o,
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
