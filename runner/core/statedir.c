/* The runner's state directory: see statedir.h. */
#include "core/statedir.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/randomid.h"

/* One candidate: fd, or -1 with the reason in why. */
static int try_dir(const char *dir, char *why, size_t whylen)
{
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(why, whylen, "cannot create %.200s: %s", dir, strerror(errno));
		return -1;
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, whylen, "cannot open %.200s: %s", dir,
			 errno == ELOOP || errno == ENOTDIR ? "not a directory (or a symlink)"
							    : strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		snprintf(why, whylen, "cannot stat %.200s: %s", dir, strerror(errno));
		close(fd);
		return -1;
	}
	/* Task output is kept here: it must be ours alone, or someone else
	 * could plant links or read the tasks' output. */
	if (st.st_uid != geteuid()) {
		snprintf(why, whylen, "%.200s is owned by uid %u, not by the runner (uid %u)", dir,
			 (unsigned)st.st_uid, (unsigned)geteuid());
		close(fd);
		return -1;
	}
	if (st.st_mode & 077) {
		if (fchmod(fd, 0700) < 0) {
			snprintf(why, whylen, "cannot make %.200s private (0700): %s", dir,
				 strerror(errno));
			close(fd);
			return -1;
		}
		log_warn("state dir permissions tightened to 0700", "{s:s}", "dir", dir);
	}
	return fd;
}

int statedir_open(const struct runner_config *cfg, char *path, size_t pathlen, bool *fallback,
		  struct error *err)
{
	char cand[3][512];
	int n = 0;
	snprintf(cand[n++], sizeof(cand[0]), "%s", cfg->state_dir);
	if (!cfg->state_dir_set) {
		const char *xdg = getenv("XDG_RUNTIME_DIR");
		if (xdg && xdg[0] == '/')
			snprintf(cand[n++], sizeof(cand[0]), "%s/forceai-runner", xdg);
		snprintf(cand[n++], sizeof(cand[0]), "/tmp/forceai-runner-%u", (unsigned)geteuid());
	}
	char reasons[ERROR_MSG_MAX] = "";
	size_t used = 0;
	for (int i = 0; i < n; i++) {
		char why[320];
		int fd = try_dir(cand[i], why, sizeof(why));
		if (fd >= 0) {
			snprintf(path, pathlen, "%s", cand[i]);
			*fallback = i > 0;
			if (i > 0)
				log_warn("state dir: using a fallback", "{s:s,s:s}", "dir", cand[i],
					 "not_used", reasons);
			return fd;
		}
		/* append "; why", cut at the buffer's end */
		for (const char *p = used ? "; " : ""; *p && used < sizeof(reasons) - 1; p++)
			reasons[used++] = *p;
		for (const char *p = why; *p && used < sizeof(reasons) - 1; p++)
			reasons[used++] = *p;
		reasons[used] = '\0';
	}
	return error_set(err, 0, "STATE_DIR", "no usable --state-dir: %s%s", reasons,
			 cfg->state_dir_set ? ""
					    : " (set --state-dir to a directory the runner may "
					      "create)");
}

int statedir_task_reachable(const char *dir, int ll_abi, const char *roots, char *why,
			    size_t whylen)
{
	if (ll_abi <= 0) {
		snprintf(why, whylen,
			 "Landlock is not in force, so tasks (the runner's uid) may "
			 "write wherever the runner may");
		return 1;
	}
	char real[PATH_MAX];
	if (!realpath(dir, real)) {
		snprintf(why, whylen, "cannot resolve %.200s: %s", dir, strerror(errno));
		return 1;
	}
	char *list = strdup(roots ? roots : "");
	if (!list) {
		snprintf(why, whylen, "out of memory");
		return 1;
	}
	int hit = 0;
	for (char *save, *tok = strtok_r(list, ":", &save); tok && !hit;
	     tok = strtok_r(NULL, ":", &save)) {
		char rr[PATH_MAX];
		if (!realpath(tok, rr))
			continue; /* a root that does not exist is not in force */
		size_t n = strlen(rr);
		if (!strcmp(rr, "/") ||
		    (!strncmp(real, rr, n) && (real[n] == 0 || real[n] == '/'))) {
			snprintf(why, whylen,
				 "%.200s lies in the writable root %.200s, where tasks "
				 "(the runner's uid) may write",
				 real, tok);
			hit = 1;
		}
	}
	free(list);
	return hit;
}

static int memfd(const char *name)
{
	int m = memfd_create(name, MFD_CLOEXEC);
	return m < 0 ? -errno : m;
}

int statedir_tmpfile(int dirfd, const char *memfd_name)
{
	if (dirfd < 0)
		return memfd(memfd_name);
	int fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0)
		return fd;
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return -errno;
	if (geteuid() != 0)
		return memfd(memfd_name);
	/* No O_TMPFILE here: create, then unlink at once (a random name, so
	 * that no two runners sharing the directory collide). */
	for (int tries = 0; tries < 100; tries++) {
		char id[33], name[64];
		if (random_id(id) < 0)
			return -EIO;
		snprintf(name, sizeof(name), ".tmp-%s", id);
		fd = openat(dirfd, name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0) {
			if (unlinkat(dirfd, name, 0) < 0) {
				int err = errno;
				close(fd);
				return -err;
			}
			return fd;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}
