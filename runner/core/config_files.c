/* The files options name: the secret files (--token-file, --gateway-key-file), read
 * while parsing and checked once every option is known, and the files read at start
 * (config_check_files). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config_internal.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/ids.h"

/* Read a secret from a file: first line, surrounding whitespace stripped.
 * The file's owner and mode are kept for config_check_secrets(), which runs
 * once every option is known. */
int config_read_secret(const struct src *src, char **dst, struct secret_file *sf, const char *opt,
		       const char *path)
{
	if (path[0] != '/')
		return config_bad(src, opt, path, "must be an absolute path");
	/* Before the loop and the signals exist: a FIFO left there (by a task
	 * of an earlier boot, on a volume) must not hold PID 1 in open().
	 * Links are followed: Kubernetes' secret volumes are made of them. */
	struct stat st;
	int fd = open_regular(AT_FDCWD, path, 0, SIZE_MAX, &st);
	if (fd == -EACCES && geteuid() != 0) {
		/* The file made root's (as a root runner is told to) cannot be
		 * read by one that is not; it takes the secret from the
		 * environment instead. */
		char why[256];
		snprintf(why, sizeof(why),
			 "%s; a runner that is not root (uid %u) takes the secret from %s instead "
			 "(Kubernetes: env valueFrom secretKeyRef)",
			 strerror(EACCES), (unsigned)geteuid(),
			 !strcmp(opt, "token-file") ? "EXECD_ACCESS_TOKEN" : "FORCEAI_GATEWAY_KEY");
		return config_bad(src, opt, path, why);
	}
	if (fd < 0)
		return config_bad(src, opt, path, open_regular_strerror(fd, &st));
	sf->path = path;
	sf->mode = st.st_mode;
	sf->uid = st.st_uid;
	sf->gid = st.st_gid;
	char buf[512];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	int err = errno;
	close(fd);
	if (n < 0)
		return config_bad(src, opt, path, strerror(err));
	buf[n] = 0;
	char *s = buf;
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	size_t len = strcspn(s, "\r\n");
	while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	if (len == 0)
		return config_bad(src, opt, path, "the file is empty");
	if (*dst) {
		explicit_bzero(*dst, strlen(*dst));
		free(*dst);
	}
	*dst = strndup(s, len);
	explicit_bzero(buf, sizeof(buf));
	return *dst ? 0 : error_set(src->err, ENOMEM, NULL, "--%s", opt);
}

/* A secret file a task could read is the secret: refuse to start (exit 2)
 * unless only its owner can read it, and that owner is no identity a task
 * can have. Group read is allowed for a group no task can have (Kubernetes
 * fsGroup below 1000, say): tasks have no supplementary groups. */
static int check_secret_file(const struct runner_config *cfg, const struct secret_file *sf,
			     const char *opt, struct error *err)
{
	if (!sf->path)
		return 0;
	unsigned mode = (unsigned)sf->mode & 07777;
	char why[384];
	if (mode & 0007)
		snprintf(why, sizeof(why), "has mode %04o: %s by every user, tasks included", mode,
			 mode & 0002 ? "writable" : "readable");
	else if (mode & 0020)
		snprintf(why, sizeof(why), "has mode %04o: writable by its group", mode);
	else if ((mode & 0040) && ids_gid_allowed(cfg, sf->gid))
		snprintf(why, sizeof(why),
			 "has mode %04o and group %u, a gid tasks can run as (--task-user, "
			 "--task-id-range): tasks can read it",
			 mode, (unsigned)sf->gid);
	else if (ids_uid_allowed(cfg, sf->uid))
		snprintf(why, sizeof(why),
			 "is owned by uid %u, a uid tasks can run as (--task-user, "
			 "--task-id-range%s): tasks can read it",
			 (unsigned)sf->uid, sf->uid == 0 ? ", --allow-root-tasks" : "");
	else
		return 0;
	const char *var = !strcmp(opt, "token-file") ? "EXECD_ACCESS_TOKEN" : "FORCEAI_GATEWAY_KEY";
	/* chown root needs root: a runner that is not root (non-root mode) passes
	 * its secrets in the environment, which it removes from its own. */
	if (geteuid() != 0)
		return error_set(err, 0, NULL,
				 "--%s '%s' %s. A runner that is not root (uid %u) cannot make it "
				 "safe and refuses a secret file anyway (its tasks share its uid): "
				 "pass the secret in %s instead (Kubernetes: env valueFrom "
				 "secretKeyRef)",
				 opt, sf->path, why, (unsigned)geteuid(), var);
	return error_set(err, 0, NULL,
			 "--%s '%s' %s. Make it readable by its owner only and owned by a uid no "
			 "task can have, e.g. `chown root '%s' && chmod 0400 '%s'` (Kubernetes: "
			 "secret volume `defaultMode: 0400`, fsGroup below 1000 or none), or pass "
			 "the secret in %s%s",
			 opt, sf->path, why, sf->path, sf->path, var,
			 sf->uid == 0 && cfg->allow_root_tasks
				 ? "; with --allow-root-tasks root tasks own root's files: use "
				   "another owner (e.g. uid 999) or pass the secret in the "
				   "environment"
				 : "");
}

int config_check_secrets(const struct runner_config *cfg, struct error *err)
{
	if (check_secret_file(cfg, &cfg->token_file, "token-file", err) < 0)
		return -1;
	return check_secret_file(cfg, &cfg->key_file, "gateway-key-file", err);
}

/* A file read at start: readable, regular, not empty. */
static int check_file(const struct runner_config *cfg, const char *opt, const char *path,
		      const char *fix, struct error *err)
{
	struct src s = config_src(cfg, opt, err);
	char why[512];
	/* open_regular: a FIFO or device there must not hold PID 1 in open(),
	 * and the message names what was found (core/fileio.h). */
	struct stat st;
	int fd = open_regular(AT_FDCWD, path, 0, SIZE_MAX, &st);
	if (fd < 0) {
		snprintf(why, sizeof(why), "cannot open: %s%s", open_regular_strerror(fd, &st),
			 fix);
		return config_bad(&s, opt, path, why);
	}
	close(fd);
	if (st.st_size == 0) {
		snprintf(why, sizeof(why), "empty%s", fix);
		return config_bad(&s, opt, path, why);
	}
	return 0;
}

int config_check_files(const struct runner_config *cfg, struct error *err)
{
	if (!cfg->insecure_no_confine &&
	    check_file(cfg, "seccomp-policy", cfg->seccomp_policy,
		       "; the image has it; outside it, in a clone of the repository: "
		       "--seccomp-policy \"$PWD/seccomp/default.json\" (or FORCEAI_SECCOMP_POLICY)",
		       err) < 0)
		return -1;
	if (cfg->gateway_ca &&
	    check_file(cfg, "gateway-ca", cfg->gateway_ca,
		       "; give a PEM bundle of the CAs the gateway's certificate chains to, or "
		       "leave it unset for SSL_CERT_FILE, CURL_CA_BUNDLE or the system's",
		       err) < 0)
		return -1;
	if (cfg->mcp_servers &&
	    check_file(cfg, "mcp-servers", cfg->mcp_servers,
		       "; give a JSON file {\"mcpServers\": {NAME: {\"command\": ...}}} or leave "
		       "it unset",
		       err) < 0)
		return -1;
	return 0;
}
