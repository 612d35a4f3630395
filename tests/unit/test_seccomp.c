/* Unit test of runner/confine/seccomp.c: policy parsing errors, and the compiled default policy
 * applied to a forked child. The policy is seccomp/default.json (run from the repository root),
 * or UNIT_SECCOMP_POLICY. */
#include "confine/seccomp_policy.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static char tmpdir[] = "/tmp/test_seccomp.XXXXXX";

/* The scratch directory, made by the first case that needs it and removed at exit. */
static const char *scratch(void)
{
	static bool made;
	if (!made && !mkdtemp(tmpdir)) {
		perror("mkdtemp");
		exit(2);
	}
	made = true;
	return tmpdir;
}

__attribute__((destructor)) static void remove_scratch(void)
{
	if (strcmp(tmpdir + strlen(tmpdir) - 6, "XXXXXX") == 0)
		return;
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", tmpdir);
}

static const char *write_policy(const char *name, const char *text)
{
	static char path[256];
	snprintf(path, sizeof(path), "%s/%s", scratch(), name);
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		perror(path);
		exit(2);
	}
	return path;
}

/* Loading `text` must fail with a message containing the file path and `want`. */
static void expect_error(const char *name, const char *text, const char *want)
{
	struct error e;
	const char *err = e.msg;
	struct seccomp_policy p;
	const char *path = write_policy(name, text);
	int rc = seccomp_policy_load(path, &p, &e);
	CHECKF(rc < 0 && strstr(err, path) && strstr(err, want),
	       "%s: error names the file and "
	       "says \"%s\" (got rc %d: %s)",
	       name, want, rc, rc < 0 ? err : "");
	if (rc == 0)
		seccomp_policy_free(&p);
}

#define HEAD                                                                                       \
	"{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"architectures\":[\"SCMP_ARCH_X86_64\","           \
	"\"SCMP_ARCH_AARCH64\"],"

TEST(policy_errors_name_file_and_cause)
{
	expect_error("notjson.json", "{\"defaultAction\": \"SCMP_ACT_ERRNO\",\n  syscalls: []}\n",
		     "invalid JSON at line 2, column");
	expect_error("action.json",
		     HEAD "\"syscalls\":[{\"names\":[\"read\"],"
			  "\"action\":\"SCMP_ACT_FOO\"}]}",
		     "unknown action \"SCMP_ACT_FOO\"");
	expect_error("defaction.json",
		     "{\"defaultAction\":\"ALLOW\",\"syscalls\":[{\"names\":"
		     "[\"read\"],\"action\":\"SCMP_ACT_ALLOW\"}]}",
		     "unknown action \"ALLOW\"");
	expect_error(
		"op.json",
		HEAD
		"\"syscalls\":[{\"names\":[\"socket\"],\"action\":"
		"\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,\"value\":1,\"op\":\"SCMP_CMP_XX\"}]}]}",
		"syscalls[0].args[0]: unknown op \"SCMP_CMP_XX\"");
	expect_error(
		"index.json",
		HEAD
		"\"syscalls\":[{\"names\":[\"socket\"],\"action\":"
		"\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":6,\"value\":1,\"op\":\"SCMP_CMP_EQ\"}]}]}",
		"bad arg index");
	expect_error(
		"dupindex.json",
		HEAD
		"\"syscalls\":[{\"names\":[\"socket\"],\"action\":"
		"\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,\"value\":1,\"op\":\"SCMP_CMP_EQ\"},"
		"{\"index\":0,\"value\":2,\"op\":\"SCMP_CMP_EQ\"}]}]}",
		"used twice");
	expect_error("empty.json", HEAD "\"syscalls\":[]}", "\"syscalls\" is missing or empty");
	expect_error("nosyscalls.json", "{\"defaultAction\":\"SCMP_ACT_ERRNO\"}",
		     "\"syscalls\" is missing or empty");
	expect_error("typo.json",
		     HEAD "\"syscalls\":[{\"names\":[\"socket\"],\"action\":"
			  "\"SCMP_ACT_ALLOW\",\"arg\":[]}]}",
		     "unknown key \"arg\"");
	expect_error("arch.json",
		     "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"architectures\":"
		     "[\"SCMP_ARCH_S390X\"],\"syscalls\":[{\"names\":[\"read\"],\"action\":"
		     "\"SCMP_ACT_ALLOW\"}]}",
		     "does not list this machine's architecture");
	expect_error("badarch.json",
		     "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"architectures\":"
		     "[\"SCMP_ARCH_VAX\"],\"syscalls\":[{\"names\":[\"read\"],\"action\":"
		     "\"SCMP_ACT_ALLOW\"}]}",
		     "unknown architecture SCMP_ARCH_VAX");
	expect_error("notify.json",
		     HEAD "\"syscalls\":[{\"names\":[\"read\"],\"action\":"
			  "\"SCMP_ACT_NOTIFY\"}]}",
		     "SCMP_ACT_NOTIFY is not supported");
	/* A deny rule for an unknown name under a default-allow policy would
	 * be a hole: error. */
	expect_error("holes.json",
		     "{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":"
		     "[\"no_such_syscall\"],\"action\":\"SCMP_ACT_ERRNO\"}]}",
		     "\"no_such_syscall\" is unknown to libseccomp");
	expect_error("errnoname.json",
		     HEAD "\"syscalls\":[{\"names\":[\"read\"],\"action\":"
			  "\"SCMP_ACT_ERRNO\",\"errno\":\"EBOGUS\"}]}",
		     "unknown \"errno\"");
}

/* Under default-deny an unknown name is only a warning: the call stays denied. */
TEST(unknown_name_under_default_deny_warns)
{
	struct error e;
	const char *err = e.msg;
	struct seccomp_policy p;
	const char *path =
		write_policy("unknown.json",
			     HEAD "\"syscalls\":[{\"names\":[\"read\","
				  "\"no_such_syscall\",\"open\"],\"action\":\"SCMP_ACT_ALLOW\"}]}");
	int rc = seccomp_policy_load(path, &p, &e);
	CHECKF(rc == 0 && p.n_unknown == 1 && strstr(p.warning, "no_such_syscall") &&
		       strcmp(p.name, "unknown.json") == 0,
	       "unknown name under default-deny: loads with a warning (rc %d, %s%s)", rc,
	       rc == 0 ? p.warning : err, "");
	if (rc == 0)
		seccomp_policy_free(&p);
}

/* Docker's conditional rules: a rule needing a capability is skipped (tasks hold none); one for
 * another architecture too. */
TEST(docker_conditional_rules)
{
	struct error e;
	const char *err = e.msg;
	struct seccomp_policy p;
	const char *path = write_policy(
		"docker.json",
		HEAD "\"syscalls\":[{\"names\":[\"read\"],\"action\":"
		     "\"SCMP_ACT_ALLOW\"},{\"names\":[\"write\"],\"action\":\"SCMP_ACT_ALLOW\","
		     "\"includes\":{\"caps\":[\"CAP_SYS_ADMIN\"]}},{\"names\":[\"close\"],"
		     "\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"arches\":[\"s390x\"]}},"
		     "{\"names\":[\"dup\"],\"action\":\"SCMP_ACT_ALLOW\",\"excludes\":"
		     "{\"caps\":[\"CAP_SYS_ADMIN\"]}},{\"names\":[\"clone3\"],\"action\":"
		     "\"SCMP_ACT_ERRNO\",\"errno\":\"ENOSYS\"}]}");
	int rc = seccomp_policy_load(path, &p, &e);
	CHECKF(rc == 0 && p.n_allowed == 2,
	       "includes/excludes: only read and dup allowed (rc %d, "
	       "%u allowed%s%s)",
	       rc, rc == 0 ? p.n_allowed : 0, rc ? ": " : "", rc ? err : "");
	if (rc == 0)
		seccomp_policy_free(&p);
}

TEST(missing_file)
{
	struct error e;
	const char *err = e.msg;
	struct seccomp_policy p;
	char missing[300];
	snprintf(missing, sizeof(missing), "%s/missing.json", scratch());
	int rc = seccomp_policy_load(missing, &p, &e);
	CHECKF(rc < 0 && strstr(err, missing) && strstr(err, "cannot open: No such file"),
	       "missing file: %s", err);
}

TEST(directory_is_not_a_policy)
{
	struct error e;
	const char *err = e.msg;
	struct seccomp_policy p;
	int rc = seccomp_policy_load(scratch(), &p, &e);
	CHECKF(rc < 0 && strstr(err, tmpdir) && strstr(err, "cannot read"), "directory: %s", err);
}

/* A FIFO where the policy should be (read at start, before the loop and the
 * signals): refused at once, not waited on for a writer. */
TEST(fifo_is_not_a_policy)
{
	struct error e;
	const char *err = e.msg;
	struct seccomp_policy p;
	char fifo[300];
	snprintf(fifo, sizeof(fifo), "%s/policy.fifo", scratch());
	if (!CHECK(mkfifo(fifo, 0600) == 0))
		return;
	int rc = seccomp_policy_load(fifo, &p, &e);
	CHECKF(rc < 0 && strstr(err, "cannot read: a FIFO, not a regular file"), "fifo: %s", err);
}

TEST(unreadable_file)
{
	struct error e;
	const char *err = e.msg;
	struct seccomp_policy p;
	if (geteuid() == 0)
		SKIP("root reads mode-000 files anyway");
	const char *path = write_policy("unreadable.json", "{}");
	chmod(path, 0);
	int rc = seccomp_policy_load(path, &p, &e);
	CHECKF(rc < 0 && strstr(err, "cannot open: Permission denied"), "unreadable file: %s", err);
}

/* Run in a child under the filter: one line per check on `out`, "1what" or "0what (errno)"; the
 * parent turns each into a check. */
static void child_checks(const struct seccomp_policy *p, int out)
{
#define EXPECT(cond, what)                                                                         \
	do {                                                                                       \
		int ok_ = (cond), errno_ = errno;                                                  \
		char l_[256];                                                                      \
		int n_ = snprintf(l_, sizeof(l_), "%d%s (errno %d %s)\n", ok_, what, errno_,       \
				  strerror(errno_));                                               \
		if (n_ >= (int)sizeof(l_))                                                         \
			l_[(n_ = sizeof(l_) - 1) - 1] = '\n';                                      \
		if (write(out, l_, (size_t)n_) != n_)                                              \
			_exit(3);                                                                  \
	} while (0)

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(4);
	int rc = seccomp_policy_apply(p);
	EXPECT(rc == 0, "filter installed");
	if (rc < 0)
		_exit(5);
	long r;
	EXPECT(getpid() > 0, "getpid works");
	errno = 0;
	r = syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0, 0, 0);
	EXPECT(r == -1 && errno == EPERM, "keyctl -> EPERM");
	errno = 0;
	r = syscall(SYS_add_key, "user", "k", "v", 1, -3);
	EXPECT(r == -1 && errno == EPERM, "add_key -> EPERM");
#ifdef SYS_clone3
	errno = 0;
	r = syscall(SYS_clone3, NULL, 0);
	EXPECT(r == -1 && errno == ENOSYS, "clone3 -> ENOSYS");
#endif
	errno = 0;
	r = socket(AF_ALG, SOCK_SEQPACKET, 0);
	EXPECT(r == -1 && errno == EPERM, "socket(AF_ALG) -> EPERM");
	errno = 0;
	r = socket(AF_VSOCK, SOCK_STREAM, 0);
	EXPECT(r == -1 && errno == EPERM, "socket(AF_VSOCK) -> EPERM");
	errno = 0;
	r = socket(AF_PACKET, SOCK_RAW, 0);
	EXPECT(r == -1 && errno == EPERM, "socket(AF_PACKET) -> EPERM");
	r = socket(AF_INET, SOCK_STREAM, 0);
	EXPECT(r >= 0, "socket(AF_INET) works");
	if (r >= 0)
		close((int)r);
	r = socket(AF_UNIX, SOCK_STREAM, 0);
	EXPECT(r >= 0, "socket(AF_UNIX) works");
	if (r >= 0)
		close((int)r);
	errno = 0;
	r = unshare(CLONE_NEWUSER);
	EXPECT(r == -1 && errno == EPERM, "unshare(CLONE_NEWUSER) -> EPERM");
	errno = 0;
	r = unshare(CLONE_NEWNS);
	EXPECT(r == -1 && errno == EPERM, "unshare(CLONE_NEWNS) -> EPERM");
	errno = 0;
	r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
	if (r == 0)
		_exit(0);
	EXPECT(r == -1 && errno == EPERM, "clone(CLONE_NEWUSER) -> EPERM");
	errno = 0;
	r = mount("none", tmpdir, "tmpfs", 0, "");
	if (r == 0)
		umount(tmpdir);
	EXPECT(r == -1 && errno == EPERM, "mount -> EPERM");
	errno = 0;
	/* ptrace passes the policy (Landlock scopes it,
	 * design/confinement.md#debugging-inside-the-tasks-own-tree-ptrace): the kernel answers,
	 * ESRCH for a process that is not our tracee. */
	r = ptrace(PTRACE_PEEKDATA, getppid(), 0, 0);
	EXPECT(r == -1 && errno == ESRCH, "ptrace passes the filter (ESRCH from the kernel)");
#ifdef SYS_pidfd_getfd
	errno = 0;
	r = syscall(SYS_pidfd_getfd, 0, 0, 0);
	EXPECT(r == -1 && errno == EPERM, "pidfd_getfd -> EPERM");
#endif
	errno = 0;
	r = syscall(SYS_bpf, 0, NULL, 0);
	EXPECT(r == -1 && errno == EPERM, "bpf -> EPERM");
#ifdef SYS_io_uring_setup
	errno = 0;
	r = syscall(SYS_io_uring_setup, 1, NULL);
	EXPECT(r == -1 && errno == EPERM, "io_uring_setup -> EPERM");
#endif
	EXPECT(personality(0xffffffff) != -1, "personality(query) works");
	errno = 0;
	r = personality(ADDR_NO_RANDOMIZE);
	EXPECT(r != -1 && personality(0xffffffff) == ADDR_NO_RANDOMIZE,
	       "personality(ADDR_NO_RANDOMIZE) works (gdb, setarch -R)");
	personality(PER_LINUX);
	errno = 0;
	r = personality(ADDR_NO_RANDOMIZE | READ_IMPLIES_EXEC);
	EXPECT(r == -1 && errno == EPERM, "personality(READ_IMPLIES_EXEC) -> EPERM");

	/* fork (clone without namespace flags) works. */
	pid_t pid = fork();
	if (pid == 0)
		_exit(42);
	int st = 0;
	EXPECT(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 42,
	       "fork works");
#ifdef __x86_64__
	/* An x32 system call hits the bad-architecture action: killed. */
	pid = fork();
	if (pid == 0) {
		syscall(0x40000000L | SYS_getpid);
		_exit(0);
	}
	EXPECT(pid > 0 && waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS,
	       "x32 syscall -> killed by SIGSYS");
#endif
	/* execve is allowed. */
	pid = fork();
	if (pid == 0) {
		execl("/bin/true", "true", (char *)NULL);
		_exit(127);
	}
	EXPECT(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	       "execve(/bin/true) works");
	_exit(0);
#undef EXPECT
}

static const char *default_policy(void)
{
	const char *path = getenv("UNIT_SECCOMP_POLICY");
	return path && *path ? path : "seccomp/default.json";
}

TEST(default_policy_loads)
{
	struct error e;
	const char *err = e.msg;
	struct seccomp_policy p;
	const char *path = default_policy();
	int rc = seccomp_policy_load(path, &p, &e);
	CHECKF(rc == 0, "default policy %s loads (%s)", path, rc == 0 ? "" : err);
	if (rc < 0)
		return;
	CHECKF(p.n_allowed > 200 && p.prog.len > 0 && p.n_unknown == 0 && p.warning[0] == '\0',
	       "default policy: %u syscalls allowed, %u instructions, no warning (%s)", p.n_allowed,
	       (unsigned)p.prog.len, p.warning);
	CHECKF(strcmp(p.name, "default.json") == 0, "policy name is the basename (%s)", p.name);
	seccomp_policy_free(&p);
}

TEST(default_policy_filters_child)
{
	/* Valgrind does not model seccomp (and its own system calls would hit
	 * the filter): the parsing checks still run under it. */
	const char *preload = getenv("LD_PRELOAD");
	if (preload && strstr(preload, "vgpreload"))
		SKIP("valgrind does not model seccomp");
	struct error e;
	const char *err = e.msg;
	struct seccomp_policy p;
	const char *path = default_policy();
	int rc = seccomp_policy_load(path, &p, &e);
	if (!CHECKF(rc == 0, "default policy %s loads (%s)", path, rc == 0 ? "" : err))
		return;
	int fds[2];
	if (pipe(fds) < 0) {
		perror("pipe");
		exit(2);
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(2);
	}
	if (pid == 0) {
		close(fds[0]);
		child_checks(&p, fds[1]);
	}
	close(fds[1]);
	FILE *in = fdopen(fds[0], "r");
	if (!in) {
		perror("fdopen");
		exit(2);
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, in)) > 0) {
		line[strcspn(line, "\n")] = 0;
		CHECKF(line[0] == '1', "child: %s", line + 1);
	}
	free(line);
	fclose(in);
	int st = 0;
	pid_t w = waitpid(pid, &st, 0);
	CHECKF(w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	       "filtered child exited cleanly (status 0x%x)", st);
	seccomp_policy_free(&p);
}

static bool same_prog(const struct seccomp_policy *a, const struct seccomp_policy *b)
{
	return a->prog.len == b->prog.len && a->prog.len &&
	       !memcmp(a->prog.filter, b->prog.filter, a->prog.len * sizeof(*a->prog.filter)) &&
	       a->n_allowed == b->n_allowed && a->flags == b->flags;
}

/* A FIFO where the state dir's cache would be (non-root mode: the tasks'
 * uid may write there until main.c judges the dir): passed over at once,
 * the policy compiled. alarm(): a blocking open fails the run instead of
 * hanging it. */
TEST(cache_fifo_is_passed_over)
{
	const char *policy = default_policy();
	struct error e;
	struct seccomp_policy p;
	char dir[300], cache[340];
	snprintf(dir, sizeof(dir), "%s/fifo-state", scratch());
	snprintf(cache, sizeof(cache), "%s/seccomp-cache.bpf", dir);
	if (!CHECK(mkdir(dir, 0700) == 0 && mkfifo(cache, 0600) == 0))
		return;
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	alarm(20);
	int rc = seccomp_policy_load_cached(policy, dirfd, &p, &e);
	alarm(0);
	CHECKF(rc == 0 && strstr(p.source, "compiled"), "fifo cache: compiled (%s)",
	       rc ? e.msg : p.source);
	if (rc == 0)
		seccomp_policy_free(&p);
	close(dirfd);
}

/* The compiled-program cache: missing -> compiled and written; then used;
 * stale (the policy changed) -> recompiled; damaged -> rejected with a
 * warning and recompiled; beside the policy (.bpf) -> used first. */
TEST(cache_missing_stale_damaged_image)
{
	const char *policy = default_policy();
	struct error e;
	struct seccomp_policy ref, p;
	char dir[300], cache[340], copy[300];
	snprintf(dir, sizeof(dir), "%s/state", scratch());
	snprintf(cache, sizeof(cache), "%s/seccomp-cache.bpf", dir);
	if (mkdir(dir, 0700) < 0) {
		perror(dir);
		exit(2);
	}
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECKF(seccomp_policy_load(policy, &ref, &e) == 0, "cache: reference compile (%s)", e.msg);

	/* A copy we can change. */
	char *data;
	size_t len;
	CHECKF(seccomp_policy_read(policy, &data, &len, &e) == 0, "cache: policy read");
	const char *path = write_policy("cached.json", data);
	snprintf(copy, sizeof(copy), "%s", path);

	int rc = seccomp_policy_load_cached(copy, dirfd, &p, &e);
	CHECKF(rc == 0 && strstr(p.source, "compiled") && strstr(p.source, "missing") &&
		       strstr(p.source, "written") && access(cache, F_OK) == 0 &&
		       same_prog(&p, &ref),
	       "cache: missing -> compiled, written, same program (%s)", rc ? e.msg : p.source);
	seccomp_policy_free(&p);

	rc = seccomp_policy_load_cached(copy, dirfd, &p, &e);
	CHECKF(rc == 0 && strstr(p.source, "cache in the state dir") && same_prog(&p, &ref) &&
		       !strcmp(p.name, "cached.json"),
	       "cache: second load uses the cache, same program (%s)", rc ? e.msg : p.source);
	seccomp_policy_free(&p);

	/* Stale: the policy's bytes changed (one allowed call fewer). */
	char *ed = strstr(data, "\"getpid\",");
	CHECKF(ed != NULL, "cache: the default policy allows getpid");
	if (ed)
		memcpy(ed, "\"zzzzzz\",", 9);
	write_policy("cached.json", data);
	rc = seccomp_policy_load_cached(copy, dirfd, &p, &e);
	CHECKF(rc == 0 && strstr(p.source, "compiled") && strstr(p.source, "stale") &&
		       p.n_allowed + 1 == ref.n_allowed && !same_prog(&p, &ref),
	       "cache: stale (policy changed) -> recompiled (%s, %u allowed)",
	       rc ? e.msg : p.source, p.n_allowed);
	seccomp_policy_free(&p);
	rc = seccomp_policy_load_cached(copy, dirfd, &p, &e);
	CHECKF(rc == 0 && strstr(p.source, "cache in the state dir") &&
		       p.n_allowed + 1 == ref.n_allowed,
	       "cache: rewritten for the new policy (%s)", rc ? e.msg : p.source);
	seccomp_policy_free(&p);

	/* Damaged: one bit of the program flipped. */
	int fd = open(cache, O_RDWR);
	struct stat st;
	unsigned char byte = 0;
	CHECKF(fd >= 0 && fstat(fd, &st) == 0 && pread(fd, &byte, 1, st.st_size - 3) == 1,
	       "cache: file readable");
	byte ^= 0x10;
	CHECKF(pwrite(fd, &byte, 1, st.st_size - 3) == 1, "cache: one byte flipped");
	close(fd);
	rc = seccomp_policy_load_cached(copy, dirfd, &p, &e);
	CHECKF(rc == 0 && strstr(p.source, "compiled") && strstr(p.source, "damaged") &&
		       strstr(p.warning, "checksum mismatch") && p.n_allowed + 1 == ref.n_allowed,
	       "cache: damaged program rejected, recompiled (%s; %s)", rc ? e.msg : p.source,
	       p.warning);
	seccomp_policy_free(&p);
	/* A cache some task could have written is never read (issue 19,
	 * finding 1): owned by another uid than root, or in a directory
	 * others may write. Rewritten valid first, then handed over. */
	rc = seccomp_policy_load_cached(copy, dirfd, &p, &e); /* rewrites it */
	seccomp_policy_free(&p);
	rc = seccomp_policy_load_cached(copy, dirfd, &p, &e);
	CHECKF(rc == 0 && strstr(p.source, "cache in the state dir"), "cache: valid again (%s)",
	       rc ? e.msg : p.source);
	seccomp_policy_free(&p);
	if (geteuid() == 0) {
		CHECKF(chown(cache, 1000, 1000) == 0, "cache: handed to uid 1000");
		rc = seccomp_policy_load_cached(copy, dirfd, &p, &e);
		CHECKF(rc == 0 && strstr(p.source, "compiled") && strstr(p.warning, "") &&
			       !strstr(p.source, "cache in the state dir"),
		       "cache: a file of uid 1000 is not trusted, recompiled (%s)",
		       rc ? e.msg : p.source);
		seccomp_policy_free(&p);
		CHECKF(chown(cache, 0, 0) == 0 && chmod(dir, 0777) == 0, "cache: dir made 0777");
		rc = seccomp_policy_load_cached(copy, dirfd, &p, &e);
		CHECKF(rc == 0 && strstr(p.source, "compiled") &&
			       !strstr(p.source, "cache in the state dir"),
		       "cache: a file in a world-writable dir is not trusted (%s)",
		       rc ? e.msg : p.source);
		seccomp_policy_free(&p);
		CHECKF(chmod(dir, 0700) == 0, "cache: dir 0700 again");
	}
	/* Truncated, and garbage. */
	CHECKF(truncate(cache, 100) == 0, "cache: truncated");
	rc = seccomp_policy_load_cached(copy, dirfd, &p, &e);
	CHECKF(rc == 0 && strstr(p.source, "damaged") && strstr(p.warning, "rejected"),
	       "cache: truncated file rejected (%s)", rc ? e.msg : p.source);
	seccomp_policy_free(&p);

	/* Beside the policy: written by --write-seccomp-cache, used first;
	 * a policy that does not compile still fails even with a cache. */
	char img[320];
	snprintf(img, sizeof(img), "%s.bpf", copy);
	CHECKF(seccomp_cache_write_file(copy, img, &e) == 0, "cache: image cache written (%s)",
	       e.msg);
	rc = seccomp_policy_load_cached(copy, -1, &p, &e);
	CHECKF(rc == 0 && strstr(p.source, "beside the policy") && p.n_allowed + 1 == ref.n_allowed,
	       "cache: image cache used (%s)", rc ? e.msg : p.source);
	seccomp_policy_free(&p);
	write_policy("cached.json", "{\"defaultAction\": 1}");
	rc = seccomp_policy_load_cached(copy, dirfd, &p, &e);
	CHECKF(rc < 0 && strstr(e.msg, "cached.json"),
	       "cache: a broken policy fails although caches exist (%s)", rc < 0 ? e.msg : "");
	if (rc == 0)
		seccomp_policy_free(&p);
	rc = seccomp_policy_load_cached(copy, -1, &p, &e);
	CHECKF(rc < 0, "cache: without a state dir too");
	if (rc == 0)
		seccomp_policy_free(&p);
	free(data);
	seccomp_policy_free(&ref);
	close(dirfd);
}
