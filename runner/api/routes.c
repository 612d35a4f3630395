/* The runner's HTTP API: every route in one table, handed to http_start. */
#include "api/routes.h"

#include "api/api.h"

/* Rows leave the fields they do not need (body, start, public) zero. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

const struct http_route api_routes[] = {
	{"GET", "/ping", api_ping, NULL, NULL, .public = true},
	{"GET", "/ready", api_ready, NULL, NULL, .public = true},
	{"GET", "/session", api_session_list, NULL, NULL},
	/* Token-free as in execd (control-plane trust; the handler asks for the
	 * startup token when the box has one). */
	{"*", "/internal/init", api_runtime_init, NULL, NULL, .public = true},
	{"*", "/v1/isolated", api_isolated, NULL, NULL},
	{"*", "/v1/isolated/**", api_isolated, NULL, NULL},
	{"POST", "/command", api_command_run, NULL, NULL},
	{"POST", "/command/operations", api_command_operation, NULL, NULL},
	{"GET", "/execution/operation", api_operation_get, NULL, NULL},
	{"GET", "/execution/instance", api_operation_instance, NULL, NULL},
	{"DELETE", "/command", api_command_interrupt, NULL, NULL},
	{"GET", "/command", api_command_list, NULL, NULL},
	{"GET", "/command/status/*", api_command_status, NULL, NULL},
	{"GET", "/command/*/logs", api_command_logs, NULL, NULL},
	{"GET", "/command/*/resume", api_command_resume, NULL, NULL},
	{"POST", "/session", api_session_create, NULL, NULL},
	{"POST", "/session/*/run", api_session_run, NULL, NULL},
	{"DELETE", "/session/*", api_session_delete, NULL, NULL},
	{"GET", "/metrics", api_metrics, NULL, NULL},
	{"GET", "/metrics/watch", api_metrics_watch, NULL, NULL},
	{"POST", "/v1/tasks", api_task_create, NULL, NULL},
	{"GET", "/v1/tasks", api_task_list, NULL, NULL},
	{"POST", "/v1/tasks/*/stdin", api_task_stdin, api_task_stdin_body, NULL},
	{"DELETE", "/v1/tasks/*/stdin", api_task_stdin_close, NULL, NULL},
	{"POST", "/v1/tasks/*/resize", api_task_resize, NULL, NULL},
	{"POST", "/v1/tasks/*/signal", api_task_signal, NULL, NULL},
	{"GET", "/v1/tasks/*", api_task_get, NULL, NULL},
	{"DELETE", "/v1/tasks/*", api_task_delete, NULL, NULL},
	{"GET", "/v1/tasks/*/events", api_task_events, NULL, NULL},
	{"GET", "/v1/hardening", api_hardening, NULL, NULL},
	{"GET", "/v1/agent/engines", api_agent_engines, NULL, NULL},
	{"POST", "/pty", api_pty_create, NULL, NULL},
	{"GET", "/pty/*", api_pty_status, NULL, NULL},
	{"DELETE", "/pty/*", api_pty_delete, NULL, NULL},
	{"GET", "/pty/*/ws", api_pty_ws, NULL, NULL},
	{"POST", "/v1/reset", api_reset, NULL, NULL},
	{"GET", "/files/info", api_files_info, NULL, NULL},
	{"GET", "/files/watch", api_files_watch, NULL, NULL},
	{"DELETE", "/files", api_files_delete, NULL, NULL},
	{"POST", "/files/mv", api_files_mv, NULL, NULL},
	{"POST", "/files/permissions", api_files_permissions, NULL, NULL},
	{"GET", "/files/search", api_files_search, NULL, NULL},
	{"GET", "/files/grep", api_files_grep, NULL, NULL},
	{"POST", "/files/replace", api_files_replace, NULL, NULL},
	{"POST", "/files/upload", api_files_upload, api_files_upload_body, NULL},
	{"GET", "/files/download", api_files_download, NULL, NULL},
	{"GET", "/directories/list", api_dirs_list, NULL, NULL},
	{"POST", "/directories", api_dirs_create, NULL, NULL},
	{"DELETE", "/directories", api_dirs_delete, NULL, NULL},
	{"GET", "/v1/ports", api_ports, NULL, NULL},
	{"POST", "/mcp", api_mcp, api_mcp_body, NULL},
	{"GET", "/mcp", api_mcp, NULL, NULL},
	{"DELETE", "/mcp", api_mcp, NULL, NULL},
	{"GET", "/v1/mcp/servers", api_mcp_servers, NULL, NULL},
	{"*", "/proxy/", api_proxy, api_proxy_body, api_proxy_start},
	{"*", "/proxy/*", api_proxy, api_proxy_body, api_proxy_start},
	{"*", "/proxy/*/**", api_proxy, api_proxy_body, api_proxy_start},
};

const size_t api_n_routes = sizeof(api_routes) / sizeof(api_routes[0]);
