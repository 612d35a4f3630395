/* Files API (docs/design.md §3.4): execd's /files and /directories routes. Every
 * filesystem operation runs as the task user (files/ident.h); bodies stream
 * both ways (uploads are parsed chunk by chunk into a temporary file,
 * downloads are served from the file descriptor), so memory does not grow
 * with file size. Errors are execd-style JSON {"code","message"}, from one
 * struct error each (core/error.h).
 *
 * Every route but upload goes through one prologue, files_route(): it takes
 * the route's input (its path= parameters or its JSON body), switches to the
 * task user, runs the operation and answers its error, if any. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "core/auditchain.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "confine/confine.h"
#include "core/runner.h"
#include "core/sha256.h"
#include "core/util.h"
#include "files/glob.h"
#include "files/grep.h"
#include "files/ident.h"
#include "files/info.h"
#include "files/multipart.h"
#include "files/ops.h"
#include "files/path.h"
#include "files/sched.h"
#include "files/walk.h"
#include "profile/profile.h"

#define MAX_QUERY_PATHS 256         /* path=... repeated in one request */
#define UPLOAD_MAX_FILES 64         /* metadata+file pairs in one upload */
#define UPLOAD_META_MAX (64 * 1024) /* bytes of one metadata part */

static void ident_of(struct runner *r, struct files_ident *id)
{
	id->uid = r->cfg.task_uid;
	id->gid = r->cfg.task_gid;
	/* Tasks may only write beneath the Landlock roots: neither may the API
	 * on their behalf (reads are allowed everywhere, as for tasks). */
	id->write_roots = r->policy->enabled && r->policy->landlock.abi > 0
				  ? r->policy->landlock.roots
				  : NULL;
}

/* A -errno of the files layer as the request's error: its code (hence its
 * status) and message. `upload` keeps the upload's own wording. */
static int fs_error(struct error *e, int rc, const char *op, const char *path,
		    const struct files_ident *id, bool upload)
{
	int err = rc < 0 ? -rc : rc;
	int r;
	switch (err) {
	case ENOENT:
		r = error_set(e, 0, "FILE_NOT_FOUND", "%s %.1024s: file not found", op, path);
		break;
	case EACCES:
	case EPERM:
	case EROFS:
		r = error_set(e, 0, "PERMISSION_DENIED",
			      "%s %.1024s: %s (acting as the task user, uid %u)", op, path,
			      strerror(err), (unsigned)id->uid);
		break;
	case FILES_EOUTSIDE:
		r = error_set(e, 0, "PERMISSION_DENIED",
			      "%s %.1024s: outside the directories tasks may write (%.300s)", op,
			      path, id->write_roots ? id->write_roots : "");
		break;
	case EISDIR:
		r = error_set(e, 0, "INVALID_FILE", "%s %.1024s: is a directory", op, path);
		break;
	case ENOTDIR:
		r = error_set(e, 0, "INVALID_FILE",
			      upload ? "%s %.1024s: a parent is not a directory"
				     : "%s %.1024s: not a directory",
			      op, path);
		break;
	case EEXIST:
	case ENOTEMPTY:
		if (upload)
			goto other;
		r = error_set(e, 0, "FILE_EXISTS", "%s %.1024s: already exists", op, path);
		break;
	case ENAMETOOLONG:
	case ELOOP:
	case EINVAL:
	case EXDEV:
	case EBUSY:
		if (upload)
			goto other;
		r = error_set(e, 0, "INVALID_REQUEST_BODY", "%s %.1024s: %s", op, path,
			      strerror(err));
		break;
	case EFBIG:
		if (upload)
			goto storage;
		r = error_set(e, 0, "FILE_TOO_LARGE", "%s %.1024s: file too large", op, path);
		break;
	case ENOSPC:
	case EDQUOT:
	storage:
		r = error_set(e, 0, "INSUFFICIENT_STORAGE", "%s %.1024s: %s", op, path,
			      strerror(err));
		break;
	case ESTALE:
		r = error_set(e, 0, "CONFLICT",
			      "%s %.1024s: changed while it was being worked on; try again", op,
			      path);
		break;
	case ETXTBSY:
		r = error_set(e, 0, "CONFLICT", "%s %.1024s: %s", op, path, strerror(err));
		break;
	case FILES_ELIMIT:
		if (upload)
			goto other;
		r = error_set(e, 0, "INVALID_REQUEST_BODY",
			      "%s %.1024s: directory tree deeper than %d levels", op, path,
			      FILES_RMRF_MAX_DEPTH);
		break;
	default:
	other:
		log_errno("files API operation failed", err, op);
		r = error_set(e, 0, "RUNTIME_ERROR", "%s %.1024s: %s", op, path, strerror(err));
		break;
	}
	if (e)
		e->errnum = err < 4096 ? err : 0;
	return r;
}

static int oom(struct error *e)
{
	return error_set(e, 0, "RUNTIME_ERROR", "out of memory");
}

/* ---- the files-route prologue ---- */

/* What a route takes from the request. */
enum files_input {
	IN_QUERY,  /* nothing: the operation reads its own query */
	IN_PATH,   /* exactly one path= */
	IN_PATHS,  /* one or more path= */
	IN_OBJECT, /* a JSON object body */
	IN_ARRAY,  /* a JSON array body */
};

struct fcall {
	struct http_req *req;
	struct files_ident id;
	struct error err;
	enum MHD_Result res; /* the answer, once the operation gave one */
	/* IN_PATH, IN_PATHS: each path= as asked (raw, len) and cleaned. */
	size_t n;
	const char *raw[MAX_QUERY_PATHS];
	size_t len[MAX_QUERY_PATHS];
	char (*paths)[PATH_MAX];
	/* IN_OBJECT, IN_ARRAY */
	json_t *body;
};

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

/* An operation: 0 once it answered (c->res), or -1 with c->err. */
typedef int (*files_op)(struct fcall *c);

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
		return oom(&c->err);
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

static int body_json(struct fcall *c, bool array)
{
	struct http_req *req = c->req;
	const char *want = array ? "array" : "object";
	if (!req->body_len)
		return error_set(&c->err, 0, "INVALID_REQUEST_BODY",
				 "the request body must be a JSON %s", want);
	json_error_t jerr;
	c->body = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!c->body)
		return error_set(&c->err, 0, "INVALID_REQUEST_BODY",
				 "error parsing request, invalid JSON at line %d column %d: %s",
				 jerr.line, jerr.column, jerr.text);
	if (array ? !json_is_array(c->body) : !json_is_object(c->body))
		return error_set(&c->err, 0, "INVALID_REQUEST_BODY",
				 "the request body must be a JSON %s", want);
	return 0;
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

/* A request whose work runs in slices on the loop (files/sched.h): its
 * first slice runs at once (small work answers straight away); if there is
 * more, the request waits suspended until the job is done, then is
 * answered. The job lives in req->ctx, so a client that goes away frees
 * it. */
struct fjob;
typedef int (*fjob_step_fn)(struct fjob *j, uint64_t deadline_ms); /* 1 more, 0 done, -1 err */
typedef int (*fjob_answer_fn)(struct fcall *c, struct fjob *j);
typedef void (*fjob_release_fn)(struct fjob *j);

struct fjob {
	struct files_job sj; /* first: the scheduler's view */
	struct http_req *req;
	struct files_ident id;
	fjob_step_fn step;
	fjob_answer_fn answer;
	fjob_release_fn release;
	struct error err;
	bool failed, done;
};

static void fjob_free(struct http_req *req)
{
	struct fjob *j = req->ctx;
	if (!j)
		return;
	files_sched_remove(req->r->files_sched, &j->sj);
	/* Descriptors are closed and temporaries removed as the task user. */
	bool entered = files_enter(&j->id) == 0;
	j->release(j);
	if (entered)
		files_leave();
	free(j);
	req->ctx = NULL;
}

/* One slice, as the task user. */
static int fjob_slice(struct fjob *j, uint64_t deadline_ms)
{
	/* A reset began (profile/profile.h): this is the previous tenant's work;
	 * it must not go on touching the files being restored. */
	if (j->req->gen != profile_gen(j->req->r)) {
		error_set(&j->err, 0, "RESETTING", "the box was reset during this request");
		j->failed = true;
		return 0;
	}
	int rc = files_enter(&j->id);
	if (rc < 0) {
		fs_error(&j->err, rc, "act as the task user", "", &j->id, false);
	} else {
		rc = j->step(j, deadline_ms);
		files_leave();
	}
	if (rc < 0)
		j->failed = true;
	return rc < 0 ? 0 : rc;
}

static int fjob_sched_step(struct files_job *sj, uint64_t deadline_ms)
{
	return fjob_slice((struct fjob *)sj, deadline_ms);
}

static void fjob_sched_done(struct files_job *sj)
{
	struct fjob *j = (struct fjob *)sj;
	j->done = true;
	http_req_resume(j->req); /* its handler runs again and answers */
}

static int fjob_answer(struct fcall *c, struct fjob *j)
{
	if (j->failed) {
		c->err = j->err;
		return -1;
	}
	return j->answer(c, j);
}

/* A new job (size bytes, struct fjob first) for this request. */
static void *fjob_new(struct fcall *c, size_t size, fjob_step_fn step, fjob_answer_fn answer,
		      fjob_release_fn release)
{
	struct fjob *j = calloc(1, size);
	if (!j)
		return NULL;
	j->sj.step = fjob_sched_step;
	j->sj.done = fjob_sched_done;
	j->req = c->req;
	j->id = c->id;
	j->step = step;
	j->answer = answer;
	j->release = release;
	c->req->ctx = j;
	c->req->ctx_free = fjob_free;
	return j;
}

/* Run a job made by fjob_new (called as the task user). */
static int fjob_run(struct fcall *c, struct fjob *j)
{
	struct runner *r = c->req->r;
	int rc = j->step(j, monotonic_ms() + FILES_SLICE_MS);
	if (rc > 0) {
		/* None waits once shutting down: it would only be cut. */
		if (r->shutting_down || http_stopping(r))
			return error_set(&c->err, 0, "UNAVAILABLE", "the runner is shutting down");
		if ((rc = files_sched_add(r->files_sched, &r->loop, &j->sj)) < 0)
			return fs_error(&c->err, rc, "schedule", "", &c->id, false);
		http_req_suspend(c->req);
		c->res = MHD_YES; /* no answer yet */
		return 0;
	}
	j->failed = rc < 0;
	j->done = true;
	return fjob_answer(c, j);
}

/* The one prologue of the files routes. */
static enum MHD_Result files_route(struct http_req *req, enum files_input in, files_op op)
{
	cleanup_fcall struct fcall *c = calloc(1, sizeof(*c));
	if (!c)
		return MHD_NO;
	c->req = req;
	ident_of(req->r, &c->id);
	if (req->ctx_free == fjob_free) {
		/* Called again: its job is done (or the server is stopping). */
		struct fjob *j = req->ctx;
		int rc = j->done ? fjob_answer(c, j)
				 : error_set(&c->err, 0, "UNAVAILABLE",
					     "the runner is shutting down");
		return rc < 0 ? http_fail(req, &c->err) : c->res;
	}
	int rc = take_input(c, in);
	if (rc == 0) {
		int e = files_enter(&c->id);
		if (e < 0) {
			rc = fs_error(&c->err, e, "act as the task user", "", &c->id, false);
		} else {
			rc = op(c);
			files_leave();
		}
	}
	return rc < 0 ? http_fail(req, &c->err) : c->res;
}

/* ---- answers ---- */

static int answer_empty(struct fcall *c)
{
	c->res = http_empty(c->req, 200);
	return 0;
}

static int answer_json(struct fcall *c, const struct buf *b)
{
	if (!b->data)
		return oom(&c->err);
	c->res = http_text(c->req, 200, "application/json", b->data, b->len, NULL, NULL);
	return 0;
}

/* ---- query and body input ---- */

/* One query value with its real length (a %00 shows up as a NUL inside). */
static const char *query_n(struct http_req *req, const char *name, size_t *len)
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
static int parse_count(const char *s, size_t len, uint64_t max, uint64_t *out)
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

/* A permission entry: {owner?, group?, mode?} (execd's Permission). */
struct perm {
	bool has_mode;
	mode_t mode;
	uid_t uid; /* -1 = unchanged */
	gid_t gid;
	bool as_root; /* beyond the task user's own rights */
};

/* Parse and authorize {owner?, group?, mode?}: 0, or -1 with *forbidden
 * (403, else 400) and a message. */
static int perm_parse(const struct runner_config *cfg, json_t *o, struct perm *p, bool *forbidden,
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
static int str_path(struct error *e, const char *s, size_t len, const char *field,
		    char out[PATH_MAX])
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

/* A JSON string field holding a path: checked and cleaned. */
static int json_path(struct error *e, json_t *v, const char *field, char out[PATH_MAX])
{
	if (!json_is_string(v))
		return error_set(e, 0, "INVALID_REQUEST_BODY", "'%s' must be a non-empty path",
				 field);
	return str_path(e, json_string_value(v), json_string_length(v), field, out);
}

static void dirname_of(const char *clean, char out[PATH_MAX])
{
	const char *slash = strrchr(clean, '/');
	size_t n = slash && slash != clean ? (size_t)(slash - clean) : 1;
	memcpy(out, clean, n);
	out[n] = 0;
}

/* lstat of a clean path, resolved without magic links. */
static int stat_nofollow(const char *path, struct stat *st)
{
	const char *base;
	if (!strcmp(path, "/"))
		return stat("/", st) < 0 ? -errno : 0;
	cleanup_close int dirfd = files_open_parent(path, &base);
	if (dirfd < 0)
		return dirfd;
	return fstatat(dirfd, base, st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

/* ---- GET /files/info ---- */

static int op_info(struct fcall *c)
{
	cleanup_buf struct buf out = {0};
	struct files_names names = {0};
	buf_append_str(&out, "{");
	for (size_t i = 0; i < c->n; i++) {
		bool dup = false;
		for (size_t j = 0; j < i && !dup; j++)
			dup = c->len[j] == c->len[i] && !memcmp(c->raw[j], c->raw[i], c->len[i]);
		if (dup)
			continue; /* a map: one key each */
		struct stat st;
		int rc = stat_nofollow(c->paths[i], &st);
		if (rc < 0)
			return fs_error(&c->err, rc, "stat", c->paths[i], &c->id, false);
		if (i)
			buf_append_str(&out, ",");
		/* Keyed by the path as asked; FileInfo.path is the cleaned one. */
		buf_append_json_str(&out, c->raw[i], c->len[i]);
		buf_append_str(&out, ":");
		files_info_json(&out, c->paths[i], &st, &names);
	}
	buf_append_str(&out, "}");
	return answer_json(c, &out);
}

enum MHD_Result api_files_info(struct http_req *req)
{
	return files_route(req, IN_PATHS, op_info);
}

/* ---- DELETE /files, DELETE /directories ---- */

/* What one path of a delete needs: the directory it is in (*dirfd) and a
 * check of its type and place; 1 = nothing to do (already gone), 0 = go
 * on, -1 with e. */
static int delete_check(struct error *e, const struct files_ident *id, const char *path, bool dirs,
			int *dirfd, const char **base)
{
	*dirfd = -1;
	if (!strcmp(path, "/"))
		return error_set(e, 0, "INVALID_REQUEST_BODY", "refusing to delete /");
	cleanup_close int fd = files_open_parent(path, base);
	struct stat st;
	int rc = fd;
	if (fd >= 0)
		rc = fstatat(fd, *base, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
	if (rc == -ENOENT)
		return 1; /* already gone: deleting is idempotent, as in execd */
	if ((rc == 0 && dirs && !S_ISDIR(st.st_mode)) || (rc == -ENOTDIR && dirs))
		return error_set(e, 0, "INVALID_FILE",
				 "%.1024s is not a directory (use DELETE /files)", path);
	if (rc == 0 && !dirs && S_ISDIR(st.st_mode))
		return error_set(e, 0, "INVALID_FILE",
				 "%.1024s is a directory (use DELETE /directories)", path);
	if (rc == -ENOTDIR && !dirs)
		rc = -ENOENT;
	if (rc == 0)
		rc = files_check_writable(id, fd);
	if (rc < 0)
		return fs_error(e, rc, "delete", path, id, false);
	*dirfd = take_fd(fd);
	return 0;
}

static int op_delete_files(struct fcall *c)
{
	for (size_t i = 0; i < c->n; i++) {
		const char *base;
		cleanup_close int dirfd = -1;
		int rc = delete_check(&c->err, &c->id, c->paths[i], false, &dirfd, &base);
		if (rc < 0)
			return -1;
		if (rc == 0 && unlinkat(dirfd, base, 0) < 0 && errno != ENOENT)
			return fs_error(&c->err, -errno, "delete", c->paths[i], &c->id, false);
	}
	return answer_empty(c);
}

/* rm -rf of each path in turn, in slices (a tree of a million files takes
 * seconds to remove). */
struct delete_job {
	struct fjob j;
	size_t n, i;
	char (*paths)[PATH_MAX];
	int dirfd; /* of paths[i], while it is removed */
	struct files_rmrf rm;
	bool removing;
};

static int delete_step(struct fjob *j, uint64_t deadline_ms)
{
	struct delete_job *dj = (struct delete_job *)j;
	do {
		if (dj->i == dj->n)
			return 0;
		const char *path = dj->paths[dj->i];
		int rc;
		if (!dj->removing) {
			const char *base;
			rc = delete_check(&j->err, &j->id, path, true, &dj->dirfd, &base);
			if (rc < 0)
				return -1;
			if (rc == 0) { /* there: what needs no walk goes now */
				rc = files_rmrf_start(&dj->rm, dj->dirfd, base);
				if (rc < 0)
					return fs_error(&j->err, rc, "delete", path, &j->id, false);
				dj->removing = rc > 0;
			}
		}
		if (dj->removing) {
			rc = files_rmrf_step(&dj->rm, deadline_ms);
			if (rc < 0)
				return fs_error(&j->err, rc, "delete", path, &j->id, false);
			if (rc > 0)
				return 1;
		}
		files_rmrf_free(&dj->rm);
		if (dj->dirfd >= 0)
			close(dj->dirfd);
		dj->dirfd = -1;
		dj->removing = false;
		dj->i++;
	} while (monotonic_ms() < deadline_ms);
	return dj->i < dj->n ? 1 : 0;
}

static int delete_answer(struct fcall *c, struct fjob *j)
{
	(void)j;
	return answer_empty(c);
}

static void delete_release(struct fjob *j)
{
	struct delete_job *dj = (struct delete_job *)j;
	files_rmrf_free(&dj->rm);
	if (dj->dirfd >= 0)
		close(dj->dirfd);
	free(dj->paths);
}

static int op_delete_dirs(struct fcall *c)
{
	struct delete_job *dj =
		fjob_new(c, sizeof(*dj), delete_step, delete_answer, delete_release);
	if (!dj)
		return oom(&c->err);
	dj->dirfd = -1;
	dj->n = c->n;
	dj->paths = take_ptr(c->paths); /* the job outlives this call */
	return fjob_run(c, &dj->j);
}

enum MHD_Result api_files_delete(struct http_req *req)
{
	return files_route(req, IN_PATHS, op_delete_files);
}

enum MHD_Result api_dirs_delete(struct http_req *req)
{
	return files_route(req, IN_PATHS, op_delete_dirs);
}

/* ---- POST /files/mv ---- */

static int do_move(const struct files_ident *id, const char *src, const char *dst, const char **op)
{
	const char *sbase, *dbase;
	char ddir[PATH_MAX];
	bool created;
	struct files_made made;
	struct stat st;
	*op = "move";
	cleanup_close int sfd = files_open_parent(src, &sbase);
	if (sfd < 0)
		return sfd == -EINVAL ? -EBUSY : sfd; /* "/" */
	if (fstatat(sfd, sbase, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		*op = "move (source)";
		return -errno;
	}
	int rc = files_check_writable(id, sfd);
	if (rc < 0)
		return rc;
	dirname_of(dst, ddir);
	if (!strcmp(dst, "/"))
		return -EEXIST;
	dbase = strrchr(dst, '/') + 1;
	/* Missing destination parents are made, as execd does (0755). */
	cleanup_close int dfd = files_mkdirs(id, ddir, 0755, &created, &made);
	files_made_free(&made);
	if (dfd < 0) {
		*op = "move (destination directory)";
		return dfd;
	}
	if ((rc = files_check_writable(id, dfd)) < 0)
		return rc;
	/* Never replace: a destination that exists is an error (execd). */
	return files_rename_noreplace(sfd, sbase, dfd, dbase);
}

static int op_move(struct fcall *c)
{
	size_t n = json_array_size(c->body);
	cleanup_free char(*src)[PATH_MAX] = malloc(sizeof(char[1][PATH_MAX]) * (n ? n : 1));
	cleanup_free char(*dst)[PATH_MAX] = malloc(sizeof(char[1][PATH_MAX]) * (n ? n : 1));
	if (!src || !dst)
		return oom(&c->err);
	/* Everything is checked before anything moves. */
	for (size_t i = 0; i < n; i++) {
		json_t *it = json_array_get(c->body, i);
		if (!json_is_object(it))
			return error_set(&c->err, 0, "INVALID_REQUEST_BODY",
					 "each item must be an object {src, dest}");
		if (json_path(&c->err, json_object_get(it, "src"), "src", src[i]) < 0 ||
		    json_path(&c->err, json_object_get(it, "dest"), "dest", dst[i]) < 0)
			return -1;
	}
	for (size_t i = 0; i < n; i++) {
		const char *op;
		int rc = do_move(&c->id, src[i], dst[i], &op);
		if (rc == -EEXIST)
			return error_set(&c->err, 0, "FILE_EXISTS",
					 "move %.1024s: destination %.1024s already exists", src[i],
					 dst[i]);
		if (rc == -EXDEV)
			return error_set(&c->err, 0, "INVALID_REQUEST_BODY",
					 "move %.1024s to %.1024s: not on the same filesystem",
					 src[i], dst[i]);
		if (rc < 0)
			return fs_error(&c->err, rc, op,
					rc == -ENOENT && strstr(op, "destination") ? dst[i]
										   : src[i],
					&c->id, false);
	}
	return answer_empty(c);
}

enum MHD_Result api_files_mv(struct http_req *req)
{
	return files_route(req, IN_ARRAY, op_move);
}

/* ---- POST /files/permissions, POST /directories ---- */

/* Both take {path: {owner, group, mode}}: parse everything first. */
struct perm_req {
	size_t n;
	char (*paths)[PATH_MAX];
	struct perm *perms;
};

static void perm_req_free(struct perm_req *pr)
{
	free(pr->paths);
	free(pr->perms);
}
#define cleanup_perm_req __attribute__((cleanup(perm_req_free)))

static int perm_req_parse(struct fcall *c, struct perm_req *pr)
{
	pr->n = json_object_size(c->body);
	pr->paths = malloc(sizeof(char[1][PATH_MAX]) * (pr->n ? pr->n : 1));
	pr->perms = calloc(pr->n ? pr->n : 1, sizeof(*pr->perms));
	if (!pr->paths || !pr->perms)
		return oom(&c->err);
	const char *key;
	json_t *v;
	size_t i = 0;
	json_object_foreach(c->body, key, v) {
		bool forbidden;
		char msg[256];
		if (str_path(&c->err, key, strlen(key), "path", pr->paths[i]) < 0)
			return -1;
		if (perm_parse(&c->req->r->cfg, v, &pr->perms[i], &forbidden, msg, sizeof(msg)) < 0)
			return error_set(&c->err, 0,
					 forbidden ? "PERMISSION_DENIED" : "INVALID_REQUEST_BODY",
					 "%.1024s: %s", key, msg);
		i++;
	}
	return 0;
}

/* Mode and owner of one path. The last component is opened (O_PATH, a
 * link itself, never what it leads to) and checked: a link or anything but
 * a regular file or directory is refused; the change is made through that
 * descriptor, beneath the write roots (Landlock's rule for writes). */
static int set_perm(struct fcall *c, const char *path, const struct perm *p)
{
	const char *base = ".";
	cleanup_close int dirfd = -1;
	if (strcmp(path, "/")) {
		dirfd = files_open_parent(path, &base);
		if (dirfd < 0)
			return fs_error(&c->err, dirfd, "chmod", path, &c->id, false);
	} else if ((dirfd = files_open(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0)) < 0) {
		return fs_error(&c->err, dirfd, "chmod", path, &c->id, false);
	}
	cleanup_close int fd = files_open_last(dirfd, base, O_PATH);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return fs_error(&c->err, fd < 0 ? fd : -errno, "chmod", path, &c->id, false);
	if (S_ISLNK(st.st_mode))
		return error_set(&c->err, 0, "INVALID_FILE",
				 "chmod %.1024s: is a symbolic link (links are not followed)",
				 path);
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
		return error_set(&c->err, 0, "INVALID_FILE",
				 "chmod %.1024s: not a regular file or directory", path);
	/* A directory is judged as itself (it may be a root), a file by the
	 * directory it is in. */
	int rc = files_check_writable(&c->id, S_ISDIR(st.st_mode) ? fd : dirfd);
	if (rc < 0)
		return fs_error(&c->err, rc, "chmod", path, &c->id, false);
	/* Giving away one of several names of a file would give away the
	 * others too, wherever they are. */
	if (p->as_root && S_ISREG(st.st_mode) && st.st_nlink > 1)
		return error_set(&c->err, 0, "PERMISSION_DENIED",
				 "chown %.1024s: the file has %lu hard links; refusing to give it "
				 "away",
				 path, (unsigned long)st.st_nlink);
	/* Mode first, then owner (after a chown the user may not own it). */
	if (p->has_mode && (rc = files_chmod_fd(fd, dirfd, base, p->mode)) < 0)
		return fs_error(&c->err, rc, "chmod", path, &c->id, false);
	if ((rc = files_chown_fd(&c->id, fd, p->uid, p->gid, p->as_root)) < 0)
		return fs_error(&c->err, rc, "chown", path, &c->id, false);
	return 0;
}

static int op_permissions(struct fcall *c)
{
	cleanup_perm_req struct perm_req pr = {0};
	if (perm_req_parse(c, &pr) < 0)
		return -1;
	for (size_t i = 0; i < pr.n; i++)
		if (set_perm(c, pr.paths[i], &pr.perms[i]) < 0)
			return -1;
	return answer_empty(c);
}

enum MHD_Result api_files_permissions(struct http_req *req)
{
	return files_route(req, IN_OBJECT, op_permissions);
}

static int op_mkdirs(struct fcall *c)
{
	cleanup_perm_req struct perm_req pr = {0};
	if (perm_req_parse(c, &pr) < 0)
		return -1;
	for (size_t i = 0; i < pr.n; i++) {
		const struct perm *p = &pr.perms[i];
		bool created;
		struct files_made made;
		/* execd: a new directory gets mode (default 755) and owner; an
		 * existing one is left as it is. */
		int rc = files_mkdirs(&c->id, pr.paths[i], p->has_mode ? p->mode : 0755, &created,
				      &made);
		if (rc >= 0) {
			close(rc);
			rc = files_chown_made(&c->id, pr.paths[i], &made, p->uid, p->gid,
					      p->as_root);
			files_made_free(&made);
		}
		if (rc < 0)
			return fs_error(&c->err, rc, "mkdir", pr.paths[i], &c->id, false);
	}
	return answer_empty(c);
}

enum MHD_Result api_dirs_create(struct http_req *req)
{
	return files_route(req, IN_OBJECT, op_mkdirs);
}

/* ---- GET /directories/list, GET /files/search ---- */

struct walk_job {
	struct fjob j;
	struct files_walk w;
	struct buf out;
	struct files_glob *glob;
	const char *what;
	char path[PATH_MAX];
};

static int walk_step(struct fjob *j, uint64_t deadline_ms)
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
		return fs_error(&j->err, rc, wj->what, wj->path, &j->id, false);
	return rc;
}

static int walk_answer(struct fcall *c, struct fjob *j)
{
	struct walk_job *wj = (struct walk_job *)j;
	buf_append_str(&wj->out, "]");
	return answer_json(c, &wj->out);
}

static void walk_release(struct fjob *j)
{
	struct walk_job *wj = (struct walk_job *)j;
	files_walk_free(&wj->w);
	buf_free(&wj->out);
	files_glob_free(wj->glob);
}

/* A walk job over path (glob taken). */
static struct walk_job *walk_job_new(struct fcall *c, const char *what, struct files_glob *glob)
{
	struct walk_job *wj = fjob_new(c, sizeof(*wj), walk_step, walk_answer, walk_release);
	if (!wj) {
		files_glob_free(glob);
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
	const char *d = query_n(c->req, "depth", &dl);
	if (d && dl && parse_count(d, dl, UINT32_MAX, &depth) < 0)
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
		return fs_error(&c->err, rc, "list", path, &c->id, false);
	struct walk_job *wj = walk_job_new(c, "list", NULL);
	if (!wj) {
		close(fd);
		return oom(&c->err);
	}
	wj->w.max_depth = depth > FILES_MAX_DEPTH ? FILES_MAX_DEPTH : (unsigned)depth;
	rc = files_walk_start(&wj->w, fd, path);
	if (rc < 0)
		return fs_error(&c->err, rc, "list", path, &c->id, false);
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
	const char *pattern = query_n(c->req, "pattern", &pl);
	if (!pattern || !pl)
		pattern = "**";
	else if (memchr(pattern, 0, pl))
		return error_set(&c->err, 0, "INVALID_QUERY", "pattern contains a NUL byte");
	char err[128];
	struct files_glob *g = NULL;
	if (files_glob_compile(&g, pattern, err, sizeof(err)) < 0)
		return error_set(&c->err, 0, "INVALID_QUERY", "invalid pattern %.600s: %s", pattern,
				 err);
	struct walk_job *wj = walk_job_new(c, "search", g);
	if (!wj)
		return oom(&c->err);
	wj->w.search = true;
	wj->w.max_depth = FILES_MAX_DEPTH;
	struct stat st;
	int fd, rc = open_walk_root(path, &st, &fd);
	if (rc < 0)
		return fs_error(&c->err, rc, "search", path, &c->id, false);
	if (fd < 0) {
		/* Like execd's walk: a root that is not a directory is itself the
		 * one candidate (a link is not followed). */
		enum files_glob_subject sub = files_glob_subject(g);
		const char *name = sub == GLOB_ABS   ? path
				   : sub == GLOB_REL ? ""
						     : strrchr(path, '/') + 1;
		if (files_glob_match(g, name, strlen(name))) {
			files_info_json(&wj->out, path, &st, &wj->w.names);
			wj->w.results = 1;
		}
		wj->j.done = true;
		return walk_answer(c, &wj->j);
	}
	rc = files_walk_start(&wj->w, fd, path);
	if (rc < 0)
		return fs_error(&c->err, rc, "search", path, &c->id, false);
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
	struct files_glob *glob;
	struct buf out;
	char path[PATH_MAX];
};

static int grep_step(struct fjob *j, uint64_t deadline_ms)
{
	struct grep_job *gj = (struct grep_job *)j;
	int rc = files_grep_step(&gj->g, deadline_ms);
	if (rc < 0)
		return fs_error(&j->err, rc, "grep", gj->path, &j->id, false);
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
	int rc = answer_json(c, &b);
	buf_free(&b);
	return rc;
}

static void grep_release(struct fjob *j)
{
	struct grep_job *gj = (struct grep_job *)j;
	files_grep_free(&gj->g);
	files_glob_free(gj->glob);
	buf_free(&gj->out);
}

static int op_grep(struct fcall *c)
{
	const char *path = c->paths[0];
	size_t pl, gl, ml;
	const char *pattern = query_n(c->req, "pattern", &pl);
	const char *glob = query_n(c->req, "glob", &gl);
	const char *max = query_n(c->req, "max_results", &ml);
	if (!pattern || !pl)
		return error_set(&c->err, 0, "MISSING_QUERY", "missing query parameter 'pattern'");
	if (memchr(pattern, 0, pl) || (glob && memchr(glob, 0, gl)))
		return error_set(&c->err, 0, "INVALID_QUERY",
				 "query parameter 'pattern' or 'glob' contains a NUL byte");
	uint64_t max_results = 0;
	if (max && ml &&
	    (parse_count(max, ml, FILES_MAX_RESULTS, &max_results) < 0 || !max_results))
		return error_set(&c->err, 0, "INVALID_QUERY",
				 "invalid query parameter 'max_results': 1 to %d",
				 FILES_MAX_RESULTS);
	struct grep_job *gj = fjob_new(c, sizeof(*gj), grep_step, grep_answer, grep_release);
	if (!gj)
		return oom(&c->err);
	snprintf(gj->path, sizeof(gj->path), "%s", path);
	char err[160];
	int rc = files_grep_init(&gj->g, pattern, err, sizeof(err));
	if (rc == -EINVAL)
		return error_set(&c->err, 0, "INVALID_QUERY",
				 "invalid query parameter 'pattern': %s", err);
	if (rc < 0)
		return oom(&c->err);
	if (glob && gl && files_glob_compile(&gj->glob, glob, err, sizeof(err)) < 0)
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
		return fs_error(&c->err, rc, "grep", path, &c->id, false);
	if ((rc = files_grep_start(&gj->g, fd, path, S_ISDIR(st.st_mode))) < 0)
		return fs_error(&c->err, rc, "grep", path, &c->id, false);
	return fjob_run(c, &gj->j);
}

enum MHD_Result api_files_grep(struct http_req *req)
{
	return files_route(req, IN_PATH, op_grep);
}

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
	struct fjob *j = &rj->j;
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
	return fs_error(&j->err, rc, "replace", rj->path, &j->id, false);
}

/* Files one after the other, each opened, streamed and put in place. */
static int replace_step(struct fjob *j, uint64_t deadline_ms)
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
		return answer_empty(c); /* execd: empty unless ?verbose=true */
	buf_append_str(&rj->out, "}");
	return answer_json(c, &rj->out);
}

static void replace_release(struct fjob *j)
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
	const char *verbose = query_n(c->req, "verbose", &vl);
	const char *key;
	json_t *v;
	char path[PATH_MAX];
	/* Everything is checked before any file is touched. */
	json_object_foreach(c->body, key, v) {
		if (str_path(&c->err, key, strlen(key), "path", path) < 0)
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
		return oom(&c->err);
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

/* ---- GET /files/download ---- */

static int parse_u64(const char **pp, uint64_t *out)
{
	const char *p = *pp;
	uint64_t v = 0;
	if (*p < '0' || *p > '9')
		return -1;
	while (*p >= '0' && *p <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p++ - '0');
	}
	*pp = p;
	*out = v;
	return 0;
}

/* The first satisfiable range of a "bytes=" Range header (later ranges are
 * ignored, as execd does). 0 with start/len; -1: nothing satisfiable (416);
 * -2: not a valid bytes range set, which RFC 9110 §14.2 says to ignore
 * (the whole file, 200). */
static int parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *len)
{
	while (*h == ' ' || *h == '\t')
		h++;
	if (strncasecmp(h, "bytes=", 6) != 0)
		return -2;
	const char *p = h + 6;
	bool found = false;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		uint64_t a = 0, b = 0;
		bool has_a = false, has_b = false;
		if (*p >= '0' && *p <= '9') {
			if (parse_u64(&p, &a) < 0)
				return -2;
			has_a = true;
		}
		if (*p != '-')
			return -2;
		p++;
		if (*p >= '0' && *p <= '9') {
			if (parse_u64(&p, &b) < 0)
				return -2;
			has_b = true;
		}
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p && *p != ',')
			return -2;
		if (!has_a && !has_b)
			return -2;
		if (has_a && has_b && b < a)
			return -2;
		if (!found) {
			if (!has_a) { /* the last b bytes */
				if (b > 0 && size > 0) {
					*start = b > size ? 0 : size - b;
					*len = size - *start;
					found = true;
				}
			} else if (a < size) {
				*start = a;
				*len = (has_b && b < size - 1 ? b : size - 1) - a + 1;
				found = true;
			}
		}
		if (!*p)
			break;
		p++;
	}
	return found ? 0 : -1;
}

/* attachment; filename="name" — RFC 5987 filename* when the name is not
 * plain printable ASCII (or has quotes), as execd does. */
static void content_disposition(char *out, size_t outsz, const char *name)
{
	bool plain = true;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\')
			plain = false;
	if (plain) {
		snprintf(out, outsz, "attachment; filename=\"%s\"", name);
		return;
	}
	char enc[3 * NAME_MAX + 1];
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)name; *p && n + 4 < sizeof(enc); p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~", *p))
			enc[n++] = (char)*p;
		else
			n += (size_t)snprintf(enc + n, sizeof(enc) - n, "%%%02X", *p);
	}
	enc[n] = 0;
	if (snprintf(out, outsz, "attachment; filename=\"%s\"; filename*=UTF-8''%s", enc, enc) >=
	    (int)outsz)
		snprintf(out, outsz, "attachment; filename*=UTF-8''%s", enc);
}

static enum MHD_Result queue_resp(struct http_req *req, unsigned status, struct MHD_Response *resp)
{
	if (!resp)
		return MHD_NO;
	req->responded = true;
	req->status = status;
	enum MHD_Result rc = MHD_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* 416 with the Content-Range the client needs (RFC 9110 §15.5.17). */
static int answer_416(struct fcall *c, uint64_t size)
{
	error_set(&c->err, 0, "RANGE_NOT_SATISFIABLE", "range not satisfiable (file size %llu)",
		  (unsigned long long)size);
	json_t *j = json_pack("{s:s,s:s}", "code", error_code(&c->err), "message", c->err.msg);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return oom(&c->err);
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(s);
		return oom(&c->err);
	}
	char hv[48];
	snprintf(hv, sizeof(hv), "bytes */%llu", (unsigned long long)size);
	MHD_add_response_header(resp, "Content-Type", "application/json");
	MHD_add_response_header(resp, "Content-Range", hv);
	c->res = queue_resp(c->req, error_http_status(&c->err), resp);
	return 0;
}

/* Open a file to read its content: resolved without magic links (ordinary
 * links are followed, as a task's open() would), checked through an O_PATH
 * descriptor first so that a FIFO or device is never opened, refused on
 * /proc (resolved by the runner, /proc/self is the runner: its memory map,
 * its descriptors), then opened non-blocking and checked to be the same
 * file. -1 with c->err, or the descriptor and its stat. */
static int open_content(struct fcall *c, const char *path, struct stat *st)
{
	cleanup_close int pfd = files_open(AT_FDCWD, path, O_PATH, 0);
	if (pfd < 0 || fstat(pfd, st) < 0)
		return fs_error(&c->err, pfd < 0 ? pfd : -errno, "download", path, &c->id, false);
	if (S_ISDIR(st->st_mode))
		return error_set(&c->err, 0, "INVALID_FILE",
				 "%.1024s is a directory (use GET /directories/list)", path);
	if (!S_ISREG(st->st_mode))
		return error_set(&c->err, 0, "INVALID_FILE", "%.1024s is not a regular file", path);
	int proc = files_on_procfs(pfd);
	if (proc < 0)
		return fs_error(&c->err, proc, "download", path, &c->id, false);
	if (proc)
		return error_set(&c->err, 0, "PERMISSION_DENIED",
				 "download %.1024s: files under /proc are not served (a task reads "
				 "its own)",
				 path);
	int fd = files_open(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
	struct stat now;
	if (fd < 0 || fstat(fd, &now) < 0) {
		int rc = fd < 0 ? fd : -errno;
		if (fd >= 0)
			close(fd);
		return fs_error(&c->err, rc, "download", path, &c->id, false);
	}
	if (now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
		close(fd);
		return fs_error(&c->err, -ESTALE, "download", path, &c->id, false);
	}
	*st = now;
	return fd;
}

/* The answer: the byte range [start, start+len) straight from the
 * descriptor (sendfile; nothing buffered); fd is taken. */
static int answer_file(struct fcall *c, int fd, const struct stat *st, const char *path,
		       uint64_t start, uint64_t len, bool lines, unsigned status,
		       const char *crange)
{
	struct MHD_Response *resp;
	if (len == 0) {
		close(fd);
		resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
	} else {
		/* MHD closes fd with the response. */
		resp = MHD_create_response_from_fd_at_offset64(len, fd, start);
		if (!resp)
			close(fd);
	}
	if (!resp) {
		c->res = MHD_NO;
		return 0;
	}
	if (lines) {
		MHD_add_response_header(resp, "Content-Type", "text/plain");
	} else {
		char cd[6 * NAME_MAX + 80], lm[64];
		struct tm tm;
		time_t mt = st->st_mtim.tv_sec;
		content_disposition(cd, sizeof(cd),
				    strrchr(path, '/')[1] ? strrchr(path, '/') + 1 : "file");
		MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
		MHD_add_response_header(resp, "Content-Disposition", cd);
		MHD_add_response_header(resp, "Accept-Ranges", "bytes");
		if (gmtime_r(&mt, &tm) &&
		    strftime(lm, sizeof(lm), "%a, %d %b %Y %H:%M:%S GMT", &tm))
			MHD_add_response_header(resp, "Last-Modified", lm);
		if (crange && crange[0])
			MHD_add_response_header(resp, "Content-Range", crange);
	}
	http_audit_note(c->req, json_pack("{s:s,s:s,s:I}", "operation", "read", "path", path,
					  "bytes_out", (json_int_t)len));
	c->res = queue_resp(c->req, status, resp);
	return 0;
}

/* offset/limit: the line range is found by a scan, in slices. */
struct lines_job {
	struct fjob j;
	int fd;
	struct stat st;
	struct files_lines l;
	char path[PATH_MAX];
};

static int lines_step(struct fjob *j, uint64_t deadline_ms)
{
	struct lines_job *lj = (struct lines_job *)j;
	int rc = files_lines_step(&lj->l, lj->fd, deadline_ms);
	if (rc == -FILES_ELIMIT)
		return error_set(
			&j->err, 0, "INVALID_QUERY",
			"download %.1024s: the line range ends more than %llu MiB into the "
			"file; read it with a byte Range instead",
			lj->path, (unsigned long long)(FILES_LINES_SCAN_MAX >> 20));
	if (rc < 0)
		return fs_error(&j->err, rc, "download", lj->path, &j->id, false);
	return rc;
}

static int lines_answer(struct fcall *c, struct fjob *j)
{
	struct lines_job *lj = (struct lines_job *)j;
	int fd = take_fd(lj->fd);
	return answer_file(c, fd, &lj->st, lj->path, (uint64_t)lj->l.start, (uint64_t)lj->l.len,
			   true, 200, NULL);
}

static void lines_release(struct fjob *j)
{
	struct lines_job *lj = (struct lines_job *)j;
	if (lj->fd >= 0)
		close(lj->fd);
}

static int op_download(struct fcall *c)
{
	struct http_req *req = c->req;
	const char *path = c->paths[0];
	size_t ol = 0, ll = 0;
	const char *off_s = query_n(req, "offset", &ol), *lim_s = query_n(req, "limit", &ll);
	bool lines = (off_s && ol) || (lim_s && ll);
	uint64_t first = 0, count = 0;
	const char *range = http_header(req, "Range");
	if (lines) {
		if (!(off_s && ol) || !(lim_s && ll))
			return error_set(&c->err, 0, "INVALID_QUERY",
					 "both offset and limit must be provided together for "
					 "line-based reading");
		if (parse_count(off_s, ol, 1ULL << 50, &first) < 0 || first < 1)
			return error_set(&c->err, 0, "INVALID_QUERY",
					 "offset must be a positive integer (1-based)");
		if (parse_count(lim_s, ll, 1ULL << 50, &count) < 0 || count < 1)
			return error_set(&c->err, 0, "INVALID_QUERY",
					 "limit must be a positive integer");
		if (range)
			return error_set(
				&c->err, 0, "INVALID_QUERY",
				"offset/limit and the Range header are mutually exclusive");
	}
	struct stat st;
	cleanup_close int fd = open_content(c, path, &st);
	if (fd < 0)
		return -1;
	if (lines) {
		struct lines_job *lj =
			fjob_new(c, sizeof(*lj), lines_step, lines_answer, lines_release);
		if (!lj)
			return oom(&c->err);
		lj->fd = take_fd(fd);
		lj->st = st;
		snprintf(lj->path, sizeof(lj->path), "%s", path);
		files_lines_init(&lj->l, first, count);
		return fjob_run(c, &lj->j);
	}
	uint64_t size = (uint64_t)st.st_size, start = 0, len = size;
	unsigned status = 200;
	char crange[96] = "";
	if (range) {
		int rc = parse_range(range, size, &start, &len);
		if (rc == -1)
			return answer_416(c, size);
		if (rc == 0) {
			status = 206;
		} else { /* malformed: ignored */
			start = 0;
			len = size;
		}
	}
	if (status == 206) {
		snprintf(crange, sizeof(crange), "bytes %llu-%llu/%llu", (unsigned long long)start,
			 (unsigned long long)(start + len - 1), (unsigned long long)size);
	}
	return answer_file(c, take_fd(fd), &st, path, start, len, false, status, crange);
}

enum MHD_Result api_files_download(struct http_req *req)
{
	return files_route(req, IN_PATH, op_download);
}

/* ---- POST /files/upload ---- */

struct up_item {
	char path[PATH_MAX];
	const char *base;
	struct perm perm;
	int dirfd;
	struct files_tmp tmp;
	bool keep_mode; /* no mode given: keep the replaced file's */
	mode_t old_mode;
	struct files_made made; /* parents made for it (chowned once it is in place) */
	struct sha256 sum;      /* of the content written, for the audit trail */
	uint64_t bytes;
};

struct upload {
	struct runner *r;
	struct files_ident id;
	struct multipart mp;
	enum { UP_IGNORE, UP_META, UP_FILE } part;
	struct buf meta;
	unsigned n_meta, n_file;
	/* The first error; the rest of the body is then read and dropped,
	 * because MHD can only answer once the request is complete. */
	bool failed;
	struct error err;
	struct up_item items[UPLOAD_MAX_FILES];
};

static int up_fail(struct upload *u, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int up_fail(struct upload *u, const char *code, const char *fmt, ...)
{
	if (u->failed)
		return 1;
	char msg[ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	error_set(&u->err, 0, code, "%s", msg);
	u->failed = true;
	return 1;
}

/* An errno as the upload's error. */
static int up_fs_fail(struct upload *u, int err, const char *op, const char *path)
{
	if (u->failed)
		return 1;
	fs_error(&u->err, err, op, path, &u->id, true);
	u->failed = true;
	return 1;
}

static int up_meta_end(struct upload *u)
{
	struct up_item *it = &u->items[u->n_meta];
	json_error_t jerr;
	cleanup_json json_t *j =
		json_loadb(u->meta.data ? u->meta.data : "", u->meta.len, 0, &jerr);
	if (!j || !json_is_object(j))
		return up_fail(
			u, "INVALID_FILE_METADATA",
			"invalid metadata format: %s (want a JSON object {path, owner, group, "
			"mode})",
			j ? "not an object" : jerr.text);
	json_t *p = json_object_get(j, "path");
	if (!json_is_string(p) || !json_string_length(p))
		return up_fail(u, "INVALID_FILE_METADATA", "metadata path is empty");
	if (files_clean_path(json_string_value(p), json_string_length(p), it->path,
			     sizeof(it->path)) < 0 ||
	    !strcmp(it->path, "/"))
		return up_fail(u, "INVALID_FILE_METADATA",
			       "metadata path must be an absolute file path: %.1024s",
			       json_string_value(p));
	bool forbidden;
	char msg[256];
	if (perm_parse(&u->r->cfg, j, &it->perm, &forbidden, msg, sizeof(msg)) < 0)
		return up_fail(u, forbidden ? "PERMISSION_DENIED" : "INVALID_FILE_METADATA",
			       "%.1024s: %s", it->path, msg);
	it->base = strrchr(it->path, '/') + 1;
	it->dirfd = -1;
	it->tmp.fd = -1;
	it->made.fd = -1;
	u->n_meta++;
	return 0;
}

/* The file part begins: parents made, a temp file opened beside the target. */
static int up_file_begin(struct upload *u, struct up_item *it)
{
	int rc = files_enter(&u->id);
	if (rc < 0)
		return up_fs_fail(u, rc, "upload", it->path);
	char dir[PATH_MAX];
	dirname_of(it->path, dir);
	bool created;
	struct stat st;
	/* Parents as execd makes them: 0755, with the metadata's owner. */
	it->dirfd = files_mkdirs(&u->id, dir, 0755, &created, &it->made);
	if (it->dirfd < 0) {
		rc = it->dirfd;
		it->dirfd = -1;
	} else if ((rc = files_check_writable(&u->id, it->dirfd)) == 0) {
		if (fstatat(it->dirfd, it->base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			if (S_ISDIR(st.st_mode))
				rc = -EISDIR;
			else if (S_ISREG(st.st_mode) && !it->perm.has_mode) {
				it->keep_mode = true;
				it->old_mode = st.st_mode & 07777;
			}
		} else if (errno != ENOENT) {
			rc = -errno;
		}
		if (rc == 0)
			rc = files_tmp_open(&it->tmp, it->dirfd);
	}
	files_leave();
	sha256_init(&it->sum);
	return rc < 0 ? up_fs_fail(u, rc, "upload", it->path) : 0;
}

static int up_part_begin(void *arg, const struct mp_part *part)
{
	struct upload *u = arg;
	if (!strcmp(part->name, "metadata")) {
		if (u->n_meta == UPLOAD_MAX_FILES)
			return up_fail(u, "INVALID_FILE", "more than %d files in one upload",
				       UPLOAD_MAX_FILES);
		buf_reset(&u->meta);
		u->part = UP_META;
		return 0;
	}
	if (!strcmp(part->name, "file")) {
		if (u->n_file >= u->n_meta)
			return up_fail(u, "INVALID_FILE_METADATA",
				       "a file part without a metadata part before it");
		u->part = UP_FILE;
		return up_file_begin(u, &u->items[u->n_file++]);
	}
	u->part = UP_IGNORE; /* other form fields are ignored, as in execd */
	return 0;
}

static int up_part_data(void *arg, const char *data, size_t len)
{
	struct upload *u = arg;
	if (u->part == UP_META) {
		if (u->meta.len + len > UPLOAD_META_MAX)
			return up_fail(u, "INVALID_FILE_METADATA",
				       "metadata part larger than %d bytes", UPLOAD_META_MAX);
		if (buf_append(&u->meta, data, len) < 0)
			return up_fail(u, "RUNTIME_ERROR", "out of memory");
	} else if (u->part == UP_FILE) {
		struct up_item *it = &u->items[u->n_file - 1];
		int rc = files_write_all(it->tmp.fd, data, len);
		if (rc < 0)
			return up_fs_fail(u, rc, "write", it->path);
		sha256_update(&it->sum, data, len);
		it->bytes += len;
	}
	return 0;
}

static int up_part_end(void *arg)
{
	struct upload *u = arg;
	int rc = u->part == UP_META ? up_meta_end(u) : 0;
	u->part = UP_IGNORE;
	return rc;
}

static const struct mp_callbacks up_cb = {up_part_begin, up_part_data, up_part_end};

static void up_free(struct http_req *req)
{
	struct upload *u = req->ctx;
	if (!u)
		return;
	/* Whatever was not committed goes: an O_TMPFILE vanishes on close, a
	 * named temp is unlinked (as the user: the directory is the user's).
	 * The old files were never touched. */
	bool entered = files_enter(&u->id) == 0;
	for (unsigned i = 0; i < u->n_file; i++) {
		struct up_item *it = &u->items[i];
		if (it->tmp.fd >= 0)
			files_tmp_discard(&it->tmp);
		if (it->dirfd >= 0)
			close(it->dirfd);
		files_made_free(&it->made);
	}
	if (entered)
		files_leave();
	buf_free(&u->meta);
	free(u);
	req->ctx = NULL;
}

enum MHD_Result api_files_upload_body(struct http_req *req, const char *data, size_t len)
{
	struct upload *u = req->ctx;
	if (!u) {
		u = calloc(1, sizeof(*u));
		if (!u)
			return MHD_NO;
		u->r = req->r;
		ident_of(req->r, &u->id);
		req->ctx = u;
		req->ctx_free = up_free;
		if (multipart_init(&u->mp, http_header(req, "Content-Type"), &up_cb, u) < 0)
			up_fail(u, "INVALID_FILE", "%s", u->mp.err);
	}
	if (u->failed)
		return MHD_YES; /* drain */
	if (multipart_feed(&u->mp, data, len) == -1 && !u->failed)
		up_fail(u, "INVALID_FILE", "malformed multipart body: %s", u->mp.err);
	return MHD_YES;
}

/* What the audit trail keeps of an upload: each file's path, bytes and
 * content hash (docs/design.md §22). */
static json_t *up_audit(struct upload *u)
{
	json_t *files = json_array();
	for (unsigned i = 0; i < u->n_file; i++) {
		struct up_item *it = &u->items[i];
		unsigned char d[32];
		char h[AUDIT_HASH_HEX];
		sha256_final(&it->sum, d);
		auditchain_hex(d, h);
		json_array_append_new(files, json_pack("{s:s,s:I,s:s}", "path", it->path, "bytes",
						       (json_int_t)it->bytes, "sha256", h));
	}
	return json_pack("{s:s,s:o}", "operation", "write", "files", files);
}

/* The whole body is in: give each file its name (atomic rename). */
static int op_upload_commit(struct fcall *c)
{
	struct upload *u = c->req->ctx;
	if (!u->failed && multipart_finish(&u->mp) < 0)
		up_fail(u, "INVALID_FILE", "malformed multipart body: %s", u->mp.err);
	if (!u->failed && u->n_meta == 0)
		up_fail(u, "INVALID_FILE_METADATA", "metadata file is missing");
	if (!u->failed && u->n_file == 0)
		up_fail(u, "INVALID_FILE_CONTENT", "file is missing");
	if (!u->failed && u->n_meta != u->n_file)
		up_fail(u, "INVALID_FILE", "metadata and file count mismatch: %u vs %u", u->n_meta,
			u->n_file);
	for (unsigned i = 0; i < u->n_file && !u->failed; i++) {
		struct up_item *it = &u->items[i];
		mode_t mode = it->perm.has_mode ? it->perm.mode
			      : it->keep_mode   ? it->old_mode
						: 0755;
		const char *op = "upload";
		int rc = fchmod(it->tmp.fd, mode) < 0 ? -errno : 0;
		if (rc == 0)
			rc = files_tmp_commit(&it->tmp, it->base);
		/* Owner last, through the file's own descriptor: a file given
		 * away can no longer be linked into place by the user
		 * (protected_hardlinks). */
		if (rc == 0) {
			op = "chown";
			rc = files_chown_fd(&u->id, it->tmp.fd, it->perm.uid, it->perm.gid,
					    it->perm.as_root);
		}
		files_tmp_discard(&it->tmp); /* closes it; its name is the real one now */
		if (rc == 0) {
			/* Parents made for it get the metadata's owner, as in execd. */
			char dir[PATH_MAX];
			dirname_of(it->path, dir);
			op = "chown";
			rc = files_chown_made(&u->id, dir, &it->made, it->perm.uid, it->perm.gid,
					      it->perm.as_root);
		}
		if (rc < 0)
			up_fs_fail(u, rc, op, it->path);
	}
	http_audit_note(c->req, up_audit(u));
	if (u->failed) {
		c->err = u->err;
		return -1;
	}
	return answer_empty(c);
}

enum MHD_Result api_files_upload(struct http_req *req)
{
	if (!req->ctx) {
		/* No body at all: still say why the Content-Type is wrong first. */
		cleanup_free struct multipart *m = malloc(sizeof(*m));
		if (!m)
			return MHD_NO;
		struct error e;
		int bad = multipart_init(m, http_header(req, "Content-Type"), &up_cb, NULL);
		error_set(&e, 0, "INVALID_FILE", "%s", bad ? m->err : "multipart form is empty");
		return http_fail(req, &e);
	}
	return files_route(req, IN_QUERY, op_upload_commit);
}
