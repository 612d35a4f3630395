/* envd's GET and POST /files on the files layer, as the task user
 * (docs/design/envd.md#files-filesystemfilesystem-and-files): `path` (relative: under envd's
 * workdir) and `username` (the task user only), a multipart body (each part named "file", its
 * filename the path when the query has none) or a raw application/octet-stream one, either of them
 * identity or gzip (decoded as it arrives, design/envd.md#gzip-uploads-and-the-upload-bound); each
 * file written beside its target and renamed into place when complete, the bytes written bounded by
 * --envd-upload-max; the answer envd's [EntryInfo {path, name, type}]; envd's status codes. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/filesroute.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/inflate.h"
#include "core/loop.h"
#include "core/runner.h"
#include "envd/internal.h"
#include "files/ident.h"
#include "files/multipart.h"
#include "files/ops.h"
#include "files/path.h"
#include "files/userjob.h"

#define UP_MAX_FILES 64
/* Decoded bytes one body callback writes before it hands the loop back: a gzip bomb's chunk of
 * 32 KiB inflates to 33 MB, so the rest of it waits for the next turn (suspend, resume). */
#define UP_INFLATE_STEP (1024 * 1024)

/* envd's error body: {"message","code"} (its Error schema). */
static enum MHD_Result files_err(struct http_req *req, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static enum MHD_Result files_err(struct http_req *req, unsigned status, const char *fmt, ...)
{
	char msg[ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return http_json(req, status, json_pack("{s:s,s:i}", "message", msg, "code", (int)status));
}

/* The user check of /files: 401 as envd's InvalidUser, 403 for root (saying why). */
static int files_user(struct http_req *req, enum MHD_Result *res)
{
	enum connect_code code;
	char msg[256];
	if (envd_user_check(req, http_query(req, "username"), &code, msg, sizeof(msg)) == 0)
		return 0;
	*res = files_err(req, code == CC_PERMISSION_DENIED ? 403 : 401, "%s", msg);
	return -1;
}

/* A files-layer error as envd's status: 404 missing, 400 a directory or a bad path, 403 no
 * permission (the task user's), 507 no space, 500 the rest. */
static enum MHD_Result fs_status(struct http_req *req, int rc, const char *op, const char *path)
{
	unsigned st = rc == -ENOENT || rc == -ENOTDIR                                          ? 404
		      : rc == -EISDIR || rc == -EINVAL                                         ? 400
		      : rc == -EACCES || rc == -EPERM || rc == -FILES_EOUTSIDE || rc == -EROFS ? 403
		      : rc == -ENOSPC || rc == -EDQUOT                                         ? 507
						       : 500;
	const char *why = rc == -FILES_EOUTSIDE ? "outside the task user's writable roots"
			  : rc == -EISDIR       ? "is a directory"
						: strerror(-rc);
	return files_err(req, st, "%s '%.1024s': %s", op, path, why);
}

/* ---- GET /files ---- */

static int open_for_read(const char *path, struct stat *st)
{
	cleanup_close int pfd = files_open(AT_FDCWD, path, O_PATH, 0);
	if (pfd < 0)
		return pfd;
	if (fstat(pfd, st) < 0)
		return -errno;
	if (S_ISDIR(st->st_mode))
		return -EISDIR;
	if (!S_ISREG(st->st_mode))
		return -EINVAL;
	int proc = files_on_procfs(pfd);
	if (proc)
		return proc < 0 ? proc : -EACCES; /* /proc resolves as the runner: never served */
	int fd = files_open(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
	struct stat now;
	if (fd >= 0 &&
	    (fstat(fd, &now) < 0 || now.st_ino != st->st_ino || now.st_dev != st->st_dev)) {
		close(fd);
		return -ESTALE;
	}
	return fd;
}

enum MHD_Result envd_files_get(struct http_req *req)
{
	enum MHD_Result res;
	if (files_user(req, &res) < 0)
		return res;
	char path[PATH_MAX], msg[256];
	if (envd_path(req->r, http_query(req, "path"), path, msg, sizeof(msg)) < 0)
		return files_err(req, 400, "%s", msg);
	struct files_ident id;
	files_task_ident(req->r, &id);
	int rc = files_enter(&id);
	struct stat st;
	int fd = rc < 0 ? rc : open_for_read(path, &st);
	if (rc == 0)
		files_leave();
	if (fd < 0)
		return fd == -EISDIR   ? files_err(req, 400, "path '%.1024s' is a directory", path)
		       : fd == -ENOENT ? files_err(req, 404, "path '%.1024s' does not exist", path)
				       : fs_status(req, fd, "error opening file", path);
	/* gzip is not offered: identity is always acceptable (RFC 9110 §12.5.3). */
	struct MHD_Response *resp =
		st.st_size ? MHD_create_response_from_fd64((uint64_t)st.st_size, fd)
			   : MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
	if (!st.st_size || !resp)
		close(fd);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
	http_audit_note(req, json_pack("{s:s,s:s,s:I}", "operation", "read", "path", path,
				       "bytes_out", (json_int_t)st.st_size));
	return http_queue(req, 200, resp);
}

/* ---- POST /files ---- */

struct up_file {
	char path[PATH_MAX];
	int dirfd;
	struct files_tmp tmp;
	uint64_t bytes;
};

struct upload {
	struct runner *r;
	struct http_req *req;
	struct files_ident id;
	struct multipart mp;
	bool octet, failed;
	struct inflate *gz;       /* Content-Encoding: gzip (NULL: identity) */
	uint8_t *gz_out;          /* its output buffer */
	uint64_t written;         /* file bytes written, all files (after decoding) */
	struct loop_timer resume; /* the next turn of a gzip body held back */
	bool timer;
	unsigned status;
	char msg[ERROR_MSG_MAX];
	struct up_file files[UP_MAX_FILES];
	unsigned n;
	bool in_file;
	char qpath[PATH_MAX]; /* the query's path ("" none) */
};

static int up_fail(struct upload *u, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int up_fail(struct upload *u, unsigned status, const char *fmt, ...)
{
	if (u->failed)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(u->msg, sizeof(u->msg), fmt, ap);
	va_end(ap);
	u->status = status;
	u->failed = true;
	return -1;
}

static int up_fs_fail(struct upload *u, int rc, const char *path)
{
	unsigned st = rc == -ENOENT || rc == -EISDIR || rc == -EINVAL || rc == -ENOTDIR ? 400
		      : rc == -ENOSPC || rc == -EDQUOT                                  ? 507
		      : rc == -EACCES || rc == -EPERM || rc == -FILES_EOUTSIDE || rc == -EROFS
			      ? 403
			      : 500;
	return up_fail(u, st, "error writing file '%.1024s': %s", path,
		       rc == -FILES_EOUTSIDE ? "outside the task user's writable roots"
					     : strerror(-rc));
}

/* A file begins: parents made (0755, the task user's), a temp file beside the target. */
static int up_begin(struct upload *u, const char *path)
{
	if (u->n == UP_MAX_FILES)
		return up_fail(u, 400, "more than %d files in one upload", UP_MAX_FILES);
	struct up_file *f = &u->files[u->n];
	char msg[256];
	if (envd_path(u->r, path, f->path, msg, sizeof(msg)) < 0 || !strcmp(f->path, "/"))
		return up_fail(u, 400, "%s", msg);
	f->dirfd = -1;
	f->tmp.fd = -1;
	u->n++;
	int rc = files_enter(&u->id);
	if (rc < 0)
		return up_fs_fail(u, rc, f->path);
	char dir[PATH_MAX];
	fapi_dirname_of(f->path, dir);
	bool created;
	struct files_made made = {.fd = -1};
	f->dirfd = files_mkdirs(&u->id, dir, 0755, &created, &made);
	files_made_free(&made);
	if (f->dirfd < 0) {
		rc = f->dirfd;
		f->dirfd = -1;
	} else if ((rc = files_check_writable(&u->id, f->dirfd)) == 0) {
		struct stat st;
		const char *base = strrchr(f->path, '/') + 1;
		if (fstatat(f->dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
			rc = -EISDIR;
		else
			rc = files_tmp_open(&f->tmp, f->dirfd);
	}
	files_leave();
	u->in_file = rc == 0;
	return rc < 0 ? up_fs_fail(u, rc, f->path) : 0;
}

static int up_data(struct upload *u, const char *data, size_t len)
{
	if (!u->in_file || !u->n)
		return 0;
	struct up_file *f = &u->files[u->n - 1];
	uint64_t max = u->r->cfg.envd_upload_max;
	if (max && u->written + len > max)
		return up_fail(
			u, 413,
			"the upload is larger than %llu bytes (--envd-upload-max)%s: nothing "
			"was written",
			(unsigned long long)max, u->gz ? ", counted after gzip decoding" : "");
	u->written += len;
	int rc = write_all(f->tmp.fd, data, len);
	if (rc < 0)
		return up_fs_fail(u, rc, f->path);
	f->bytes += len;
	return 0;
}

static int mp_begin(void *arg, const struct mp_part *part)
{
	struct upload *u = arg;
	u->in_file = false;
	if (strcmp(part->name, "file"))
		return 0; /* other fields are not envd's */
	const char *path = u->qpath[0] && u->n == 0 ? u->qpath : part->filename;
	if (!*path)
		return up_fail(u, 400, "a file part without a path (no filename, no ?path=)");
	return up_begin(u, path);
}

static int mp_data(void *arg, const char *data, size_t len)
{
	return up_data(arg, data, len);
}

static int mp_end(void *arg)
{
	((struct upload *)arg)->in_file = false;
	return 0;
}

static const struct mp_callbacks up_cb = {mp_begin, mp_data, mp_end};

/* The temporary files removed: at the end, or at once when the upload is refused, so a
 * refused upload holds no disk while the rest of its body is drained. */
static void up_discard(struct upload *u)
{
	bool entered = files_enter(&u->id) == 0;
	for (unsigned i = 0; i < u->n; i++) {
		if (u->files[i].tmp.fd >= 0)
			files_tmp_discard(&u->files[i].tmp);
		u->files[i].tmp.fd = -1;
		if (u->files[i].dirfd >= 0)
			close(u->files[i].dirfd);
		u->files[i].dirfd = -1;
	}
	if (entered)
		files_leave();
}

static void up_free(struct http_req *req)
{
	struct upload *u = req->ctx;
	if (!u)
		return;
	up_discard(u);
	if (u->timer)
		loop_timer_close(&u->r->loop, &u->resume);
	free(u->gz);
	free(u->gz_out);
	free(u);
	req->ctx = NULL;
}

static void up_resume(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct upload *u = t->arg;
	http_req_resume(u->req);
}

/* Content-Encoding: identity (or none) and gzip are taken; 0, or -1 refused with 400. */
static int up_encoding(struct upload *u, const char *ce)
{
	if (!ce || !strcasecmp(ce, "identity"))
		return 0;
	if (strcasecmp(ce, "gzip") && strcasecmp(ce, "x-gzip"))
		return up_fail(u, 400,
			       "Content-Encoding '%.32s' is not accepted: send gzip or identity",
			       ce);
	u->gz = malloc(sizeof(*u->gz));
	u->gz_out = malloc(65536);
	if (!u->gz || !u->gz_out)
		return up_fail(u, 500, "out of memory for the gzip decoder");
	inflate_init(u->gz);
	return 0;
}

static struct upload *up_new(struct http_req *req)
{
	struct upload *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->r = req->r;
	u->req = req;
	files_task_ident(req->r, &u->id);
	req->ctx = u;
	req->ctx_free = up_free;
	const char *q = http_query(req, "path");
	snprintf(u->qpath, sizeof(u->qpath), "%s", q ? q : "");
	const char *ct = http_header(req, "Content-Type");
	const char *ce = http_header(req, "Content-Encoding");
	if (up_encoding(u, ce) < 0)
		return u; /* refused: the body is drained, the answer 400 */
	if (ct && !strncasecmp(ct, "application/octet-stream", 24)) {
		u->octet = true;
		if (!u->qpath[0])
			up_fail(u, 400, "an application/octet-stream upload needs ?path=");
		else
			up_begin(u, u->qpath);
	} else if (multipart_init(&u->mp, ct, &up_cb, u) < 0) {
		up_fail(u, 400, "%s", u->mp.err);
	}
	return u;
}

/* The body as sent, or decoded from gzip: into the file, or through the multipart parser. */
static void up_feed(struct upload *u, const char *data, size_t len)
{
	if (u->octet)
		up_data(u, data, len);
	else if (multipart_feed(&u->mp, data, len) == -1)
		up_fail(u, 400, "malformed multipart body: %s", u->mp.err);
}

/* Decode what this callback may (UP_INFLATE_STEP bytes out); returns the input left over. */
static size_t up_inflate(struct upload *u, const char *data, size_t len)
{
	const uint8_t *p = (const uint8_t *)data;
	size_t left = len, out = 0;
	while (!u->failed) {
		size_t got;
		enum inflate_rc rc = inflate_gzip(u->gz, &p, &left, u->gz_out, 65536, &got);
		if (got)
			up_feed(u, (const char *)u->gz_out, got);
		out += got;
		if (rc == INFLATE_ERROR)
			up_fail(u, 400, "bad gzip body (Content-Encoding: gzip): %s", u->gz->err);
		else if ((!left && got < 65536) || (left && out >= UP_INFLATE_STEP))
			break;
	}
	return u->failed ? 0 : left;
}

enum MHD_Result envd_files_post_body(struct http_req *req, const char *data, size_t len)
{
	struct upload *u = req->ctx;
	if (!u && !(u = up_new(req)))
		return MHD_NO;
	if (u->failed)
		return MHD_YES; /* drained */
	if (!u->gz) {
		up_feed(u, data, len);
	} else if ((req->body_left = up_inflate(u, data, len))) {
		/* The rest of this chunk on the loop's next turn: others are served between. */
		if (!u->timer && loop_timer_init(&u->r->loop, &u->resume, up_resume, u) == 0)
			u->timer = true;
		if (u->timer && loop_timer_start(&u->r->loop, &u->resume, 0, 0) == 0)
			http_req_suspend(req);
		else
			req->body_left = 0, up_fail(u, 500, "cannot schedule the gzip body's rest");
	}
	if (u->failed)
		up_discard(u);
	return MHD_YES;
}

/* Commit each file (atomic rename, as the task user) and answer envd's [EntryInfo]. */
static enum MHD_Result up_commit(struct http_req *req, struct upload *u)
{
	json_t *arr = json_array();
	json_t *audit = json_array();
	int rc = files_enter(&u->id);
	if (rc < 0)
		up_fs_fail(u, rc, "/");
	for (unsigned i = 0; i < u->n && rc == 0; i++) {
		struct up_file *f = &u->files[i];
		const char *base = strrchr(f->path, '/') + 1;
		rc = fchmod(f->tmp.fd, 0644) < 0 ? -errno : files_tmp_commit(&f->tmp, base);
		files_tmp_discard(&f->tmp);
		if (rc < 0) {
			up_fs_fail(u, rc, f->path);
			break;
		}
		json_array_append_new(arr, json_pack("{s:s,s:s,s:s}", "path", f->path, "name", base,
						     "type", "file"));
		json_array_append_new(audit, json_pack("{s:s,s:I}", "path", f->path, "bytes",
						       (json_int_t)f->bytes));
	}
	if (!u->failed || rc != -1)
		files_leave();
	http_audit_note(req, json_pack("{s:s,s:o}", "operation", "write", "files", audit));
	if (u->failed) {
		json_decref(arr);
		return files_err(req, u->status, "%s", u->msg);
	}
	return http_json(req, 200, arr);
}

enum MHD_Result envd_files_post(struct http_req *req)
{
	enum MHD_Result res;
	if (files_user(req, &res) < 0)
		return res;
	struct upload *u = req->ctx;
	if (!u && !(u = up_new(req)))
		return MHD_NO;
	if (!u->failed && u->gz) {
		up_inflate(u, NULL, 0); /* at most one match's bytes are still in the decoder */
		if (!u->failed && inflate_finish(u->gz) < 0)
			up_fail(u, 400, "bad gzip body (Content-Encoding: gzip): %s", u->gz->err);
	}
	if (!u->failed && !u->octet && multipart_finish(&u->mp) < 0)
		up_fail(u, 400, "malformed multipart body: %s", u->mp.err);
	if (!u->failed && !u->n)
		up_fail(u, 400, "no file in the request");
	if (u->failed) {
		up_discard(u);
		return files_err(req, u->status, "%s", u->msg);
	}
	return up_commit(req, u);
}
