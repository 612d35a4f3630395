/* Runner configuration: command-line options, each with an environment
 * variable, validated once at start. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Where a secret came from (owner and mode checked at start). */
struct secret_file {
	const char *path; /* NULL: not read from a file */
	mode_t mode;
	uid_t uid;
	gid_t gid;
};

#define CONFIG_MAX_OPTS 96

struct runner_config {
	char listen_host[64]; /* numeric IPv4/IPv6 address */
	unsigned listen_port;
	uint64_t grace_ms;
	char *token;           /* access token (X-EXECD-ACCESS-TOKEN); NULL = none */
	const char *state_dir; /* private dir for task output spools */
	bool state_dir_set;    /* given (option or environment), not the default */
	const char *seccomp_policy;
	uid_t task_uid;
	gid_t task_gid;
	bool task_user_set; /* given, not the default (non-root mode uses its own) */
	bool allow_root_tasks;
	uint32_t task_id_lo, task_id_hi; /* ids requests may ask for (core/ids.h) */
	bool exec_network_none;          /* exec tasks get no IP sockets unless asked */
	bool exec_network_set;           /* given (vault mode's default is none) */
	bool insecure_no_confine;        /* test-only: benchmarks of confinement cost */
	bool no_prefork_shim;            /* no spare shim: exec one per task (task/prefork.h) */
	bool write_seccomp_cache;        /* compile POLICY into POLICY.bpf and exit */
	unsigned max_tasks;              /* concurrent running tasks; 429 beyond */
	uint64_t max_body;               /* request body bytes; 413 beyond */
	uint64_t task_log_max;           /* retained output per task (bytes) */
	uint64_t stream_window;          /* bytes a live client may lag before the pipe is paused */
	unsigned retain_count;           /* finished task records kept */
	uint64_t retain_ms;              /* ... and for how long */
	uint64_t header_timeout_ms;      /* idle connection / slowloris timeout */
	uint64_t header_deadline_ms;     /* a connection's request head must be in by then */
	unsigned max_client_conns;       /* connections at once per client */
	uint64_t proxy_timeout_ms;       /* /proxy/{port}: upstream silence before 504 */
	const char *landlock_roots;      /* colon-separated writable roots */
	const char *execd_envs;          /* OpenSandbox's EXECD_ENVS file, or NULL */
	uint64_t rlimit_nproc, rlimit_nofile, rlimit_as, rlimit_fsize; /* 0 = unset */
	uint64_t task_memory_max; /* cgroup v2 memory.max per task; 0 = max */
	uint64_t task_pids_max;   /* cgroup v2 pids.max per task; 0 = max */
	const char *task_cpu_max; /* cgroup v2 cpu.max per task, e.g. "100000 100000" */
	char **main_argv;         /* after "--"; NULL when none */
	bool ping;                /* --ping: probe a running runner, then exit (ping.h) */

	/* The gateway's runtime profiles (profile/profile.h). */
	bool one_shot;     /* serve one task, then exit with its status */
	bool allow_reset;  /* POST /v1/reset (pooled boxes) */
	bool runtime_init; /* execd --runtime-init: tasks wait for POST /internal/init */
	const char *lifecycle_status_file; /* execd --lifecycle-startup-status-file */
	uint64_t reset_snapshot_max;       /* bytes of the writable roots kept for reset */
	uint64_t checkpoint_max_bytes;     /* distinct content all checkpoints keep */
	uint64_t checkpoint_max_watches;   /* inotify watches the change tracker takes */

	/* Model calls (docs/design/model.md). gateway_url NULL = no model access. */
	const char *gateway_url;
	char *gateway_key; /* NULL = vault mode: no Authorization sent */
	struct secret_file token_file, key_file;
	const char *gateway_ca;    /* NULL = SSL_CERT_FILE / CURL_CA_BUNDLE / system */
	const char *gateway_proxy; /* NULL = no proxy (proxy env vars ignored) */
	uint64_t gateway_connect_timeout_ms;
	uint64_t gateway_timeout_ms;
	const char *model;         /* default model of agent tasks */
	unsigned model_proxy_port; /* loopback model proxy (0 = ephemeral) */
	uint64_t agent_max_steps;
	uint64_t agent_timeout_ms; /* 0 = none */
	uint64_t agent_max_tokens; /* 0 = none */
	/* Per-task model budgets, every route (0 = unlimited). */
	uint64_t task_max_tokens;
	uint64_t task_max_model_requests;
	uint64_t agent_output_max; /* tool output fed back to the model (bytes) */
	/* Agent engines (docs/design/model.md#agent-engines-finding-an-engine): "NAME=PATH" as
	 * given (validated as such here; NAME against the engines at start, model/engine.c). */
#define AGENT_ENGINES_MAX 8
	const char *agent_engine[AGENT_ENGINES_MAX];
	unsigned n_agent_engines;
	uint64_t agent_context_max; /* bytes of conversation the built-in loop sends */

	/* /mcp (docs/design/mcp-tools.md). */
	const char *mcp_allowed_origins; /* NULL: localhost forms only */
	const char *mcp_servers;         /* --mcp-servers FILE, or NULL */
	unsigned mcp_max_sessions;
	unsigned mcp_max_inflight;
	uint64_t mcp_max_body;

	/* The audit trail (docs/design/audit.md). */
	const char *audit_file;    /* --audit-file: a copy outside every writable root, or NULL */
	const char *otlp_endpoint; /* --otlp-endpoint: OTLP/HTTP logs URL, or NULL */
	/* OTEL_EXPORTER_OTLP_METRICS_ENDPOINT (execd's variable): OTLP/HTTP
	 * metrics URL, or NULL; OTEL_METRIC_EXPORT_INTERVAL, ms. */
	const char *otlp_metrics_endpoint;
	uint64_t otlp_metrics_interval_ms;
	unsigned audit_rate;      /* events per second kept (bursts of as many); beyond: counted */
	uint64_t audit_ring_max;  /* bytes of events kept for GET /v1/audit */
	bool insecure_no_audit;   /* test only: no trail at all (measures its cost) */
	const char *verify_audit; /* --verify-audit FILE: check a saved trail, then exit */
	const char *audit_head;   /* --audit-head SEQ:HASH: the head --verify-audit must find */
	/* Code contexts (docs/design/code.md). */
	const char *code_interpreter_listen; /* E2B's API: ADDR:PORT, or NULL */
	const char *envd_listen;             /* E2B's envd API: ADDR:PORT, or NULL */
	uint64_t envd_upload_max;            /* bytes an envd upload writes (decoded); 0 none */
	unsigned code_max_contexts;
	uint64_t code_idle_timeout_ms; /* 0 = none */
	uint64_t code_exec_timeout_ms; /* 0 = none */
	uint64_t code_output_max;      /* stdout+stderr bytes per execution */
	uint64_t code_result_max;      /* bytes of one protocol message (a rich result) */
	/* Where each option's value came from (config.c's table order): the
	 * checks made after parsing name the option or the variable. */
	unsigned char origin[CONFIG_MAX_OPTS];
};

/* Parse argv + environment. Returns 0 to run, 1 when --help/--version was
 * printed (exit 0), -1 on a usage error (err set; exit 2). */
struct error;
int config_parse(struct runner_config *cfg, int argc, char **argv, struct error *err);
void config_free(struct runner_config *cfg);
/* The files the options name that are read at start (the seccomp policy
 * unless --insecure-no-confine, --gateway-ca, --mcp-servers): each must be
 * a readable regular file. 0, or -1 with a message that names the option
 * (or its variable) and the fix: a configuration error, exit 2. Not part of
 * config_parse: --ping and --help need none of them. */
int config_check_files(const struct runner_config *cfg, struct error *err);
