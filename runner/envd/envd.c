/* What the envd face's parts share: the Connect answers, the user a request asks for, paths
 * relative to envd's workdir (docs/design/envd.md#the-connect-protocol-as-the-sdk-speaks-it,
 * design/envd.md#users-and-the-token). The routes are in routes.c. */
#include "envd/envd.h"

#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/runner.h"
#include "envd/internal.h"
#include "files/path.h"

struct envd_state *envd_state(struct runner *r)
{
	return r->envd;
}

/* ---- Connect answers ---- */

static const char *ctype_of(struct http_req *req)
{
	const char *ct = http_header(req, "Content-Type");
	return ct ? ct : "";
}

static bool ctype_is(const char *ct, const char *want)
{
	size_t n = strlen(want);
	return !strncasecmp(ct, want, n) && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ');
}

enum MHD_Result envd_rpc_ok(struct http_req *req, json_t *msg)
{
	return http_json(req, 200, msg ? msg : json_object());
}

static enum MHD_Result rpc_answer_error(struct http_req *req, bool stream, enum connect_code c,
					const char *msg)
{
	http_audit_note(req, json_pack("{s:s}", "connect_code", connect_code_name(c)));
	if (!stream)
		return http_json(req, connect_code_http(c), connect_error_body(c, msg));
	/* A stream's error is its end-of-stream message, on a 200 (Connect's rule). */
	cleanup_buf struct buf b = {0};
	if (connect_end_append(&b, c, msg) < 0)
		return MHD_NO;
	return http_text(req, 200, "application/connect+json", b.data, b.len, NULL, NULL);
}

enum MHD_Result envd_rpc_fail(struct http_req *req, bool stream, enum connect_code c,
			      const char *fmt, ...)
{
	char msg[ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return rpc_answer_error(req, stream, c, msg);
}

enum MHD_Result envd_rpc_error(struct http_req *req, bool stream, const struct error *e)
{
	return rpc_answer_error(req, stream, connect_code_of(error_code(e)), e->msg);
}

json_t *envd_rpc_msg(struct http_req *req, bool stream)
{
	const char *ct = ctype_of(req);
	const char *want = stream ? "application/connect+json" : "application/json";
	if (!ctype_is(ct, want)) {
		envd_rpc_fail(req, stream, CC_UNIMPLEMENTED,
			      "Content-Type '%.64s' is not served: this envd face speaks Connect "
			      "with JSON (%s)",
			      ct, want);
		return NULL;
	}
	const char *data = req->body ? req->body : "";
	size_t len = req->body_len;
	if (stream) {
		const char *why = NULL;
		if (connect_env_single(data, len, CONNECT_MSG_MAX, &data, &len, &why) < 0) {
			envd_rpc_fail(req, true, CC_INVALID_ARGUMENT, "bad request envelope: %s",
				      why);
			return NULL;
		}
	}
	json_error_t je;
	json_t *msg = len ? json_loadb(data, len, JSON_REJECT_DUPLICATES, &je) : json_object();
	if (!json_is_object(msg)) {
		json_decref(msg);
		envd_rpc_fail(req, stream, CC_INVALID_ARGUMENT,
			      "the request message is not a JSON object");
		return NULL;
	}
	return msg;
}

/* ---- users and paths ---- */

static int basic_user(struct http_req *req, char *out, size_t outsz)
{
	const char *a = http_header(req, "Authorization");
	out[0] = 0;
	if (!a || strncasecmp(a, "Basic ", 6))
		return 0;
	a += 6 + strspn(a + 6, " ");
	unsigned char *dec = NULL;
	size_t n = 0;
	if (connect_b64_decode(a, strlen(a), &dec, &n) < 0)
		return -1;
	char *colon = memchr(dec, ':', n);
	size_t ulen = colon ? (size_t)(colon - (char *)dec) : n;
	if (ulen >= outsz || memchr(dec, 0, ulen)) {
		free(dec);
		return -1;
	}
	memcpy(out, dec, ulen);
	out[ulen] = 0;
	free(dec);
	return 0;
}

int envd_user_check(struct http_req *req, const char *query_user, enum connect_code *code,
		    char *msg, size_t msglen)
{
	char user[128];
	if (basic_user(req, user, sizeof(user)) < 0) {
		*code = CC_UNAUTHENTICATED;
		snprintf(msg, msglen, "the Authorization header is not Basic base64(user:)");
		return -1;
	}
	if (query_user && *query_user)
		snprintf(user, sizeof(user), "%s", query_user);
	if (!user[0])
		return 0;
	uid_t uid = req->r->cfg.task_uid;
	struct passwd *pw = getpwuid(uid);
	char num[24];
	snprintf(num, sizeof(num), "%u", (unsigned)uid);
	/* "user" is E2B's default user: here it is the task user, whatever its name. */
	if (!strcmp(user, "user") || !strcmp(user, num) || (pw && !strcmp(user, pw->pw_name)))
		return 0;
	if (!strcmp(user, "root") || !strcmp(user, "0")) {
		*code = CC_PERMISSION_DENIED;
		snprintf(
			msg, msglen,
			"user 'root' is refused: every process and file operation of this box runs "
			"confined as the task user (uid %u); ask for 'user' or none",
			(unsigned)uid);
		return -1;
	}
	*code = CC_UNAUTHENTICATED;
	snprintf(msg, msglen,
		 "invalid username: '%.64s' (this box serves the task user only: "
		 "'user')",
		 user);
	return -1;
}

const char *envd_workdir(struct runner *r)
{
	if (r->envd && r->envd->workdir[0])
		return r->envd->workdir;
	struct stat st;
	return stat("/workspace", &st) == 0 && S_ISDIR(st.st_mode) ? "/workspace" : "/";
}

int envd_path(struct runner *r, const char *in, char out[PATH_MAX], char *msg, size_t msglen)
{
	char joined[PATH_MAX * 2];
	if (!in || !*in)
		in = ".";
	if (in[0] == '~' && (in[1] == 0 || in[1] == '/'))
		in += in[1] ? 2 : 1; /* the home of envd's user is its workdir here */
	if (in[0] == '/')
		snprintf(joined, sizeof(joined), "%s", in);
	else
		snprintf(joined, sizeof(joined), "%s/%s", envd_workdir(r), in);
	int rc = files_clean_path(joined, strlen(joined), out, PATH_MAX);
	if (rc < 0) {
		snprintf(msg, msglen, "invalid path '%.256s': %s", in,
			 rc == -ENAMETOOLONG ? "too long" : "not a path");
		return -1;
	}
	return 0;
}
