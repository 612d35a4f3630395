/* GET /files/watch?path=DIR&recursive=true: a directory's changes as server-sent events
 * (E2B envd's WatchDir). The query is read here; the watch is the engine's (watch/watch.c:
 * inotify as the task user, its bounds and its events). */
#include <limits.h>
#include <string.h>

#include "api/api.h"
#include "core/error.h"
#include "files/path.h"
#include "watch/watch.h"

enum MHD_Result api_files_watch(struct http_req *req)
{
	struct error err;
	const char *raw = http_query(req, "path");
	char path[PATH_MAX];
	if (!raw)
		return http_error(req, 400, "MISSING_QUERY",
				  "missing query parameter 'path' (an absolute directory path)");
	if (files_clean_path(raw, strlen(raw), path, sizeof(path)) < 0)
		return http_error(req, 400, "INVALID_QUERY",
				  "query parameter 'path' must be an absolute directory path");
	const char *rec = http_query(req, "recursive");
	bool recursive = false;
	if (rec && (!strcmp(rec, "true") || !strcmp(rec, "1")))
		recursive = true;
	else if (rec && *rec && strcmp(rec, "false") && strcmp(rec, "0"))
		return http_error(req, 400, "INVALID_QUERY",
				  "query parameter 'recursive' must be true or false");
	struct watch_stream *s = watch_sse_open(req->r, path, recursive, &err);
	if (!s)
		return http_fail(req, &err);
	return watch_sse_start(req, s);
}
