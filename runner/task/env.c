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

struct envb {
	char **v;
	size_t n, cap;
};

static int envb_set(struct envb *e, const char *name, const char *value)
{
	size_t nl = strlen(name);
	char *s;
	if (asprintf(&s, "%s=%s", name, value) < 0)
		return -1;
	for (size_t i = 0; i < e->n; i++) {
		if (!strncmp(e->v[i], name, nl) && e->v[i][nl] == '=') {
			free(e->v[i]);
			e->v[i] = s;
			return 0;
		}
	}
	if (e->n + 2 > e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 32;
		char **nv = realloc(e->v, cap * sizeof(*nv));
		if (!nv) {
			free(s);
			return -1;
		}
		e->v = nv;
		e->cap = cap;
	}
	e->v[e->n++] = s;
	e->v[e->n] = NULL;
	return 0;
}

char **env_build(uid_t uid, const char *cwd, json_t *req_env, struct error *err)
{
	if (env_validate(req_env, err) < 0)
		return NULL;
	struct envb e = {0};
	int rc = 0;
	for (const char *const *p = passthrough; *p; p++) {
		const char *v = getenv(*p);
		if (v)
			rc |= envb_set(&e, *p, v);
	}
	if (!getenv("PATH"))
		rc |= envb_set(&e, "PATH", DEFAULT_PATH);
	struct passwd *pw = getpwuid(uid);
	char uidbuf[16];
	snprintf(uidbuf, sizeof(uidbuf), "%u", (unsigned)uid);
	rc |= envb_set(&e, "HOME", pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : "/tmp");
	rc |= envb_set(&e, "USER", pw ? pw->pw_name : uidbuf);
	rc |= envb_set(&e, "LOGNAME", pw ? pw->pw_name : uidbuf);
	rc |= envb_set(&e, "PWD", cwd);
	if (req_env && json_is_object(req_env)) {
		const char *k;
		json_t *v;
		json_object_foreach(req_env, k, v)
			rc |= envb_set(&e, k, json_string_value(v));
	}
	if (rc || !e.v) {
		env_free(e.v);
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot build the environment");
		return NULL;
	}
	return e.v;
}

/* The file as OpenSandbox's bootstrap leaves it (root's, or the task
 * user's so that the SDK's set_env can append): a regular file with one
 * link, opened without following a symlink and without blocking (a FIFO
 * must not stall the loop). Anything else is refused: the runner reads it
 * as root, and what it reads goes into a task's environment. */
static json_t *envfile_load(const char *path, uid_t task_uid)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		if (errno != ENOENT)
			log_errno("EXECD_ENVS: cannot open the file", errno, path);
		return NULL;
	}
	struct stat st;
	json_t *out = NULL;
	char *data = NULL;
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
	} else if ((data = malloc((size_t)st.st_size + 1))) {
		size_t got = 0;
		ssize_t n = 1;
		while (got < (size_t)st.st_size &&
		       ((n = read(fd, data + got, (size_t)st.st_size - got)) > 0 ||
			(n < 0 && errno == EINTR)))
			got += n > 0 ? (size_t)n : 0;
		if (n < 0)
			log_errno("EXECD_ENVS: read failed", errno, path);
		struct envfile_result res;
		out = json_object();
		if (n >= 0 && out && envfile_parse(data, got, out, &res) == 0) {
			if (res.errors)
				log_warn("EXECD_ENVS: lines skipped", "{s:s,s:i,s:i,s:s}", "file",
					 path, "skipped", (int)res.errors, "first_line",
					 (int)res.first_error_line, "error", res.first_error);
		} else {
			json_decref(out);
			out = NULL;
		}
	}
	free(data);
	close(fd);
	return out;
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
	     json_object_set_new(env, "EXECD_ENVS", json_string(path)) < 0) ||
	    (req_env && json_is_object(req_env) && json_object_update(env, req_env) < 0)) {
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
