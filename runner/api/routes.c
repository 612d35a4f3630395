/* The runner's HTTP API: every route in one table, handed to http_start. */
#include "api/routes.h"

#include "api/api.h"

const struct http_route api_routes[] = {
	{"GET", "/ping", api_ping, NULL},
	{"POST", "/command", api_command_run, NULL},
	{"DELETE", "/command", api_command_interrupt, NULL},
	{"GET", "/command", api_command_list, NULL},
	{"GET", "/command/status/*", api_command_status, NULL},
	{"GET", "/command/*/logs", api_command_logs, NULL},
	{"POST", "/session", api_session_create, NULL},
	{"POST", "/session/*/run", api_session_run, NULL},
	{"DELETE", "/session/*", api_session_delete, NULL},
	{"GET", "/metrics", api_metrics, NULL},
	{"GET", "/metrics/watch", api_metrics_watch, NULL},
	{"POST", "/v1/tasks", api_task_create, NULL},
	{"GET", "/v1/tasks", api_task_list, NULL},
	{"POST", "/v1/tasks/*/stdin", api_task_stdin, api_task_stdin_body},
	{"DELETE", "/v1/tasks/*/stdin", api_task_stdin_close, NULL},
	{"POST", "/v1/tasks/*/resize", api_task_resize, NULL},
	{"POST", "/v1/tasks/*/signal", api_task_signal, NULL},
	{"GET", "/v1/tasks/*", api_task_get, NULL},
	{"DELETE", "/v1/tasks/*", api_task_delete, NULL},
	{"GET", "/v1/tasks/*/events", api_task_events, NULL},
	{"GET", "/v1/hardening", api_hardening, NULL},
	{"POST", "/pty", api_pty_create, NULL},
	{"GET", "/pty/*", api_pty_status, NULL},
	{"DELETE", "/pty/*", api_pty_delete, NULL},
	{"GET", "/pty/*/ws", api_pty_ws, NULL},
	{"POST", "/v1/reset", api_reset, NULL},
	{"GET", "/files/info", api_files_info, NULL},
	{"DELETE", "/files", api_files_delete, NULL},
	{"POST", "/files/mv", api_files_mv, NULL},
	{"POST", "/files/permissions", api_files_permissions, NULL},
	{"GET", "/files/search", api_files_search, NULL},
	{"POST", "/files/replace", api_files_replace, NULL},
	{"POST", "/files/upload", api_files_upload, api_files_upload_body},
	{"GET", "/files/download", api_files_download, NULL},
	{"GET", "/directories/list", api_dirs_list, NULL},
	{"POST", "/directories", api_dirs_create, NULL},
	{"DELETE", "/directories", api_dirs_delete, NULL},
};

const size_t api_n_routes = sizeof(api_routes) / sizeof(api_routes[0]);
