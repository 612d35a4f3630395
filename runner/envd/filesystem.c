/* filesystem.Filesystem's unary RPCs (envd's filesystem/filesystem.proto: Stat, MakeDir, Move,
 * ListDir, Remove) on the files layer, each as the task user inside the files API's prologue
 * (api/filesroute.h: files_route), within its writable roots; EntryInfo as envd fills it
 * (docs/design/envd.md#files-filesystemfilesystem-and-files). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/filesroute.h"
#include "core/cleanup.h"
#include "core/runner.h"
#include "envd/internal.h"
#include "files/ops.h"
#include "files/path.h"
#include "files/walk.h"

#define LIST_MAX 100000 /* entries of one ListDir */

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

/* EntryInfo of path (its name, a stat of it not following a link; dirfd/name to read the
 * link's target). */
static json_t *entry_info(const char *path, const struct stat *st, int dirfd, const char *name)
{
	char perm[11], ts[64], num[24];
	perm_string(st->st_mode, perm);
	struct tm tm;
	time_t sec = st->st_mtim.tv_sec;
	gmtime_r(&sec, &tm);
	size_t k = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + k, sizeof(ts) - k, ".%09ldZ", (long)st->st_mtim.tv_nsec);
	struct passwd *pw = getpwuid(st->st_uid);
	struct group *gr = getgrgid(st->st_gid);
	snprintf(num, sizeof(num), "%lld", (long long)st->st_size);
	const char *slash = strrchr(path, '/');
	json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:i,s:s,s:s,s:s,s:s}", "name",
			      slash && slash[1] ? slash + 1 : path, "type", type_of(st->st_mode),
			      "path", path, "size", num, "mode", (int)(st->st_mode & 07777),
			      "permissions", perm, "owner", pw ? pw->pw_name : "", "group",
			      gr ? gr->gr_name : "", "modifiedTime", ts);
	if (o && S_ISLNK(st->st_mode)) {
		char target[PATH_MAX];
		ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);
		if (n >= 0) {
			target[n] = 0;
			json_object_set_new(o, "symlinkTarget", json_string(target));
		}
	}
	return o;
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
	c->res = envd_rpc_ok(c->req, json_pack("{s:o}", "entry", entry_info(path, &st, dfd, base)));
	return 0;
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
	c->res = envd_rpc_ok(c->req, json_pack("{s:o}", "entry", entry_info(path, &st, fd, ".")));
	return 0;
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
	c->res = envd_rpc_ok(c->req, json_pack("{s:o}", "entry", entry_info(dst, &st, dfd, dbase)));
	return 0;
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
	rc = S_ISDIR(st.st_mode) ? files_rmrf(dfd, base) : unlinkat(dfd, base, 0) < 0 ? -errno : 0;
	if (rc < 0 && rc != -ENOENT)
		return fs_fail(c, rc, "error removing file or directory", path);
	c->res = envd_rpc_ok(c->req, NULL);
	return 0;
}

/* The entries of dir (fd) down to depth levels, in readdir order, directories before their
 * contents; a link is listed, never followed. */
static int list_walk(int fd, const char *dir, unsigned depth, json_t *out)
{
	int dup_fd = dup(fd);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (!d) {
		if (dup_fd >= 0)
			close(dup_fd);
		return -errno;
	}
	struct dirent *e;
	int rc = 0;
	while (rc == 0 && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (json_array_size(out) >= LIST_MAX)
			break;
		char path[PATH_MAX];
		struct stat st;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", strcmp(dir, "/") ? dir : "",
				     e->d_name) >= sizeof(path) ||
		    fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		json_array_append_new(out, entry_info(path, &st, fd, e->d_name));
		if (depth > 1 && S_ISDIR(st.st_mode)) {
			int sub = openat(fd, e->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				list_walk(sub, path, depth - 1, out);
				close(sub);
			}
		}
	}
	closedir(d);
	return rc;
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
	if (depth > 64)
		depth = 64;
	cleanup_close int fd = files_open(AT_FDCWD, path, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0)
		return fs_fail(c, fd == -ENOTDIR ? -EINVAL : fd, "error reading directory", path);
	json_t *arr = json_array();
	int rc = list_walk(fd, path, depth, arr);
	if (rc < 0) {
		json_decref(arr);
		return fs_fail(c, rc, "error reading directory", path);
	}
	c->res = envd_rpc_ok(c->req, json_pack("{s:o}", "entries", arr));
	return 0;
}

static const struct {
	const char *method;
	files_op op;
} fs_ops[] = {
	{"Stat", op_stat},        {"MakeDir", op_make_dir}, {"Move", op_move},
	{"ListDir", op_list_dir}, {"Remove", op_remove},
};

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
	return files_route(req, IN_OBJECT, fs_ops[i].op);
}
