/* Route handlers (api/routes.c puts them in the table); each is called once
 * the request body is complete. */
#pragma once
#include "http/http.h"

/* execd.c: OpenSandbox execd-compatible command API */
enum MHD_Result api_ping(struct http_req *req);
/* execd 1.2: readiness ({"initialized": true}), the session list, and the
 * routes the runner does not implement (runtime init, isolated sessions). */
enum MHD_Result api_ready(struct http_req *req);
/* GET /files/watch: a directory's changes as server-sent events (api/watch.c; the engine:
 * watch/watch.h). */
enum MHD_Result api_files_watch(struct http_req *req);
enum MHD_Result api_session_list(struct http_req *req);
enum MHD_Result api_runtime_init(struct http_req *req);
enum MHD_Result api_isolated(struct http_req *req);
enum MHD_Result api_command_run(struct http_req *req);
enum MHD_Result api_command_interrupt(struct http_req *req);
enum MHD_Result api_command_status(struct http_req *req);
enum MHD_Result api_command_logs(struct http_req *req);
enum MHD_Result api_command_resume(struct http_req *req);
enum MHD_Result api_command_operation(struct http_req *req);
enum MHD_Result api_operation_get(struct http_req *req);
enum MHD_Result api_operation_instance(struct http_req *req);
enum MHD_Result api_session_create(struct http_req *req);
enum MHD_Result api_session_run(struct http_req *req);
enum MHD_Result api_session_delete(struct http_req *req);

/* POST /v1/tasks's body (the common fields: task/request.h): 0, or -1 with err set
 * (INVALID_REQUEST_BODY, UNKNOWN_FIELD, UNKNOWN_CAPABILITY). */
struct task_spec;
struct model_args;
struct error;
/* spec, and in margs (spec->cap_args points there) the model fields. */
int api_parse_task(json_t *body, struct task_spec *spec, struct model_args *margs,
		   struct error *err);

/* tasks.c: the native task API, /v1/tasks */
enum MHD_Result api_task_create(struct http_req *req);
enum MHD_Result api_task_get(struct http_req *req);
enum MHD_Result api_agent_engines(struct http_req *req);
enum MHD_Result api_task_events(struct http_req *req);
enum MHD_Result api_task_delete(struct http_req *req);

/* taskio.c: a native task's stdin, terminal size and signals, GET /v1/tasks; commands.c:
 * execd's GET /command */
enum MHD_Result api_task_list(struct http_req *req);
enum MHD_Result api_task_stdin(struct http_req *req);
enum MHD_Result api_task_stdin_body(struct http_req *req, const char *data, size_t len);
enum MHD_Result api_task_stdin_close(struct http_req *req);
enum MHD_Result api_task_resize(struct http_req *req);
enum MHD_Result api_task_signal(struct http_req *req);
enum MHD_Result api_command_list(struct http_req *req);
/* A finished command's end (finished_at, exit_code, error) and what it left behind,
 * into o: GET /command and GET /command/status/{id}. */
struct task;
void api_command_end_fields(json_t *o, struct task *t);

/* pty.c: execd PTY sessions over WebSocket (the engine: pty/session.h) */
enum MHD_Result api_pty_create(struct http_req *req);
enum MHD_Result api_pty_status(struct http_req *req);
enum MHD_Result api_pty_delete(struct http_req *req);
enum MHD_Result api_pty_ws(struct http_req *req);

/* metrics.c (the figures and the OTLP exporter: metrics/metrics.h), hardening.c */
enum MHD_Result api_metrics(struct http_req *req);
enum MHD_Result api_metrics_watch(struct http_req *req);
enum MHD_Result api_hardening(struct http_req *req);

/* audit.c: GET /v1/audit (audit/trail.h); the door of each API path */
enum MHD_Result api_audit(struct http_req *req);
const char *api_audit_door(const char *path);

/* reset.c: POST /v1/reset (profile/profile.h) */
enum MHD_Result api_reset(struct http_req *req);
/* checkpoints.c */
enum MHD_Result api_checkpoint_create(struct http_req *req);
enum MHD_Result api_checkpoint_list(struct http_req *req);
enum MHD_Result api_checkpoint_get(struct http_req *req);
enum MHD_Result api_checkpoint_delete(struct http_req *req);
enum MHD_Result api_checkpoint_diff(struct http_req *req);
enum MHD_Result api_checkpoint_restore(struct http_req *req);

/* files*.c: execd-compatible files and directories API (files.c the prologue,
 * filesops.c, fileswalk.c, filesreplace.c, filesdownload.c, filesupload.c) */
enum MHD_Result api_files_info(struct http_req *req);
enum MHD_Result api_files_delete(struct http_req *req);
enum MHD_Result api_files_mv(struct http_req *req);
enum MHD_Result api_files_permissions(struct http_req *req);
enum MHD_Result api_files_search(struct http_req *req);
enum MHD_Result api_files_grep(struct http_req *req);
enum MHD_Result api_files_replace(struct http_req *req);
enum MHD_Result api_files_upload(struct http_req *req);
enum MHD_Result api_files_upload_body(struct http_req *req, const char *data, size_t len);
enum MHD_Result api_files_download(struct http_req *req);
enum MHD_Result api_dirs_list(struct http_req *req);
enum MHD_Result api_dirs_create(struct http_req *req);
enum MHD_Result api_dirs_delete(struct http_req *req);

/* proxy.c: ANY /proxy/{port}/{path} to 127.0.0.1:{port} in the box */
enum MHD_Result api_proxy_start(struct http_req *req);
enum MHD_Result api_proxy_body(struct http_req *req, const char *data, size_t len);
enum MHD_Result api_proxy(struct http_req *req);
/* ports.c: GET /v1/ports */
enum MHD_Result api_ports(struct http_req *req);

/* mcp.c: /mcp, the box as an MCP server (Streamable HTTP; the engine: mcp/session.h) */
enum MHD_Result api_mcp(struct http_req *req);
enum MHD_Result api_mcp_body(struct http_req *req, const char *data, size_t len);
/* GET /v1/mcp/servers: the stdio servers behind /mcp, their state and tools. */
enum MHD_Result api_mcp_servers(struct http_req *req);

/* code.c: code contexts, OpenSandbox execd's /code and E2B's code-interpreter API */
enum MHD_Result api_code_context_create(struct http_req *req);
enum MHD_Result api_code_contexts_list(struct http_req *req);
enum MHD_Result api_code_contexts_delete(struct http_req *req);
enum MHD_Result api_code_context_get(struct http_req *req);
enum MHD_Result api_code_context_delete(struct http_req *req);
enum MHD_Result api_code_languages(struct http_req *req);
enum MHD_Result api_code_run(struct http_req *req);
enum MHD_Result api_code_interrupt(struct http_req *req);
/* The E2B port's route table (--code-interpreter-listen). */
extern const struct http_route e2b_routes[];
extern const size_t e2b_n_routes;
/* execd.c: start spec (an execd command) and stream its events as POST /command does. */
enum MHD_Result api_command_stream(struct http_req *req, struct task_spec *spec);
/* execd_stream.c: t's events as server-sent events on req. init_text: the init event's text
 * (the command or session id); NULL: a resume (no init event; the output from the start,
 * events up to after_eid left out). session_mode: stderr into stdout, empty lines dropped,
 * like execd sessions. */
struct task;
enum MHD_Result execd_stream_start(struct http_req *req, struct task *t, bool session_mode,
				   const char *init_text, uint64_t after_eid);
