/* Files API: execd's /files and /directories routes (docs/design/wire.md#files-api: every
 * operation as the task user, bodies streamed both ways, one struct error each). This file is
 * the one prologue every route but upload goes through, files_route() (input, the task user,
 * the operation, its error answered), the request side of the task user's job
 * (files/userjob.h), and the input and answers the operations share (api/filesroute.h); the
 * operations are in api/filesops.c, fileswalk.c, filesreplace.c, filesdownload.c and
 * filesupload.c. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/filesroute.h"
#include "core/log.h"
#include "core/runner.h"
#include "files/fserror.h"
#include "files/ident.h"
#include "files/path.h"
#include "files/sched.h"
#include "files/userjob.h"
#include "http/body.h"
#include "profile/profile.h"

int fapi_fs_error(struct error *e, int rc, const char *op, const char *path,
		  const struct files_ident *id, bool upload)
{
	int r = files_error(e, rc, op, path, id, upload);
	/* What has no words of its own is the runner's trouble, not the client's. */
	if (!strcmp(error_code(e), "RUNTIME_ERROR"))
		log_errno("files API operation failed", rc < 0 ? -rc : rc, op);
	return r;
}

int fapi_oom(struct error *e)
{
	return error_set(e, 0, "RUNTIME_ERROR", "out of memory");
}

/* ---- the files-route prologue ---- */

static void fcall_free(struct fcall **cp)
{
	struct fcall *c = *cp;
	if (!c)
		return;
	free(c->paths);
	json_decref(c->body);
	free(c);
}
#define cleanup_fcall __attribute__((cleanup(fcall_free)))

struct qvals {
	struct fcall *c;
	bool overflow;
};

static enum MHD_Result qvals_it(void *cls, enum MHD_ValueKind kind, const char *key,
				size_t key_size, const char *value, size_t value_size)
{
	(void)kind;
	struct qvals *q = cls;
	struct fcall *c = q->c;
	if (key_size != 4 || memcmp(key, "path", 4) != 0)
		return MHD_YES;
	if (c->n == MAX_QUERY_PATHS) {
		q->overflow = true;
		return MHD_NO;
	}
	c->raw[c->n] = value ? value : "";
	c->len[c->n] = value ? value_size : 0;
	c->n++;
	return MHD_YES;
}

/* Every path=... of the query (at least one), each checked and cleaned. */
static int query_paths(struct fcall *c)
{
	struct qvals q = {.c = c};
	MHD_get_connection_values_n(c->req->conn, MHD_GET_ARGUMENT_KIND, qvals_it, &q);
	if (q.overflow)
		return error_set(&c->err, 0, "INVALID_QUERY", "more than %d 'path' parameters",
				 MAX_QUERY_PATHS);
	if (c->n == 0 || (c->n == 1 && c->len[0] == 0))
		return error_set(&c->err, 0, "MISSING_QUERY", "missing query parameter 'path'");
	c->paths = malloc(sizeof(char[1][PATH_MAX]) * c->n);
	if (!c->paths)
		return fapi_oom(&c->err);
	for (size_t i = 0; i < c->n; i++) {
		int rc = files_clean_path(c->raw[i], c->len[i], c->paths[i], PATH_MAX);
		if (rc == -ENAMETOOLONG)
			return error_set(&c->err, 0, "INVALID_QUERY", "path too long");
		if (rc < 0 && c->len[i] && !memchr(c->raw[i], 0, c->len[i]))
			return error_set(&c->err, 0, "INVALID_QUERY",
					 "path must be absolute: %.1024s", c->raw[i]);
		if (rc < 0)
			return error_set(
				&c->err, 0, "INVALID_QUERY",
				"path must be a non-empty absolute path without NUL bytes");
	}
	return 0;
}

/* The route's JSON body through the one reader (http/body.h), in execd's words. */
static int body_json(struct fcall *c, bool array)
{
	struct http_json_opts o = {.array = array, .syntax_prefix = "error parsing request, "};
	c->body = http_parse_json(c->req->body, c->req->body_len, &o, &c->err);
	return c->body ? 0 : -1;
}

static int take_input(struct fcall *c, enum files_input in)
{
	switch (in) {
	case IN_QUERY:
		return 0;
	case IN_PATH:
		if (query_paths(c) < 0)
			return -1;
		if (c->n > 1)
			return error_set(&c->err, 0, "INVALID_QUERY",
					 "exactly one 'path' parameter is expected");
		return 0;
	case IN_PATHS:
		return query_paths(c);
	case IN_OBJECT:
	case IN_ARRAY:
		return body_json(c, in == IN_ARRAY);
	}
	return 0;
}

/* ---- work in slices ---- */

static void fjob_free(struct http_req *req)
{
	struct fjob *j = req->ctx;
	if (!j)
		return;
	files_userjob_release(&j->uj);
	free(j);
	req->ctx = NULL;
}

/* A slice in the loop's turns, as the task user. */
static int fjob_step(struct files_userjob *uj, uint64_t deadline_ms)
{
	struct fjob *j = (struct fjob *)uj;
	/* A reset began (profile/profile.h): this is the previous tenant's work;
	 * it must not go on touching the files being restored. */
	if (j->req->gen != profile_gen(j->req->r))
		return error_set(&uj->err, 0, "RESETTING", "the box was reset during this request");
	return j->step(uj, deadline_ms);
}

static void fjob_done(struct files_userjob *uj)
{
	struct fjob *j = (struct fjob *)uj;
	j->done = true;
	http_req_resume(j->req); /* its handler runs again and answers */
}

static int fjob_answer(struct fcall *c, struct fjob *j)
{
	if (j->uj.failed) {
		c->err = j->uj.err;
		return -1;
	}
	return j->answer(c, j);
}

void *fjob_new(struct fcall *c, size_t size, files_userjob_step_fn step, fjob_answer_fn answer,
	       files_userjob_fn release)
{
	struct fjob *j = calloc(1, size);
	if (!j)
		return NULL;
	files_userjob_init(&j->uj, c->req->r, fjob_step, fjob_done, release);
	j->req = c->req;
	j->step = step;
	j->answer = answer;
	c->req->ctx = j;
	c->req->ctx_free = fjob_free;
	return j;
}

int fjob_run(struct fcall *c, struct fjob *j)
{
	struct runner *r = c->req->r;
	int rc = j->step(&j->uj, monotonic_ms() + FILES_SLICE_MS);
	if (rc > 0) {
		/* None waits once shutting down: it would only be cut. */
		if (r->shutting_down || http_stopping(r))
			return error_set(&c->err, 0, "UNAVAILABLE", "the runner is shutting down");
		if ((rc = files_userjob_schedule(&j->uj)) < 0)
			return fapi_fs_error(&c->err, rc, "schedule", "", &c->id, false);
		http_req_suspend(c->req);
		c->res = MHD_YES; /* no answer yet */
		return 0;
	}
	j->uj.failed = rc < 0;
	j->done = true;
	return fjob_answer(c, j);
}

enum MHD_Result files_route(struct http_req *req, enum files_input in, files_op op)
{
	return files_route_as(req, in, op, http_fail);
}

enum MHD_Result files_route_as(struct http_req *req, enum files_input in, files_op op,
			       files_fail_fn fail)
{
	cleanup_fcall struct fcall *c = calloc(1, sizeof(*c));
	if (!c)
		return MHD_NO;
	c->req = req;
	files_task_ident(req->r, &c->id);
	if (req->ctx_free == fjob_free) {
		/* Called again: its job is done (or the server is stopping). */
		struct fjob *j = req->ctx;
		int rc = j->done ? fjob_answer(c, j)
				 : error_set(&c->err, 0, "UNAVAILABLE",
					     "the runner is shutting down");
		return rc < 0 ? fail(req, &c->err) : c->res;
	}
	int rc = take_input(c, in);
	if (rc == 0) {
		int e = files_enter(&c->id);
		if (e < 0) {
			rc = fapi_fs_error(&c->err, e, "act as the task user", "", &c->id, false);
		} else {
			rc = op(c);
			files_leave();
		}
	}
	return rc < 0 ? fail(req, &c->err) : c->res;
}

/* ---- answers ---- */

int fapi_answer_empty(struct fcall *c)
{
	c->res = http_empty(c->req, 200);
	return 0;
}

int fapi_answer_json(struct fcall *c, const struct buf *b)
{
	if (!b->data)
		return fapi_oom(&c->err);
	c->res = http_text(c->req, 200, "application/json", b->data, b->len, NULL, NULL);
	return 0;
}

/* ---- query and body input ---- */

/* One query value with its real length (a %00 shows up as a NUL inside). */
const char *fapi_query_n(struct http_req *req, const char *name, size_t *len)
{
	const char *v = NULL;
	*len = 0;
	if (MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
					  len) != MHD_YES ||
	    !v)
		return NULL;
	return v;
}

/* A non-negative decimal number ("depth", "offset", "limit"). */
int fapi_parse_count(const char *s, size_t len, uint64_t max, uint64_t *out)
{
	if (!s || len == 0 || len > 19)
		return -1;
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > max)
		return -1;
	*out = v;
	return 0;
}

/* mode: octal digits written as a decimal number (755 = 0755); absent,
 * null or 0 = unset. 0, or -1 with msg. */
static int parse_mode(json_t *v, bool *has, mode_t *out, char *msg, size_t msglen)
{
	*has = false;
	if (!v || json_is_null(v))
		return 0;
	json_int_t d = json_is_integer(v) ? json_integer_value(v) : -1;
	if (d < 0 || d > 7777) {
		snprintf(msg, msglen, "mode must be octal digits written as a number, e.g. 755");
		return -1;
	}
	mode_t m = 0, shift = 0;
	for (json_int_t x = d; x; x /= 10, shift += 3) {
		if (x % 10 > 7) {
			snprintf(msg, msglen, "mode %lld is not octal digits (0-7 each)",
				 (long long)d);
			return -1;
		}
		m |= (mode_t)(x % 10) << shift;
	}
	if (m) {
		*has = true;
		*out = m;
	}
	return 0;
}

/* Parse and authorize {owner?, group?, mode?}: 0, or -1 with *forbidden
 * (403, else 400) and a message. */
int fapi_perm_parse(const struct runner_config *cfg, json_t *o, struct perm *p, bool *forbidden,
		    char *msg, size_t msglen)
{
	memset(p, 0, sizeof(*p));
	p->uid = (uid_t)-1;
	p->gid = (gid_t)-1;
	*forbidden = false;
	if (!json_is_object(o)) {
		snprintf(msg, msglen, "expected an object {owner, group, mode}");
		return -1;
	}
	if (parse_mode(json_object_get(o, "mode"), &p->has_mode, &p->mode, msg, msglen) < 0)
		return -1;
	static const char *const keys[2] = {"owner", "group"};
	for (int k = 0; k < 2; k++) {
		json_t *v = json_object_get(o, keys[k]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_string(v)) {
			snprintf(msg, msglen, "%s must be a string", keys[k]);
			return -1;
		}
		const char *name = json_string_value(v);
		if (!*name)
			continue;
		int rc = k == 0 ? files_lookup_user(name, &p->uid)
				: files_lookup_group(name, &p->gid);
		if (rc < 0 || strlen(name) != json_string_length(v)) {
			snprintf(msg, msglen, "unknown %s '%.128s'", k == 0 ? "user" : "group",
				 name);
			return -1;
		}
	}
	/* The kernel lets the user give a file only to itself and its own
	 * group; anything else is root's business. */
	p->as_root = (p->uid != (uid_t)-1 && p->uid != cfg->task_uid) ||
		     (p->gid != (gid_t)-1 && p->gid != cfg->task_gid);
	if (p->as_root && !cfg->allow_root_tasks) {
		*forbidden = true;
		snprintf(msg, msglen,
			 "the task user (%u:%u) may not give files to another owner or group; that "
			 "needs --allow-root-tasks",
			 (unsigned)cfg->task_uid, (unsigned)cfg->task_gid);
		return -1;
	}
	return 0;
}

/* A path given as a string: checked and cleaned. */
int fapi_str_path(struct error *e, const char *s, size_t len, const char *field, char out[PATH_MAX])
{
	if (!len)
		return error_set(e, 0, "INVALID_REQUEST_BODY", "'%s' must be a non-empty path",
				 field);
	if (files_clean_path(s, len, out, PATH_MAX) < 0)
		return error_set(e, 0, "INVALID_REQUEST_BODY",
				 "'%s' must be an absolute path without NUL bytes: %.1024s", field,
				 s);
	return 0;
}

void fapi_dirname_of(const char *clean, char out[PATH_MAX])
{
	const char *slash = strrchr(clean, '/');
	size_t n = slash && slash != clean ? (size_t)(slash - clean) : 1;
	memcpy(out, clean, n);
	out[n] = 0;
}
