/* Security probe: run AS A TASK inside the runner's confinement. It tries
 * what a hostile task would try and prints one JSON object per line:
 *   {"check":"mount","refused":true,"errno":"EPERM","errno_num":1}
 *   {"check":"setuid_0","refused":false,"result":0}
 *   {"check":"chown_root_file","skipped":true,"why":"no --root-file"}
 * ("refused" is also true, with "signal", when the attempt killed the
 * process that made it), then one line with the interesting fields of
 * /proc/self/status:
 *   {"status":{"CapInh":"0000000000000000",...,"Groups":""}}
 * and finally {"done":true,"checks":N}.
 *
 * Every attempt runs in a forked child, so one that unexpectedly succeeds
 * (a namespace, a uid change) cannot disturb the next. Attempts are chosen
 * to be harmless even if they did succeed (nonexistent paths, a private
 * temporary directory, immediate _exit in clone children).
 *
 * Usage: probe [--pid PID] [--root-file PATH] [--outside PATH]
 *   --pid        the runner's pid (ptrace, process_vm_readv, /proc/PID/...)
 *                default 1
 *   --root-file  a root-owned file to try to chown to ourselves (skipped
 *                when not given)
 *   --outside    a path outside the Landlock writable roots, in a directory
 *                the task may write by file permissions (so only Landlock
 *                can refuse), default /var/tmp/forceai-probe-outside
 * Build: cc -O2 -o probe tests/security/probe.c (no other dependency). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
/* Syscall numbers for x86_64 and aarch64 where libc headers may lack them
 * (new syscalls share one number on every architecture). */
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_fsopen
#define SYS_fsopen 430
#endif

static pid_t target_pid = 1;
static const char *root_file;
static const char *outside = "/var/tmp/forceai-probe-outside";
static char tmpdir[64];
static int nchecks;

struct result {
	long ret;
	int err;
};

static const char *errname(int e)
{
	switch (e) {
	case EPERM:
		return "EPERM";
	case ENOENT:
		return "ENOENT";
	case ESRCH:
		return "ESRCH";
	case EIO:
		return "EIO";
	case EBADF:
		return "EBADF";
	case EAGAIN:
		return "EAGAIN";
	case ENOMEM:
		return "ENOMEM";
	case EACCES:
		return "EACCES";
	case EFAULT:
		return "EFAULT";
	case EBUSY:
		return "EBUSY";
	case EEXIST:
		return "EEXIST";
	case ENOTDIR:
		return "ENOTDIR";
	case EINVAL:
		return "EINVAL";
	case EROFS:
		return "EROFS";
	case ENOSYS:
		return "ENOSYS";
	case EOPNOTSUPP:
		return "EOPNOTSUPP";
	case EAFNOSUPPORT:
		return "EAFNOSUPPORT";
	case EXDEV:
		return "EXDEV";
	case ENODEV:
		return "ENODEV";
	case ESTALE:
		return "ESTALE";
	case ENOKEY:
		return "ENOKEY";
	default:
		return "other";
	}
}

static void print_json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* Run fn in a child; report whether it was refused. fn returns the
 * syscall's result with errno set. */
static void check(const char *name, long (*fn)(void))
{
	int p[2];
	nchecks++;
	fflush(stdout);
	if (pipe(p) < 0) {
		printf("{\"check\":\"%s\",\"error\":\"pipe failed\"}\n", name);
		return;
	}
	pid_t pid = fork();
	if (pid < 0) {
		printf("{\"check\":\"%s\",\"error\":\"fork failed\",\"errno\":\"%s\"}\n", name,
		       errname(errno));
		close(p[0]);
		close(p[1]);
		return;
	}
	if (pid == 0) {
		close(p[0]);
		errno = 0;
		struct result r;
		r.ret = fn();
		r.err = errno;
		if (write(p[1], &r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(3);
		_exit(0);
	}
	close(p[1]);
	struct result r;
	ssize_t n;
	do
		n = read(p[0], &r, sizeof(r));
	while (n < 0 && errno == EINTR);
	close(p[0]);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof(r)) {
		if (WIFSIGNALED(st))
			printf("{\"check\":\"%s\",\"refused\":true,\"signal\":%d}\n", name,
			       WTERMSIG(st));
		else
			printf("{\"check\":\"%s\",\"error\":\"no result\",\"status\":%d}\n", name,
			       st);
		return;
	}
	if (r.ret < 0)
		printf("{\"check\":\"%s\",\"refused\":true,\"errno\":\"%s\",\"errno_num\":%d}\n",
		       name, errname(r.err), r.err);
	else
		printf("{\"check\":\"%s\",\"refused\":false,\"result\":%ld}\n", name, r.ret);
}

static void skip(const char *name, const char *why)
{
	nchecks++;
	printf("{\"check\":\"%s\",\"skipped\":true,\"why\":\"%s\"}\n", name, why);
}

/* ---- the attempts (each runs in its own child) ---- */

static long t_mount(void)
{
	return mount("none", tmpdir, "tmpfs", 0, "size=1m");
}
static long t_umount2(void)
{
	return umount2(tmpdir, MNT_DETACH);
}
static long t_pivot_root(void)
{
	/* may_mount() is checked before the (nonexistent) paths. */
	return syscall(SYS_pivot_root, "/nonexistent-probe-new", "/nonexistent-probe-old");
}
static long t_fsopen(void)
{
	return syscall(SYS_fsopen, "tmpfs", 0);
}
static long t_open_tree(void)
{
	return syscall(SYS_open_tree, AT_FDCWD, tmpdir, 1 /* OPEN_TREE_CLONE */);
}
static long t_unshare_user(void)
{
	return unshare(CLONE_NEWUSER);
}
static long t_unshare_ns(void)
{
	return unshare(CLONE_NEWNS);
}
static long t_unshare_net(void)
{
	return unshare(CLONE_NEWNET);
}
static long t_setns(void)
{
	int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	return setns(fd, CLONE_NEWNS);
}
static long t_clone_newuser(void)
{
	long r = syscall(SYS_clone, (unsigned long)(CLONE_NEWUSER | SIGCHLD), 0, 0, 0, 0);
	if (r == 0)
		_exit(0);
	if (r > 0)
		waitpid((pid_t)r, NULL, 0);
	return r;
}
static long t_clone_newpid(void)
{
	long r = syscall(SYS_clone, (unsigned long)(CLONE_NEWPID | SIGCHLD), 0, 0, 0, 0);
	if (r == 0)
		_exit(0);
	if (r > 0)
		waitpid((pid_t)r, NULL, 0);
	return r;
}
static long t_clone3(void)
{
	/* struct clone_args (v0, 64 bytes): flags, pidfd, child_tid,
	 * parent_tid, exit_signal, stack, stack_size, tls. */
	uint64_t args[8] = {CLONE_NEWUSER, 0, 0, 0, SIGCHLD, 0, 0, 0};
	long r = syscall(SYS_clone3, args, sizeof(args));
	if (r == 0)
		_exit(0);
	if (r > 0)
		waitpid((pid_t)r, NULL, 0);
	return r;
}
static long t_ptrace_attach(void)
{
	long r = ptrace(PTRACE_ATTACH, target_pid, 0, 0);
	if (r == 0) { /* confinement broken: at least do not leave it stopped */
		waitpid(target_pid, NULL, __WALL);
		ptrace(PTRACE_DETACH, target_pid, 0, 0);
		errno = 0;
	}
	return r;
}
static long t_process_vm_readv(void)
{
	char buf[16];
	struct iovec local = {buf, sizeof(buf)};
	struct iovec remote = {(void *)0x400000, sizeof(buf)};
	return process_vm_readv(target_pid, &local, 1, &remote, 1, 0);
}
static long read_proc(const char *what)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)target_pid, what);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf));
	int e = errno;
	close(fd);
	errno = e;
	return n; /* > 0: secrets readable; < 0: refused at read */
}
static long t_proc_environ(void)
{
	return read_proc("environ");
}
static long t_proc_mem(void)
{
	return read_proc("mem");
}
static long t_bpf(void)
{
	char attr[128] = {0};
	return syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, attr, sizeof(attr));
}
static long t_perf_event_open(void)
{
	char attr[128] = {0};
	attr[4] = 112; /* size field of perf_event_attr (PERF_ATTR_SIZE_VER0 is 64) */
	return syscall(SYS_perf_event_open, attr, 0, -1, -1, 0);
}
static long t_userfaultfd(void)
{
	return syscall(SYS_userfaultfd, O_CLOEXEC);
}
static long t_io_uring_setup(void)
{
	char params[120] = {0};
	return syscall(SYS_io_uring_setup, 1, params);
}
static long t_keyctl(void)
{
	return syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3 /* session */, 0, 0, 0);
}
static long t_add_key(void)
{
	return syscall(SYS_add_key, "user", "forceai-probe", "x", 1, -2 /* process */);
}
static long t_request_key(void)
{
	return syscall(SYS_request_key, "user", "forceai-probe", NULL, 0);
}
static long t_kexec_load(void)
{
	/* A foreign architecture in the flags: EINVAL past the permission
	 * check, so nothing is loaded or unloaded even if it were allowed. */
	return syscall(SYS_kexec_load, 0, 0, NULL, 0x7fff0000UL);
}
static long t_init_module(void)
{
	return syscall(SYS_init_module, NULL, 0, "");
}
static long t_finit_module(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return syscall(SYS_finit_module, fd, "", 0);
}
static long t_delete_module(void)
{
	return syscall(SYS_delete_module, "forceai_probe_nonexistent", 0);
}
static long t_open_by_handle_at(void)
{
	struct {
		unsigned int handle_bytes;
		int handle_type;
		unsigned char f_handle[64];
	} h = {.handle_bytes = 8, .handle_type = 1};
	return syscall(SYS_open_by_handle_at, AT_FDCWD, &h, O_RDONLY);
}
static long t_name_to_handle_at(void)
{
	struct {
		unsigned int handle_bytes;
		int handle_type;
		unsigned char f_handle[128];
	} h = {.handle_bytes = 128};
	int mount_id;
	return syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &h, &mount_id, 0);
}
static long t_socket_alg(void)
{
	return socket(AF_ALG, SOCK_SEQPACKET, 0);
}
static long t_socket_vsock(void)
{
	return socket(AF_VSOCK, SOCK_STREAM, 0);
}
static long t_socket_packet(void)
{
	return socket(AF_PACKET, SOCK_RAW, 0);
}
static long t_setuid0(void)
{
	return setuid(0);
}
static long t_setgid0(void)
{
	return setgid(0);
}
static long t_setgroups(void)
{
	gid_t g = 0;
	return setgroups(1, &g);
}
static long t_capset(void)
{
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	data[0].effective = data[0].permitted = 1u << CAP_SYS_ADMIN | 1u << CAP_SETUID;
	return syscall(SYS_capset, &hdr, data);
}
static long t_chown_root_file(void)
{
	return chown(root_file, getuid(), getgid());
}
static long t_write_outside(void)
{
	int fd = open(outside, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, "probe\n", 6);
	close(fd);
	unlink(outside);
	return n;
}
static long t_mknod_char(void)
{
	char path[96];
	snprintf(path, sizeof(path), "%s/mem", tmpdir);
	long r = mknod(path, S_IFCHR | 0600, makedev(1, 1)); /* /dev/mem */
	if (r == 0)
		unlink(path);
	return r;
}
static long t_kill_runner(void)
{
	return kill(target_pid, 0); /* permission check only: no signal sent */
}
static long t_syslog(void)
{
	char buf[64];
	return syscall(SYS_syslog, 3 /* SYSLOG_ACTION_READ_ALL */, buf, sizeof(buf));
}
static long t_reboot(void)
{
	/* Invalid magic: EINVAL if it ever got past the permission checks. */
	return syscall(SYS_reboot, 0, 0, 0, NULL);
}

static void print_status(void)
{
	static const char *const keys[] = {"CapInh", "CapPrm",     "CapEff",  "CapBnd",
					   "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters",
					   "Uid",    "Gid",        "Groups",  NULL};
	FILE *f = fopen("/proc/self/status", "re");
	if (!f) {
		printf("{\"status\":null,\"error\":\"cannot open /proc/self/status\"}\n");
		return;
	}
	char line[512];
	int first = 1;
	printf("{\"status\":{");
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		*colon = '\0';
		for (const char *const *k = keys; *k; k++) {
			if (strcmp(line, *k) != 0)
				continue;
			char *v = colon + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			v[strcspn(v, "\n")] = '\0';
			for (char *t = v; *t; t++)
				if (*t == '\t')
					*t = ' ';
			size_t len = strlen(v);
			while (len && v[len - 1] == ' ')
				v[--len] = '\0';
			printf("%s\"%s\":", first ? "" : ",", *k);
			print_json_str(v);
			first = 0;
		}
	}
	fclose(f);
	printf("}}\n");
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--pid") == 0 && i + 1 < argc)
			target_pid = (pid_t)atoi(argv[++i]);
		else if (strcmp(argv[i], "--root-file") == 0 && i + 1 < argc)
			root_file = argv[++i];
		else if (strcmp(argv[i], "--outside") == 0 && i + 1 < argc)
			outside = argv[++i];
		else {
			fprintf(stderr,
				"usage: %s [--pid PID] [--root-file PATH] [--outside PATH]\n",
				argv[0]);
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *tmp = getenv("TMPDIR");
	snprintf(tmpdir, sizeof(tmpdir), "%s/probe.XXXXXX",
		 tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
	if (!mkdtemp(tmpdir)) {
		printf("{\"error\":\"mkdtemp failed\",\"errno\":\"%s\"}\n", errname(errno));
		return 1;
	}

	check("mount", t_mount);
	check("umount2", t_umount2);
	check("pivot_root", t_pivot_root);
	check("fsopen", t_fsopen);
	check("open_tree", t_open_tree);
	check("unshare_newuser", t_unshare_user);
	check("unshare_newns", t_unshare_ns);
	check("unshare_newnet", t_unshare_net);
	check("setns", t_setns);
	check("clone_newuser", t_clone_newuser);
	check("clone_newpid", t_clone_newpid);
	check("clone3", t_clone3);
	check("ptrace_attach_runner", t_ptrace_attach);
	check("process_vm_readv_runner", t_process_vm_readv);
	check("read_runner_environ", t_proc_environ);
	check("read_runner_mem", t_proc_mem);
	check("bpf", t_bpf);
	check("perf_event_open", t_perf_event_open);
	check("userfaultfd", t_userfaultfd);
	check("io_uring_setup", t_io_uring_setup);
	check("keyctl", t_keyctl);
	check("add_key", t_add_key);
	check("request_key", t_request_key);
	check("kexec_load", t_kexec_load);
	check("init_module", t_init_module);
	check("finit_module", t_finit_module);
	check("delete_module", t_delete_module);
	check("open_by_handle_at", t_open_by_handle_at);
	check("name_to_handle_at", t_name_to_handle_at);
	check("socket_af_alg", t_socket_alg);
	check("socket_af_vsock", t_socket_vsock);
	check("socket_af_packet", t_socket_packet);
	check("setuid_0", t_setuid0);
	check("setgid_0", t_setgid0);
	check("setgroups_0", t_setgroups);
	check("capset_raise", t_capset);
	check("mknod_dev_mem", t_mknod_char);
	check("syslog", t_syslog);
	check("reboot", t_reboot);
	check("kill_runner", t_kill_runner);
	if (root_file)
		check("chown_root_file", t_chown_root_file);
	else
		skip("chown_root_file", "no --root-file");
	check("write_outside_roots", t_write_outside);
	print_status();

	rmdir(tmpdir);
	printf("{\"done\":true,\"checks\":%d}\n", nchecks);
	return 0;
}
