/* Landlock ruleset for tasks (docs/design/confinement.md#in-the-task-in-this-order step 7,
 * design/confinement.md#landlock-and-the-hardening-report). See landlock.h.
 *
 * Rights handled: every filesystem right the kernel's ABI knows (network
 * rights are not handled: egress is the sandbox network policy's job, and
 * tasks must reach the loopback model proxy). Granted:
 * - "/" and below: execute, read files, list directories;
 * - each writable root, and /dev/shm (POSIX semaphores and shared memory,
 *   e.g. python multiprocessing): every right;
 * - the harmless character devices (/dev/null, zero, full, random,
 *   urandom, tty, ptmx) and /dev/pts: read, write, truncate, device ioctl.
 * ABI 1 is not used: it forbids every cross-directory rename and link,
 * which breaks git and most package managers. ABI 6 scoping (no signals
 * to, no abstract UNIX sockets of, processes outside the task) goes into a
 * second ruleset, for root tasks only (see landlock.h). */
#include "confine/landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/types.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"

/* Own copies of the UAPI: the build's kernel headers may predate the
 * rights this kernel offers. The values are ABI, they never change. */
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH 1

#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_WRITE_FILE (1ULL << 1)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
#define LL_FS_REMOVE_DIR (1ULL << 4)
#define LL_FS_REMOVE_FILE (1ULL << 5)
#define LL_FS_MAKE_CHAR (1ULL << 6)
#define LL_FS_MAKE_DIR (1ULL << 7)
#define LL_FS_MAKE_REG (1ULL << 8)
#define LL_FS_MAKE_SOCK (1ULL << 9)
#define LL_FS_MAKE_FIFO (1ULL << 10)
#define LL_FS_MAKE_BLOCK (1ULL << 11)
#define LL_FS_MAKE_SYM (1ULL << 12)
#define LL_FS_REFER (1ULL << 13)     /* ABI 2 */
#define LL_FS_TRUNCATE (1ULL << 14)  /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */

#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ULL << 1)               /* ABI 6 */

struct ll_ruleset_attr {
	__u64 handled_access_fs;
	__u64 handled_access_net; /* ABI 4 */
	__u64 scoped;             /* ABI 6 */
};

struct ll_path_beneath_attr {
	__u64 allowed_access;
	__s32 parent_fd;
} __attribute__((packed));

#define DEFAULT_ROOTS "/workspace:/tmp:/var/tmp:/home"

static __u64 fs_rights(int abi)
{
	__u64 r = (LL_FS_MAKE_SYM << 1) - 1; /* ABI 1: bits 0..12 */
	if (abi >= 2)
		r |= LL_FS_REFER;
	if (abi >= 3)
		r |= LL_FS_TRUNCATE;
	if (abi >= 5)
		r |= LL_FS_IOCTL_DEV;
	return r;
}

static void append(char *buf, size_t size, const char *item)
{
	size_t len = strlen(buf);
	if (len + strlen(item) + 2 <= size)
		snprintf(buf + len, size - len, "%s%s", len ? ":" : "", item);
}

/* Allow `access` beneath `path`. Returns 1 when added, 0 when the path does
 * not exist, -1 with err set. */
static int add_path(int rfd, const char *path, __u64 access, bool dir_only, struct error *err)
{
	cleanup_close int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return error_set(err, errno, NULL, "landlock: open %s", path);
	}
	struct stat st;
	if (fstat(fd, &st) < 0)
		return error_set(err, errno, NULL, "landlock: stat %s", path);
	if (dir_only && !S_ISDIR(st.st_mode))
		return error_set(err, 0, NULL, "landlock: writable root %s is not a directory",
				 path);
	if (!S_ISDIR(st.st_mode)) /* files take file rights only */
		access &= LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE |
			  LL_FS_IOCTL_DEV;
	struct ll_path_beneath_attr pb = {.allowed_access = access, .parent_fd = fd};
	if (syscall(SYS_landlock_add_rule, rfd, LL_RULE_PATH_BENEATH, &pb, 0) < 0)
		return error_set(err, errno, NULL, "landlock: add rule for %s", path);
	return 1;
}

/* Move fd to >= 64: the task's stdio (and extra fds) are placed at 0..4 by
 * dup2 after fork, which must never land on a ruleset. */
static int move_high(int fd, struct error *err)
{
	if (fd >= 64)
		return fd;
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 64);
	int e = errno;
	close(fd);
	if (high < 0)
		return error_set(err, e, NULL, "landlock: fcntl(F_DUPFD_CLOEXEC)");
	return high;
}

/* One ruleset with every rule; `scoped` adds ABI 6 scoping. Returns the
 * ruleset fd or -1 with err set; fills the root lists when `ll` is given. */
static int build_ruleset(int abi, bool scoped, const char *roots, const char *envs,
			 struct landlock_info *ll, struct error *err)
{
	__u64 all = fs_rights(abi);
	struct ll_ruleset_attr attr = {.handled_access_fs = all};
	size_t attr_size = sizeof(attr.handled_access_fs);
	if (scoped) {
		attr.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
		attr_size = sizeof(attr);
	}
	int rfd = (int)syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0);
	if (rfd < 0)
		return error_set(err, errno, NULL, "landlock: create ruleset (ABI %d)", abi);

	const __u64 read_rights = LL_FS_EXECUTE | LL_FS_READ_FILE | LL_FS_READ_DIR;
	const __u64 dev_rights = (LL_FS_READ_FILE | LL_FS_WRITE_FILE | LL_FS_TRUNCATE |
				  LL_FS_IOCTL_DEV | LL_FS_READ_DIR) &
				 all;
	static const char *const devices[] = {"/dev/null",   "/dev/zero",    "/dev/full",
					      "/dev/random", "/dev/urandom", "/dev/tty",
					      "/dev/ptmx",   "/dev/pts",     NULL};
	int rc = add_path(rfd, "/", read_rights, true, err);
	if (rc <= 0) {
		if (rc == 0)
			error_set(err, 0, NULL, "landlock: cannot open /");
		goto fail;
	}
	for (const char *const *d = devices; *d; d++)
		if (add_path(rfd, *d, dev_rights, false, err) < 0)
			goto fail;
	if (add_path(rfd, "/dev/shm", all, true, err) < 0)
		goto fail;
	/* OpenSandbox's EXECD_ENVS file (docs/design/wire.md#opensandbox-execd-12): the SDK's
	 * set_env appends to it from a command, so tasks may write that one
	 * file (file rights only; not its directory). The bootstrap creates it
	 * before the runner starts; the runner reads it as root with its own
	 * checks (task/env.c). */
	if (envs && envs[0] == '/' &&
	    add_path(rfd, envs, (LL_FS_READ_FILE | LL_FS_WRITE_FILE | LL_FS_TRUNCATE) & all, false,
		     err) < 0)
		goto fail;

	char *list = strdup(roots ? roots : DEFAULT_ROOTS);
	if (!list) {
		error_set(err, ENOMEM, NULL, "landlock");
		goto fail;
	}
	char *save = NULL;
	for (char *r = strtok_r(list, ":", &save); r; r = strtok_r(NULL, ":", &save)) {
		if (r[0] != '/') {
			error_set(err, 0, NULL,
				  "landlock: writable root \"%s\" is not an absolute path", r);
			free(list);
			goto fail;
		}
		rc = add_path(rfd, r, all, true, err);
		if (rc < 0) {
			free(list);
			goto fail;
		}
		if (ll && rc)
			append(ll->roots, sizeof(ll->roots), r);
		else if (ll)
			append(ll->skipped, sizeof(ll->skipped), r);
	}
	free(list);
	return move_high(rfd, err);
fail:
	close(rfd);
	return -1;
}

int landlock_prepare(struct landlock_info *ll, const char *roots, const char *envs_file,
		     struct error *err)
{
	memset(ll, 0, sizeof(*ll));
	ll->ruleset_fd = -1;
	ll->root_ruleset_fd = -1;
	int abi = (int)syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
	if (abi < 0) {
		const char *why = errno == ENOSYS       ? "the kernel has no Landlock"
				  : errno == EOPNOTSUPP ? "Landlock is disabled at boot (lsm=)"
				  : errno == EPERM      ? "Landlock calls are refused (an outer "
							  "seccomp profile?)"
							: strerror(errno);
		snprintf(ll->reason, sizeof(ll->reason), "%s", why);
		return 0;
	}
	if (abi < 2) {
		snprintf(ll->reason, sizeof(ll->reason),
			 "Landlock ABI %d forbids cross-directory renames (breaks git); not used",
			 abi);
		return 0;
	}
	int fd = build_ruleset(abi, false, roots, envs_file, ll, err);
	if (fd < 0)
		return -1;
	if (abi >= 6) {
		int rfd = build_ruleset(abi, true, roots, envs_file, NULL, err);
		if (rfd < 0) {
			close(fd);
			return -1;
		}
		ll->root_ruleset_fd = rfd;
	}
	ll->abi = abi;
	ll->ruleset_fd = fd;
	return 0;
}

int landlock_apply(int ruleset_fd)
{
	if (syscall(SYS_landlock_restrict_self, ruleset_fd, 0) < 0)
		return -errno;
	return 0;
}

void landlock_info_free(struct landlock_info *ll)
{
	if (ll->ruleset_fd >= 0)
		close(ll->ruleset_fd);
	if (ll->root_ruleset_fd >= 0)
		close(ll->root_ruleset_fd);
	ll->ruleset_fd = -1;
	ll->root_ruleset_fd = -1;
}
