/* The watch engine (watch/watch.c): a directory's changes from inotify, watched as the task
 * user within the runner's bounds, for GET /files/watch (api/watch.c) and envd's WatchDir and
 * polling watchers (envd/watch.c). */
#pragma once
#include <stdbool.h>

#include "core/error.h"
#include "http/http.h"

struct runner;
struct watch_stream;

/* The events of path (as the task user, within the same limits) to a sink, as they are read.
 * event's type: create, write, remove, rename (old_path when known), chmod, overflow; end
 * once the directory is gone (nothing follows). NULL with err. Closed by watch_close only
 * (never from inside a sink call). */
struct watch_sink {
	void (*event)(void *arg, const char *type, const char *path, const char *old_path,
		      bool is_dir);
	void (*end)(void *arg, const char *reason);
};
struct watch_stream *watch_open(struct runner *r, const char *path, bool recursive,
				const struct watch_sink *sink, void *arg, struct error *err);
void watch_close(struct watch_stream *s);

/* GET /files/watch's stream: the watch of path with its first events queued (watching, and
 * overflow when a recursive walk hit the directory limit). NULL with err (TOO_MANY_WATCHES,
 * FILE_NOT_FOUND, INVALID_FILE, PERMISSION_DENIED, RUNTIME_ERROR). */
struct watch_stream *watch_sse_open(struct runner *r, const char *path, bool recursive,
				    struct error *err);
/* The answer: the stream's events as SSE until the client goes or the directory does. */
enum MHD_Result watch_sse_start(struct http_req *req, struct watch_stream *s);
