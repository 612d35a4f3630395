/* Route handlers (api/routes.c puts them in the table); each is called once
 * the request body is complete. */
#pragma once
#include "http/http.h"

/* execd.c: OpenSandbox execd-compatible command API */
enum MHD_Result api_ping(struct http_req *req);
enum MHD_Result api_command_run(struct http_req *req);
enum MHD_Result api_command_interrupt(struct http_req *req);
enum MHD_Result api_command_status(struct http_req *req);
enum MHD_Result api_command_logs(struct http_req *req);
enum MHD_Result api_session_create(struct http_req *req);
enum MHD_Result api_session_run(struct http_req *req);
enum MHD_Result api_session_delete(struct http_req *req);

/* Request bodies, validated without I/O (also driven by tests/fuzz): each
 * returns 0, or -1 with err set (INVALID_REQUEST_BODY; UNKNOWN_CAPABILITY),
 * which the handler answers with http_fail. Strings in the spec point into
 * body. */
struct task_spec;
struct error;
int api_read_spec(json_t *body, const char *cmd_key, struct task_spec *spec, struct error *err);
int api_parse_command(json_t *body, struct task_spec *spec, struct error *err);
int api_parse_session_create(json_t *body, const char **cwd, struct error *err);
int api_parse_session_run(json_t *body, struct task_spec *spec, struct error *err);
int api_parse_task(json_t *body, struct task_spec *spec, struct error *err);

/* native.c: native task API */
enum MHD_Result api_task_create(struct http_req *req);
enum MHD_Result api_task_get(struct http_req *req);
enum MHD_Result api_task_events(struct http_req *req);
enum MHD_Result api_task_delete(struct http_req *req);

/* metrics.c, hardening.c */
enum MHD_Result api_metrics(struct http_req *req);
enum MHD_Result api_metrics_watch(struct http_req *req);
enum MHD_Result api_hardening(struct http_req *req);

/* files.c: execd-compatible files and directories API */
enum MHD_Result api_files_info(struct http_req *req);
enum MHD_Result api_files_delete(struct http_req *req);
enum MHD_Result api_files_mv(struct http_req *req);
enum MHD_Result api_files_permissions(struct http_req *req);
enum MHD_Result api_files_search(struct http_req *req);
enum MHD_Result api_files_replace(struct http_req *req);
enum MHD_Result api_files_upload(struct http_req *req);
enum MHD_Result api_files_upload_body(struct http_req *req, const char *data, size_t len);
enum MHD_Result api_files_download(struct http_req *req);
enum MHD_Result api_dirs_list(struct http_req *req);
enum MHD_Result api_dirs_create(struct http_req *req);
enum MHD_Result api_dirs_delete(struct http_req *req);
