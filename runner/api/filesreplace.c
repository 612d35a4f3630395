/* POST /files/replace (api/files.c is its prologue): each file's content rewritten with
 * old replaced by new (files/ops.h), the files one after the other, in slices as the task
 * user. */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

#include "api/filesroute.h"
#include "core/jsonesc.h"
#include "core/log.h"
#include "files/ops.h"
#include "files/path.h"

/* ---- POST /files/replace ---- */

struct replace_job {
	struct fjob j;
	json_t *body; /* a reference: keys, old and new point into it */
	void *iter;   /* the file being worked on */
	char path[PATH_MAX];
	bool open;
	struct files_replace rp;
	struct buf out; /* {"path":{"replacedCount":N},...} */
	bool want_counts, any;
};

static int replace_fail(struct replace_job *rj, int rc)
{
	struct files_userjob *j = &rj->j.uj;
	if (rc == -EFBIG)
		return error_set(&j->err, 0, "FILE_TOO_LARGE",
				 "replace %.1024s: files over %llu MiB are not rewritten", rj->path,
				 (unsigned long long)(FILES_REPLACE_MAX >> 20));
	if (rc == -EINVAL)
		return error_set(&j->err, 0, "INVALID_FILE", "replace %.1024s: not a regular file",
				 rj->path);
	if (rc == -ELOOP)
		return error_set(&j->err, 0, "INVALID_FILE",
				 "replace %.1024s: is a symbolic link (links are not followed)",
				 rj->path);
	return fapi_fs_error(&j->err, rc, "replace", rj->path, &j->id, false);
}

/* Files one after the other, each opened, streamed and put in place. */
static int replace_step(struct files_userjob *j, uint64_t deadline_ms)
{
	struct replace_job *rj = (struct replace_job *)j;
	do {
		if (!rj->iter)
			return 0;
		const char *key = json_object_iter_key(rj->iter);
		json_t *v = json_object_iter_value(rj->iter);
		int rc;
		if (!rj->open) {
			json_t *o = json_object_get(v, "old"), *nw = json_object_get(v, "new");
			rc = files_clean_path(key, strlen(key), rj->path, sizeof(rj->path));
			if (rc == 0)
				rc = files_replace_open(&rj->rp, &j->id, rj->path,
							json_string_value(o), json_string_length(o),
							json_is_string(nw) ? json_string_value(nw)
									   : "",
							json_is_string(nw) ? json_string_length(nw)
									   : 0);
			rj->open = true;
			if (rc < 0)
				return replace_fail(rj, rc);
		}
		rc = files_replace_step(&rj->rp, deadline_ms);
		if (rc < 0)
			return replace_fail(rj, rc);
		if (rc > 0)
			return 1;
		if (rj->any)
			buf_append_str(&rj->out, ",");
		rj->any = true;
		buf_append_json_str(&rj->out, key, strlen(key));
		buf_appendf(&rj->out, ":{\"replacedCount\":%llu}",
			    (unsigned long long)rj->rp.count);
		files_replace_close(&rj->rp);
		rj->open = false;
		rj->iter = json_object_iter_next(rj->body, rj->iter);
	} while (monotonic_ms() < deadline_ms);
	return rj->iter ? 1 : 0;
}

static int replace_answer(struct fcall *c, struct fjob *j)
{
	struct replace_job *rj = (struct replace_job *)j;
	if (!rj->want_counts)
		return fapi_answer_empty(c); /* execd: empty unless ?verbose=true */
	buf_append_str(&rj->out, "}");
	return fapi_answer_json(c, &rj->out);
}

static void replace_release(struct files_userjob *j)
{
	struct replace_job *rj = (struct replace_job *)j;
	if (rj->open)
		files_replace_close(&rj->rp);
	buf_free(&rj->out);
	json_decref(rj->body);
}

static int op_replace(struct fcall *c)
{
	size_t vl;
	const char *verbose = fapi_query_n(c->req, "verbose", &vl);
	const char *key;
	json_t *v;
	char path[PATH_MAX];
	/* Everything is checked before any file is touched. */
	json_object_foreach(c->body, key, v) {
		if (fapi_str_path(&c->err, key, strlen(key), "path", path) < 0)
			return -1;
		json_t *o = json_is_object(v) ? json_object_get(v, "old") : NULL;
		json_t *nw = json_is_object(v) ? json_object_get(v, "new") : NULL;
		if (!json_is_object(v) || (o && !json_is_string(o)) ||
		    (nw && !json_is_null(nw) && !json_is_string(nw)))
			return error_set(&c->err, 0, "INVALID_REQUEST_BODY",
					 "%.1024s: expected {\"old\": string, \"new\": string}",
					 key);
		if (!o || !json_string_length(o))
			return error_set(&c->err, 0, "INVALID_REQUEST_BODY",
					 "%.1024s: old content must not be empty", key);
	}
	struct replace_job *rj =
		fjob_new(c, sizeof(*rj), replace_step, replace_answer, replace_release);
	if (!rj)
		return fapi_oom(&c->err);
	rj->body = json_incref(c->body);
	rj->iter = json_object_iter(rj->body);
	rj->want_counts = verbose && vl == 4 && !strncasecmp(verbose, "true", 4);
	buf_append_str(&rj->out, "{");
	return fjob_run(c, &rj->j);
}

enum MHD_Result api_files_replace(struct http_req *req)
{
	return files_route(req, IN_OBJECT, op_replace);
}
