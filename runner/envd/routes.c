/* envd's plain HTTP routes (/health, /envs, /metrics, /init) and the face's route table
 * (docs/design/envd.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/runner.h"
#include "core/sha256.h"
#include "envd/envd.h"
#include "envd/internal.h"

/* ---- envd's state: made at start, forgotten by a reset, freed at exit ---- */

int envd_init(struct runner *r)
{
	r->envd = calloc(1, sizeof(*r->envd));
	return r->envd ? 0 : -ENOMEM;
}

void envd_free_all(struct runner *r)
{
	if (!r->envd)
		return;
	envd_watchers_free(r);
	envd_procs_free(r);
	json_decref(r->envd->env);
	free(r->envd);
	r->envd = NULL;
}

void envd_reset(struct runner *r)
{
	if (!r->envd)
		return;
	envd_watchers_free(r);
	envd_procs_free(r);
	json_decref(r->envd->env);
	r->envd->env = NULL;
	r->envd->workdir[0] = 0;
	if (r->envd->token_set) {
		/* The tenant's token goes with it: the box answers its startup token again. */
		r->auth_hash_set = false;
		memset(r->auth_hash, 0, sizeof(r->auth_hash));
		r->envd->token_set = false;
	}
}

static enum MHD_Result envd_health(struct http_req *req)
{
	return http_empty(req, 204);
}

/* The variables every envd process gets: the runtime init's sandbox-level ones, under
 * envd's own /init's. */
static enum MHD_Result envd_envs(struct http_req *req)
{
	json_t *o = req->r->sandbox_env ? json_deep_copy(req->r->sandbox_env) : json_object();
	struct envd_state *s = envd_state(req->r);
	if (o && s && s->env)
		json_object_update(o, s->env);
	return http_json(req, 200, o);
}

static enum MHD_Result envd_metrics(struct http_req *req)
{
	struct sysinfo si;
	struct statvfs vfs;
	if (sysinfo(&si) < 0)
		memset(&si, 0, sizeof(si));
	if (statvfs(envd_workdir(req->r), &vfs) < 0)
		memset(&vfs, 0, sizeof(vfs));
	uint64_t unit = si.mem_unit ? si.mem_unit : 1;
	uint64_t total = si.totalram * unit, used = (si.totalram - si.freeram) * unit;
	uint64_t dtotal = (uint64_t)vfs.f_blocks * vfs.f_frsize;
	uint64_t dused = dtotal - (uint64_t)vfs.f_bfree * vfs.f_frsize;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	double load = si.loads[0] / 65536.0 * 100.0 / (double)(cpus > 0 ? cpus : 1);
	return http_json(req, 200,
			 json_pack("{s:I,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "ts",
				   (json_int_t)time(NULL), "cpu_count",
				   (json_int_t)(cpus > 0 ? cpus : 1), "cpu_used_pct",
				   load > 100 ? 100.0 : load, "mem_total", (json_int_t)total,
				   "mem_used", (json_int_t)used, "mem_cache",
				   (json_int_t)(si.bufferram * unit), "mem_total_mib",
				   (json_int_t)(total >> 20), "mem_used_mib",
				   (json_int_t)(used >> 20), "disk_used", (json_int_t)dused,
				   "disk_total", (json_int_t)dtotal));
}

/* envVars: merged into envd's own (envd's /init merges too). */
static int init_envs(struct envd_state *s, json_t *v, struct error *e)
{
	if (!json_is_object(v))
		return error_set(e, 0, "INVALID_REQUEST_BODY", "field 'envVars' must be an object");
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x) {
		if (!json_is_string(x) || !*k || strchr(k, '=') ||
		    strlen(json_string_value(x)) != json_string_length(x))
			return error_set(
				e, 0, "INVALID_REQUEST_BODY",
				"envVars: '%.64s' must be a name without '=' with a string "
				"value without NUL",
				k);
	}
	if (!s->env && !(s->env = json_object()))
		return error_set(e, ENOMEM, NULL, "envVars");
	json_object_update(s->env, v);
	return 0;
}

/* The access token: from now on requests carry it (its hash is kept, never the token: the
 * runtime init's binding, http.c). A box started with a token accepts a new one only from
 * a request that carried the old (the route's own check). */
static void init_token(struct runner *r, const char *tok)
{
	struct sha256 c;
	sha256_init(&c);
	sha256_update(&c, tok, strlen(tok));
	sha256_final(&c, r->auth_hash);
	r->auth_hash_set = true;
	r->envd->token_set = true;
}

static int init_apply(struct http_req *req, json_t *body, struct error *e)
{
	struct envd_state *s = envd_state(req->r);
	json_t *v;
	char msg[256];
	enum connect_code code = CC_INVALID_ARGUMENT; /* a defaultUser that is not a string */
	if ((v = json_object_get(body, "defaultUser")) && !json_is_null(v)) {
		if (!json_is_string(v) ||
		    envd_user_check(req, json_string_value(v), &code, msg, sizeof(msg)) < 0)
			return error_set(e, 0,
					 code == CC_PERMISSION_DENIED ? "FORBIDDEN"
								      : "INVALID_REQUEST_BODY",
					 "defaultUser: %s",
					 json_is_string(v) ? msg : "not a string");
	}
	char wd[PATH_MAX] = "";
	if ((v = json_object_get(body, "defaultWorkdir")) && !json_is_null(v)) {
		if (!json_is_string(v) || json_string_value(v)[0] != '/' ||
		    envd_path(req->r, json_string_value(v), wd, msg, sizeof(msg)) < 0)
			return error_set(e, 0, "INVALID_REQUEST_BODY",
					 "defaultWorkdir must be an absolute path");
	}
	json_t *tok = json_object_get(body, "accessToken");
	if (tok && !json_is_null(tok) && (!json_is_string(tok) || !json_string_length(tok)))
		return error_set(e, 0, "INVALID_REQUEST_BODY",
				 "accessToken must be a non-empty string");
	if ((v = json_object_get(body, "envVars")) && !json_is_null(v) && init_envs(s, v, e) < 0)
		return -1;
	if (wd[0])
		snprintf(s->workdir, sizeof(s->workdir), "%s", wd);
	if (tok && json_is_string(tok))
		init_token(req->r, json_string_value(tok));
	return 0;
}

static enum MHD_Result envd_init_route(struct http_req *req)
{
	cleanup_json json_t *body = http_body_json(req, true);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct error e;
	if (init_apply(req, body, &e) < 0)
		return http_json(req, error_http_status(&e),
				 json_pack("{s:s,s:i}", "message", e.msg, "code",
					   (int)error_http_status(&e)));
	http_audit_note(req,
			json_pack("{s:b,s:I}", "access_token",
				  json_is_string(json_object_get(body, "accessToken")), "env_vars",
				  (json_int_t)json_object_size(json_object_get(body, "envVars"))));
	return http_empty(req, 204);
}

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define TOK .token_header = "X-Access-Token"
#define PROC(m, fn)                                                                                \
	{                                                                                          \
		"POST", "/process.Process/" m, fn, NULL, NULL, TOK                                 \
	}
#define FS(m, fn)                                                                                  \
	{                                                                                          \
		"POST", "/filesystem.Filesystem/" m, fn, NULL, NULL, TOK                           \
	}
const struct http_route envd_routes[] = {
	{"GET", "/health", envd_health, NULL, NULL, .public = true},
	{"GET", "/envs", envd_envs, NULL, NULL, TOK},
	{"GET", "/metrics", envd_metrics, NULL, NULL, TOK},
	{"POST", "/init", envd_init_route, NULL, NULL, TOK},
	{"GET", "/files", envd_files_get, NULL, NULL, TOK},
	{"POST", "/files", envd_files_post, envd_files_post_body, NULL, TOK},
	PROC("Start", envd_process_start),
	PROC("Connect", envd_process_connect),
	PROC("List", envd_process_list),
	PROC("SendInput", envd_process_unary),
	PROC("StreamInput", envd_process_stream_input),
	PROC("CloseStdin", envd_process_unary),
	PROC("SendSignal", envd_process_unary),
	PROC("Update", envd_process_unary),
	FS("Stat", envd_fs_unary),
	FS("MakeDir", envd_fs_unary),
	FS("Move", envd_fs_unary),
	FS("ListDir", envd_fs_unary),
	FS("Remove", envd_fs_unary),
	FS("WatchDir", envd_fs_watch_dir),
	FS("CreateWatcher", envd_fs_create_watcher),
	FS("GetWatcherEvents", envd_fs_get_watcher_events),
	FS("RemoveWatcher", envd_fs_remove_watcher),
};
const size_t envd_n_routes = sizeof(envd_routes) / sizeof(envd_routes[0]);
