/* POST /files/upload (api/files.c is the prologue of its commit): a multipart body parsed
 * chunk by chunk (files/multipart.h) into temporary files beside the targets, as the task
 * user; once the body is complete each is given its name (an atomic rename) and owner. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/filesroute.h"
#include "audit/chain.h"
#include "core/cleanup.h"
#include "core/runner.h"
#include "core/sha256.h"
#include "core/buf.h"
#include "core/fileio.h"
#include "files/multipart.h"
#include "files/ops.h"
#include "files/path.h"

#define UPLOAD_MAX_FILES 64         /* metadata+file pairs in one upload */
#define UPLOAD_META_MAX (64 * 1024) /* bytes of one metadata part */

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
	fapi_fs_error(&u->err, err, op, path, &u->id, true);
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
	if (fapi_perm_parse(&u->r->cfg, j, &it->perm, &forbidden, msg, sizeof(msg)) < 0)
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
	fapi_dirname_of(it->path, dir);
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
		int rc = write_all(it->tmp.fd, data, len);
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
		files_task_ident(req->r, &u->id);
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
 * content hash (docs/design/audit.md). */
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
			fapi_dirname_of(it->path, dir);
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
	return fapi_answer_empty(c);
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
