/* The files API's walks (api/files.c is their prologue): GET /directories/list and GET
 * /files/search (files/walk.h) and GET /files/grep (files/grep.h), each in slices as the
 * task user, so a large tree never stalls the loop. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/jsonesc.h"
#include "api/filesroute.h"
#include "text/glob.h"
#include "files/grep.h"
#include "files/info.h"
#include "files/path.h"
#include "files/walk.h"

/* ---- GET /directories/list, GET /files/search ---- */

struct walk_job {
	struct fjob j;
	struct files_walk w;
	struct buf out;
	struct text_glob *glob;
	const char *what;
	char path[PATH_MAX];
};

static int walk_step(struct files_userjob *j, uint64_t deadline_ms)
{
	struct walk_job *wj = (struct walk_job *)j;
	int rc = files_walk_step(&wj->w, deadline_ms);
	if (rc == -FILES_ELIMIT)
		return error_set(&j->err, 0, "INVALID_REQUEST_BODY",
				 "%s %.1024s: %s; narrow it (limits: %d results, %d entries looked "
				 "at, %d ms, %d levels)",
				 wj->what, wj->path, wj->w.limit_msg, FILES_MAX_RESULTS,
				 FILES_MAX_VISITED, FILES_MAX_WALK_MS, FILES_MAX_DEPTH);
	if (rc < 0)
		return fapi_fs_error(&j->err, rc, wj->what, wj->path, &j->id, false);
	return rc;
}

static int walk_answer(struct fcall *c, struct fjob *j)
{
	struct walk_job *wj = (struct walk_job *)j;
	buf_append_str(&wj->out, "]");
	return fapi_answer_json(c, &wj->out);
}

static void walk_release(struct files_userjob *j)
{
	struct walk_job *wj = (struct walk_job *)j;
	files_walk_free(&wj->w);
	buf_free(&wj->out);
	text_glob_free(wj->glob);
}

/* A walk job over path (glob taken). */
static struct walk_job *walk_job_new(struct fcall *c, const char *what, struct text_glob *glob)
{
	struct walk_job *wj = fjob_new(c, sizeof(*wj), walk_step, walk_answer, walk_release);
	if (!wj) {
		text_glob_free(glob);
		return NULL;
	}
	wj->glob = glob;
	wj->what = what;
	snprintf(wj->path, sizeof(wj->path), "%s", c->paths[0]);
	wj->w.out = &wj->out;
	wj->w.glob = glob;
	buf_append_str(&wj->out, "[");
	return wj;
}

static int open_walk_root(const char *path, struct stat *st, int *fd)
{
	return files_open_root(path, st, fd);
}

static int op_list(struct fcall *c)
{
	const char *path = c->paths[0];
	uint64_t depth = 1;
	size_t dl;
	const char *d = fapi_query_n(c->req, "depth", &dl);
	if (d && dl && fapi_parse_count(d, dl, UINT32_MAX, &depth) < 0)
		return error_set(&c->err, 0, "INVALID_QUERY",
				 "invalid query parameter 'depth': must be a non-negative number");
	struct stat st;
	int fd, rc = open_walk_root(path, &st, &fd);
	if (rc == 0 && fd < 0 && S_ISLNK(st.st_mode))
		return error_set(&c->err, 0, "INVALID_REQUEST_BODY",
				 "path is a symbolic link, refusing to traverse: %.1024s", path);
	if (rc == 0 && fd < 0)
		rc = -ENOTDIR;
	if (rc < 0)
		return fapi_fs_error(&c->err, rc, "list", path, &c->id, false);
	struct walk_job *wj = walk_job_new(c, "list", NULL);
	if (!wj) {
		close(fd);
		return fapi_oom(&c->err);
	}
	wj->w.max_depth = depth > FILES_MAX_DEPTH ? FILES_MAX_DEPTH : (unsigned)depth;
	rc = files_walk_start(&wj->w, fd, path);
	if (rc < 0)
		return fapi_fs_error(&c->err, rc, "list", path, &c->id, false);
	return fjob_run(c, &wj->j);
}

enum MHD_Result api_dirs_list(struct http_req *req)
{
	return files_route(req, IN_PATH, op_list);
}

static int op_search(struct fcall *c)
{
	const char *path = c->paths[0];
	size_t pl;
	const char *pattern = fapi_query_n(c->req, "pattern", &pl);
	if (!pattern || !pl)
		pattern = "**";
	else if (memchr(pattern, 0, pl))
		return error_set(&c->err, 0, "INVALID_QUERY", "pattern contains a NUL byte");
	char err[128];
	struct text_glob *g = NULL;
	if (text_glob_compile(&g, pattern, err, sizeof(err)) < 0)
		return error_set(&c->err, 0, "INVALID_QUERY", "invalid pattern %.600s: %s", pattern,
				 err);
	struct walk_job *wj = walk_job_new(c, "search", g);
	if (!wj)
		return fapi_oom(&c->err);
	wj->w.search = true;
	wj->w.max_depth = FILES_MAX_DEPTH;
	struct stat st;
	int fd, rc = open_walk_root(path, &st, &fd);
	if (rc < 0)
		return fapi_fs_error(&c->err, rc, "search", path, &c->id, false);
	if (fd < 0) {
		/* Like execd's walk: a root that is not a directory is itself the
		 * one candidate (a link is not followed). */
		enum text_glob_subject sub = text_glob_subject(g);
		const char *name = sub == GLOB_ABS   ? path
				   : sub == GLOB_REL ? ""
						     : strrchr(path, '/') + 1;
		if (text_glob_match(g, name, strlen(name))) {
			files_info_json(&wj->out, path, &st, &wj->w.names);
			wj->w.results = 1;
		}
		wj->j.done = true;
		return walk_answer(c, &wj->j);
	}
	rc = files_walk_start(&wj->w, fd, path);
	if (rc < 0)
		return fapi_fs_error(&c->err, rc, "search", path, &c->id, false);
	return fjob_run(c, &wj->j);
}

enum MHD_Result api_files_search(struct http_req *req)
{
	return files_route(req, IN_PATH, op_search);
}

/* ---- GET /files/grep ---- */

/* Content search (files/grep.h), the grep tool's own search: a regular expression over the
 * lines of the files below path (or of the one file path names). */
struct grep_job {
	struct fjob j;
	struct files_grep g;
	struct text_glob *glob;
	struct buf out;
	char path[PATH_MAX];
};

static int grep_step(struct files_userjob *j, uint64_t deadline_ms)
{
	struct grep_job *gj = (struct grep_job *)j;
	int rc = files_grep_step(&gj->g, deadline_ms);
	if (rc < 0)
		return fapi_fs_error(&j->err, rc, "grep", gj->path, &j->id, false);
	return rc;
}

static int grep_answer(struct fcall *c, struct fjob *j)
{
	struct grep_job *gj = (struct grep_job *)j;
	struct buf b = {0};
	buf_append_str(&b, "{\"matches\":[");
	buf_append(&b, gj->out.data ? gj->out.data : "", gj->out.len);
	buf_appendf(&b,
		    "],\"truncated\":%s,\"files_searched\":%zu,\"skipped_binary\":%zu,"
		    "\"skipped_large\":%zu",
		    gj->g.truncated ? "true" : "false", gj->g.files, gj->g.skipped_binary,
		    gj->g.skipped_large);
	if (gj->g.truncated) {
		buf_append_str(&b, ",\"limit\":");
		buf_append_json_str(&b, gj->g.limit_msg, strlen(gj->g.limit_msg));
	}
	buf_append_str(&b, "}");
	int rc = fapi_answer_json(c, &b);
	buf_free(&b);
	return rc;
}

static void grep_release(struct files_userjob *j)
{
	struct grep_job *gj = (struct grep_job *)j;
	files_grep_free(&gj->g);
	text_glob_free(gj->glob);
	buf_free(&gj->out);
}

static int op_grep(struct fcall *c)
{
	const char *path = c->paths[0];
	size_t pl, gl, ml;
	const char *pattern = fapi_query_n(c->req, "pattern", &pl);
	const char *glob = fapi_query_n(c->req, "glob", &gl);
	const char *max = fapi_query_n(c->req, "max_results", &ml);
	if (!pattern || !pl)
		return error_set(&c->err, 0, "MISSING_QUERY", "missing query parameter 'pattern'");
	if (memchr(pattern, 0, pl) || (glob && memchr(glob, 0, gl)))
		return error_set(&c->err, 0, "INVALID_QUERY",
				 "query parameter 'pattern' or 'glob' contains a NUL byte");
	uint64_t max_results = 0;
	if (max && ml &&
	    (fapi_parse_count(max, ml, FILES_MAX_RESULTS, &max_results) < 0 || !max_results))
		return error_set(&c->err, 0, "INVALID_QUERY",
				 "invalid query parameter 'max_results': 1 to %d",
				 FILES_MAX_RESULTS);
	struct grep_job *gj = fjob_new(c, sizeof(*gj), grep_step, grep_answer, grep_release);
	if (!gj)
		return fapi_oom(&c->err);
	snprintf(gj->path, sizeof(gj->path), "%s", path);
	char err[160];
	int rc = files_grep_init(&gj->g, pattern, err, sizeof(err));
	if (rc == -EINVAL)
		return error_set(&c->err, 0, "INVALID_QUERY",
				 "invalid query parameter 'pattern': %s", err);
	if (rc < 0)
		return fapi_oom(&c->err);
	if (glob && gl && text_glob_compile(&gj->glob, glob, err, sizeof(err)) < 0)
		return error_set(&c->err, 0, "INVALID_QUERY",
				 "invalid query parameter 'glob' %.600s: %s", glob, err);
	gj->g.glob = gj->glob;
	gj->g.max_results = (size_t)max_results;
	gj->g.out = &gj->out;
	struct stat st;
	int fd;
	rc = open_walk_root(path, &st, &fd);
	if (rc == 0 && fd < 0) {
		if (S_ISLNK(st.st_mode))
			return error_set(&c->err, 0, "INVALID_REQUEST_BODY",
					 "path is a symbolic link, refusing to follow: %.1024s",
					 path);
		if (!S_ISREG(st.st_mode))
			return error_set(&c->err, 0, "INVALID_FILE",
					 "grep %.1024s: not a regular file or directory", path);
		rc = fd = files_open(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW,
				     0);
	}
	if (rc < 0)
		return fapi_fs_error(&c->err, rc, "grep", path, &c->id, false);
	if ((rc = files_grep_start(&gj->g, fd, path, S_ISDIR(st.st_mode))) < 0)
		return fapi_fs_error(&c->err, rc, "grep", path, &c->id, false);
	return fjob_run(c, &gj->j);
}

enum MHD_Result api_files_grep(struct http_req *req)
{
	return files_route(req, IN_PATH, op_grep);
}
