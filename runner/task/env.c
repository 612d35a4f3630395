#include "task/env.h"

#include <errno.h>

#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "task/envfile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define ENVFILE_MAX (1u << 20)

/* Not secrets, and tasks need them: locale, terminal, and the CA bundle an
 * egress MITM proxy installs (OpenSandbox's bootstrap exports these). */
static const char *const passthrough[] = {"PATH",
					  "LANG",
					  "LANGUAGE",
					  "LC_ALL",
					  "LC_CTYPE",
					  "TZ",
					  "TERM",
					  "SSL_CERT_FILE",
					  "SSL_CERT_DIR",
					  "CURL_CA_BUNDLE",
					  "REQUESTS_CA_BUNDLE",
					  "NODE_EXTRA_CA_CERTS",
					  "GIT_SSL_CAINFO",
					  NULL};
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static bool valid_name(const char *s)
{
	if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
		return false;
	for (s++; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
		      (*s >= '0' && *s <= '9') || *s == '_'))
			return false;
	return true;
}

int env_validate(json_t *req_env, struct error *err)
{
	if (!req_env || json_is_null(req_env))
		return 0;
	if (!json_is_object(req_env))
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "env must be an object of strings");
	const char *k;
	json_t *v;
	json_object_foreach(req_env, k, v) {
		if (!valid_name(k) || strlen(k) > 256)
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "env name '%.64s' is not a valid variable name", k);
		if (!json_is_string(v))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "env value of '%s' must be a string", k);
		if (strlen(json_string_value(v)) != json_string_length(v))
			return error_set(err, 0, "INVALID_REQUEST_BODY",
					 "env value of '%s' contains a NUL byte", k);
	}
	return 0;
}

char **env_build(uid_t uid, const char *cwd, json_t *req_env, struct error *err)
{
	if (env_validate(req_env, err) < 0)
		return NULL;
	json_t *base = json_object();
	int rc = base ? 0 : -1;
	for (const char *const *p = passthrough; *p && base; p++) {
		const char *v = getenv(*p);
		if (v)
			rc |= json_object_set_new(base, *p, json_string_nocheck(v));
	}
	if (base && !getenv("PATH"))
		rc |= json_object_set_new(base, "PATH", json_string_nocheck(DEFAULT_PATH));
	struct passwd *pw = getpwuid(uid);
	char uidbuf[16];
	snprintf(uidbuf, sizeof(uidbuf), "%u", (unsigned)uid);
	if (base) {
		rc |= json_object_set_new(base, "HOME",
					  json_string_nocheck(pw && pw->pw_dir && *pw->pw_dir
								      ? pw->pw_dir
								      : "/tmp"));
		rc |= json_object_set_new(base, "USER",
					  json_string_nocheck(pw ? pw->pw_name : uidbuf));
		rc |= json_object_set_new(base, "LOGNAME",
					  json_string_nocheck(pw ? pw->pw_name : uidbuf));
		rc |= json_object_set_new(base, "PWD", json_string_nocheck(cwd));
		/* As login(1) and sshd set it; it also spares every bash the task
		 * starts a passwd lookup of its own (bash fills an unset SHELL
		 * from passwd: two nscd tries, nsswitch.conf, /etc/passwd). */
		rc |= json_object_set_new(base, "SHELL",
					  json_string_nocheck(pw && pw->pw_shell && *pw->pw_shell
								      ? pw->pw_shell
								      : "/bin/sh"));
	}
	/* A hash merge: linear in the variables however many a request or
	 * the EXECD_ENVS file brings (a list searched for each name made
	 * 110,000 of them cost 12 s of the loop per task). */
	json_t *layers[2] = {base, req_env};
	char **envp = rc ? NULL : envfile_envp(layers, 2);
	json_decref(base);
	if (!envp)
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot build the environment");
	return envp;
}

/* The last file read, parsed. A task start reads it again only when the
 * descriptor's inode, size, mtime or ctime differ (one fstat): a task
 * that wrote 1 MiB once must not make every later start parse it. One
 * loop thread: no lock. */
static struct {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtim, ctim;
	char *path;
	json_t *vars; /* NULL: nothing cached */
} cache;

static bool cache_holds(const char *path, const struct stat *st)
{
	return cache.vars && cache.path && !strcmp(cache.path, path) && cache.dev == st->st_dev &&
	       cache.ino == st->st_ino && cache.size == st->st_size &&
	       cache.mtim.tv_sec == st->st_mtim.tv_sec &&
	       cache.mtim.tv_nsec == st->st_mtim.tv_nsec &&
	       cache.ctim.tv_sec == st->st_ctim.tv_sec && cache.ctim.tv_nsec == st->st_ctim.tv_nsec;
}

static void cache_store(const char *path, const struct stat *st, json_t *vars)
{
	json_decref(cache.vars);
	cache.vars = NULL;
	if (!cache.path || strcmp(cache.path, path)) {
		free(cache.path);
		if (!(cache.path = strdup(path)))
			return;
	}
	cache.dev = st->st_dev;
	cache.ino = st->st_ino;
	cache.size = st->st_size;
	cache.mtim = st->st_mtim;
	cache.ctim = st->st_ctim;
	cache.vars = json_incref(vars);
}

static json_t *envfile_parse_fd(int fd, const char *path, const struct stat *st)
{
	char *data = malloc((size_t)st->st_size + 1);
	if (!data) {
		log_errno("EXECD_ENVS: not read", ENOMEM, path);
		return NULL;
	}
	size_t got = 0;
	ssize_t n = 1;
	while (got < (size_t)st->st_size &&
	       ((n = read(fd, data + got, (size_t)st->st_size - got)) > 0 ||
		(n < 0 && errno == EINTR)))
		got += n > 0 ? (size_t)n : 0;
	json_t *out = NULL;
	if (n < 0) {
		log_errno("EXECD_ENVS: read failed", errno, path);
	} else {
		struct envfile_result res;
		out = json_object();
		if (out && envfile_parse(data, got, out, &res) == 0) {
			if (res.errors)
				log_warn("EXECD_ENVS: lines skipped", "{s:s,s:i,s:i,s:s}", "file",
					 path, "skipped", (int)res.errors, "first_line",
					 (int)res.first_error_line, "error", res.first_error);
			if (res.refused)
				log_warn("EXECD_ENVS: variables refused (they change how programs "
					 "load)",
					 "{s:s,s:i,s:s}", "file", path, "refused", (int)res.refused,
					 "first", res.first_refused);
			if (res.over || res.too_long)
				log_warn("EXECD_ENVS: variables skipped (over the bounds)",
					 "{s:s,s:i,s:i,s:i,s:i,s:i}", "file", path, "taken",
					 (int)json_object_size(out), "over_count", (int)res.over,
					 "max_vars", ENVFILE_MAX_VARS, "too_long",
					 (int)res.too_long, "max_bytes", (int)ENVFILE_MAX_ENTRY);
		} else {
			log_errno("EXECD_ENVS: not read", ENOMEM, path);
			json_decref(out);
			out = NULL;
		}
	}
	free(data);
	return out;
}

/* The file as OpenSandbox's bootstrap leaves it (root's, or the task
 * user's so that the SDK's set_env can append): a regular file with one
 * link, opened without following a symlink and without blocking (a FIFO
 * must not stall the loop). Anything else is refused: the runner reads it
 * as root, and what it reads goes into a task's environment. A new
 * object (a copy of the cached one), or NULL. */
static json_t *envfile_load(const char *path, uid_t task_uid)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		if (errno != ENOENT)
			log_errno("EXECD_ENVS: cannot open the file", errno, path);
		return NULL;
	}
	struct stat st;
	json_t *vars = NULL;
	if (fstat(fd, &st) < 0) {
		log_errno("EXECD_ENVS: fstat failed", errno, path);
	} else if (!S_ISREG(st.st_mode) || st.st_nlink != 1 ||
		   (st.st_uid != 0 && st.st_uid != task_uid)) {
		log_warn("EXECD_ENVS: not read (not a regular file with one link, owned by root "
			 "or the task user)",
			 "{s:s,s:i,s:i}", "file", path, "uid", (int)st.st_uid, "links",
			 (int)st.st_nlink);
	} else if (st.st_size > ENVFILE_MAX) {
		log_warn("EXECD_ENVS: not read (over 1 MiB)", "{s:s,s:I}", "file", path,
			 (json_int_t)st.st_size);
	} else if (cache_holds(path, &st)) {
		vars = json_copy(cache.vars);
	} else if ((vars = envfile_parse_fd(fd, path, &st))) {
		cache_store(path, &st, vars);
		json_t *own = json_copy(vars);
		json_decref(vars);
		vars = own;
	}
	close(fd);
	return vars;
}

json_t *env_with_file(json_t *req_env, const char *path, uid_t task_uid)
{
	if (!path || !*path)
		return req_env ? json_incref(req_env) : NULL;
	if (req_env && !json_is_object(req_env) && !json_is_null(req_env))
		return json_incref(req_env); /* refused by env_build with its own message */
	json_t *env = envfile_load(path, task_uid);
	if (!env)
		env = json_object();
	/* Where the SDK's set_env appends (a default: the file or a request may
	 * say otherwise), then the request's variables over the file's. */
	if (!env ||
	    (!json_object_get(env, "EXECD_ENVS") &&
	     json_object_set_new(env, "EXECD_ENVS", json_string_nocheck(path)) < 0) ||
	    (req_env && json_is_object(req_env) && json_object_update(env, req_env) < 0)) {
		json_decref(env);
		return req_env ? json_incref(req_env) : NULL;
	}
	return env;
}

json_t *env_with_path(json_t *req_env, const char *path)
{
	if (!path || !*path || (req_env && !json_is_object(req_env) && !json_is_null(req_env)))
		return req_env ? json_incref(req_env) : NULL;
	json_t *env = json_pack("{s:s}", "EXECD_ENVS", path);
	if (!env || (req_env && json_is_object(req_env) && json_object_update(env, req_env) < 0)) {
		json_decref(env);
		return req_env ? json_incref(req_env) : NULL;
	}
	return env;
}

void env_free(char **env)
{
	if (!env)
		return;
	for (char **p = env; *p; p++)
		free(*p);
	free(env);
}
