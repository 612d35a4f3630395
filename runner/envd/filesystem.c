/* filesystem.Filesystem's unary RPCs (envd's filesystem/filesystem.proto: Stat, MakeDir, Move,
 * ListDir, Remove) on the files layer, each as the task user inside the files API's prologue
 * (api/filesroute.h: files_route), within its writable roots; EntryInfo as envd fills it
 * (docs/design/envd.md#files-filesystemfilesystem-and-files). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/filesroute.h"
#include "core/cleanup.h"
#include "core/jsonesc.h"
#include "core/runner.h"
#include "envd/internal.h"
#include "files/ops.h"
#include "files/path.h"
#include "files/walk.h"

/* Go's FileMode.String() of a stat: "drwxr-xr-x", "-rw-r--r--", "Lrwxrwxrwx". */
static void perm_string(mode_t m, char out[11])
{
	out[0] = S_ISDIR(m)    ? 'd'
		 : S_ISLNK(m)  ? 'L'
		 : S_ISFIFO(m) ? 'p'
		 : S_ISSOCK(m) ? 'S'
		 : S_ISCHR(m)  ? 'c'
		 : S_ISBLK(m)  ? 'D'
			       : '-';
	static const char rwx[] = "rwxrwxrwx";
	for (int i = 0; i < 9; i++)
		out[1 + i] = m & (1u << (8 - i)) ? rwx[i] : '-';
	out[10] = 0;
}

static const char *type_of(mode_t m)
{
	return S_ISDIR(m)   ? "FILE_TYPE_DIRECTORY"
	       : S_ISLNK(m) ? "FILE_TYPE_SYMLINK"
	       : S_ISREG(m) ? "FILE_TYPE_FILE"
			    : "FILE_TYPE_UNSPECIFIED";
}

/* EntryInfo of path as JSON text into out (its name, a stat of it not following a link;
 * dirfd/name to read the link's target). Text, not jansson objects: a listing of 10,000
 * entries is 2.5 MB this way and was 19 MB as objects, and listings run side by side. Names
 * that are not UTF-8 are written as Go's encoder writes them (U+FFFD). 0 or -ENOMEM. */
static int entry_json(struct buf *out, const char *path, const struct stat *st, int dirfd,
		      const char *name, struct files_names *nc)
{
	char perm[11], ts[64];
	perm_string(st->st_mode, perm);
	struct tm tm;
	time_t sec = st->st_mtim.tv_sec;
	gmtime_r(&sec, &tm);
	size_t k = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + k, sizeof(ts) - k, ".%09ldZ", (long)st->st_mtim.tv_nsec);
	const char *owner = files_id_name(nc, st->st_uid, false);
	const char *group = files_id_name(nc, st->st_gid, true);
	const char *slash = strrchr(path, '/');
	const char *base = slash && slash[1] ? slash + 1 : path;
	int rc = buf_append_lit(out, "{\"name\":");
	rc |= buf_append_json_str(out, base, strlen(base));
	rc |= buf_appendf(out, ",\"type\":\"%s\",\"path\":", type_of(st->st_mode));
	rc |= buf_append_json_str(out, path, strlen(path));
	rc |= buf_appendf(out, ",\"size\":\"%lld\",\"mode\":%d,\"permissions\":\"%s\",\"owner\":",
			  (long long)st->st_size, (int)(st->st_mode & 07777), perm);
	rc |= buf_append_json_str(out, owner ? owner : "", owner ? strlen(owner) : 0);
	rc |= buf_append_lit(out, ",\"group\":");
	rc |= buf_append_json_str(out, group ? group : "", group ? strlen(group) : 0);
	rc |= buf_appendf(out, ",\"modifiedTime\":\"%s\"", ts);
	if (S_ISLNK(st->st_mode)) {
		char target[PATH_MAX];
		ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);
		if (n >= 0) {
			rc |= buf_append_lit(out, ",\"symlinkTarget\":");
			rc |= buf_append_json_str(out, target, (size_t)n);
		}
	}
	rc |= buf_append_lit(out, "}");
	return rc ? -ENOMEM : 0;
}

/* The request's `path` as a clean absolute path; on failure answers invalid_argument. */
static int rpc_path(struct fcall *c, json_t *msg, const char *camel, const char *proto,
		    char out[PATH_MAX])
{
	json_t *p = connect_field(msg, camel, proto);
	char why[512];
	if (!json_is_string(p)) {
		c->res = envd_rpc_fail(c->req, false, CC_INVALID_ARGUMENT,
				       "field '%s' must be a path", camel);
		return -1;
	}
	if (envd_path(c->req->r, json_string_value(p), out, why, sizeof(why)) < 0) {
		c->res = envd_rpc_fail(c->req, false, CC_INVALID_ARGUMENT, "%s", why);
		return -1;
	}
	return 0;
}

/* A files-layer error as envd's Connect code. */
static int fs_fail(struct fcall *c, int rc, const char *op, const char *path)
{
	enum connect_code code =
		rc == -ENOENT || rc == -ENOTDIR ? CC_NOT_FOUND
		: rc == -EEXIST                 ? CC_ALREADY_EXISTS
		: rc == -EACCES || rc == -EPERM || rc == -FILES_EOUTSIDE || rc == -EROFS
			? CC_PERMISSION_DENIED
		: rc == -EINVAL || rc == -EISDIR || rc == -EBUSY ? CC_INVALID_ARGUMENT
								 : CC_INTERNAL;
	const char *why = rc == -FILES_EOUTSIDE ? "outside the task user's writable roots"
			  : rc == -ENOENT       ? "no such file or directory"
						: strerror(-rc);
	c->res = envd_rpc_fail(c->req, false, code, "%s '%.1024s': %s", op, path, why);
	return 0;
}

/* A unary answer {"entry": EntryInfo}. */
static int entry_answer(struct fcall *c, const char *path, const struct stat *st, int dirfd,
			const char *name)
{
	cleanup_buf struct buf b = {0};
	struct files_names nc = {0};
	if (buf_append_lit(&b, "{\"entry\":") < 0 ||
	    entry_json(&b, path, st, dirfd, name, &nc) < 0 || buf_append_lit(&b, "}") < 0)
		return fs_fail(c, -ENOMEM, "error describing", path);
	c->res = http_text(c->req, 200, "application/json", b.data, b.len, NULL, NULL);
	return 0;
}

static int lstat_path(const char *path, struct stat *st, int *dirfd, const char **base)
{
	if (!strcmp(path, "/")) {
		*dirfd = files_open(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0);
		*base = ".";
	} else {
		*dirfd = files_open_parent(path, base);
	}
	if (*dirfd < 0)
		return *dirfd;
	return fstatat(*dirfd, *base, st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

/* The message of a unary filesystem RPC, the user checked; NULL once answered. */
static json_t *fs_msg(struct http_req *req)
{
	json_t *msg = envd_rpc_msg(req, false);
	if (!msg)
		return NULL;
	enum connect_code code;
	char why[512];
	if (envd_user_check(req, NULL, &code, why, sizeof(why)) < 0) {
		envd_rpc_fail(req, false, code, "%s", why);
		json_decref(msg);
		return NULL;
	}
	return msg;
}

static int op_stat(struct fcall *c)
{
	char path[PATH_MAX];
	if (rpc_path(c, c->body, "path", NULL, path) < 0)
		return 0;
	struct stat st;
	const char *base;
	cleanup_close int dfd = -1;
	int rc = lstat_path(path, &st, &dfd, &base);
	if (rc < 0)
		return fs_fail(c, rc, "error getting file info", path);
	return entry_answer(c, path, &st, dfd, base);
}

static int op_make_dir(struct fcall *c)
{
	char path[PATH_MAX];
	if (rpc_path(c, c->body, "path", NULL, path) < 0)
		return 0;
	struct stat st;
	const char *base;
	cleanup_close int dfd = -1;
	int rc = lstat_path(path, &st, &dfd, &base);
	if (rc == 0)
		return S_ISDIR(st.st_mode)
			       ? fs_fail(c, -EEXIST, "directory already exists", path)
			       : fs_fail(c, -EINVAL, "path already exists as a file", path);
	bool created;
	struct files_made made = {.fd = -1};
	cleanup_close int fd = files_mkdirs(&c->id, path, 0755, &created, &made);
	files_made_free(&made);
	if (fd < 0)
		return fs_fail(c, fd, "error creating directory", path);
	if (fstat(fd, &st) < 0)
		return fs_fail(c, -errno, "error creating directory", path);
	return entry_answer(c, path, &st, fd, ".");
}

static int op_move(struct fcall *c)
{
	char src[PATH_MAX], dst[PATH_MAX], ddir[PATH_MAX];
	if (rpc_path(c, c->body, "source", NULL, src) < 0 ||
	    rpc_path(c, c->body, "destination", NULL, dst) < 0)
		return 0;
	const char *sbase;
	struct stat st;
	cleanup_close int sfd = -1;
	int rc = lstat_path(src, &st, &sfd, &sbase);
	if (rc < 0)
		return fs_fail(c, rc, "error moving: source", src);
	if ((rc = files_check_writable(&c->id, sfd)) < 0 || !strcmp(dst, "/"))
		return fs_fail(c, rc < 0 ? rc : -EINVAL, "error moving", src);
	fapi_dirname_of(dst, ddir);
	bool created;
	struct files_made made = {.fd = -1};
	cleanup_close int dfd = files_mkdirs(&c->id, ddir, 0755, &created, &made);
	files_made_free(&made);
	if (dfd < 0)
		return fs_fail(c, dfd, "error moving: destination directory", ddir);
	if ((rc = files_check_writable(&c->id, dfd)) < 0)
		return fs_fail(c, rc, "error moving", dst);
	const char *dbase = strrchr(dst, '/') + 1;
	/* envd's os.Rename replaces a file at the destination. */
	if (renameat(sfd, sbase, dfd, dbase) < 0)
		return fs_fail(c, -errno, "error moving", src);
	if (fstatat(dfd, dbase, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return fs_fail(c, -errno, "error moving", dst);
	return entry_answer(c, dst, &st, dfd, dbase);
}

/* Remove: rm -rf in slices as the task user (files/walk.h), so a large tree never stalls the
 * loop; the path's parent stays open (the walk's base) until the job ends. */
struct remove_job {
	struct fjob j;
	struct files_rmrf rm;
	int dirfd;
	int rc; /* the removal's failure, answered as a Connect error */
	char path[PATH_MAX];
};

static int remove_step(struct files_userjob *uj, uint64_t deadline_ms)
{
	struct remove_job *rj = (struct remove_job *)uj;
	int rc = files_rmrf_step(&rj->rm, deadline_ms);
	if (rc < 0)
		rj->rc = rc; /* done: remove_answer says why */
	return rc < 0 ? 0 : rc;
}

static int remove_answer(struct fcall *c, struct fjob *j)
{
	struct remove_job *rj = (struct remove_job *)j;
	if (rj->rc < 0 && rj->rc != -ENOENT)
		return fs_fail(c, rj->rc, "error removing file or directory", rj->path);
	c->res = envd_rpc_ok(c->req, NULL);
	return 0;
}

static void remove_release(struct files_userjob *uj)
{
	struct remove_job *rj = (struct remove_job *)uj;
	files_rmrf_free(&rj->rm);
	if (rj->dirfd >= 0)
		close(rj->dirfd);
}

static int op_remove(struct fcall *c)
{
	char path[PATH_MAX];
	if (rpc_path(c, c->body, "path", NULL, path) < 0)
		return 0;
	if (!strcmp(path, "/"))
		return fs_fail(c, -EINVAL, "error removing", path);
	const char *base;
	struct stat st;
	cleanup_close int dfd = -1;
	int rc = lstat_path(path, &st, &dfd, &base);
	if (rc < 0)
		return fs_fail(c, rc, "error removing file or directory", path);
	if ((rc = files_check_writable(&c->id, dfd)) < 0)
		return fs_fail(c, rc, "error removing file or directory", path);
	/* What needs no walk (a file, a link, an empty directory) goes now. */
	struct files_rmrf rm;
	rc = files_rmrf_start(&rm, dfd, base);
	if (rc <= 0) {
		files_rmrf_free(&rm);
		if (rc < 0 && rc != -ENOENT)
			return fs_fail(c, rc, "error removing file or directory", path);
		c->res = envd_rpc_ok(c->req, NULL);
		return 0;
	}
	struct remove_job *rj =
		fjob_new(c, sizeof(*rj), remove_step, remove_answer, remove_release);
	if (!rj) {
		files_rmrf_free(&rm);
		return fs_fail(c, -ENOMEM, "error removing file or directory", path);
	}
	rj->rm = rm;
	rj->dirfd = dfd; /* the job's now: rm works relative to it */
	dfd = -1;
	snprintf(rj->path, sizeof(rj->path), "%s", path);
	return fjob_run(c, &rj->j);
}

/* ListDir: the files layer's walk (files/walk.h), in slices as the task user, so a large
 * tree never stalls the loop; its bounds are the execd listing's. Entries in lexical order,
 * a directory before its contents; a link is listed, never followed. */
struct list_job {
	struct fjob j;
	struct files_walk w;
	struct buf out; /* {"entries":[ and the entries so far */
	size_t n;
	int rc; /* the walk's failure, answered as a Connect error */
	char path[PATH_MAX];
};

static int list_take(void *arg, int dirfd, const char *name, const char *path,
		     const struct stat *st)
{
	struct list_job *lj = arg;
	if (lj->n >= FILES_MAX_RESULTS) {
		snprintf(lj->w.limit_msg, sizeof(lj->w.limit_msg), "more than %d entries",
			 FILES_MAX_RESULTS);
		return -FILES_ELIMIT;
	}
	if ((lj->n++ && buf_append_lit(&lj->out, ",") < 0) ||
	    entry_json(&lj->out, path, st, dirfd, name, &lj->w.names) < 0)
		return -ENOMEM;
	return 0;
}

static int list_step(struct files_userjob *uj, uint64_t deadline_ms)
{
	struct list_job *lj = (struct list_job *)uj;
	int rc = files_walk_step(&lj->w, deadline_ms);
	if (rc < 0)
		lj->rc = rc; /* done: list_answer says why */
	return rc < 0 ? 0 : rc;
}

static int list_answer(struct fcall *c, struct fjob *j)
{
	struct list_job *lj = (struct list_job *)j;
	if (lj->rc == -FILES_ELIMIT) {
		c->res = envd_rpc_fail(c->req, false, CC_RESOURCE_EXHAUSTED,
				       "listing '%.1024s': %s; narrow it (a smaller depth; limits: "
				       "%d entries, %d looked at, %d ms, %d levels)",
				       lj->path, lj->w.limit_msg, FILES_MAX_RESULTS,
				       FILES_MAX_VISITED, FILES_MAX_WALK_MS, FILES_MAX_DEPTH);
		return 0;
	}
	if (lj->rc < 0)
		return fs_fail(c, lj->rc, "error reading directory", lj->path);
	struct MHD_Response *resp =
		buf_append_lit(&lj->out, "]}") < 0
			? NULL
			: MHD_create_response_from_buffer(lj->out.len, lj->out.data,
							  MHD_RESPMEM_MUST_FREE);
	if (!resp)
		return fs_fail(c, -ENOMEM, "error reading directory", lj->path);
	lj->out = (struct buf){0}; /* the response's now: not copied */
	MHD_add_response_header(resp, "Content-Type", "application/json");
	c->res = http_queue(c->req, 200, resp);
	return 0;
}

static void list_release(struct files_userjob *uj)
{
	struct list_job *lj = (struct list_job *)uj;
	files_walk_free(&lj->w);
	buf_free(&lj->out);
}

static int op_list_dir(struct fcall *c)
{
	char path[PATH_MAX];
	if (rpc_path(c, c->body, "path", NULL, path) < 0)
		return 0;
	uint32_t depth = 1;
	if (connect_u32(c->body, "depth", NULL, &depth) < 0)
		return fs_fail(c, -EINVAL, "depth", path);
	if (depth == 0)
		depth = 1;
	if (depth > FILES_MAX_DEPTH)
		depth = FILES_MAX_DEPTH;
	int fd = files_open(AT_FDCWD, path, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0)
		return fs_fail(c, fd == -ENOTDIR ? -EINVAL : fd, "error reading directory", path);
	struct list_job *lj = fjob_new(c, sizeof(*lj), list_step, list_answer, list_release);
	if (!lj || buf_append_lit(&lj->out, "{\"entries\":[") < 0) {
		close(fd);
		return fs_fail(c, -ENOMEM, "error reading directory", path);
	}
	snprintf(lj->path, sizeof(lj->path), "%s", path);
	lj->w.max_depth = depth;
	lj->w.take = list_take;
	lj->w.take_arg = lj;
	int rc = files_walk_start(&lj->w, fd, path);
	if (rc < 0)
		return fs_fail(c, rc, "error reading directory", path);
	return fjob_run(c, &lj->j);
}

static const struct {
	const char *method;
	files_op op;
} fs_ops[] = {
	{"Stat", op_stat},        {"MakeDir", op_make_dir}, {"Move", op_move},
	{"ListDir", op_list_dir}, {"Remove", op_remove},
};

static enum MHD_Result envd_files_fail(struct http_req *req, const struct error *e)
{
	return envd_rpc_error(req, false, e);
}

/* Stat, MakeDir, Move, ListDir, Remove share one prologue (the message, the user); the op,
 * chosen by the route's method name, then runs as the task user in the files API's. */
enum MHD_Result envd_fs_unary(struct http_req *req)
{
	const char *m = strrchr(req->route->pattern, '/') + 1;
	size_t i = 0, n = sizeof(fs_ops) / sizeof(fs_ops[0]);
	while (i < n && strcmp(m, fs_ops[i].method))
		i++;
	if (i == n)
		return envd_rpc_fail(req, false, CC_UNIMPLEMENTED, "no method %.64s", m);
	json_t *msg = fs_msg(req);
	if (!msg)
		return MHD_YES;
	/* files_route reads the body itself (IN_OBJECT): the envelope-free JSON we checked. */
	json_decref(msg);
	return files_route_as(req, IN_OBJECT, fs_ops[i].op, envd_files_fail);
}
