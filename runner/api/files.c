/* Files API (docs/design.md §3.4): execd's /files and /directories routes. Every
 * filesystem operation runs as the task user (files.c); bodies stream both
 * ways (uploads are parsed chunk by chunk into a temporary file, downloads
 * are served from the file descriptor), so memory does not grow with file
 * size. Errors are execd-style JSON {"code","message"}. */
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
#include "files/glob.h"
#include "files/ident.h"
#include "files/info.h"
#include "files/ops.h"
#include "files/path.h"
#include "files/walk.h"
#include "core/log.h"
#include "files/multipart.h"
#include "core/runner.h"
#include "core/util.h"

#define MAX_QUERY_PATHS 256          /* path=... repeated in one request */
#define UPLOAD_MAX_FILES 64          /* metadata+file pairs in one upload */
#define UPLOAD_META_MAX (64 * 1024)  /* bytes of one metadata part */

static void ident_of(struct runner *r, struct files_ident *id)
{
	id->uid = r->cfg.task_uid;
	id->gid = r->cfg.task_gid;
	/* Tasks may only write beneath the Landlock roots: neither may the API
	 * on their behalf (reads are allowed everywhere, as for tasks). */
	id->write_roots = r->policy.enabled && r->policy.landlock.abi > 0 ? r->policy.landlock.roots
									   : NULL;
}

/* An errno from files.c as an HTTP error. */
static enum MHD_Result fs_error(struct http_req *req, int err, const char *op, const char *path)
{
	if (err < 0)
		err = -err;
	unsigned uid = (unsigned)req->r->cfg.task_uid;
	switch (err) {
	case ENOENT:
		return http_error(req, 404, "FILE_NOT_FOUND", "%s %.1024s: file not found", op, path);
	case EACCES:
	case EPERM:
	case EROFS:
		return http_error(req, 403, "PERMISSION_DENIED",
				  "%s %.1024s: %s (acting as the task user, uid %u)", op, path,
				  strerror(err), uid);
	case FILES_EOUTSIDE:
		return http_error(req, 403, "PERMISSION_DENIED",
				  "%s %.1024s: outside the directories tasks may write (%.300s)", op,
				  path, req->r->policy.landlock.roots);
	case EISDIR:
		return http_error(req, 400, "INVALID_FILE", "%s %.1024s: is a directory", op, path);
	case ENOTDIR:
		return http_error(req, 400, "INVALID_FILE", "%s %.1024s: not a directory", op, path);
	case EEXIST:
	case ENOTEMPTY:
		return http_error(req, 409, "FILE_EXISTS", "%s %.1024s: already exists", op, path);
	case ENAMETOOLONG:
	case ELOOP:
	case EINVAL:
	case EXDEV:
	case EBUSY:
		return http_error(req, 400, "INVALID_REQUEST_BODY", "%s %.1024s: %s", op, path,
				  strerror(err));
	case EFBIG:
		return http_error(req, 413, "FILE_TOO_LARGE", "%s %.1024s: file too large", op, path);
	case ENOSPC:
	case EDQUOT:
		return http_error(req, 507, "INSUFFICIENT_STORAGE", "%s %.1024s: %s", op, path,
				  strerror(err));
	case FILES_ELIMIT:
		return http_error(req, 400, "INVALID_REQUEST_BODY",
				  "%s %.1024s: directory tree deeper than %d levels", op, path,
				  FILES_RMRF_MAX_DEPTH);
	default:
		log_errno("files API operation failed", err, op);
		return http_error(req, 500, "RUNTIME_ERROR", "%s %.1024s: %s", op, path,
				  strerror(err));
	}
}

static enum MHD_Result queue_resp(struct http_req *req, unsigned status, struct MHD_Response *resp)
{
	if (!resp)
		return MHD_NO;
	req->responded = true;
	enum MHD_Result rc = MHD_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* ---- query and body input ---- */

struct qvals {
	const char *name;
	size_t nlen;
	const char *v[MAX_QUERY_PATHS];
	size_t len[MAX_QUERY_PATHS];
	size_t n;
	bool overflow;
};

static enum MHD_Result qvals_it(void *cls, enum MHD_ValueKind kind, const char *key,
				size_t key_size, const char *value, size_t value_size)
{
	(void)kind;
	struct qvals *q = cls;
	if (key_size != q->nlen || memcmp(key, q->name, key_size) != 0)
		return MHD_YES;
	if (q->n == MAX_QUERY_PATHS) {
		q->overflow = true;
		return MHD_NO;
	}
	q->v[q->n] = value ? value : "";
	q->len[q->n] = value ? value_size : 0;
	q->n++;
	return MHD_YES;
}

/* Every path=... of the query (at least one), each checked and cleaned
 * into (*out)[i], an array the caller frees. Responds and returns -1 on
 * bad input. */
static int query_paths(struct http_req *req, struct qvals *q, char (**outp)[PATH_MAX])
{
	*outp = NULL;
	memset(q, 0, sizeof(*q));
	q->name = "path";
	q->nlen = 4;
	MHD_get_connection_values_n(req->conn, MHD_GET_ARGUMENT_KIND, qvals_it, q);
	if (q->overflow) {
		http_error(req, 400, "INVALID_REQUEST_BODY", "more than %d 'path' parameters",
			   MAX_QUERY_PATHS);
		return -1;
	}
	if (q->n == 0 || (q->n == 1 && q->len[0] == 0)) {
		http_error(req, 400, "MISSING_QUERY", "missing query parameter 'path'");
		return -1;
	}
	char (*out)[PATH_MAX] = malloc(sizeof(char[1][PATH_MAX]) * q->n);
	if (!out) {
		http_error(req, 500, "RUNTIME_ERROR", "out of memory");
		return -1;
	}
	*outp = out;
	for (size_t i = 0; i < q->n; i++) {
		int rc = files_clean_path(q->v[i], q->len[i], out[i], PATH_MAX);
		if (rc < 0) {
			http_error(req, 400, "INVALID_REQUEST_BODY",
				   rc == -ENAMETOOLONG ? "path too long"
				   : q->len[i] && !memchr(q->v[i], 0, q->len[i])
					   ? "path must be absolute: %.1024s"
					   : "path must be a non-empty absolute path without NUL bytes%.0s",
				   q->v[i]);
			return -1;
		}
	}
	return 0;
}

/* One query value with its real length (a %00 shows up as a NUL inside). */
static const char *query_n(struct http_req *req, const char *name, size_t *len)
{
	const char *v = NULL;
	*len = 0;
	if (MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
					  len) != MHD_YES || !v)
		return NULL;
	return v;
}

/* A single path=... (list, search, download). */
static int query_path(struct http_req *req, char out[PATH_MAX])
{
	struct qvals *q = malloc(sizeof(*q));
	char (*paths)[PATH_MAX] = NULL;
	int rc = -1;
	if (!q) {
		http_error(req, 500, "RUNTIME_ERROR", "out of memory");
	} else if (query_paths(req, q, &paths) == 0) {
		if (q->n > 1) {
			http_error(req, 400, "INVALID_REQUEST_BODY",
				   "exactly one 'path' parameter is expected");
		} else {
			memcpy(out, paths[0], PATH_MAX);
			rc = 0;
		}
	}
	free(q);
	free(paths);
	return rc;
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

static json_t *body_json(struct http_req *req, bool array)
{
	json_error_t jerr;
	if (!req->body_len) {
		http_error(req, 400, "INVALID_REQUEST_BODY", "the request body must be a JSON %s",
			   array ? "array" : "object");
		return NULL;
	}
	json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		http_error(req, 400, "INVALID_REQUEST_BODY",
			   "error parsing request, invalid JSON at line %d column %d: %s", jerr.line,
			   jerr.column, jerr.text);
		return NULL;
	}
	if (array ? !json_is_array(j) : !json_is_object(j)) {
		json_decref(j);
		http_error(req, 400, "INVALID_REQUEST_BODY", "the request body must be a JSON %s",
			   array ? "array" : "object");
		return NULL;
	}
	return j;
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
			snprintf(msg, msglen, "mode %lld is not octal digits (0-7 each)", (long long)d);
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

/* Parse and authorize {owner?, group?, mode?}: 0, or -1 with the HTTP
 * status (400 or 403) and a message. */
static int perm_parse(const struct runner_config *cfg, json_t *o, struct perm *p, unsigned *status,
		      char *msg, size_t msglen)
{
	memset(p, 0, sizeof(*p));
	p->uid = (uid_t)-1;
	p->gid = (gid_t)-1;
	*status = 400;
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
		int rc = k == 0 ? files_lookup_user(name, &p->uid) : files_lookup_group(name, &p->gid);
		if (rc < 0 || strlen(name) != json_string_length(v)) {
			snprintf(msg, msglen, "unknown %s '%.128s'", k == 0 ? "user" : "group", name);
			return -1;
		}
	}
	/* The kernel lets the user give a file only to itself and its own
	 * group; anything else is root's business. */
	p->as_root = (p->uid != (uid_t)-1 && p->uid != cfg->task_uid) ||
		     (p->gid != (gid_t)-1 && p->gid != cfg->task_gid);
	if (p->as_root && !cfg->allow_root_tasks) {
		*status = 403;
		snprintf(msg, msglen,
			 "the task user (%u:%u) may not give files to another owner or group; that "
			 "needs --allow-root-tasks",
			 (unsigned)cfg->task_uid, (unsigned)cfg->task_gid);
		return -1;
	}
	return 0;
}

/* A path given as a string: checked and cleaned. Responds on bad input. */
static int str_path(struct http_req *req, const char *s, size_t len, const char *field,
		    char out[PATH_MAX])
{
	if (!len) {
		http_error(req, 400, "INVALID_REQUEST_BODY", "'%s' must be a non-empty path", field);
		return -1;
	}
	if (files_clean_path(s, len, out, PATH_MAX) < 0) {
		http_error(req, 400, "INVALID_REQUEST_BODY",
			   "'%s' must be an absolute path without NUL bytes: %.1024s", field, s);
		return -1;
	}
	return 0;
}

/* A JSON string field holding a path: checked and cleaned. */
static int json_path(struct http_req *req, json_t *v, const char *field, char out[PATH_MAX])
{
	if (!json_is_string(v)) {
		http_error(req, 400, "INVALID_REQUEST_BODY", "'%s' must be a non-empty path", field);
		return -1;
	}
	return str_path(req, json_string_value(v), json_string_length(v), field, out);
}

static void dirname_of(const char *clean, char out[PATH_MAX])
{
	const char *slash = strrchr(clean, '/');
	size_t n = slash && slash != clean ? (size_t)(slash - clean) : 1;
	memcpy(out, clean, n);
	out[n] = 0;
}

/* ---- GET /files/info ---- */

enum MHD_Result api_files_info(struct http_req *req)
{
	struct files_ident id;
	ident_of(req->r, &id);
	struct qvals *q = malloc(sizeof(*q));
	char (*paths)[PATH_MAX] = NULL;
	struct buf out = {0};
	struct files_names names = {0};
	enum MHD_Result res = MHD_YES;
	if (!q) {
		res = http_error(req, 500, "RUNTIME_ERROR", "out of memory");
		goto done;
	}
	if (query_paths(req, q, &paths) < 0)
		goto done;
	buf_append_str(&out, "{");
	for (size_t i = 0; i < q->n; i++) {
		bool dup = false;
		for (size_t j = 0; j < i && !dup; j++)
			dup = q->len[j] == q->len[i] && !memcmp(q->v[j], q->v[i], q->len[i]);
		if (dup)
			continue; /* a map: one key each */
		struct stat st;
		int rc = files_enter(&id);
		if (rc == 0) {
			rc = fstatat(AT_FDCWD, paths[i], &st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
			files_leave();
		}
		if (rc < 0) {
			res = fs_error(req, rc, "stat", paths[i]);
			goto done;
		}
		if (i)
			buf_append_str(&out, ",");
		/* Keyed by the path as asked; FileInfo.path is the cleaned one. */
		buf_append_json_str(&out, q->v[i], q->len[i]);
		buf_append_str(&out, ":");
		files_info_json(&out, paths[i], &st, &names);
	}
	buf_append_str(&out, "}");
	res = out.data ? http_text(req, 200, "application/json", out.data, out.len, NULL, NULL)
		       : http_error(req, 500, "RUNTIME_ERROR", "out of memory");
done:
	buf_free(&out);
	free(q);
	free(paths);
	return res;
}

/* ---- DELETE /files, DELETE /directories ---- */

static enum MHD_Result delete_paths(struct http_req *req, bool dirs)
{
	struct files_ident id;
	ident_of(req->r, &id);
	struct qvals *q = malloc(sizeof(*q));
	char (*paths)[PATH_MAX] = NULL;
	enum MHD_Result res = MHD_YES;
	if (!q) {
		res = http_error(req, 500, "RUNTIME_ERROR", "out of memory");
		goto done;
	}
	if (query_paths(req, q, &paths) < 0)
		goto done;
	for (size_t i = 0; i < q->n; i++) {
		const char *path = paths[i], *base;
		if (!strcmp(path, "/")) {
			res = http_error(req, 400, "INVALID_REQUEST_BODY", "refusing to delete /");
			goto done;
		}
		int rc = files_enter(&id);
		if (rc < 0) {
			res = fs_error(req, rc, "delete", path);
			goto done;
		}
		int dirfd = files_open_parent(path, &base);
		struct stat st;
		rc = dirfd;
		if (dirfd >= 0)
			rc = fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
		if (rc == -ENOENT) {
			rc = 0; /* already gone: deleting is idempotent, as in execd */
		} else if (rc == 0 && dirs && !S_ISDIR(st.st_mode)) {
			rc = -ENOTDIR;
		} else if (rc == 0 && !dirs && S_ISDIR(st.st_mode)) {
			rc = -EISDIR;
		} else if (rc == 0 && (rc = files_check_writable(&id, dirfd)) == 0) {
			if (dirs)
				rc = files_rmrf(dirfd, base);
			else if (unlinkat(dirfd, base, 0) < 0 && errno != ENOENT)
				rc = -errno;
		}
		if (dirfd >= 0)
			close(dirfd);
		files_leave();
		if (rc < 0) {
			if (rc == -EISDIR)
				res = http_error(req, 400, "INVALID_FILE",
						 "%.1024s is a directory (use DELETE /directories)", path);
			else if (rc == -ENOTDIR && !dirs)
				res = fs_error(req, -ENOENT, "delete", path);
			else if (rc == -ENOTDIR)
				res = http_error(req, 400, "INVALID_FILE",
						 "%.1024s is not a directory (use DELETE /files)", path);
			else
				res = fs_error(req, rc, "delete", path);
			goto done;
		}
	}
	res = http_empty(req, 200);
done:
	free(q);
	free(paths);
	return res;
}

enum MHD_Result api_files_delete(struct http_req *req)
{
	return delete_paths(req, false);
}

enum MHD_Result api_dirs_delete(struct http_req *req)
{
	return delete_paths(req, true);
}

/* ---- POST /files/mv ---- */

static int do_move(const struct files_ident *id, const char *src, const char *dst, const char **op)
{
	const char *sbase, *dbase;
	char ddir[PATH_MAX];
	int sfd = -1, dfd = -1, rc;
	bool created;
	size_t first_new;
	struct stat st;
	*op = "move";
	if ((rc = files_enter(id)) < 0)
		return rc;
	sfd = files_open_parent(src, &sbase);
	if (sfd < 0) {
		rc = sfd == -EINVAL ? -EBUSY : sfd; /* "/" */
		goto out;
	}
	if (fstatat(sfd, sbase, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		rc = -errno;
		*op = "move (source)";
		goto out;
	}
	if ((rc = files_check_writable(id, sfd)) < 0)
		goto out;
	dirname_of(dst, ddir);
	if (!strcmp(dst, "/")) {
		rc = -EEXIST;
		goto out;
	}
	dbase = strrchr(dst, '/') + 1;
	/* Missing destination parents are made, as execd does (0755). */
	dfd = files_mkdirs(id, ddir, 0755, &created, &first_new);
	if (dfd < 0) {
		rc = dfd;
		*op = "move (destination directory)";
		goto out;
	}
	if ((rc = files_check_writable(id, dfd)) < 0)
		goto out;
	/* Never replace: a destination that exists is an error (execd). */
	rc = files_rename_noreplace(sfd, sbase, dfd, dbase);
out:
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	files_leave();
	return rc;
}

enum MHD_Result api_files_mv(struct http_req *req)
{
	json_t *body = body_json(req, true);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct files_ident id;
	ident_of(req->r, &id);
	enum MHD_Result res = MHD_YES;
	size_t n = json_array_size(body);
	char (*src)[PATH_MAX] = malloc(sizeof(char[1][PATH_MAX]) * (n ? n : 1));
	char (*dst)[PATH_MAX] = malloc(sizeof(char[1][PATH_MAX]) * (n ? n : 1));
	if (!src || !dst) {
		res = http_error(req, 500, "RUNTIME_ERROR", "out of memory");
		goto done;
	}
	/* Everything is checked before anything moves. */
	for (size_t i = 0; i < n; i++) {
		json_t *it = json_array_get(body, i);
		if (!json_is_object(it)) {
			res = http_error(req, 400, "INVALID_REQUEST_BODY",
					 "each item must be an object {src, dest}");
			goto done;
		}
		if (json_path(req, json_object_get(it, "src"), "src", src[i]) < 0 ||
		    json_path(req, json_object_get(it, "dest"), "dest", dst[i]) < 0)
			goto done;
	}
	for (size_t i = 0; i < n; i++) {
		const char *op;
		int rc = do_move(&id, src[i], dst[i], &op);
		if (rc == -EEXIST) {
			res = http_error(req, 409, "FILE_EXISTS",
					 "move %.1024s: destination %.1024s already exists", src[i],
					 dst[i]);
			goto done;
		}
		if (rc == -EXDEV) {
			res = http_error(req, 400, "INVALID_REQUEST_BODY",
					 "move %.1024s to %.1024s: not on the same filesystem", src[i],
					 dst[i]);
			goto done;
		}
		if (rc < 0) {
			res = fs_error(req, rc, op, rc == -ENOENT && strstr(op, "destination")
							    ? dst[i]
							    : src[i]);
			goto done;
		}
	}
	res = http_empty(req, 200);
done:
	free(src);
	free(dst);
	json_decref(body);
	return res;
}

/* ---- POST /files/permissions, POST /directories ---- */

/* Both take {path: {owner, group, mode}}: parse everything first. */
struct perm_req {
	size_t n;
	char (*paths)[PATH_MAX];
	struct perm *perms;
};

static int perm_req_parse(struct http_req *req, json_t *body, struct perm_req *pr)
{
	pr->n = json_object_size(body);
	pr->paths = malloc(sizeof(char[1][PATH_MAX]) * (pr->n ? pr->n : 1));
	pr->perms = calloc(pr->n ? pr->n : 1, sizeof(*pr->perms));
	if (!pr->paths || !pr->perms) {
		http_error(req, 500, "RUNTIME_ERROR", "out of memory");
		return -1;
	}
	const char *key;
	json_t *v;
	size_t i = 0;
	json_object_foreach(body, key, v)
	{
		unsigned status;
		char msg[256];
		if (str_path(req, key, strlen(key), "path", pr->paths[i]) < 0)
			return -1;
		if (perm_parse(&req->r->cfg, v, &pr->perms[i], &status, msg, sizeof(msg)) < 0) {
			http_error(req, status, status == 403 ? "PERMISSION_DENIED" : "INVALID_REQUEST_BODY",
				   "%.1024s: %s", key, msg);
			return -1;
		}
		i++;
	}
	return 0;
}

static void perm_req_free(struct perm_req *pr)
{
	free(pr->paths);
	free(pr->perms);
}

enum MHD_Result api_files_permissions(struct http_req *req)
{
	json_t *body = body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct files_ident id;
	ident_of(req->r, &id);
	struct perm_req pr = {0};
	enum MHD_Result res = MHD_YES;
	if (perm_req_parse(req, body, &pr) < 0)
		goto done;
	for (size_t i = 0; i < pr.n; i++) {
		const char *path = pr.paths[i], *base = path;
		const struct perm *p = &pr.perms[i];
		int rc = files_enter(&id);
		if (rc < 0) {
			res = fs_error(req, rc, "chmod", path);
			goto done;
		}
		int dirfd = strcmp(path, "/") ? files_open_parent(path, &base) : AT_FDCWD;
		rc = dirfd == AT_FDCWD ? 0 : dirfd < 0 ? dirfd : 0;
		/* Mode first, then owner (after a chown the user may not own it). */
		if (rc == 0 && p->has_mode && fchmodat(dirfd, base, p->mode, 0) < 0)
			rc = -errno;
		const char *op = "chmod";
		if (rc == 0) {
			op = "chown";
			rc = files_chown(&id, dirfd, base, p->uid, p->gid, p->as_root);
		}
		if (dirfd >= 0)
			close(dirfd);
		files_leave();
		if (rc < 0) {
			res = fs_error(req, rc, op, path);
			goto done;
		}
	}
	res = http_empty(req, 200);
done:
	perm_req_free(&pr);
	json_decref(body);
	return res;
}

enum MHD_Result api_dirs_create(struct http_req *req)
{
	json_t *body = body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct files_ident id;
	ident_of(req->r, &id);
	struct perm_req pr = {0};
	enum MHD_Result res = MHD_YES;
	if (perm_req_parse(req, body, &pr) < 0)
		goto done;
	for (size_t i = 0; i < pr.n; i++) {
		const struct perm *p = &pr.perms[i];
		bool created;
		size_t first_new;
		int rc = files_enter(&id);
		if (rc == 0) {
			/* execd: a new directory gets mode (default 755) and owner;
			 * an existing one is left as it is. */
			rc = files_mkdirs(&id, pr.paths[i], p->has_mode ? p->mode : 0755, &created,
					  &first_new);
			if (rc >= 0) {
				close(rc);
				rc = files_chown_new(&id, pr.paths[i], first_new, p->uid, p->gid,
						     p->as_root);
			}
			files_leave();
		}
		if (rc < 0) {
			res = fs_error(req, rc, "mkdir", pr.paths[i]);
			goto done;
		}
	}
	res = http_empty(req, 200);
done:
	perm_req_free(&pr);
	json_decref(body);
	return res;
}

/* ---- GET /directories/list, GET /files/search ---- */

static enum MHD_Result walk_respond(struct http_req *req, struct files_walk *w, int rc,
				    const char *what, const char *path)
{
	if (rc == -FILES_ELIMIT)
		return http_error(req, 400, "INVALID_REQUEST_BODY",
				  "%s %.1024s: %s; narrow it (limits: %d results, %d entries looked "
				  "at, %d ms, %d levels)",
				  what, path, w->limit_msg, FILES_MAX_RESULTS, FILES_MAX_VISITED,
				  FILES_MAX_WALK_MS, FILES_MAX_DEPTH);
	if (rc < 0)
		return fs_error(req, rc, what, path);
	buf_append_str(w->out, "]");
	if (!w->out->data)
		return http_error(req, 500, "RUNTIME_ERROR", "out of memory");
	return http_text(req, 200, "application/json", w->out->data, w->out->len, NULL, NULL);
}

enum MHD_Result api_dirs_list(struct http_req *req)
{
	char path[PATH_MAX];
	if (query_path(req, path) < 0)
		return MHD_YES;
	uint64_t depth = 1;
	size_t dl;
	const char *d = query_n(req, "depth", &dl);
	if (d && dl && parse_count(d, dl, UINT32_MAX, &depth) < 0)
		return http_error(req, 400, "INVALID_REQUEST_BODY",
				  "invalid query parameter 'depth': must be a non-negative number");
	struct files_ident id;
	ident_of(req->r, &id);
	struct buf out = {0};
	struct files_walk *w = calloc(1, sizeof(*w));
	if (!w)
		return http_error(req, 500, "RUNTIME_ERROR", "out of memory");
	w->out = &out;
	w->max_depth = depth > FILES_MAX_DEPTH ? FILES_MAX_DEPTH : (unsigned)depth;
	buf_append_str(&out, "[");
	int rc = files_enter(&id);
	struct stat st;
	int fd = -1;
	enum MHD_Result res;
	if (rc == 0 && fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
		rc = -errno;
	if (rc == 0 && S_ISLNK(st.st_mode)) {
		files_leave();
		res = http_error(req, 400, "INVALID_REQUEST_BODY",
				 "path is a symbolic link, refusing to traverse: %.1024s", path);
		goto done;
	}
	if (rc == 0 && !S_ISDIR(st.st_mode))
		rc = -ENOTDIR;
	if (rc == 0 && (fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		rc = -errno;
	if (rc == 0)
		rc = files_walk(w, fd, path);
	files_leave();
	res = walk_respond(req, w, rc, "list", path);
done:
	if (fd >= 0)
		close(fd);
	buf_free(&out);
	free(w);
	return res;
}

enum MHD_Result api_files_search(struct http_req *req)
{
	char path[PATH_MAX];
	if (query_path(req, path) < 0)
		return MHD_YES;
	size_t pl;
	const char *pattern = query_n(req, "pattern", &pl);
	if (!pattern || !pl)
		pattern = "**";
	else if (memchr(pattern, 0, pl))
		return http_error(req, 400, "INVALID_REQUEST_BODY", "pattern contains a NUL byte");
	char err[128];
	struct files_glob *g = NULL;
	if (files_glob_compile(&g, pattern, err, sizeof(err)) < 0)
		return http_error(req, 400, "INVALID_REQUEST_BODY", "invalid pattern %.600s: %s",
				  pattern, err);
	struct files_ident id;
	ident_of(req->r, &id);
	struct buf out = {0};
	struct files_walk *w = calloc(1, sizeof(*w));
	enum MHD_Result res;
	int fd = -1;
	if (!w) {
		files_glob_free(g);
		return http_error(req, 500, "RUNTIME_ERROR", "out of memory");
	}
	w->out = &out;
	w->search = true;
	w->glob = g;
	w->max_depth = FILES_MAX_DEPTH;
	buf_append_str(&out, "[");
	struct stat st;
	int rc = files_enter(&id);
	if (rc == 0 && fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
		rc = -errno;
	if (rc == 0 && S_ISDIR(st.st_mode)) {
		fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		rc = fd < 0 ? -errno : files_walk(w, fd, path);
	} else if (rc == 0) {
		/* Like execd's walk: a root that is not a directory is itself the
		 * one candidate (a link is not followed). */
		enum files_glob_subject sub = files_glob_subject(g);
		const char *name = sub == GLOB_ABS ? path : sub == GLOB_REL ? "" : strrchr(path, '/') + 1;
		if (files_glob_match(g, name, strlen(name))) {
			files_info_json(&out, path, &st, &w->names);
			w->results = 1;
		}
	}
	files_leave();
	res = walk_respond(req, w, rc, "search", path);
	if (fd >= 0)
		close(fd);
	buf_free(&out);
	free(w);
	files_glob_free(g);
	return res;
}

/* ---- POST /files/replace ---- */

enum MHD_Result api_files_replace(struct http_req *req)
{
	json_t *body = body_json(req, false);
	if (!body)
		return req->responded ? MHD_YES : MHD_NO;
	struct files_ident id;
	ident_of(req->r, &id);
	size_t vl;
	const char *verbose = query_n(req, "verbose", &vl);
	bool want_counts = verbose && vl == 4 && !strncasecmp(verbose, "true", 4);
	size_t n = json_object_size(body);
	char (*paths)[PATH_MAX] = malloc(sizeof(char[1][PATH_MAX]) * (n ? n : 1));
	enum MHD_Result res = MHD_YES;
	struct buf out = {0};
	const char *key;
	json_t *v;
	size_t i = 0;
	if (!paths) {
		res = http_error(req, 500, "RUNTIME_ERROR", "out of memory");
		goto done;
	}
	json_object_foreach(body, key, v)
	{
		if (str_path(req, key, strlen(key), "path", paths[i]) < 0)
			goto done;
		json_t *o = json_is_object(v) ? json_object_get(v, "old") : NULL;
		json_t *nw = json_is_object(v) ? json_object_get(v, "new") : NULL;
		if (!json_is_object(v) || (o && !json_is_string(o)) ||
		    (nw && !json_is_null(nw) && !json_is_string(nw))) {
			res = http_error(req, 400, "INVALID_REQUEST_BODY",
					 "%.1024s: expected {\"old\": string, \"new\": string}", key);
			goto done;
		}
		if (!o || !json_string_length(o)) {
			res = http_error(req, 400, "INVALID_REQUEST_BODY",
					 "%.1024s: old content must not be empty", key);
			goto done;
		}
		i++;
	}
	buf_append_str(&out, "{");
	i = 0;
	json_object_foreach(body, key, v)
	{
		json_t *o = json_object_get(v, "old"), *nw = json_object_get(v, "new");
		const char *ns = json_is_string(nw) ? json_string_value(nw) : "";
		size_t nl = json_is_string(nw) ? json_string_length(nw) : 0;
		uint64_t count = 0;
		int rc = files_enter(&id);
		if (rc == 0) {
			rc = files_replace(&id, paths[i], json_string_value(o), json_string_length(o), ns,
					   nl, &count);
			files_leave();
		}
		if (rc == -EFBIG) {
			res = http_error(req, 413, "FILE_TOO_LARGE",
					 "replace %.1024s: files over %llu MiB are not rewritten", paths[i],
					 (unsigned long long)(FILES_REPLACE_MAX >> 20));
			goto done;
		}
		if (rc == -EINVAL) {
			res = http_error(req, 400, "INVALID_FILE", "replace %.1024s: not a regular file",
					 paths[i]);
			goto done;
		}
		if (rc < 0) {
			res = fs_error(req, rc, "replace", paths[i]);
			goto done;
		}
		if (i)
			buf_append_str(&out, ",");
		buf_append_json_str(&out, key, strlen(key));
		buf_appendf(&out, ":{\"replacedCount\":%llu}", (unsigned long long)count);
		i++;
	}
	buf_append_str(&out, "}");
	if (!want_counts)
		res = http_empty(req, 200); /* execd: empty unless ?verbose=true */
	else if (!out.data)
		res = http_error(req, 500, "RUNTIME_ERROR", "out of memory");
	else
		res = http_text(req, 200, "application/json", out.data, out.len, NULL, NULL);
done:
	buf_free(&out);
	free(paths);
	json_decref(body);
	return res;
}

/* ---- GET /files/download ---- */

static enum MHD_Result error_with_header(struct http_req *req, unsigned status, const char *code,
					 const char *msg, const char *hname, const char *hval)
{
	json_t *j = json_pack("{s:s,s:s}", "code", code, "message", msg);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return MHD_NO;
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(s);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "application/json");
	MHD_add_response_header(resp, hname, hval);
	return queue_resp(req, status, resp);
}

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
 * ignored, as execd does). 0 with start/len, or -1: malformed or nothing
 * satisfiable (416). */
static int parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *len)
{
	while (*h == ' ' || *h == '\t')
		h++;
	if (strncasecmp(h, "bytes=", 6) != 0)
		return -1;
	const char *p = h + 6;
	bool found = false;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		uint64_t a = 0, b = 0;
		bool has_a = false, has_b = false;
		if (*p >= '0' && *p <= '9') {
			if (parse_u64(&p, &a) < 0)
				return -1;
			has_a = true;
		}
		if (*p != '-')
			return -1;
		p++;
		if (*p >= '0' && *p <= '9') {
			if (parse_u64(&p, &b) < 0)
				return -1;
			has_b = true;
		}
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p && *p != ',')
			return -1;
		if (!has_a && !has_b)
			return -1;
		if (has_a && has_b && b < a)
			return -1;
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
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~", *p))
			enc[n++] = (char)*p;
		else
			n += (size_t)snprintf(enc + n, sizeof(enc) - n, "%%%02X", *p);
	}
	enc[n] = 0;
	if (snprintf(out, outsz, "attachment; filename=\"%s\"; filename*=UTF-8''%s", enc, enc) >=
	    (int)outsz)
		snprintf(out, outsz, "attachment; filename*=UTF-8''%s", enc);
}

enum MHD_Result api_files_download(struct http_req *req)
{
	char path[PATH_MAX];
	if (query_path(req, path) < 0)
		return MHD_YES;
	size_t ol = 0, ll = 0;
	const char *off_s = query_n(req, "offset", &ol), *lim_s = query_n(req, "limit", &ll);
	bool lines = (off_s && ol) || (lim_s && ll);
	uint64_t first = 0, count = 0;
	const char *range = http_header(req, "Range");
	if (lines) {
		if (!(off_s && ol) || !(lim_s && ll))
			return http_error(req, 400, "INVALID_REQUEST_BODY",
					  "both offset and limit must be provided together for "
					  "line-based reading");
		if (parse_count(off_s, ol, 1ULL << 50, &first) < 0 || first < 1)
			return http_error(req, 400, "INVALID_REQUEST_BODY",
					  "offset must be a positive integer (1-based)");
		if (parse_count(lim_s, ll, 1ULL << 50, &count) < 0 || count < 1)
			return http_error(req, 400, "INVALID_REQUEST_BODY",
					  "limit must be a positive integer");
		if (range)
			return http_error(req, 400, "INVALID_REQUEST_BODY",
					  "offset/limit and the Range header are mutually exclusive");
	}
	struct files_ident id;
	ident_of(req->r, &id);
	int rc = files_enter(&id);
	if (rc < 0)
		return fs_error(req, rc, "download", path);
	/* O_NONBLOCK: a FIFO must not hang the runner at open. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	rc = fd < 0 ? -errno : 0;
	files_leave();
	if (rc < 0)
		return fs_error(req, rc, "download", path);
	struct stat st;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		close(fd);
		return fs_error(req, rc, "download", path);
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		return http_error(req, 400, "INVALID_FILE",
				  "%.1024s is a directory (use GET /directories/list)", path);
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return http_error(req, 400, "INVALID_FILE", "%.1024s is not a regular file", path);
	}
	uint64_t size = (uint64_t)st.st_size, start = 0, len = size;
	unsigned status = 200;
	char crange[96] = "";
	if (lines) {
		off_t s, l;
		if ((rc = files_line_range(fd, first, count, &s, &l)) < 0) {
			close(fd);
			return fs_error(req, rc, "download", path);
		}
		start = (uint64_t)s;
		len = (uint64_t)l;
	} else if (range) {
		if (parse_range(range, size, &start, &len) < 0) {
			close(fd);
			char msg[128], hv[48];
			snprintf(msg, sizeof(msg), "range not satisfiable (file size %llu)",
				 (unsigned long long)size);
			snprintf(hv, sizeof(hv), "bytes */%llu", (unsigned long long)size);
			return error_with_header(req, 416, "RANGE_NOT_SATISFIABLE", msg,
						 "Content-Range", hv);
		}
		status = 206;
		snprintf(crange, sizeof(crange), "bytes %llu-%llu/%llu", (unsigned long long)start,
			 (unsigned long long)(start + len - 1), (unsigned long long)size);
	}
	struct MHD_Response *resp;
	if (len == 0) {
		close(fd);
		resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
	} else {
		/* Served straight from the descriptor (sendfile): nothing buffered.
		 * MHD closes fd with the response. */
		resp = MHD_create_response_from_fd_at_offset64(len, fd, start);
		if (!resp)
			close(fd);
	}
	if (!resp)
		return MHD_NO;
	if (lines) {
		MHD_add_response_header(resp, "Content-Type", "text/plain");
	} else {
		char cd[6 * NAME_MAX + 80], lm[64];
		struct tm tm;
		time_t mt = st.st_mtim.tv_sec;
		content_disposition(cd, sizeof(cd), strrchr(path, '/')[1] ? strrchr(path, '/') + 1
									 : "file");
		MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
		MHD_add_response_header(resp, "Content-Disposition", cd);
		MHD_add_response_header(resp, "Accept-Ranges", "bytes");
		if (gmtime_r(&mt, &tm) && strftime(lm, sizeof(lm), "%a, %d %b %Y %H:%M:%S GMT", &tm))
			MHD_add_response_header(resp, "Last-Modified", lm);
		if (crange[0])
			MHD_add_response_header(resp, "Content-Range", crange);
	}
	return queue_resp(req, status, resp);
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
	size_t first_new; /* parents made for it (chowned once it is in place) */
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
	unsigned status;
	const char *code;
	char msg[512];
	struct up_item items[UPLOAD_MAX_FILES];
};

static int up_fail(struct upload *u, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int up_fail(struct upload *u, unsigned status, const char *code, const char *fmt, ...)
{
	if (u->status)
		return 1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(u->msg, sizeof(u->msg), fmt, ap);
	va_end(ap);
	u->status = status;
	u->code = code;
	return 1;
}

/* An errno as the upload's error (same mapping as fs_error). */
static int up_fs_fail(struct upload *u, int err, const char *op, const char *path)
{
	err = err < 0 ? -err : err;
	switch (err) {
	case ENOENT:
		return up_fail(u, 404, "FILE_NOT_FOUND", "%s %.1024s: file not found", op, path);
	case EACCES:
	case EPERM:
	case EROFS:
		return up_fail(u, 403, "PERMISSION_DENIED",
			       "%s %.1024s: %s (acting as the task user, uid %u)", op, path,
			       strerror(err), (unsigned)u->id.uid);
	case FILES_EOUTSIDE:
		return up_fail(u, 403, "PERMISSION_DENIED",
			       "%s %.1024s: outside the directories tasks may write (%.300s)", op,
			       path, u->id.write_roots ? u->id.write_roots : "");
	case EISDIR:
		return up_fail(u, 400, "INVALID_FILE", "%s %.1024s: is a directory", op, path);
	case ENOTDIR:
		return up_fail(u, 400, "INVALID_FILE", "%s %.1024s: a parent is not a directory",
			       op, path);
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
		return up_fail(u, 507, "INSUFFICIENT_STORAGE", "%s %.1024s: %s", op, path,
			       strerror(err));
	default:
		log_errno("upload failed", err, op);
		return up_fail(u, 500, "RUNTIME_ERROR", "%s %.1024s: %s", op, path, strerror(err));
	}
}

static int up_meta_end(struct upload *u)
{
	struct up_item *it = &u->items[u->n_meta];
	json_error_t jerr;
	json_t *j = json_loadb(u->meta.data ? u->meta.data : "", u->meta.len, 0, &jerr);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		return up_fail(u, 400, "INVALID_FILE_METADATA",
			       "invalid metadata format: %s (want a JSON object {path, owner, group, "
			       "mode})",
			       j ? "not an object" : jerr.text);
	}
	int rc = 0;
	json_t *p = json_object_get(j, "path");
	if (!json_is_string(p) || !json_string_length(p)) {
		rc = up_fail(u, 400, "INVALID_FILE_METADATA", "metadata path is empty");
	} else if (files_clean_path(json_string_value(p), json_string_length(p), it->path,
				    sizeof(it->path)) < 0 ||
		   !strcmp(it->path, "/")) {
		rc = up_fail(u, 400, "INVALID_FILE_METADATA",
			     "metadata path must be an absolute file path: %.1024s",
			     json_string_value(p));
	}
	unsigned status;
	char msg[256];
	if (!rc && perm_parse(&u->r->cfg, j, &it->perm, &status, msg, sizeof(msg)) < 0)
		rc = up_fail(u, status, status == 403 ? "PERMISSION_DENIED" : "INVALID_FILE_METADATA",
			     "%.1024s: %s", it->path, msg);
	json_decref(j);
	if (rc)
		return rc;
	it->base = strrchr(it->path, '/') + 1;
	it->dirfd = -1;
	it->tmp.fd = -1;
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
	it->dirfd = files_mkdirs(&u->id, dir, 0755, &created, &it->first_new);
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
	return rc < 0 ? up_fs_fail(u, rc, "upload", it->path) : 0;
}

static int up_part_begin(void *arg, const struct mp_part *part)
{
	struct upload *u = arg;
	if (!strcmp(part->name, "metadata")) {
		if (u->n_meta == UPLOAD_MAX_FILES)
			return up_fail(u, 400, "INVALID_FILE", "more than %d files in one upload",
				       UPLOAD_MAX_FILES);
		buf_reset(&u->meta);
		u->part = UP_META;
		return 0;
	}
	if (!strcmp(part->name, "file")) {
		if (u->n_file >= u->n_meta)
			return up_fail(u, 400, "INVALID_FILE_METADATA",
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
			return up_fail(u, 400, "INVALID_FILE_METADATA",
				       "metadata part larger than %d bytes", UPLOAD_META_MAX);
		if (buf_append(&u->meta, data, len) < 0)
			return up_fail(u, 500, "RUNTIME_ERROR", "out of memory");
	} else if (u->part == UP_FILE) {
		struct up_item *it = &u->items[u->n_file - 1];
		int rc = files_write_all(it->tmp.fd, data, len);
		if (rc < 0)
			return up_fs_fail(u, rc, "write", it->path);
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
			up_fail(u, 400, "INVALID_FILE", "%s", u->mp.err);
	}
	if (u->status)
		return MHD_YES; /* drain */
	if (multipart_feed(&u->mp, data, len) == -1 && !u->status)
		up_fail(u, 400, "INVALID_FILE", "malformed multipart body: %s", u->mp.err);
	return MHD_YES;
}

enum MHD_Result api_files_upload(struct http_req *req)
{
	struct upload *u = req->ctx;
	if (!u) {
		/* No body at all: still say why the Content-Type is wrong first. */
		struct multipart *m = malloc(sizeof(*m));
		if (!m)
			return MHD_NO;
		int bad = multipart_init(m, http_header(req, "Content-Type"), &up_cb, NULL);
		enum MHD_Result res = http_error(req, 400, "INVALID_FILE", "%s",
						 bad ? m->err : "multipart form is empty");
		free(m);
		return res;
	}
	if (!u->status && multipart_finish(&u->mp) < 0)
		up_fail(u, 400, "INVALID_FILE", "malformed multipart body: %s", u->mp.err);
	if (!u->status && u->n_meta == 0)
		up_fail(u, 400, "INVALID_FILE_METADATA", "metadata file is missing");
	if (!u->status && u->n_file == 0)
		up_fail(u, 400, "INVALID_FILE_CONTENT", "file is missing");
	if (!u->status && u->n_meta != u->n_file)
		up_fail(u, 400, "INVALID_FILE", "metadata and file count mismatch: %u vs %u",
			u->n_meta, u->n_file);
	/* The whole body is in: give each file its name (atomic rename). */
	for (unsigned i = 0; i < u->n_file && !u->status; i++) {
		struct up_item *it = &u->items[i];
		mode_t mode = it->perm.has_mode ? it->perm.mode : it->keep_mode ? it->old_mode : 0755;
		int rc = files_enter(&u->id);
		const char *op = "upload";
		if (rc == 0 && fchmod(it->tmp.fd, mode) < 0)
			rc = -errno;
		if (rc == 0)
			rc = files_tmp_commit(&it->tmp, it->base);
		/* Owner last: a file given away can no longer be linked into
		 * place by the user (protected_hardlinks). */
		if (rc == 0) {
			op = "chown";
			rc = files_chown(&u->id, it->dirfd, it->base, it->perm.uid, it->perm.gid,
					 it->perm.as_root);
		}
		if (rc == 0) {
			/* Parents made for it get the metadata's owner, as in execd. */
			char dir[PATH_MAX];
			dirname_of(it->path, dir);
			op = "chown";
			rc = files_chown_new(&u->id, dir, it->first_new, it->perm.uid, it->perm.gid,
					     it->perm.as_root);
		}
		files_leave();
		if (rc < 0)
			up_fs_fail(u, rc, op, it->path);
	}
	if (u->status)
		return http_error(req, u->status, u->code, "%s", u->msg);
	return http_empty(req, 200);
}
