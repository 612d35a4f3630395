/* The routes of execd's PTY sessions (components/execd/PTY.md): POST /pty,
 * GET /pty/{id}, DELETE /pty/{id} and the WebSocket GET /pty/{id}/ws. The
 * sessions, their shells and their clients are pty/session.c's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "task/request.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "http/ws.h"
#include "pty/session.h"

static enum MHD_Result not_found(struct http_req *req)
{
	return http_error(req, 404, "CONTEXT_NOT_FOUND", "pty session %.64s not found", req->param);
}

enum MHD_Result api_pty_create(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, true);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct error err;
	if (schema_check(&schema_pty_create, body, &err) < 0)
		return http_fail(req, &err);
	json_t *jc = json_object_get(body, "cwd"), *jcmd = json_object_get(body, "command");
	if ((jc && !json_is_null(jc) && !json_is_string(jc)) ||
	    (jcmd && !json_is_null(jcmd) && !json_is_string(jcmd))) {
		error_set(&err, 0, "INVALID_REQUEST_BODY", "cwd and command must be strings");
		return http_fail(req, &err);
	}
	const char *cwd = json_string_value(jc), *command = json_string_value(jcmd);
	if ((cwd && strlen(cwd) != json_string_length(jc)) ||
	    (command && strlen(command) != json_string_length(jcmd))) {
		error_set(&err, 0, "INVALID_REQUEST_BODY", "a NUL byte in cwd or command");
		return http_fail(req, &err);
	}
	struct pty_session *s;
	if (pty_session_create(req->r, cwd, command, &s, &err) < 0)
		return http_fail(req, &err);
	return http_json(req, 201, json_pack("{s:s}", "session_id", pty_session_id(s)));
}

enum MHD_Result api_pty_status(struct http_req *req)
{
	struct pty_session *s = pty_session_find(req->r, req->param);
	if (!s)
		return not_found(req);
	struct pty_session_status st;
	pty_session_status(s, &st);
	return http_json(req, 200,
			 json_pack("{s:s,s:b,s:I,s:b,s:b}", "session_id", pty_session_id(s),
				   "running", st.running, "output_offset",
				   (json_int_t)st.output_offset, "launch_attempted",
				   st.launch_attempted, "launch_failed", st.launch_failed));
}

enum MHD_Result api_pty_delete(struct http_req *req)
{
	struct pty_session *s = pty_session_find(req->r, req->param);
	if (!s)
		return not_found(req);
	pty_session_delete(req->r, s);
	return http_empty(req, 200);
}

enum MHD_Result api_pty_ws(struct http_req *req)
{
	struct pty_session *s = pty_session_find(req->r, req->param);
	if (!s)
		return not_found(req);
	const char *tk = http_query(req, "takeover");
	bool takeover = tk && !strcmp(tk, "1") && ws_is_upgrade_request(req);
	const char *mode = http_query(req, "mode");
	if (mode && *mode && strcmp(mode, "viewer"))
		return http_error(req, 400, "INVALID_REQUEST",
				  "mode must be \"viewer\" (or absent)");
	struct pty_attach a = {.viewer = mode && !strcmp(mode, "viewer")};
	if (a.viewer && takeover)
		return http_error(req, 400, "INVALID_REQUEST",
				  "a viewer cannot take over the session");
	if (pty_session_held(s) && !takeover && !a.viewer)
		return http_error(req, 409, "ALREADY_CONNECTED",
				  "another client is already connected to pty session %s",
				  pty_session_id(s));
	const char *pty = http_query(req, "pty");
	a.want_pipe = pty && !strcmp(pty, "0");
	const char *since = http_query(req, "since");
	if (since && *since) {
		/* execd: anything but a decimal number counts as 0 */
		char *end;
		errno = 0;
		long long v = strtoll(since, &end, 10);
		a.since = (*end || errno || v < 0) ? 0 : (uint64_t)v;
	}
	return pty_session_attach(req, s, &a);
}
