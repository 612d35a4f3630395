/* Per-task cgroup v2 leaves. See cgroup.h.
 *
 * Only cgroup v2 is used, and only when delegated: /sys/fs/cgroup is a
 * cgroup2 filesystem, our own cgroup (from /proc/self/cgroup, "0::PATH")
 * is writable and offers the memory and pids controllers. The development
 * machine has hybrid cgroups, so this path is exercised there only for
 * leaf creation, joining and cgroup.kill (on the controller-less v2
 * hierarchy); the limits need a delegated v2 box. */
#include "confine/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

static struct {
	enum cgroup_mode mode;
	char base[PATH_MAX - 128]; /* directory the task leaves are created in */
	bool memory, pids, cpu;    /* controllers enabled for the leaves */
	char reason[384];
} cg = {.reason = "cgroups not initialised"};

const char *cgroup_mode_reason(void)
{
	return cg.reason;
}

bool cgroup_has_pids(void)
{
	return cg.mode == CGROUP_V2 && cg.pids;
}

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t len = strlen(s);
	ssize_t n = write(fd, s, len);
	int e = n < 0 ? errno : (size_t)n != len ? EIO : 0;
	close(fd);
	return -e;
}

/* Read a small file into buf (NUL-terminated). Returns length or -errno. */
static ssize_t read_str(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t got = 0;
	while (got + 1 < size) {
		ssize_t n = read(fd, buf + got, size - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			return -e;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	return (ssize_t)got;
}

static bool has_word(const char *list, const char *word)
{
	size_t wl = strlen(word);
	for (const char *p = list; (p = strstr(p, word)); p += wl)
		if ((p == list || p[-1] == ' ') && (p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\n'))
			return true;
	return false;
}

static enum cgroup_mode none(const char *fmt, const char *a, const char *b)
{
	char why[256];
	/* A cut message is still a good reason; using the result tells gcc so. */
	if (snprintf(why, sizeof(why), fmt, a, b) >= (int)sizeof(why))
		why[sizeof(why) - 2] = '~';
	snprintf(cg.reason, sizeof(cg.reason),
		 "%s; per-task memory/pids/cpu limits are off, tasks get rlimits and the "
		 "process-tree kill",
		 why);
	cg.mode = CGROUP_NONE;
	return cg.mode;
}

/* Move every process of `from`/cgroup.procs into `to`/cgroup.procs. */
static int move_procs(const char *from, const char *to)
{
	char src[PATH_MAX], dst[PATH_MAX];
	if (snprintf(src, sizeof(src), "%s/cgroup.procs", from) >= (int)sizeof(src) ||
	    snprintf(dst, sizeof(dst), "%s/cgroup.procs", to) >= (int)sizeof(dst))
		return -ENAMETOOLONG;
	for (int round = 0; round < 10; round++) {
		FILE *f = fopen(src, "re");
		if (!f)
			return -errno;
		int moved = 0, rc = 0;
		long pid;
		while (fscanf(f, "%ld", &pid) == 1) {
			char num[24];
			snprintf(num, sizeof(num), "%ld", pid);
			int r = write_str(dst, num);
			if (r == 0)
				moved++;
			else if (r != -ESRCH) /* exited meanwhile: fine */
				rc = r;
		}
		fclose(f);
		if (rc < 0)
			return rc;
		if (moved == 0)
			return 0;
	}
	return 0;
}

enum cgroup_mode cgroup_init(void)
{
	const char *mnt = "/sys/fs/cgroup";
	memset(&cg, 0, sizeof(cg));
	struct statfs sfs;
	if (statfs(mnt, &sfs) < 0)
		return none("cannot inspect %s: %s", mnt, strerror(errno));
	if (sfs.f_type != CGROUP2_SUPER_MAGIC) {
		char unified[PATH_MAX];
		snprintf(unified, sizeof(unified), "%s/unified", mnt);
		if (statfs(unified, &sfs) == 0 && sfs.f_type == CGROUP2_SUPER_MAGIC)
			return none("hybrid cgroup hierarchy: controllers are bound to cgroup v1, "
				    "the v2 hierarchy at %s%s has none",
				    unified, "");
		return none("%s is not a cgroup v2 filesystem (cgroup v1 or none)%s", mnt, "");
	}

	/* Our cgroup: the "0::" line (relative to our cgroup namespace). */
	char self[PATH_MAX];
	ssize_t n = read_str("/proc/self/cgroup", self, sizeof(self));
	if (n < 0)
		return none("cannot read /proc/self/cgroup: %s%s", strerror((int)-n), "");
	char *rel = strstr(self, "0::");
	if (rel != self && (!rel || rel[-1] != '\n'))
		rel = NULL;
	if (!rel)
		return none("no cgroup v2 entry in /proc/self/cgroup%s%s", "", "");
	rel += 3;
	rel[strcspn(rel, "\n")] = '\0';
	if (strcmp(rel, "/") == 0)
		rel = "";
	if ((size_t)snprintf(cg.base, sizeof(cg.base), "%s%s", mnt, rel) >= sizeof(cg.base))
		return none("cgroup path too long: %s%s", rel, "");

	char path[PATH_MAX], buf[512];
	snprintf(path, sizeof(path), "%s/cgroup.controllers", cg.base);
	n = read_str(path, buf, sizeof(buf));
	if (n < 0)
		return none("cannot read %s: %s", path, strerror((int)-n));
	bool mem = has_word(buf, "memory"), pids = has_word(buf, "pids"),
	     cpu = has_word(buf, "cpu");
	if (!mem || !pids)
		return none("cgroup %s does not offer the memory and pids controllers (has: %s)",
			    cg.base, buf[0] ? buf : "none");
	if (access(cg.base, W_OK) < 0)
		return none("cgroup %s is not delegated (not writable: %s)", cg.base,
			    strerror(errno));

	/* memory and pids are there (checked above); cpu when offered. */
	char ctl[64];
	snprintf(ctl, sizeof(ctl), "+memory +pids%s", cpu ? " +cpu" : "");
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", cg.base);
	int rc = write_str(path, ctl);
	if (rc == -EBUSY) {
		/* "No internal processes": our cgroup holds processes
		 * (us, a wrapper): move them to a leaf of their own. */
		char leaf[PATH_MAX];
		snprintf(leaf, sizeof(leaf), "%s/runner", cg.base);
		if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
			return none("mkdir %s: %s", leaf, strerror(errno));
		rc = move_procs(cg.base, leaf);
		if (rc < 0)
			return none("cannot move the runner's processes to %s: %s", leaf,
				    strerror(-rc));
		rc = write_str(path, ctl);
	}
	if (rc < 0)
		return none("cannot enable controllers in %s: %s", path, strerror(-rc));
	cg.memory = mem;
	cg.pids = pids;
	cg.cpu = cpu;
	cg.mode = CGROUP_V2;
	if (snprintf(cg.reason, sizeof(cg.reason),
		     "cgroup v2 delegated at %s: a leaf per task with %s%s%scgroup.kill", cg.base,
		     cg.memory ? "memory.max, " : "", cg.pids ? "pids.max, " : "",
		     cg.cpu ? "cpu.max, " : "") >= (int)sizeof(cg.reason))
		cg.reason[sizeof(cg.reason) - 1] = '\0'; /* truncated path: still readable */
	return cg.mode;
}

static int leaf_path(const char *task_id, const char *file, char *out, size_t size)
{
	size_t len = task_id ? strlen(task_id) : 0;
	if (len == 0 || len > 64)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		char c = task_id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_'))
			return -EINVAL; /* no path tricks in a directory name */
	}
	int n = snprintf(out, size, "%s/task-%s%s%s", cg.base, task_id, file ? "/" : "",
			 file ? file : "");
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int write_limit(const char *task_id, const char *file, const char *value, bool optional)
{
	char path[PATH_MAX];
	int rc = leaf_path(task_id, file, path, sizeof(path));
	if (rc == 0)
		rc = write_str(path, value);
	return rc == -ENOENT && optional ? 0 : rc;
}

int cgroup_task_create(const char *task_id, uint64_t mem_max, uint64_t pids_max,
		       const char *cpu_max, int *procs_fd)
{
	*procs_fd = -1;
	if (cg.mode != CGROUP_V2)
		return -EOPNOTSUPP;
	char dir[PATH_MAX], num[32];
	int rc = leaf_path(task_id, NULL, dir, sizeof(dir));
	if (rc < 0)
		return rc;
	if (mkdir(dir, 0755) < 0)
		return -errno;
	if (mem_max) {
		if (!cg.memory) {
			rc = -EOPNOTSUPP;
			goto fail;
		}
		snprintf(num, sizeof(num), "%llu", (unsigned long long)mem_max);
		if ((rc = write_limit(task_id, "memory.max", num, false)) < 0)
			goto fail;
		/* Swap would let a task exceed memory.max; an OOM kills the
		 * whole task, not one random process of it. */
		if ((rc = write_limit(task_id, "memory.swap.max", "0", true)) < 0 ||
		    (rc = write_limit(task_id, "memory.oom.group", "1", true)) < 0)
			goto fail;
	}
	if (pids_max) {
		if (!cg.pids) {
			rc = -EOPNOTSUPP;
			goto fail;
		}
		snprintf(num, sizeof(num), "%llu", (unsigned long long)pids_max);
		if ((rc = write_limit(task_id, "pids.max", num, false)) < 0)
			goto fail;
	}
	if (cpu_max && *cpu_max) {
		if (!cg.cpu) {
			rc = -EOPNOTSUPP;
			goto fail;
		}
		if ((rc = write_limit(task_id, "cpu.max", cpu_max, false)) < 0)
			goto fail;
	}
	char procs[PATH_MAX];
	leaf_path(task_id, "cgroup.procs", procs, sizeof(procs));
	int fd = open(procs, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	*procs_fd = fd;
	return 0;
fail:
	rmdir(dir);
	return rc;
}

int cgroup_task_kill(const char *task_id)
{
	if (cg.mode != CGROUP_V2)
		return -EOPNOTSUPP;
	char path[PATH_MAX];
	int rc = leaf_path(task_id, "cgroup.kill", path, sizeof(path));
	if (rc < 0)
		return rc;
	rc = write_str(path, "1");
	if (rc != -ENOENT)
		return rc;
	/* Kernel before 5.14 (no cgroup.kill): kill what is listed until
	 * nothing is left; forks racing with us show up in the next round. */
	leaf_path(task_id, "cgroup.procs", path, sizeof(path));
	for (int round = 0; round < 100; round++) {
		FILE *f = fopen(path, "re");
		if (!f)
			return -errno;
		int seen = 0;
		long pid;
		while (fscanf(f, "%ld", &pid) == 1) {
			seen++;
			if (kill((pid_t)pid, SIGKILL) < 0 && errno != ESRCH) {
				int e = errno;
				fclose(f);
				return -e;
			}
		}
		fclose(f);
		if (!seen)
			return 0;
	}
	return -EAGAIN;
}

void cgroup_task_remove(const char *task_id)
{
	char dir[PATH_MAX];
	if (cg.mode == CGROUP_V2 && leaf_path(task_id, NULL, dir, sizeof(dir)) == 0)
		(void)rmdir(dir); /* EBUSY while processes remain: the caller kills first */
}
