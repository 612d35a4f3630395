/* The option table (name, variable, type, default, help), --help, and how a
 * problem with an option is told (its name, or the variable its value came
 * from). Every option has an environment variable; the command line wins. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_internal.h"
#include "core/error.h"

const struct opt_def config_opts[] = {
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
	{"checkpoint-max-watches", "FORCEAI_CHECKPOINT_MAX_WATCHES", OPT_U64,
	 OFF(checkpoint_max_watches), "65536",
	 "inotify watches the checkpoints' change tracker takes at most (1..10000000); a "
	 "directory past them is walked at every checkpoint"},
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
const size_t config_n_opts = sizeof(config_opts) / sizeof(config_opts[0]);
_Static_assert(sizeof(config_opts) / sizeof(config_opts[0]) <= CONFIG_MAX_OPTS,
	       "raise CONFIG_MAX_OPTS");

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
	 "one-shot allow-reset reset-snapshot-max runtime-init lifecycle-startup-status-file checkpoint-max-bytes "
	 "checkpoint-max-watches"},
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

void config_usage(FILE *out)
{
	fprintf(out,
		"usage: forceai-runner [OPTIONS] [-- CMD [ARG...]]\n\n"
		"Init (PID 1) and task endpoint of a forceai sandbox box.\n"
		"With -- CMD, CMD is the box's main process and the runner exits with its status.\n"
		"Each option is also read from the environment variable shown; the command line\n"
		"wins. Options are spelled in full (no abbreviations). Bounds and what 0 means:\n"
		"docs/configuration.md. Exit status: 2 for a configuration error (a bad option or\n"
		"a file it names that cannot be read), 1 when the system refuses to start it.\n");
	bool shown[CONFIG_MAX_OPTS] = {false};
	for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
		fprintf(out, "\n%s:\n", groups[g].title);
		/* In the group's order, which is the document's. */
		for (const char *p = groups[g].names; *p;) {
			size_t n = strcspn(p, " ");
			for (size_t i = 0; i < config_n_opts; i++)
				if (strlen(config_opts[i].name) == n &&
				    !strncmp(config_opts[i].name, p, n)) {
					shown[i] = true;
					usage_opt(out, &config_opts[i]);
				}
			p += n + strspn(p + n, " ");
		}
	}
	bool title = false;
	for (size_t i = 0; i < config_n_opts; i++) {
		if (shown[i])
			continue;
		if (!title)
			fprintf(out, "\nOther:\n");
		title = true;
		usage_opt(out, &config_opts[i]);
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

/* ---- how a problem with an option is told ---- */

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
