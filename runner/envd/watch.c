/* filesystem.Filesystem's watchers on the runner's one watch engine (watch/watch.c through
 * watch_open): WatchDir as a Connect stream (start, filesystem events, keepalives) and the
 * polling watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher) with a bounded queue each,
 * a bounded number of them, and an idle expiry (docs/design/envd.md#watchers). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/list.h"
#include "core/log.h"
#include "core/randomid.h"
#include "core/runner.h"
#include "envd/internal.h"
#include "envd/procstream.h"
#include "watch/watch.h"

#define WATCHERS_MAX 16              /* polling watchers at once */
#define WATCHER_EVENTS_MAX 4096      /* events a polling watcher keeps until polled */
#define WATCHER_IDLE_MS (10 * 60000) /* not polled this long: removed */

struct envd_watcher {
	char id[33];
	struct runner *r;
	struct watch_stream *w;
	char root[PATH_MAX];
	json_t *events; /* FilesystemEvent objects not yet polled */
	uint64_t dropped, last_poll_ms;
	bool ended;
	struct envd_watcher *next, *prev;
};

/* envd's type of an engine event (fsnotify's names). */
static const char *event_type(const char *type)
{
	return !strcmp(type, "create")   ? "EVENT_TYPE_CREATE"
	       : !strcmp(type, "write")  ? "EVENT_TYPE_WRITE"
	       : !strcmp(type, "remove") ? "EVENT_TYPE_REMOVE"
	       : !strcmp(type, "rename") ? "EVENT_TYPE_RENAME"
	       : !strcmp(type, "chmod")  ? "EVENT_TYPE_CHMOD"
					 : NULL;
}

/* The name envd gives: the path relative to the watched directory. */
static const char *rel_name(const char *root, const char *path)
{
	size_t n = strlen(root);
	if (!strcmp(root, "/"))
		return path[0] == '/' ? path + 1 : path;
	if (!strncmp(path, root, n) && path[n] == '/')
		return path + n + 1;
	return path;
}

/* FilesystemEvent(s) of an engine event: a rename with both names is envd's (fsnotify's)
 * RENAME of the old name then CREATE of the new. */
static void to_events(const char *root, const char *type, const char *path, const char *old,
		      void (*put)(void *arg, json_t *ev), void *arg)
{
	const char *t = event_type(type);
	if (!t || !path)
		return;
	if (!strcmp(type, "rename") && old) {
		put(arg, json_pack("{s:s,s:s}", "name", rel_name(root, old), "type", t));
		t = "EVENT_TYPE_CREATE";
	}
	put(arg, json_pack("{s:s,s:s}", "name", rel_name(root, path), "type", t));
}

/* ---- WatchDir: a stream ---- */

struct wstream {
	struct envd_pstream ps; /* first: the stream machinery of process streams (no task) */
	struct watch_stream *w;
	char root[PATH_MAX];
};

static void ws_put(void *arg, json_t *ev)
{
	struct wstream *ws = arg;
	json_t *o = json_pack("{s:o}", "filesystem", ev);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (s && buf_avail(&ws->ps.hs.out) < (4u << 20))
		connect_env_append(&ws->ps.hs.out, 0, s, strlen(s));
	free(s);
	json_decref(o);
}

static void ws_event(void *arg, const char *type, const char *path, const char *old, bool is_dir)
{
	(void)is_dir;
	struct wstream *ws = arg;
	to_events(ws->root, type, path, old, ws_put, ws);
	http_stream_wake(&ws->ps.hs);
}

static void ws_end(void *arg, const char *reason)
{
	struct wstream *ws = arg;
	envd_pstream_end(&ws->ps, CC_NOT_FOUND, reason ? reason : "the directory is gone");
	http_stream_wake(&ws->ps.hs);
}

static const struct watch_sink ws_sink = {ws_event, ws_end};

static void ws_close(struct http_stream *hs)
{
	struct wstream *ws = (struct wstream *)hs;
	watch_close(ws->w);
	free(ws);
}

static void ws_produce(struct http_stream *hs)
{
	(void)hs; /* events are appended to out as they come */
}

/* The error of a watch that cannot start, in envd's words. */
static enum connect_code watch_code(const struct error *e)
{
	const char *c = error_code(e);
	return !strcmp(c, "TOO_MANY_WATCHES") ? CC_RESOURCE_EXHAUSTED
	       : !strcmp(c, "INVALID_FILE")   ? CC_INVALID_ARGUMENT
					      : connect_code_of(c);
}

static json_t *watch_msg(struct http_req *req, bool stream, char root[PATH_MAX])
{
	json_t *msg = envd_rpc_msg(req, stream);
	if (!msg)
		return NULL;
	enum connect_code code;
	char why[512];
	json_t *p = connect_field(msg, "path", NULL);
	if (envd_user_check(req, NULL, &code, why, sizeof(why)) < 0 ||
	    (code = CC_INVALID_ARGUMENT, !json_is_string(p)) ||
	    envd_path(req->r, json_string_value(p), root, why, sizeof(why)) < 0) {
		envd_rpc_fail(req, stream, code, "%s", json_is_string(p) ? why : "path is missing");
		json_decref(msg);
		return NULL;
	}
	return msg;
}

enum MHD_Result envd_fs_watch_dir(struct http_req *req);

static const struct http_stream_ops ws_ops = {
	.produce = ws_produce,
	.close = ws_close,
	.tick = envd_pstream_tick,
};

enum MHD_Result envd_fs_watch_dir(struct http_req *req)
{
	char root[PATH_MAX];
	cleanup_json json_t *msg = watch_msg(req, true, root);
	if (!msg)
		return MHD_YES;
	struct wstream *ws = calloc(1, sizeof(*ws));
	if (!ws)
		return MHD_NO;
	snprintf(ws->root, sizeof(ws->root), "%s", root);
	struct error err;
	ws->w = watch_open(req->r, root, json_is_true(connect_field(msg, "recursive", NULL)),
			   &ws_sink, ws, &err);
	if (!ws->w) {
		free(ws);
		return envd_rpc_fail(req, true, watch_code(&err), "%s", err.msg);
	}
	envd_pstream_headers(&ws->ps, req);
	ws->ps.keepalive_msg = "{\"keepalive\":{}}";
	connect_env_append(&ws->ps.hs.out, 0, "{\"start\":{}}", 12);
	http_audit_note(req, json_pack("{s:s}", "path", root));
	return http_stream_start(req, &ws->ps.hs, &ws_ops, "application/connect+json");
}

/* ---- polling watchers ---- */

static void pw_put(void *arg, json_t *ev)
{
	struct envd_watcher *w = arg;
	if (json_array_size(w->events) >= WATCHER_EVENTS_MAX) {
		w->dropped++; /* bounded: a watcher nobody polls holds no more than this */
		json_decref(ev);
		return;
	}
	json_array_append_new(w->events, ev);
}

static void pw_event(void *arg, const char *type, const char *path, const char *old, bool is_dir)
{
	(void)is_dir;
	struct envd_watcher *w = arg;
	to_events(w->root, type, path, old, pw_put, w);
}

static void pw_end(void *arg, const char *reason)
{
	(void)reason;
	((struct envd_watcher *)arg)->ended = true;
}

static const struct watch_sink pw_sink = {pw_event, pw_end};

static void pw_free(struct runner *r, struct envd_watcher *w)
{
	struct envd_state *s = envd_state(r);
	LIST_UNLINK(s->watchers, w);
	s->n_watchers--;
	watch_close(w->w);
	json_decref(w->events);
	free(w);
}

/* Watchers not polled for WATCHER_IDLE_MS go (a client that forgot one does not hold a slot of
 * the engine for good). */
static void pw_expire(struct runner *r)
{
	uint64_t now = monotonic_ms();
	struct envd_watcher *w = envd_state(r)->watchers, *n;
	for (; w; w = n) {
		n = w->next;
		if (now - w->last_poll_ms >= WATCHER_IDLE_MS)
			pw_free(r, w);
	}
}

void envd_watchers_free(struct runner *r)
{
	while (envd_state(r)->watchers)
		pw_free(r, envd_state(r)->watchers);
}

static struct envd_watcher *pw_find(struct http_req *req, json_t *msg)
{
	json_t *id = connect_field(msg, "watcherId", "watcher_id");
	for (struct envd_watcher *w = envd_state(req->r)->watchers; w && json_is_string(id);
	     w = w->next)
		if (!strcmp(w->id, json_string_value(id)))
			return w;
	return NULL;
}

enum MHD_Result envd_fs_create_watcher(struct http_req *req)
{
	char root[PATH_MAX];
	cleanup_json json_t *msg = watch_msg(req, false, root);
	if (!msg)
		return MHD_YES;
	struct envd_state *s = envd_state(req->r);
	pw_expire(req->r);
	if (s->n_watchers >= WATCHERS_MAX)
		return envd_rpc_fail(req, false, CC_RESOURCE_EXHAUSTED,
				     "%d watchers are open, the limit: remove one (RemoveWatcher); "
				     "one not polled for %d minutes is removed",
				     WATCHERS_MAX, WATCHER_IDLE_MS / 60000);
	struct envd_watcher *w = calloc(1, sizeof(*w));
	if (!w || random_id(w->id) < 0 || !(w->events = json_array())) {
		free(w);
		return envd_rpc_fail(req, false, CC_INTERNAL, "out of memory");
	}
	w->r = req->r;
	w->last_poll_ms = monotonic_ms();
	snprintf(w->root, sizeof(w->root), "%s", root);
	struct error err;
	w->w = watch_open(req->r, root, json_is_true(connect_field(msg, "recursive", NULL)),
			  &pw_sink, w, &err);
	if (!w->w) {
		json_decref(w->events);
		free(w);
		return envd_rpc_fail(req, false, watch_code(&err), "%s", err.msg);
	}
	LIST_PUSH(s->watchers, w);
	s->n_watchers++;
	return envd_rpc_ok(req, json_pack("{s:s}", "watcherId", w->id));
}

enum MHD_Result envd_fs_get_watcher_events(struct http_req *req)
{
	cleanup_json json_t *msg = envd_rpc_msg(req, false);
	if (!msg)
		return MHD_YES;
	struct envd_watcher *w = pw_find(req, msg);
	if (!w)
		return envd_rpc_fail(req, false, CC_NOT_FOUND, "watcher not found");
	w->last_poll_ms = monotonic_ms();
	json_t *events = w->events;
	w->events = json_array();
	if (w->dropped)
		http_audit_note(req, json_pack("{s:I}", "events_dropped", (json_int_t)w->dropped));
	w->dropped = 0;
	return envd_rpc_ok(req, json_pack("{s:o}", "events", events));
}

enum MHD_Result envd_fs_remove_watcher(struct http_req *req)
{
	cleanup_json json_t *msg = envd_rpc_msg(req, false);
	if (!msg)
		return MHD_YES;
	struct envd_watcher *w = pw_find(req, msg);
	if (!w)
		return envd_rpc_fail(req, false, CC_NOT_FOUND, "watcher not found");
	pw_free(req->r, w);
	return envd_rpc_ok(req, NULL);
}
