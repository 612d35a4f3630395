/* The files API's small operations (api/files.c is their prologue): GET /files/info,
 * DELETE /files and /directories, POST /files/mv, POST /files/permissions and POST
 * /directories. All but a directory's removal are done at once; that one runs in slices. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/filesroute.h"
#include "core/jsonesc.h"
#include "core/log.h"
#include "core/cleanup.h"
#include "core/runner.h"
#include "files/info.h"
#include "files/ops.h"
#include "files/path.h"
#include "files/walk.h"

/* A JSON string field holding a path: checked and cleaned. */
static int json_path(struct error *e, json_t *v, const char *field, char out[PATH_MAX])
{
	if (!json_is_string(v))
		return error_set(e, 0, "INVALID_REQUEST_BODY", "'%s' must be a non-empty path",
				 field);
	return fapi_str_path(e, json_string_value(v), json_string_length(v), field, out);
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
			return fapi_fs_error(&c->err, rc, "stat", c->paths[i], &c->id, false);
		if (i)
			buf_append_str(&out, ",");
		/* Keyed by the path as asked; FileInfo.path is the cleaned one. */
		buf_append_json_str(&out, c->raw[i], c->len[i]);
		buf_append_str(&out, ":");
		files_info_json(&out, c->paths[i], &st, &names);
	}
	buf_append_str(&out, "}");
	return fapi_answer_json(c, &out);
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
		return fapi_fs_error(e, rc, "delete", path, id, false);
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
			return fapi_fs_error(&c->err, -errno, "delete", c->paths[i], &c->id, false);
	}
	return fapi_answer_empty(c);
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

static int delete_step(struct files_userjob *j, uint64_t deadline_ms)
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
					return fapi_fs_error(&j->err, rc, "delete", path, &j->id,
							     false);
				dj->removing = rc > 0;
			}
		}
		if (dj->removing) {
			rc = files_rmrf_step(&dj->rm, deadline_ms);
			if (rc < 0)
				return fapi_fs_error(&j->err, rc, "delete", path, &j->id, false);
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
	return fapi_answer_empty(c);
}

static void delete_release(struct files_userjob *j)
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
		return fapi_oom(&c->err);
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
	fapi_dirname_of(dst, ddir);
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
		return fapi_oom(&c->err);
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
			return fapi_fs_error(&c->err, rc, op,
					     rc == -ENOENT && strstr(op, "destination") ? dst[i]
											: src[i],
					     &c->id, false);
	}
	return fapi_answer_empty(c);
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
		return fapi_oom(&c->err);
	const char *key;
	json_t *v;
	size_t i = 0;
	json_object_foreach(c->body, key, v) {
		bool forbidden;
		char msg[256];
		if (fapi_str_path(&c->err, key, strlen(key), "path", pr->paths[i]) < 0)
			return -1;
		if (fapi_perm_parse(&c->req->r->cfg, v, &pr->perms[i], &forbidden, msg,
				    sizeof(msg)) < 0)
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
			return fapi_fs_error(&c->err, dirfd, "chmod", path, &c->id, false);
	} else if ((dirfd = files_open(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0)) < 0) {
		return fapi_fs_error(&c->err, dirfd, "chmod", path, &c->id, false);
	}
	cleanup_close int fd = files_open_last(dirfd, base, O_PATH);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return fapi_fs_error(&c->err, fd < 0 ? fd : -errno, "chmod", path, &c->id, false);
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
		return fapi_fs_error(&c->err, rc, "chmod", path, &c->id, false);
	/* Giving away one of several names of a file would give away the
	 * others too, wherever they are. */
	if (p->as_root && S_ISREG(st.st_mode) && st.st_nlink > 1)
		return error_set(&c->err, 0, "PERMISSION_DENIED",
				 "chown %.1024s: the file has %lu hard links; refusing to give it "
				 "away",
				 path, (unsigned long)st.st_nlink);
	/* Mode first, then owner (after a chown the user may not own it). */
	if (p->has_mode && (rc = files_chmod_fd(fd, dirfd, base, p->mode)) < 0)
		return fapi_fs_error(&c->err, rc, "chmod", path, &c->id, false);
	if ((rc = files_chown_fd(&c->id, fd, p->uid, p->gid, p->as_root)) < 0)
		return fapi_fs_error(&c->err, rc, "chown", path, &c->id, false);
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
	return fapi_answer_empty(c);
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
			return fapi_fs_error(&c->err, rc, "mkdir", pr.paths[i], &c->id, false);
	}
	return fapi_answer_empty(c);
}

enum MHD_Result api_dirs_create(struct http_req *req)
{
	return files_route(req, IN_OBJECT, op_mkdirs);
}
