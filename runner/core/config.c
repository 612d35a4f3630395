/* Command line and environment: every option has an environment variable,
 * the command line wins. A usage error is one message naming the problem
 * (main prints it and exits 2). */
#include "core/config.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/ids.h"
#include "core/fileio.h"
#include "core/version.h"

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

static const struct opt_def opts[] = {
	{"listen", "FORCEAI_RUNNER_LISTEN", OPT_LISTEN, 0, "0.0.0.0:8080",
	 "address and port of the HTTP endpoint (IPv4 or [IPv6])"},
	{"grace-ms", "FORCEAI_RUNNER_GRACE_MS", OPT_U64, OFF(grace_ms), "5000",
	 "time between SIGTERM and SIGKILL when stopping task trees and the main child (ms, "
	 "0..3600000; 0 = SIGKILL right after SIGTERM)"},
	{"token-file", "FORCEAI_RUNNER_TOKEN_FILE", OPT_TOKEN_FILE, 0, NULL,
	 "file holding the access token required in X-EXECD-ACCESS-TOKEN (or EXECD_ACCESS_TOKEN)"},
	{"state-dir", "FORCEAI_RUNNER_STATE_DIR", OPT_PATH, OFF(state_dir), "/run/forceai-runner",
	 "private directory (0700) for task output spools"},
	{"seccomp-policy", "FORCEAI_SECCOMP_POLICY", OPT_PATH, OFF(seccomp_policy),
	 "/etc/forceai-runner/seccomp.json",
	 "OCI seccomp JSON policy applied to every task (outside the image: the repository's "
	 "seccomp/default.json)"},
	{"task-user", "FORCEAI_TASK_USER", OPT_USER, 0, "1000:1000", "UID:GID tasks run as"},
	{"allow-root-tasks", "FORCEAI_ALLOW_ROOT_TASKS", OPT_BOOL, OFF(allow_root_tasks), "0",
	 "honour uid/gid 0 in requests (root tasks still have no capabilities)"},
	{"task-id-range", "FORCEAI_TASK_ID_RANGE", OPT_ID_RANGE, 0, "1000-4294967294",
	 "uids/gids a request may ask for, besides the task user's own (65534 and gids below "
	 "1000 never)"},
	{"exec-network", "FORCEAI_EXEC_NETWORK", OPT_NETWORK, OFF(exec_network_none), "full",
	 "network of exec tasks unless the request says: full, or none (no IP sockets); "
	 "vault mode (a gateway, no key) makes none the default unless this is given"},
	{"max-tasks", "FORCEAI_MAX_TASKS", OPT_UINT, OFF(max_tasks), "64",
	 "running tasks at once, 1..1000000; more get 429"},
	{"max-body", "FORCEAI_MAX_BODY", OPT_U64, OFF(max_body), "1048576",
	 "largest JSON request body in bytes, at least 1024; larger get 413"},
	{"task-log-max", "FORCEAI_TASK_LOG_MAX", OPT_U64, OFF(task_log_max), "16777216",
	 "output retained per task for re-attach and logs (bytes, at least 65536 and 4 x "
	 "--stream-window; oldest dropped beyond)"},
	{"stream-window", "FORCEAI_STREAM_WINDOW", OPT_U64, OFF(stream_window), "1048576",
	 "bytes a connected client may lag before the task's pipe is paused (4096 .. "
	 "task-log-max/4)"},
	{"retain-count", "FORCEAI_RETAIN_COUNT", OPT_UINT, OFF(retain_count), "256",
	 "finished task records kept, 1..1000000 (the oldest beyond go at the next tick, "
	 "once a second)"},
	{"retain-ms", "FORCEAI_RETAIN_MS", OPT_U64, OFF(retain_ms), "900000",
	 "how long finished task records are kept (ms; 0 = until the next tick)"},
	{"idle-timeout-ms", "FORCEAI_IDLE_TIMEOUT_MS", OPT_U64, OFF(header_timeout_ms), "15000",
	 "a connection idle this long (e.g. headers never finished) is closed (0 = none)"},
	{"header-deadline-ms", "FORCEAI_HEADER_DEADLINE_MS", OPT_U64, OFF(header_deadline_ms),
	 "5000",
	 "a new connection that has not sent a whole request head by then is closed (ms, "
	 "100..600000)"},
	{"max-client-connections", "FORCEAI_MAX_CLIENT_CONNECTIONS", OPT_UINT,
	 OFF(max_client_conns), "512",
	 "connections at once from one client (address, or uid "
	 "inside the box), 1..1000000"},
	{"proxy-timeout-ms", "FORCEAI_PROXY_TIMEOUT_MS", OPT_U64, OFF(proxy_timeout_ms), "60000",
	 "time a server behind /proxy/{port} has to take a request and start its answer (504; "
	 "0 = none)"},
	{"landlock-roots", "FORCEAI_LANDLOCK_ROOTS", OPT_ROOTS, OFF(landlock_roots),
	 "/workspace:/tmp:/var/tmp:/home",
	 "colon-separated roots tasks may write under (Landlock)"},
	{"execd-envs", "EXECD_ENVS", OPT_PATH, OFF(execd_envs), NULL,
	 "OpenSandbox's extra-environment file (KEY='value' lines), read again for every command; "
	 "a request's envs win; tasks may write that one file"},
	{"limit-nproc", "FORCEAI_LIMIT_NPROC", OPT_U64, OFF(rlimit_nproc), NULL,
	 "RLIMIT_NPROC of tasks: processes and threads of the task uid, all tasks together "
	 "(unset: 4096, or 32768 where each task's cgroup has pids.max)"},
	{"limit-nofile", "FORCEAI_LIMIT_NOFILE", OPT_U64, OFF(rlimit_nofile), NULL,
	 "RLIMIT_NOFILE of tasks (unset: 65536)"},
	{"limit-as", "FORCEAI_LIMIT_AS", OPT_U64, OFF(rlimit_as), "0",
	 "RLIMIT_AS of tasks in bytes (0 = unlimited)"},
	{"limit-fsize", "FORCEAI_LIMIT_FSIZE", OPT_U64, OFF(rlimit_fsize), "0",
	 "RLIMIT_FSIZE of tasks in bytes (0 = unlimited)"},
	{"gateway-url", "FORCEAI_GATEWAY_URL", OPT_STR, OFF(gateway_url), NULL,
	 "OpenAI-compatible base URL of the model gateway (http/https), e.g. https://gw/v1"},
	{"gateway-key-file", "FORCEAI_GATEWAY_KEY_FILE", OPT_KEY_FILE, 0, NULL,
	 "file holding the gateway key (or FORCEAI_GATEWAY_KEY); none = vault mode"},
	{"gateway-ca", "FORCEAI_GATEWAY_CA", OPT_PATH, OFF(gateway_ca), NULL,
	 "CA bundle (PEM) trusted for the gateway, checked at start (else SSL_CERT_FILE, "
	 "CURL_CA_BUNDLE, system)"},
	{"gateway-proxy", "FORCEAI_GATEWAY_PROXY", OPT_PROXY, OFF(gateway_proxy), NULL,
	 "HTTP proxy for gateway calls (proxy environment variables are ignored)"},
	{"gateway-connect-timeout-ms", "FORCEAI_GATEWAY_CONNECT_TIMEOUT_MS", OPT_U64,
	 OFF(gateway_connect_timeout_ms), "10000",
	 "connect timeout of gateway calls (ms, at least 1)"},
	{"gateway-timeout-ms", "FORCEAI_GATEWAY_TIMEOUT_MS", OPT_U64, OFF(gateway_timeout_ms),
	 "600000", "overall timeout of one gateway call (ms, 0 = none)"},
	{"model", "FORCEAI_MODEL", OPT_STR, OFF(model), NULL,
	 "default model of agent tasks (a request's \"model\" wins)"},
	{"model-proxy-port", "FORCEAI_MODEL_PROXY_PORT", OPT_PORT, OFF(model_proxy_port), "0",
	 "port of the loopback model proxy for chat tasks (0 = ephemeral)"},
	{"agent-max-steps", "FORCEAI_AGENT_MAX_STEPS", OPT_U64, OFF(agent_max_steps), "20",
	 "default model turns of an agent task, 1..10000"},
	{"agent-timeout-ms", "FORCEAI_AGENT_TIMEOUT_MS", OPT_U64, OFF(agent_timeout_ms), "1800000",
	 "default time limit of an agent task (ms, 0 = none)"},
	{"agent-max-tokens", "FORCEAI_AGENT_MAX_TOKENS", OPT_U64, OFF(agent_max_tokens), "0",
	 "default total-token limit of an agent task (0 = none)"},
	{"task-max-tokens", "FORCEAI_TASK_MAX_TOKENS", OPT_U64, OFF(task_max_tokens), "0",
	 "default model-token budget of a task, summed over all its model calls and formats "
	 "(0 = unlimited; request field max_tokens)"},
	{"task-max-model-requests", "FORCEAI_TASK_MAX_MODEL_REQUESTS", OPT_U64,
	 OFF(task_max_model_requests), "0",
	 "default number of model calls a task may make (0 = unlimited; request field "
	 "max_model_requests)"},
	{"agent-output-max", "FORCEAI_AGENT_OUTPUT_MAX", OPT_U64, OFF(agent_output_max), "16384",
	 "tool output fed back to the model per call (bytes, 256..1048576; head and tail kept)"},
	{"agent-engine", "FORCEAI_AGENT_ENGINE", OPT_ENGINE, 0, NULL,
	 "NAME=PATH: the CLI of agent engine NAME (codex, claude-code; repeatable, or "
	 "comma-separated in the variable; default: looked up on the task's PATH)"},
	{"agent-context-max", "FORCEAI_AGENT_CONTEXT_MAX", OPT_U64, OFF(agent_context_max),
	 "262144",
	 "bytes of conversation the built-in agent sends per model call, 16384..67108864 "
	 "(older tool output is elided beyond it)"},
	{"mcp-allowed-origins", "FORCEAI_MCP_ALLOWED_ORIGINS", OPT_STR, OFF(mcp_allowed_origins),
	 NULL,
	 "comma-separated Origin values /mcp accepts (\"*\": any); unset: the localhost forms, "
	 "which a list replaces (list them too to keep them)"},
	{"mcp-servers", "FORCEAI_MCP_SERVERS", OPT_STR, OFF(mcp_servers), NULL,
	 "JSON file {\"mcpServers\": {name: {command, args, env}}}: stdio MCP servers offered on "
	 "/mcp as name__tool, each started on first use as a confined task"},
	{"mcp-max-sessions", "FORCEAI_MCP_MAX_SESSIONS", OPT_UINT, OFF(mcp_max_sessions), "64",
	 "MCP sessions open at once on /mcp, 1..1000000"},
	{"mcp-max-inflight", "FORCEAI_MCP_MAX_INFLIGHT", OPT_UINT, OFF(mcp_max_inflight), "32",
	 "MCP tool calls running at once (all sessions), 1..1000000"},
	{"mcp-max-body", "FORCEAI_MCP_MAX_BODY", OPT_U64, OFF(mcp_max_body), "1048576",
	 "largest JSON-RPC message POSTed to /mcp (bytes, 1024..67108864)"},
	{"audit-file", "FORCEAI_AUDIT_FILE", OPT_PATH, OFF(audit_file), NULL,
	 "a copy of the audit trail, appended (refused inside a writable root)"},
	{"otlp-endpoint", "FORCEAI_OTLP_ENDPOINT", OPT_STR, OFF(otlp_endpoint), NULL,
	 "OTLP/HTTP JSON logs URL the audit trail is also sent to, e.g. "
	 "http://127.0.0.1:4318/v1/logs (batched each second; never blocks)"},
	{"audit-rate", "FORCEAI_AUDIT_RATE", OPT_UINT, OFF(audit_rate), "5000",
	 "audit events kept per second (bursts of as many), 10..1000000; beyond, a counted "
	 "\"events dropped\" marker"},
	{"audit-ring-max", "FORCEAI_AUDIT_RING_MAX", OPT_U64, OFF(audit_ring_max), "8388608",
	 "bytes of audit events GET /v1/audit keeps, 65536..1073741824"},
	{"insecure-no-audit", "FORCEAI_INSECURE_NO_AUDIT", OPT_BOOL, OFF(insecure_no_audit), "0",
	 "TEST ONLY: no audit trail at all (measures its cost)"},
	{"code-interpreter-listen", "FORCEAI_CODE_INTERPRETER_LISTEN", OPT_STR,
	 OFF(code_interpreter_listen), NULL,
	 "ADDR:PORT (numeric IPv4) of E2B's code-interpreter API (E2B's port is 49999); unset: "
	 "not served"},
	{"envd-listen", "FORCEAI_ENVD_LISTEN", OPT_STR, OFF(envd_listen), NULL,
	 "ADDR:PORT (numeric IPv4) of E2B's envd API, the SDK's commands, files and pty (E2B's "
	 "port is 49983); unset: not served"},
	{"envd-upload-max", "FORCEAI_ENVD_UPLOAD_MAX", OPT_U64, OFF(envd_upload_max), "4294967296",
	 "bytes one envd POST /files may write, all its files together and counted after gzip is "
	 "decoded; more get 413 (0 = no bound but the disk)"},
	{"code-max-contexts", "FORCEAI_CODE_MAX_CONTEXTS", OPT_UINT, OFF(code_max_contexts), "32",
	 "code contexts at once, 1..1024 (each a long-lived interpreter task)"},
	{"code-idle-timeout-ms", "FORCEAI_CODE_IDLE_TIMEOUT_MS", OPT_U64, OFF(code_idle_timeout_ms),
	 "1800000", "a code context unused this long ends (0 = never)"},
	{"code-exec-timeout-ms", "FORCEAI_CODE_EXEC_TIMEOUT_MS", OPT_U64, OFF(code_exec_timeout_ms),
	 "1800000",
	 "an execution running this long is interrupted, its interpreter killed 5 s later if it "
	 "goes on (0 = none)"},
	{"code-output-max", "FORCEAI_CODE_OUTPUT_MAX", OPT_U64, OFF(code_output_max), "67108864",
	 "stdout and stderr bytes one execution may print; beyond, dropped and interrupted"},
	{"code-result-max", "FORCEAI_CODE_RESULT_MAX", OPT_U64, OFF(code_result_max), "16777216",
	 "bytes of one rich result (a chart, a table), 65536..268435456; larger ones are dropped"},
	{"task-memory-max", "FORCEAI_TASK_MEMORY_MAX", OPT_U64, OFF(task_memory_max), "0",
	 "memory.max of each task's cgroup where cgroup v2 is delegated (bytes; 0 = max)"},
	{"task-pids-max", "FORCEAI_TASK_PIDS_MAX", OPT_U64, OFF(task_pids_max), "4096",
	 "pids.max of each task's cgroup where cgroup v2 is delegated (0 = max)"},
	{"task-cpu-max", "FORCEAI_TASK_CPU_MAX", OPT_CPU_MAX, OFF(task_cpu_max), "max",
	 "cpu.max of each task's cgroup where cgroup v2 is delegated (\"QUOTA PERIOD\" in us, "
	 "QUOTA >= 1000, PERIOD 1000..1000000; max = none)"},
	{"one-shot", "FORCEAI_RUNNER_ONE_SHOT", OPT_BOOL, OFF(one_shot), "0",
	 "serve exactly one task, then shut down and exit with its status"},
	{"allow-reset", "FORCEAI_ALLOW_RESET", OPT_BOOL, OFF(allow_reset), "0",
	 "enable POST /v1/reset: the writable roots are snapshotted at start and restored"},
	{"runtime-init", "EXECD_RUNTIME_INIT", OPT_BOOL, OFF(runtime_init), "0",
	 "execd runtime init (warm pools): no task runs until POST /internal/init binds the box "
	 "to a sandbox (id, generation, token hash, envs, lifecycle hooks)"},
	{"lifecycle-startup-status-file", "EXECD_LIFECYCLE_STARTUP_STATUS_FILE", OPT_PATH,
	 OFF(lifecycle_status_file), NULL,
	 "file the preStart lifecycle hook's result is written to as JSON (running, succeeded, "
	 "failed)"},
	{"reset-snapshot-max", "FORCEAI_RESET_SNAPSHOT_MAX", OPT_U64, OFF(reset_snapshot_max),
	 "268435456", "largest content of the writable roots kept for reset (bytes, at least 1)"},
	{"checkpoint-max-bytes", "FORCEAI_CHECKPOINT_MAX_BYTES", OPT_U64, OFF(checkpoint_max_bytes),
	 "1073741824",
	 "bytes of distinct file content all checkpoints may keep together (POST /v1/checkpoints "
	 "answers 507 beyond; at least 1)"},
	{"write-seccomp-cache", "FORCEAI_WRITE_SECCOMP_CACHE", OPT_BOOL, OFF(write_seccomp_cache),
	 "0",
	 "compile the seccomp policy into POLICY.bpf beside it and exit (image build: starts "
	 "then skip the compile)"},
	{"no-prefork-shim", "FORCEAI_NO_PREFORK_SHIM", OPT_BOOL, OFF(no_prefork_shim), "0",
	 "start every task's shim on its request instead of handing it to a spare shim started "
	 "ahead"},
	{"insecure-no-confine", "FORCEAI_INSECURE_NO_CONFINE", OPT_BOOL, OFF(insecure_no_confine),
	 "0", "TEST ONLY: run tasks without seccomp/capability/Landlock confinement"},
};
#define N_OPTS (sizeof(opts) / sizeof(opts[0]))

/* --help's groups, in the order and with the titles of docs/configuration.md,
 * so the two read alike. An option in no group is listed under "Other". */
static const struct {
	const char *title;
	const char *names; /* space-separated */
} groups[] = {
	{"Endpoint and access", "listen token-file max-body max-client-connections idle-timeout-ms "
				"header-deadline-ms proxy-timeout-ms"},
	{"Tasks", "task-user allow-root-tasks task-id-range exec-network max-tasks grace-ms "
		  "task-log-max stream-window retain-count retain-ms state-dir execd-envs"},
	{"Confinement and limits",
	 "seccomp-policy landlock-roots limit-nproc limit-nofile limit-as "
	 "limit-fsize task-memory-max task-pids-max task-cpu-max "
	 "write-seccomp-cache no-prefork-shim insecure-no-confine"},
	{"Profiles",
	 "one-shot allow-reset reset-snapshot-max runtime-init lifecycle-startup-status-file checkpoint-max-bytes"},
	{"Model gateway", "gateway-url gateway-key-file gateway-ca gateway-proxy "
			  "gateway-connect-timeout-ms gateway-timeout-ms model model-proxy-port "
			  "task-max-tokens task-max-model-requests"},
	{"Agents", "agent-max-steps agent-timeout-ms agent-max-tokens agent-output-max "
		   "agent-context-max agent-engine"},
	{"MCP", "mcp-allowed-origins mcp-servers mcp-max-sessions mcp-max-inflight mcp-max-body"},
	{"Audit trail", "audit-file otlp-endpoint audit-rate audit-ring-max insecure-no-audit"},
	{"Code interpreter", "code-interpreter-listen code-max-contexts code-idle-timeout-ms "
			     "code-exec-timeout-ms code-output-max code-result-max"},
	{"E2B envd", "envd-listen envd-upload-max"},
};

static void usage_opt(FILE *out, const struct opt_def *o)
{
	char left[64];
	snprintf(left, sizeof(left), "--%s%s", o->name, o->type == OPT_BOOL ? "" : " V");
	fprintf(out, "  %-24s %s\n  %-24s [%s%s%s]\n", left, o->help, "", o->env,
		o->def ? ", default " : "", o->def ? o->def : "");
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: forceai-runner [OPTIONS] [-- CMD [ARG...]]\n\n"
		"Init (PID 1) and task endpoint of a forceai sandbox box.\n"
		"With -- CMD, CMD is the box's main process and the runner exits with its status.\n"
		"Each option is also read from the environment variable shown; the command line\n"
		"wins. Options are spelled in full (no abbreviations). Bounds and what 0 means:\n"
		"docs/configuration.md. Exit status: 2 for a configuration error (a bad option or\n"
		"a file it names that cannot be read), 1 when the system refuses to start it.\n");
	bool shown[N_OPTS] = {false};
	for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
		fprintf(out, "\n%s:\n", groups[g].title);
		/* In the group's order, which is the document's. */
		for (const char *p = groups[g].names; *p;) {
			size_t n = strcspn(p, " ");
			for (size_t i = 0; i < N_OPTS; i++)
				if (strlen(opts[i].name) == n && !strncmp(opts[i].name, p, n)) {
					shown[i] = true;
					usage_opt(out, &opts[i]);
				}
			p += n + strspn(p + n, " ");
		}
	}
	bool title = false;
	for (size_t i = 0; i < N_OPTS; i++) {
		if (shown[i])
			continue;
		if (!title)
			fprintf(out, "\nOther:\n");
		title = true;
		usage_opt(out, &opts[i]);
	}
	fprintf(out, "\nProbe and information:\n");
	fprintf(out, "  %-24s %s\n", "--ping",
		"health probe: GET /ping from the runner these options describe (token included), "
		"exit 0 when it answers 200");
	fprintf(out, "  %-24s %s\n", "--verify-audit V",
		"check the hash chain of an audit trail as saved (stderr lines or --audit-file), "
		"exit 0 when unbroken, 1 naming the first break");
	fprintf(out, "  %-24s %s\n", "--audit-head V",
		"with --verify-audit: the head SEQ:HASH the runner published (GET /v1/audit, "
		"the reset's answer, its last log line); a trail cut before it exits 1");
	fprintf(out, "  %-24s %s\n  %-24s %s\n", "--version", "print the version and exit",
		"--help", "print this help and exit");
}

/* Where the value being applied comes from, for messages, and where a
 * problem goes. */
struct src {
	const char *env; /* the environment variable, or NULL: the command line */
	struct error *err;
};

static int bad(const struct src *src, const char *opt, const char *val, const char *why)
{
	if (src->env)
		return error_set(src->err, 0, NULL, "invalid %s '%s': %s", src->env, val, why);
	return error_set(src->err, 0, NULL, "invalid --%s '%s': %s", opt, val, why);
}

static int bad_num(const struct src *src, const char *opt, uint64_t val, const char *why)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)val);
	return bad(src, opt, buf, why);
}

static int parse_u64(const char *s, uint64_t *out)
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
			return bad(src, "listen", val, "expected [IPv6]:PORT");
		size_t n = (size_t)(close - val - 1);
		if (n >= sizeof(host))
			return bad(src, "listen", val, "address too long");
		memcpy(host, val + 1, n);
		host[n] = 0;
		colon = close + 1;
		struct in6_addr a6;
		if (inet_pton(AF_INET6, host, &a6) != 1)
			return bad(src, "listen", val, "not a numeric IPv6 address");
	} else {
		colon = strrchr(val, ':');
		if (!colon)
			return bad(src, "listen", val, "expected ADDR:PORT");
		size_t n = (size_t)(colon - val);
		if (n == 0 || n >= sizeof(host))
			return bad(src, "listen", val, "missing or too long address");
		memcpy(host, val, n);
		host[n] = 0;
		struct in_addr a4;
		if (inet_pton(AF_INET, host, &a4) != 1)
			return bad(src, "listen", val, "not a numeric IPv4 address");
	}
	uint64_t port;
	if (parse_u64(colon + 1, &port) < 0 || port > 65535)
		return bad(src, "listen", val, "port must be a number 0-65535");
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
	if (parse_u64(buf, &uid) < 0 || uid > 0xfffffffe)
		return bad(src, "task-user", val, "expected numeric UID[:GID]");
	gid = uid;
	if (colon && (parse_u64(colon + 1, &gid) < 0 || gid > 0xfffffffe))
		return bad(src, "task-user", val, "expected numeric UID[:GID]");
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
		return bad(src, "task-id-range", val, "expected LO-HI, e.g. 1000-60000");
	*dash = 0;
	if (parse_u64(buf, &lo) < 0 || parse_u64(dash + 1, &hi) < 0 || hi > 0xfffffffe)
		return bad(src, "task-id-range", val, "expected LO-HI, numbers up to 4294967294");
	if (lo == 0 || lo > hi)
		return bad(src, "task-id-range", val,
			   "LO must be 1..HI (uid 0 only with --allow-root-tasks)");
	cfg->task_id_lo = (uint32_t)lo;
	cfg->task_id_hi = (uint32_t)hi;
	return 0;
}

/* Read a secret from a file: first line, surrounding whitespace stripped.
 * The file's owner and mode are kept for check_secret_file(), which runs
 * once every option is known. */
static int read_secret_file(const struct src *src, char **dst, struct secret_file *sf,
			    const char *opt, const char *path)
{
	if (path[0] != '/')
		return bad(src, opt, path, "must be an absolute path");
	/* Before the loop and the signals exist: a FIFO left there (by a task
	 * of an earlier boot, on a volume) must not hold PID 1 in open().
	 * Links are followed: Kubernetes' secret volumes are made of them. */
	struct stat st;
	int fd = open_regular(AT_FDCWD, path, 0, SIZE_MAX, &st);
	if (fd == -EACCES && geteuid() != 0) {
		/* The file made root's (as a root runner is told to) cannot be
		 * read by one that is not; it takes the secret from the
		 * environment instead. */
		char why[256];
		snprintf(why, sizeof(why),
			 "%s; a runner that is not root (uid %u) takes the secret from %s instead "
			 "(Kubernetes: env valueFrom secretKeyRef)",
			 strerror(EACCES), (unsigned)geteuid(),
			 !strcmp(opt, "token-file") ? "EXECD_ACCESS_TOKEN" : "FORCEAI_GATEWAY_KEY");
		return bad(src, opt, path, why);
	}
	if (fd < 0)
		return bad(src, opt, path, open_regular_strerror(fd, &st));
	sf->path = path;
	sf->mode = st.st_mode;
	sf->uid = st.st_uid;
	sf->gid = st.st_gid;
	char buf[512];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	int err = errno;
	close(fd);
	if (n < 0)
		return bad(src, opt, path, strerror(err));
	buf[n] = 0;
	char *s = buf;
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	size_t len = strcspn(s, "\r\n");
	while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	if (len == 0)
		return bad(src, opt, path, "the file is empty");
	if (*dst) {
		explicit_bzero(*dst, strlen(*dst));
		free(*dst);
	}
	*dst = strndup(s, len);
	explicit_bzero(buf, sizeof(buf));
	return *dst ? 0 : error_set(src->err, ENOMEM, NULL, "--%s", opt);
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
		return bad(src, opt, val, "expected \"QUOTA PERIOD\", QUOTA or max");
	memcpy(quota, val, qlen);
	quota[qlen] = 0;
	bool is_max = !strcmp(quota, "max");
	if (!is_max && (parse_u64(quota, &q) < 0 || q < 1000))
		return bad(src, opt, val, "QUOTA must be max or a number of microseconds >= 1000");
	if (sp && (parse_u64(sp + 1, &period) < 0 || period < 1000 || period > 1000000))
		return bad(src, opt, val, "PERIOD must be 1000..1000000 microseconds");
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
		return bad(src, opt, val, "out of memory");
	char *scheme = NULL, *host = NULL;
	int rc = 0;
	if (curl_url_set(u, CURLUPART_URL, val, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host) {
		rc = bad(src, opt, val, "expected a proxy URL, e.g. http://proxy:3128");
	} else {
		rc = bad(src, opt, val,
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
			return bad(src, opt, val, "an empty entry (expected /A:/B)");
		if (p[0] != '/')
			return bad(src, opt, val, "every entry must be an absolute path");
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
			return bad(src, "agent-engine", val, "expected NAME=/absolute/path");
		for (const char *c = p; c < eq; c++)
			if (!((*c >= 'a' && *c <= 'z') || *c == '-'))
				return bad(src, "agent-engine", val,
					   "an engine name is lower-case letters and '-'");
		if (cfg->n_agent_engines == AGENT_ENGINES_MAX)
			return bad(src, "agent-engine", val, "at most 8 engines");
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

static int apply_opt(const struct src *src, struct runner_config *cfg, const struct opt_def *o,
		     const char *val)
{
	char *base = (char *)cfg;
	switch (o->type) {
	case OPT_STR:
		if (!*val)
			return bad(src, o->name, val, "must not be empty");
		*(const char **)(base + o->off) = val;
		return 0;
	case OPT_U64: {
		uint64_t v;
		if (parse_u64(val, &v) < 0)
			return bad(src, o->name, val, "not a non-negative integer");
		*(uint64_t *)(base + o->off) = v;
		return 0;
	}
	case OPT_UINT: {
		uint64_t v;
		if (parse_u64(val, &v) < 0 || v == 0 || v > 1000000)
			return bad(src, o->name, val, "not an integer in 1..1000000");
		*(unsigned *)(base + o->off) = (unsigned)v;
		return 0;
	}
	case OPT_BOOL:
		/* on/off too: execd's EXECD_RUNTIME_INIT and EXECD_INIT take them. */
		if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "yes") ||
		    !strcmp(val, "on"))
			*(bool *)(base + o->off) = true;
		else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "no") ||
			 !strcmp(val, "off") || !*val)
			*(bool *)(base + o->off) = false;
		else
			return bad(src, o->name, val, "expected 1/0, true/false, yes/no or on/off");
		return 0;
	case OPT_LISTEN:
		return parse_listen(src, cfg, val);
	case OPT_USER:
		return parse_user(src, cfg, val);
	case OPT_TOKEN_FILE:
		return read_secret_file(src, &cfg->token, &cfg->token_file, o->name, val);
	case OPT_KEY_FILE:
		return read_secret_file(src, &cfg->gateway_key, &cfg->key_file, o->name, val);
	case OPT_ID_RANGE:
		return parse_id_range(src, cfg, val);
	case OPT_NETWORK:
		if (strcmp(val, "full") && strcmp(val, "none"))
			return bad(src, o->name, val, "expected full or none");
		*(bool *)(base + o->off) = !strcmp(val, "none");
		return 0;
	case OPT_ENGINE:
		return parse_engines(src, cfg, val);
	case OPT_PORT: {
		uint64_t v;
		if (parse_u64(val, &v) < 0 || v > 65535)
			return bad(src, o->name, val, "not a port number 0-65535");
		*(unsigned *)(base + o->off) = (unsigned)v;
		return 0;
	}
	case OPT_PATH:
		if (val[0] != '/')
			return bad(src, o->name, val, "must be an absolute path");
		*(const char **)(base + o->off) = val;
		return 0;
	case OPT_CPU_MAX:
		return parse_cpu_max(src, o->name, val, (const char **)(base + o->off));
	case OPT_PROXY:
		if (parse_proxy(src, o->name, val) < 0)
			return -1;
		*(const char **)(base + o->off) = val;
		return 0;
	case OPT_ROOTS:
		if (parse_roots(src, o->name, val) < 0)
			return -1;
		*(const char **)(base + o->off) = val;
		return 0;
	}
	return error_set(src->err, 0, NULL, "--%s: unknown option type", o->name);
}

/* A secret file a task could read is the secret: refuse to start (exit 2)
 * unless only its owner can read it, and that owner is no identity a task
 * can have. Group read is allowed for a group no task can have (Kubernetes
 * fsGroup below 1000, say): tasks have no supplementary groups. */
static int check_secret_file(const struct runner_config *cfg, const struct secret_file *sf,
			     const char *opt, struct error *err)
{
	if (!sf->path)
		return 0;
	unsigned mode = (unsigned)sf->mode & 07777;
	char why[384];
	if (mode & 0007)
		snprintf(why, sizeof(why), "has mode %04o: %s by every user, tasks included", mode,
			 mode & 0002 ? "writable" : "readable");
	else if (mode & 0020)
		snprintf(why, sizeof(why), "has mode %04o: writable by its group", mode);
	else if ((mode & 0040) && ids_gid_allowed(cfg, sf->gid))
		snprintf(why, sizeof(why),
			 "has mode %04o and group %u, a gid tasks can run as (--task-user, "
			 "--task-id-range): tasks can read it",
			 mode, (unsigned)sf->gid);
	else if (ids_uid_allowed(cfg, sf->uid))
		snprintf(why, sizeof(why),
			 "is owned by uid %u, a uid tasks can run as (--task-user, "
			 "--task-id-range%s): tasks can read it",
			 (unsigned)sf->uid, sf->uid == 0 ? ", --allow-root-tasks" : "");
	else
		return 0;
	const char *var = !strcmp(opt, "token-file") ? "EXECD_ACCESS_TOKEN" : "FORCEAI_GATEWAY_KEY";
	/* chown root needs root: a runner that is not root (non-root mode) passes
	 * its secrets in the environment, which it removes from its own. */
	if (geteuid() != 0)
		return error_set(err, 0, NULL,
				 "--%s '%s' %s. A runner that is not root (uid %u) cannot make it "
				 "safe and refuses a secret file anyway (its tasks share its uid): "
				 "pass the secret in %s instead (Kubernetes: env valueFrom "
				 "secretKeyRef)",
				 opt, sf->path, why, (unsigned)geteuid(), var);
	return error_set(err, 0, NULL,
			 "--%s '%s' %s. Make it readable by its owner only and owned by a uid no "
			 "task can have, e.g. `chown root '%s' && chmod 0400 '%s'` (Kubernetes: "
			 "secret volume `defaultMode: 0400`, fsGroup below 1000 or none), or pass "
			 "the secret in %s%s",
			 opt, sf->path, why, sf->path, sf->path, var,
			 sf->uid == 0 && cfg->allow_root_tasks
				 ? "; with --allow-root-tasks root tasks own root's files: use "
				   "another owner (e.g. uid 999) or pass the secret in the "
				   "environment"
				 : "");
}

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

/* The gateway URL: http or https, a host, no credentials, no query or
 * fragment (paths are appended to it). */
static int validate_gateway_url(const struct src *src, const char *url)
{
	CURLU *u = curl_url();
	if (!u)
		return bad(src, "gateway-url", url, "out of memory");
	int rc = 0;
	char *scheme = NULL, *host = NULL, *user = NULL, *query = NULL, *frag = NULL;
	if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
		rc = bad(src, "gateway-url", url, "not a valid absolute URL");
		goto out;
	}
	curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
	curl_url_get(u, CURLUPART_HOST, &host, 0);
	curl_url_get(u, CURLUPART_USER, &user, 0);
	curl_url_get(u, CURLUPART_QUERY, &query, 0);
	curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0);
	if (!scheme || (strcmp(scheme, "http") && strcmp(scheme, "https")))
		rc = bad(src, "gateway-url", url, "the scheme must be http or https");
	else if (!host || !*host)
		rc = bad(src, "gateway-url", url, "no host");
	else if (user)
		rc = bad(src, "gateway-url", "(redacted)",
			 "credentials in the URL are not allowed (use FORCEAI_GATEWAY_KEY)");
	else if (query || frag)
		rc = bad(src, "gateway-url", url, "no query or fragment allowed");
out:
	curl_free(scheme);
	curl_free(host);
	curl_free(user);
	curl_free(query);
	curl_free(frag);
	curl_url_cleanup(u);
	return rc;
}

/* Where each option's value came from: the checks made once every option
 * is known name the option, or the variable when it came from there. */
enum origin { FROM_DEFAULT, FROM_ENV, FROM_CLI };

static struct src src_of(const enum origin *from, const char *opt, struct error *err)
{
	for (size_t i = 0; i < N_OPTS; i++)
		if (!strcmp(opts[i].name, opt))
			return (struct src){.env = from[i] == FROM_ENV ? opts[i].env : NULL,
					    .err = err};
	return (struct src){.err = err};
}

static bool given(const enum origin *from, const char *opt)
{
	for (size_t i = 0; i < N_OPTS; i++)
		if (!strcmp(opts[i].name, opt))
			return from[i] != FROM_DEFAULT;
	return false;
}

/* A value out of bounds, named as it was given. */
static int out_of_bounds(const enum origin *from, const char *opt, uint64_t v, const char *why,
			 struct error *err)
{
	struct src s = src_of(from, opt, err);
	return bad_num(&s, opt, v, why);
}

/* The checks that need more than one option, or a bound: after parsing. */

/* An extra listener's ADDR:PORT: the same form as --listen's IPv4 one, checked here so a bad
 * value is a usage error (the listener itself starts in main). */
static int listen_check(const enum origin *from, const char *name, const char *v, struct error *err)
{
	const char *colon = strrchr(v, ':');
	char host[64];
	struct in_addr a4;
	uint64_t port;
	size_t n = colon ? (size_t)(colon - v) : 0;
	struct src s = src_of(from, name, err);
	if (!colon || !n || n >= sizeof(host))
		return bad(&s, name, v, "expected ADDR:PORT");
	memcpy(host, v, n);
	host[n] = 0;
	if (inet_pton(AF_INET, host, &a4) != 1)
		return bad(&s, name, v, "not a numeric IPv4 address");
	if (parse_u64(colon + 1, &port) < 0 || port > 65535)
		return bad(&s, name, v, "port must be 0..65535");
	return 0;
}

static int check_values(struct runner_config *cfg, const enum origin *from, struct error *err)
{
	if (cfg->grace_ms > 3600000)
		return out_of_bounds(from, "grace-ms", cfg->grace_ms, "must be at most 3600000",
				     err);
	if (cfg->task_log_max < 65536)
		return out_of_bounds(from, "task-log-max", cfg->task_log_max,
				     "must be at least 65536", err);
	if (cfg->stream_window < 4096)
		return out_of_bounds(from, "stream-window", cfg->stream_window,
				     "must be at least 4096", err);
	if (cfg->stream_window > cfg->task_log_max / 4) {
		/* Name the one the user set (both: the window). */
		char why[160];
		if (given(from, "stream-window")) {
			snprintf(why, sizeof(why), "must be at most task-log-max/4 (%llu)",
				 (unsigned long long)(cfg->task_log_max / 4));
			return out_of_bounds(from, "stream-window", cfg->stream_window, why, err);
		}
		snprintf(why, sizeof(why),
			 "must be at least 4 x --stream-window (%llu, its default): %llu; or "
			 "lower --stream-window",
			 (unsigned long long)cfg->stream_window,
			 (unsigned long long)cfg->stream_window * 4);
		return out_of_bounds(from, "task-log-max", cfg->task_log_max, why, err);
	}
	if (cfg->max_body < 1024)
		return out_of_bounds(from, "max-body", cfg->max_body, "must be at least 1024", err);
	if (cfg->header_deadline_ms < 100 || cfg->header_deadline_ms > 600000)
		return out_of_bounds(from, "header-deadline-ms", cfg->header_deadline_ms,
				     "must be 100..600000", err);
	/* "0 = none" where none is possible; where it is not, 0 is refused. */
	static const struct {
		const char *opt;
		size_t off;
		const char *why;
	} nonzero[] = {
		{"gateway-connect-timeout-ms", OFF(gateway_connect_timeout_ms),
		 "must be at least 1 (a connection attempt always has a time limit)"},
		{"reset-snapshot-max", OFF(reset_snapshot_max), "must be at least 1"},
		{"checkpoint-max-bytes", OFF(checkpoint_max_bytes), "must be at least 1"},
		{"limit-nproc", OFF(rlimit_nproc),
		 "must be at least 1 (leave it unset for the built-in default)"},
		{"limit-nofile", OFF(rlimit_nofile),
		 "must be at least 1 (leave it unset for the built-in default)"},
	};
	for (size_t i = 0; i < sizeof(nonzero) / sizeof(nonzero[0]); i++)
		if (*(uint64_t *)((char *)cfg + nonzero[i].off) == 0 && given(from, nonzero[i].opt))
			return out_of_bounds(from, nonzero[i].opt, 0, nonzero[i].why, err);
	if (cfg->task_uid == 0 && !cfg->allow_root_tasks)
		return out_of_bounds(from, "task-user", 0, "uid 0 needs --allow-root-tasks", err);
	if (cfg->gateway_url) {
		struct src s = src_of(from, "gateway-url", err);
		if (validate_gateway_url(&s, cfg->gateway_url) != 0)
			return -1;
	}
	if (cfg->agent_max_steps == 0 || cfg->agent_max_steps > 10000)
		return out_of_bounds(from, "agent-max-steps", cfg->agent_max_steps,
				     "must be 1..10000", err);
	if (cfg->agent_output_max < 256 || cfg->agent_output_max > 1048576)
		return out_of_bounds(from, "agent-output-max", cfg->agent_output_max,
				     "must be 256..1048576", err);
	if (cfg->mcp_max_body < 1024 || cfg->mcp_max_body > (64ULL << 20))
		return out_of_bounds(from, "mcp-max-body", cfg->mcp_max_body,
				     "must be from 1024 to 67108864", err);
	if (cfg->mcp_servers && cfg->mcp_servers[0] != '/') {
		struct src s = src_of(from, "mcp-servers", err);
		return bad(&s, "mcp-servers", cfg->mcp_servers, "must be an absolute path");
	}
	/* Each allowed Origin is "*" or scheme://host[:port], exactly as browsers send it. */
	for (const char *p = cfg->mcp_allowed_origins; p && *p;) {
		size_t n = strcspn(p, ",");
		char one[256];
		snprintf(one, sizeof(one), "%.*s", (int)(n < 255 ? n : 255), p);
		char *o = one + strspn(one, " \t");
		for (size_t k = strlen(o); k && (o[k - 1] == ' ' || o[k - 1] == '\t'); k--)
			o[k - 1] = 0;
		const char *h = !strncmp(o, "http://", 7)    ? o + 7
				: !strncmp(o, "https://", 8) ? o + 8
							     : NULL;
		if (strcmp(o, "*") && (!h || !*h || strpbrk(h, "/?# \t") || n >= 255)) {
			struct src s = src_of(from, "mcp-allowed-origins", err);
			return bad(&s, "mcp-allowed-origins", cfg->mcp_allowed_origins,
				   "each entry must be * or http(s)://host[:port]");
		}
		p += n;
		if (*p == ',')
			p++;
	}
	if (cfg->mcp_max_sessions < 1)
		return out_of_bounds(from, "mcp-max-sessions", cfg->mcp_max_sessions,
				     "must be at least 1", err);
	if (cfg->mcp_max_inflight < 1)
		return out_of_bounds(from, "mcp-max-inflight", cfg->mcp_max_inflight,
				     "must be at least 1", err);
	if (cfg->otlp_endpoint && strncmp(cfg->otlp_endpoint, "http://", 7) &&
	    strncmp(cfg->otlp_endpoint, "https://", 8)) {
		struct src s = src_of(from, "otlp-endpoint", err);
		return bad(&s, "otlp-endpoint", cfg->otlp_endpoint,
			   "the scheme must be http or https");
	}
	if (cfg->audit_rate < 10 || cfg->audit_rate > 1000000)
		return out_of_bounds(from, "audit-rate", cfg->audit_rate,
				     "must be 10..1000000 (events per second)", err);
	if (cfg->audit_ring_max < 65536 || cfg->audit_ring_max > 1ull << 30)
		return out_of_bounds(from, "audit-ring-max", cfg->audit_ring_max,
				     "must be 65536..1073741824 (bytes)", err);
	if (cfg->agent_context_max < 16384 || cfg->agent_context_max > 64ull << 20)
		return out_of_bounds(from, "agent-context-max", cfg->agent_context_max,
				     "must be 16384..67108864 (bytes)", err);
	if (cfg->code_max_contexts < 1 || cfg->code_max_contexts > 1024)
		return out_of_bounds(from, "code-max-contexts", cfg->code_max_contexts,
				     "must be 1..1024", err);
	if (cfg->code_result_max < 65536 || cfg->code_result_max > 256ull << 20)
		return out_of_bounds(from, "code-result-max", cfg->code_result_max,
				     "must be 65536..268435456 (bytes)", err);
	if (cfg->code_interpreter_listen &&
	    listen_check(from, "code-interpreter-listen", cfg->code_interpreter_listen, err) < 0)
		return -1;
	if (cfg->envd_listen && listen_check(from, "envd-listen", cfg->envd_listen, err) < 0)
		return -1;
	if (cfg->code_output_max < 1)
		return out_of_bounds(from, "code-output-max", cfg->code_output_max,
				     "must be at least 1 (bytes)", err);
	return 0;
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
		return bad(&s, "", url, "the scheme must be http or https");
	cfg->otlp_metrics_endpoint = url;
	const char *iv = getenv("OTEL_METRIC_EXPORT_INTERVAL");
	if (iv && *iv) {
		char *end;
		errno = 0;
		unsigned long long ms = strtoull(iv, &end, 10);
		struct src si = {.env = "OTEL_METRIC_EXPORT_INTERVAL", .err = err};
		if (errno || *end || *iv == '-' || ms < 100 || ms > 86400000)
			return bad(&si, "", iv, "must be 100..86400000 (milliseconds)");
		cfg->otlp_metrics_interval_ms = ms;
	}
	return 0;
}

int config_parse(struct runner_config *cfg, int argc, char **argv, struct error *err)
{
	struct src cli = {.err = err};
	memset(cfg, 0, sizeof(*cfg));
	/* --help and --version work whatever the environment holds. */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 1;
		}
		if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
			printf("forceai-runner %s\n", FORCEAI_RUNNER_VERSION);
			return 1;
		}
	}
	/* Defaults first, then the environment, then the command line. A bad
	 * environment value only counts if the command line does not replace
	 * it. */
	bool env_bad[N_OPTS] = {false};
	enum origin from[N_OPTS] = {FROM_DEFAULT};
	for (size_t i = 0; i < N_OPTS; i++) {
		if (opts[i].def && apply_opt(&cli, cfg, &opts[i], opts[i].def))
			return -1;
	}
	for (size_t i = 0; i < N_OPTS; i++) {
		const char *val = getenv(opts[i].env);
		if (!val)
			continue;
		/* The problem is told only once we know the CLI does not win. */
		struct error ignored;
		struct src env = {.env = opts[i].env, .err = &ignored};
		if (apply_opt(&env, cfg, &opts[i], val))
			env_bad[i] = true;
		else
			note_given(cfg, &opts[i]);
		from[i] = FROM_ENV;
	}
	char *tok = take_secret_env("EXECD_ACCESS_TOKEN");
	if (tok && *tok && !cfg->token)
		cfg->token = tok;
	else
		free(tok);
	/* The gateway key: read once, then gone from the environment (tasks
	 * get a clean environment anyway; /proc/1/environ must not show it). */
	char *key = take_secret_env("FORCEAI_GATEWAY_KEY");
	if (key && *key && !cfg->gateway_key) {
		cfg->gateway_key = key;
	} else if (key) {
		explicit_bzero(key, strlen(key));
		free(key);
	}

	struct option lopts[N_OPTS + 6];
	for (size_t i = 0; i < N_OPTS; i++) {
		lopts[i].name = opts[i].name;
		/* --flag or --flag=VALUE (1/0, true/false, yes/no) */
		lopts[i].has_arg = opts[i].type == OPT_BOOL ? optional_argument : required_argument;
		lopts[i].flag = NULL;
		lopts[i].val = 1000 + (int)i;
	}
	lopts[N_OPTS] = (struct option){"help", no_argument, NULL, 'h'};
	lopts[N_OPTS + 1] = (struct option){"version", no_argument, NULL, 'V'};
	lopts[N_OPTS + 2] = (struct option){"ping", no_argument, NULL, 'P'};
	lopts[N_OPTS + 3] = (struct option){"verify-audit", required_argument, NULL, 'A'};
	lopts[N_OPTS + 4] = (struct option){"audit-head", required_argument, NULL, 'H'};
	lopts[N_OPTS + 5] = (struct option){0};

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
		if (c == 'h') {
			usage(stdout);
			return 1;
		}
		if (c == 'V') {
			printf("forceai-runner %s\n", FORCEAI_RUNNER_VERSION);
			return 1;
		}
		if (c == 'P') {
			cfg->ping = true;
			continue;
		}
		if (c == 'A') {
			cfg->verify_audit = optarg;
			continue;
		}
		if (c == 'H') {
			/* Its form is checked by audit/verify.c, above core. */
			cfg->audit_head = optarg;
			continue;
		}
		if (c == '?' || c == ':') {
			const char *arg = argv[optind - 1];
			if (optopt && optopt < 1000)
				return error_set(err, 0, NULL, "unknown option '-%c' (see --help)",
						 optopt);
			if (optopt >= 1000 && optopt < 1000 + (int)N_OPTS &&
			    not_in_full(lopts, arg, opts[optopt - 1000].name, err) < 0)
				return -1;
			if (c == ':' || (optopt >= 1000))
				return error_set(err, 0, NULL, "option '%s' needs a value", arg);
			not_in_full(lopts, arg, NULL, err);
			if (strncmp(arg, "--", 2))
				error_set(err, 0, NULL, "unknown option '%s' (see --help)", arg);
			return -1;
		}
		const struct opt_def *o = &opts[c - 1000];
		if (apply_opt(&cli, cfg, o, o->type == OPT_BOOL && !optarg ? "1" : optarg))
			return -1;
		note_given(cfg, o);
		env_bad[c - 1000] = false;
		from[c - 1000] = FROM_CLI;
	}
	_Static_assert(N_OPTS <= CONFIG_MAX_OPTS, "raise CONFIG_MAX_OPTS");
	for (size_t i = 0; i < N_OPTS; i++)
		cfg->origin[i] = (unsigned char)from[i];
	for (size_t i = 0; i < N_OPTS; i++) {
		if (env_bad[i]) {
			struct src env = {.env = opts[i].env, .err = err};
			if (!apply_opt(&env, cfg, &opts[i], getenv(opts[i].env)))
				error_set(err, 0, NULL, "invalid %s", opts[i].env);
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
	if (cfg->audit_head && !cfg->verify_audit)
		return error_set(err, 0, NULL,
				 "--audit-head is the head --verify-audit checks a trail against: "
				 "give --verify-audit FILE too");
	if (check_values(cfg, from, err) < 0 || otel_metrics_env(cfg, err) < 0)
		return -1;
	if (check_secret_file(cfg, &cfg->token_file, "token-file", err) ||
	    check_secret_file(cfg, &cfg->key_file, "gateway-key-file", err))
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

/* The name a problem with option opt is told by: its variable when the value
 * came from there. */
static struct src src_cfg(const struct runner_config *cfg, const char *opt, struct error *err)
{
	for (size_t i = 0; i < N_OPTS; i++)
		if (!strcmp(opts[i].name, opt))
			return (struct src){.env = cfg->origin[i] == FROM_ENV ? opts[i].env : NULL,
					    .err = err};
	return (struct src){.err = err};
}

/* A file read at start: readable, regular, not empty. */
static int check_file(const struct runner_config *cfg, const char *opt, const char *path,
		      const char *fix, struct error *err)
{
	struct src s = src_cfg(cfg, opt, err);
	char why[512];
	/* open_regular: a FIFO or device there must not hold PID 1 in open(),
	 * and the message names what was found (core/fileio.h). */
	struct stat st;
	int fd = open_regular(AT_FDCWD, path, 0, SIZE_MAX, &st);
	if (fd < 0) {
		snprintf(why, sizeof(why), "cannot open: %s%s", open_regular_strerror(fd, &st),
			 fix);
		return bad(&s, opt, path, why);
	}
	close(fd);
	if (st.st_size == 0) {
		snprintf(why, sizeof(why), "empty%s", fix);
		return bad(&s, opt, path, why);
	}
	return 0;
}

int config_check_files(const struct runner_config *cfg, struct error *err)
{
	if (!cfg->insecure_no_confine &&
	    check_file(cfg, "seccomp-policy", cfg->seccomp_policy,
		       "; the image has it; outside it, in a clone of the repository: "
		       "--seccomp-policy \"$PWD/seccomp/default.json\" (or FORCEAI_SECCOMP_POLICY)",
		       err) < 0)
		return -1;
	if (cfg->gateway_ca &&
	    check_file(cfg, "gateway-ca", cfg->gateway_ca,
		       "; give a PEM bundle of the CAs the gateway's certificate chains to, or "
		       "leave it unset for SSL_CERT_FILE, CURL_CA_BUNDLE or the system's",
		       err) < 0)
		return -1;
	if (cfg->mcp_servers &&
	    check_file(cfg, "mcp-servers", cfg->mcp_servers,
		       "; give a JSON file {\"mcpServers\": {NAME: {\"command\": ...}}} or leave "
		       "it unset",
		       err) < 0)
		return -1;
	return 0;
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
