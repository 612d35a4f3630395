/* Route handlers; each is called once the request body is complete. */
#pragma once
#include "http.h"

typedef enum MHD_Result (*route_fn)(struct http_req *req);
/* A chunk of a streamed request body (routes that must not buffer it). */
typedef enum MHD_Result (*body_fn)(struct http_req *req, const char *data, size_t len);

/* api_execd.c: OpenSandbox execd-compatible command API */
enum MHD_Result api_ping(struct http_req *req);
enum MHD_Result api_command_run(struct http_req *req);
enum MHD_Result api_command_interrupt(struct http_req *req);
enum MHD_Result api_command_status(struct http_req *req);
enum MHD_Result api_command_logs(struct http_req *req);
enum MHD_Result api_session_create(struct http_req *req);
enum MHD_Result api_session_run(struct http_req *req);
enum MHD_Result api_session_delete(struct http_req *req);

/* api_tasks.c: native task API */
enum MHD_Result api_task_create(struct http_req *req);
enum MHD_Result api_task_get(struct http_req *req);
enum MHD_Result api_task_events(struct http_req *req);
enum MHD_Result api_task_delete(struct http_req *req);

/* metrics.c, hardening.c */
enum MHD_Result api_metrics(struct http_req *req);
enum MHD_Result api_metrics_watch(struct http_req *req);
enum MHD_Result api_hardening(struct http_req *req);
