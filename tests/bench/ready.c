/* ready: start-to-ready time of an HTTP server (the runner), or the
 * exec-to-exit time of a plain command (the floor it is compared with).
 *
 *   ready [-n RUNS] [-p PORT] [-l LOG] [-T TIMEOUT_MS] [-i POLL_US] -- CMD [ARG...]
 *       fork+exec CMD, then connect to 127.0.0.1:PORT and send GET /ping until
 *       the answer is 200. Prints one line per run: "<ready_ns> <stop_ns>",
 *       ready = fork -> 200 received, stop = SIGTERM -> child reaped.
 *   ready -x [-n RUNS] -- CMD [ARG...]
 *       fork+exec CMD and wait for it to exit. Prints "<exit_ns>" per run.
 *
 * Times come from CLOCK_MONOTONIC. The child's stdout/stderr go to LOG
 * (default /dev/null). Exit status 1 if any run failed. */
#include "bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *prog = "ready";

/* 1 = got 200, 0 = not ready yet (refused, reset, other status) */
static int try_ping(int port, int timeout_ms)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		bench_die(prog, "socket: %s", strerror(errno));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int ok = 0;
	if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		static const char req[] =
			"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
		if (write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1)) {
			char buf[512];
			size_t have = 0;
			for (;;) {
				struct pollfd p = {.fd = fd, .events = POLLIN};
				if (poll(&p, 1, timeout_ms) <= 0)
					break;
				ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
				if (r <= 0)
					break;
				have += (size_t)r;
				buf[have] = 0;
				char *eol = strstr(buf, "\r\n");
				if (eol || have == sizeof buf - 1) {
					ok = strncmp(buf, "HTTP/1.1 200", 12) == 0 ||
					     strncmp(buf, "HTTP/1.0 200", 12) == 0;
					break;
				}
			}
		}
	}
	close(fd);
	return ok;
}

int main(int argc, char **argv)
{
	long runs = 20, port = 0, timeout_ms = 10000, poll_us = 100;
	const char *log = "/dev/null";
	int exit_mode = 0, opt;
	while ((opt = getopt(argc, argv, "+n:p:l:T:i:x")) != -1) {
		switch (opt) {
		case 'n':
			runs = bench_atol(prog, "-n", optarg);
			break;
		case 'p':
			port = bench_atol(prog, "-p", optarg);
			break;
		case 'l':
			log = optarg;
			break;
		case 'T':
			timeout_ms = bench_atol(prog, "-T", optarg);
			break;
		case 'i':
			poll_us = bench_atol(prog, "-i", optarg);
			break;
		case 'x':
			exit_mode = 1;
			break;
		default:
			fprintf(stderr,
				"usage: ready [-x] [-n RUNS] [-p PORT] [-l LOG] [-T MS] [-i US] -- CMD [ARG...]\n");
			return 2;
		}
	}
	if (optind >= argc)
		bench_die(prog, "no command given");
	if (!exit_mode && (port <= 0 || port > 65535))
		bench_die(prog, "-p PORT is required (1..65535)");
	signal(SIGPIPE, SIG_IGN);
	int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (logfd < 0)
		bench_die(prog, "%s: %s", log, strerror(errno));
	char **cmd = argv + optind;
	int failed = 0;

	for (long i = 0; i < runs; i++) {
		uint64_t t0 = bench_now_ns();
		pid_t pid = fork();
		if (pid < 0)
			bench_die(prog, "fork: %s", strerror(errno));
		if (pid == 0) {
			dup2(logfd, 1);
			dup2(logfd, 2);
			execv(cmd[0], cmd);
			_exit(127);
		}
		int st;
		if (exit_mode) {
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			uint64_t t1 = bench_now_ns();
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				fprintf(stderr, "%s: run %ld: %s exited with status 0x%x\n", prog,
					i, cmd[0], st);
				failed = 1;
				continue;
			}
			printf("%llu\n", (unsigned long long)(t1 - t0));
			continue;
		}
		uint64_t deadline = t0 + (uint64_t)timeout_ms * 1000000ull, t1 = 0;
		int dead = 0;
		for (;;) {
			if (try_ping((int)port, 1000)) {
				t1 = bench_now_ns();
				break;
			}
			if (waitpid(pid, &st, WNOHANG) == pid) {
				fprintf(stderr,
					"%s: run %ld: %s exited (status 0x%x) before it was ready; log: %s\n",
					prog, i, cmd[0], st, log);
				dead = 1;
				break;
			}
			if (bench_now_ns() > deadline) {
				fprintf(stderr, "%s: run %ld: not ready after %ld ms\n", prog, i,
					timeout_ms);
				break;
			}
			bench_sleep_ns(poll_us * 1000);
		}
		if (dead) {
			failed = 1;
			continue;
		}
		uint64_t t2 = bench_now_ns();
		kill(pid, SIGTERM);
		uint64_t kill_deadline = t2 + 10000000000ull;
		for (;;) {
			pid_t w = waitpid(pid, &st, WNOHANG);
			if (w == pid)
				break;
			if (bench_now_ns() > kill_deadline) {
				fprintf(stderr,
					"%s: run %ld: no exit 10 s after SIGTERM; SIGKILL\n", prog,
					i);
				kill(pid, SIGKILL);
				waitpid(pid, &st, 0);
				failed = 1;
				break;
			}
			bench_sleep_ns(50000);
		}
		uint64_t t3 = bench_now_ns();
		if (!t1) {
			failed = 1;
			continue;
		}
		printf("%llu %llu\n", (unsigned long long)(t1 - t0), (unsigned long long)(t3 - t2));
	}
	fflush(stdout);
	return failed;
}
