/* What the envd face's files share (envd/envd.h). */
#pragma once
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>

#include "envd/connect.h"
#include "http/http.h"

struct runner;
struct error;

struct envd_watcher; /* a polling watcher (envd/watch.c) */

struct envd_state {
	json_t *env;            /* /init's envVars: every envd process gets them (NULL: none) */
	char workdir[PATH_MAX]; /* /init's defaultWorkdir ("" none: the task default) */
	void *procs;            /* envd_proc list (envd/process.c) */
	bool token_set;         /* /init bound the access token (a reset unbinds it) */
	struct envd_watcher *watchers;
	unsigned n_watchers;
};
struct envd_state *envd_state(struct runner *r);

/* The request message of an RPC: the JSON body (unary, application/json) or the one envelope
 * of a server stream's body (application/connect+json). NULL once answered with the error. */
json_t *envd_rpc_msg(struct http_req *req, bool stream);
/* Answers of an RPC: a unary message (steals msg), a unary or stream error. */
enum MHD_Result envd_rpc_ok(struct http_req *req, json_t *msg);
enum MHD_Result envd_rpc_fail(struct http_req *req, bool stream, enum connect_code c,
			      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* A runner error as the RPC's error (its code mapped, its message kept). */
enum MHD_Result envd_rpc_error(struct http_req *req, bool stream, const struct error *e);
/* The user asked for (Basic auth's user, or the query's `username`): every envd process and
 * file operation is the task user's. 0, or -1 with *code and msg (root is refused, saying
 * why; an unknown name is unauthenticated, as envd answers it). */
int envd_user_check(struct http_req *req, const char *query_user, enum connect_code *code,
		    char *msg, size_t msglen);
/* The default directory of envd's processes and relative paths: /init's defaultWorkdir, else
 * the task engine's default (/workspace if present, else /). */
const char *envd_workdir(struct runner *r);
/* A path of a request: relative ones are under envd_workdir; cleaned. 0, or -1 (msg). */
int envd_path(struct runner *r, const char *in, char out[PATH_MAX], char *msg, size_t msglen);

/* The routes of each part. */
enum MHD_Result envd_process_start(struct http_req *req);
enum MHD_Result envd_process_connect(struct http_req *req);
enum MHD_Result envd_process_list(struct http_req *req);
enum MHD_Result envd_process_stream_input(struct http_req *req);
/* SendInput, CloseStdin, SendSignal, Update: one path, the op by the route's method. */
enum MHD_Result envd_process_unary(struct http_req *req);
/* Stat, MakeDir, Move, ListDir, Remove: one path, the op by the route's method. */
enum MHD_Result envd_fs_unary(struct http_req *req);
enum MHD_Result envd_fs_watch_dir(struct http_req *req);
enum MHD_Result envd_fs_create_watcher(struct http_req *req);
enum MHD_Result envd_fs_get_watcher_events(struct http_req *req);
enum MHD_Result envd_fs_remove_watcher(struct http_req *req);
void envd_watchers_free(struct runner *r);
void envd_procs_free(struct runner *r);
enum MHD_Result envd_files_get(struct http_req *req);
enum MHD_Result envd_files_post(struct http_req *req);
enum MHD_Result envd_files_post_body(struct http_req *req, const char *data, size_t len);
