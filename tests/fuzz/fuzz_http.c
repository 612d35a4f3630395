/* fuzz_http: HTTP request handling end to end, through libmicrohttpd's
 * callbacks and the runner's own routing, auth, body handling and handlers.
 *
 * One runner is set up in-process (config_parse with a fake argv, loop,
 * task and session tables, http_start on 127.0.0.1:0). Each input is raw
 * bytes written to a fresh loopback TCP connection; the write side is then
 * shut down and the runner's loop is stepped until the server closes the
 * connection or goes idle; the response is read and thrown away.
 *
 * Nothing may be spawned: --max-tasks is forced to 0 after start, so every
 * route that would run a task answers 429 before reaching the spawner, and
 * spawn_task is wrapped (-Wl,--wrap=spawn_task, fuzz_hooks.c) to abort if it
 * is ever reached. The only processes are made once, before fuzzing starts: two
 * fake tasks whose "shim" is a forked child that writes fixed bytes to its
 * stdout/stderr pipes and _exit()s (no execve), so that the status, logs,
 * events and delete routes have a finished task of each API to work on.
 *
 * The files API acts on the filesystem (as the task user, through
 * setfsuid), so the fuzzer confines what it can touch: the task user is
 * 65533:65533 (owns nothing; the process drops its supplementary groups),
 * writes are allowed only beneath /tmp/forceai-fuzz-files (the write roots,
 * emptied after every input), and when the process may, it enters a private
 * mount namespace with fresh tmpfs on /tmp, /var/tmp and /dev/shm, so what
 * is written there vanishes with the fuzzer.
 *
 * The port proxy (/proxy/{port}/...) connects to 127.0.0.1: when it may, the
 * process enters a network namespace of its own (loopback up), where
 * nothing listens but the runner, so the fuzzer never talks to the
 * machine's services.
 *
 * Ids are predictable (-Wl,--wrap=random_id) so seeds can name them:
 *   execd task   00000000000000000000000000000001
 *   native task  00000000000000000000000000000002
 *   session      00000000000000000000000000000003 (re-created for every input)
 * The access token is "fuzz-token" (X-EXECD-ACCESS-TOKEN).
 *
 * Invariants checked after every input (abort = finding): the connection is
 * released and no stream or proxied request stays open once the client is
 * gone; every 512
 * inputs, the process's open fd count has not grown. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <net/if.h>
#include <sys/ioctl.h>

#include <microhttpd.h>

#include "api/proxy.h"
#include "relay/portproxy.h"
#include "api/routes.h"
#include "confine/confine.h"
#include "core/error.h"
#include "files/sched.h"
#include "http/gate.h"
#include "http/http.h"
#include "http/internal.h"
#include "task/task_uids.h"
#include "http/ws.h"
#include "core/runner.h"
#include "task/session.h"
#include "task/spawn.h"
#include "task/task.h"

static struct runner R;
static struct confine_policy R_policy;
static struct files_sched R_files_sched;
static char state_dir[64];
static unsigned long long id_counter;
static int fd_baseline = -1;
static unsigned long long n_inputs;

#define FAKE_STDOUT "line one\nline two\r\n\r\nthird\rno newline at the end"
#define FAKE_STDERR "err \xff\xfe not utf-8\n\xe2\x82"

/* tests/fuzz/fuzz_hooks.c: the wrapped spawn_task calls this, or aborts
 * when it is NULL (always, once fuzzing has started). */
extern pid_t (*fuzz_spawn_hook)(struct confine_plan *plan, const struct spawn_io *io);
extern int fuzz_diag_fd;
extern int fuzz_http_port;

static pid_t fake_spawn(struct confine_plan *plan, const struct spawn_io *io)
{
	(void)plan;
	pid_t pid = fork();
	if (pid == 0) {
		/* The fake task: fixed output, no execve. */
		(void)!write(io->out_fd, FAKE_STDOUT, sizeof(FAKE_STDOUT) - 1);
		(void)!write(io->err_fd, FAKE_STDERR, sizeof(FAKE_STDERR) - 1);
		_exit(3);
	}
	return pid < 0 ? -errno : pid;
}

int __wrap_random_id(char out[33]);
int __wrap_random_id(char out[33])
{
	snprintf(out, 33, "%016llx%016llx", 0ULL, ++id_counter);
	return 0;
}

/* The runner logs a line per request to stderr, so the target runs with
 * -close_fd_mask=2 (tests/fuzz/http.options): libFuzzer then keeps its own
 * and the sanitizers' reports on a copy of stderr. The harness keeps one
 * too (taken before libFuzzer closes fd 2) for its own findings. */
static int diag_fd = STDERR_FILENO;

static void die(const char *what)
{
	dprintf(diag_fd, "fuzz_http: %s (errno: %s)\n", what, strerror(errno));
	abort();
}

/* The runner's panic hook logs to stderr, which libFuzzer has closed: a
 * libmicrohttpd panic (an inconsistency the runner's use of it caused) is a
 * finding and must say what it was. */
static void harness_mhd_panic(void *cls, const char *file, unsigned int line, const char *reason)
{
	(void)cls;
	dprintf(diag_fd, "fuzz_http: libmicrohttpd panic at %s:%u: %s\n", file ? file : "?", line,
		reason ? reason : "?");
	abort();
}

static void cleanup(void)
{
	if (state_dir[0])
		rmdir(state_dir);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void fake_task(enum task_api api)
{
	struct task_spec spec = {
		.api = api,
		.command = "fake",
		.cwd = "/",
		.cap = api == TASK_API_NATIVE ? &task_cap_exec : NULL,
		.state_in_fd = -1,
		.state_out_fd = -1,
	};
	struct error err;
	fuzz_spawn_hook = fake_spawn;
	struct task *t = task_start(&R, &spec, &err);
	fuzz_spawn_hook = NULL;
	if (!t) {
		dprintf(diag_fd, "fuzz_http: fake task: %s %s\n", error_code(&err), err.msg);
		abort();
	}
	for (int i = 0; i < 1000 && !t->finished; i++) {
		loop_run_once(&R.loop, 10);
		reaper_reap(&R.reaper);
	}
	if (!t->finished)
		die("fake task did not finish");
}

#define SANDBOX "/tmp/forceai-fuzz-files"
#define TASK_UID 65533

static void private_tmp(void)
{
	if (setgroups(0, NULL) < 0)
		die("setgroups");
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		dprintf(diag_fd,
			"fuzz_http: no private mount namespace (%s): the files API "
			"writes only beneath " SANDBOX " (write roots)\n",
			strerror(errno));
		return;
	}
	static const char *const dirs[] = {"/tmp", "/var/tmp", "/dev/shm"};
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (mount("fuzz-tmp", dirs[i], "tmpfs", MS_NOSUID | MS_NODEV,
			  "size=256m,mode=1777") < 0 &&
		    errno != ENOENT) {
			dprintf(diag_fd, "fuzz_http: tmpfs on %s: %s\n", dirs[i], strerror(errno));
			abort();
		}
}

/* A network namespace of our own, loopback up (see the header). */
static void private_net(void)
{
	if (unshare(CLONE_NEWNET) < 0) {
		dprintf(diag_fd,
			"fuzz_http: no private network namespace (%s): /proxy/{port} "
			"requests may reach services on this machine's loopback\n",
			strerror(errno));
		return;
	}
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		die("SIOCGIFFLAGS lo");
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		die("SIOCSIFFLAGS lo");
	close(s);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	if (ftw->level > 0 && remove(path) < 0)
		dprintf(diag_fd, "fuzz_http: cannot remove %s: %s\n", path, strerror(errno));
	return 0;
}

/* Empty the sandbox (only when something is in it: one readdir). */
static void clean_sandbox(void)
{
	DIR *d = opendir(SANDBOX);
	if (!d)
		die("sandbox vanished");
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	if (n > 2)
		nftw(SANDBOX, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	if (chmod(SANDBOX, 0755) < 0 || chown(SANDBOX, TASK_UID, TASK_UID) < 0)
		die("sandbox chmod/chown");
}

static void reset_sessions(void)
{
	sessions_free_all(&R);
	if (sessions_init(&R) < 0)
		die("sessions_init");
	id_counter = 2;
	if (!session_create(&R, NULL, NULL))
		die("session_create");
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	diag_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 100);
	if (diag_fd < 0)
		diag_fd = STDERR_FILENO;
	fuzz_diag_fd = diag_fd;
	private_tmp();
	private_net();
	if (mkdir(SANDBOX, 0755) < 0 && errno != EEXIST)
		die("mkdir sandbox");
	struct stat sst;
	if (lstat(SANDBOX, &sst) < 0 || !S_ISDIR(sst.st_mode))
		die(SANDBOX " is not a directory");
	clean_sandbox();
	snprintf(state_dir, sizeof(state_dir), "/tmp/fuzz_http.XXXXXX");
	if (!mkdtemp(state_dir))
		die("mkdtemp");
	atexit(cleanup);
	char *av[] = {"fuzz_http",   "--listen",         "127.0.0.1:0", "--state-dir",
		      state_dir,     "--max-body",       "4096",        "--idle-timeout-ms",
		      "1000",        "--task-log-max",   "65536",       "--stream-window",
		      "16384",       "--grace-ms",       "100",         "--task-user",
		      "65533:65533", "--landlock-roots", SANDBOX,       NULL};
	optind = 1;
	struct error err;
	if (config_parse(&R.cfg, (int)(sizeof(av) / sizeof(av[0])) - 1, av, &err) != 0) {
		dprintf(diag_fd, "fuzz_http: config_parse: %s\n", err.msg);
		abort();
	}
	R.cfg.token = strdup("fuzz-token");
	R.self_pid = getpid();
	R.init_mode = INIT_SUBREAPER;
	R.signals.fd = -1;
	R.policy = &R_policy;
	R.files_sched = &R_files_sched;
	/* Confinement "in force" as far as the files API looks: writes only
	 * beneath the write roots. Nothing is ever spawned. */
	R.policy->enabled = true;
	R.policy->landlock_ruleset_fd = -1;
	R.policy->landlock.ruleset_fd = -1;
	R.policy->landlock.root_ruleset_fd = -1;
	R.policy->landlock.abi = 1;
	snprintf(R.policy->landlock.roots, sizeof(R.policy->landlock.roots), "%s", SANDBOX);
	R.state_dir_fd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (R.state_dir_fd < 0)
		die("open state dir");
	if (loop_init(&R.loop) < 0)
		die("loop_init");
	reaper_init(&R.reaper);
	if (tasks_init(&R) < 0 || sessions_init(&R) < 0 || relay_init(&R) < 0)
		die("tables");
	static const struct gate_tasks doors = {.is_task_uid = task_uids_include,
						.describe = task_uids_describe};
	if (http_start(&R, api_routes, api_n_routes, &doors, &err) < 0) {
		dprintf(diag_fd, "fuzz_http: http_start: %s\n", err.msg);
		abort();
	}
	/* As main.c registers them: WebSocket connections keep the server busy and are ticked (no
	 * runtime profile here: its gate would let everything through). */
	static const struct http_hooks hooks = {.upgraded_count = ws_count,
						.upgraded_tick = ws_tick,
						.upgraded_close_all = ws_close_all};
	http_set_hooks(&R, &hooks);
	MHD_set_panic_func(harness_mhd_panic, NULL);
	fuzz_http_port = (int)http_port(&R);
	id_counter = 0;
	fake_task(TASK_API_EXECD);
	fake_task(TASK_API_NATIVE);
	/* From here on no route can start a task. */
	R.cfg.max_tasks = 0;
	return 0;
}

/* Step the loop until it has been idle for a few rounds; wake streams that
 * sleep (as the 1 s tick would) when they hold a connection, as though their
 * keep-alive interval had passed: an idle stream (an MCP session's GET stream)
 * learns that its client is gone when its keep-alive is written, which here
 * would be seconds of real time away. */
static void settle(void)
{
	int idle = 0;
	for (int i = 0; i < 400; i++) {
		int n = loop_run_once(&R.loop, 0);
		if (n < 0)
			die("loop_run_once failed");
		if (n > 0) {
			idle = 0;
			continue;
		}
		if (++idle < 3)
			continue;
		if (!http_busy(&R))
			return;
		for (struct http_stream *st = R.http ? R.http->streams : NULL; st; st = st->next)
			st->last_send_ms = 0;
		http_tick(&R);
		idle = 0;
	}
	die("a stream stayed open after its client went away");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	reset_sessions();

	int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c < 0)
		die("socket");
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http_port(&R))};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* Non-blocking: libFuzzer's SIGALRM may interrupt a blocking connect. */
	if (connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno != EINPROGRESS && errno != EINTR)
			die("connect");
		struct pollfd pfd = {.fd = c, .events = POLLOUT};
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		while (poll(&pfd, 1, 1000) < 0 && errno == EINTR)
			;
		if (getsockopt(c, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
			errno = soerr;
			die("connect");
		}
	}

	size_t off = 0;
	bool wr_closed = false, eof = false;
	int idle = 0;
	static char sink[65536];
	for (int it = 0; it < 2000 && !eof; it++) {
		if (!wr_closed) {
			if (off < size) {
				ssize_t n = send(c, data + off, size - off, MSG_NOSIGNAL);
				if (n > 0)
					off += (size_t)n;
				else if (n < 0 && errno != EAGAIN && errno != EINTR)
					wr_closed = true; /* the server closed on us */
			}
			if (off == size && !wr_closed) {
				shutdown(c, SHUT_WR);
				wr_closed = true;
			}
		}
		int n = loop_run_once(&R.loop, 0);
		if (n < 0)
			die("loop_run_once failed");
		bool got = false;
		for (;;) {
			ssize_t r = recv(c, sink, sizeof(sink), 0);
			if (r > 0) {
				got = true;
				continue;
			}
			if (r == 0 || (errno != EAGAIN && errno != EINTR))
				eof = true;
			break;
		}
		/* The server waits for something that will not come (a
		 * suspended stream): stop, as a client would time out. */
		if (wr_closed && n == 0 && !got) {
			if (++idle >= 3)
				break;
		} else {
			idle = 0;
		}
	}
	/* Abortive close: no TIME_WAIT pile-up over millions of inputs. */
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(c);
	settle();
	if (relay_count(&R))
		die("a proxied request stayed open after its client went away");
	clean_sandbox();

	if (++n_inputs % 512 == 0) {
		int fds = count_fds();
		if (fd_baseline < 0)
			fd_baseline = fds;
		else if (fds > fd_baseline + 4) {
			dprintf(diag_fd, "fuzz_http: open fds grew from %d to %d\n", fd_baseline,
				fds);
			abort();
		}
	}
	return 0;
}
