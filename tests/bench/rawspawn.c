/* rawspawn: the baseline for task round trips - fork + execv + waitpid of a
 * command line, with no runner in between.
 *
 *   rawspawn [-n RUNS] [-w WARMUP] [-p] -- CMD [ARG...]
 *
 * Prints the duration of each measured run in nanoseconds, one per line
 * (fork -> child reaped, CLOCK_MONOTONIC). The child's stdin is /dev/null; its
 * stdout and stderr are /dev/null, or with -p a pipe that the driver reads to
 * EOF (as the runner does with a task's output). Exit status 1 if any run
 * exited non-zero. */
#include "bench.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *prog = "rawspawn";

int main(int argc, char **argv)
{
	long runs = 1000, warmup = 10;
	int use_pipe = 0, opt;
	while ((opt = getopt(argc, argv, "+n:w:p")) != -1) {
		switch (opt) {
		case 'n': runs = bench_atol(prog, "-n", optarg); break;
		case 'w': warmup = bench_atol(prog, "-w", optarg); break;
		case 'p': use_pipe = 1; break;
		default:
			fprintf(stderr, "usage: rawspawn [-n RUNS] [-w WARMUP] [-p] -- CMD [ARG...]\n");
			return 2;
		}
	}
	if (optind >= argc)
		bench_die(prog, "no command given");
	char **cmd = argv + optind;
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		bench_die(prog, "/dev/null: %s", strerror(errno));
	uint64_t *s = calloc((size_t)runs + 1, sizeof *s);
	if (!s)
		bench_die(prog, "out of memory");
	size_t n = 0;
	int failed = 0;
	for (long i = 0; i < warmup + runs; i++) {
		int pfd[2] = { -1, -1 };
		uint64_t t0 = bench_now_ns();
		if (use_pipe && pipe2(pfd, O_CLOEXEC) < 0)
			bench_die(prog, "pipe: %s", strerror(errno));
		pid_t pid = fork();
		if (pid < 0)
			bench_die(prog, "fork: %s", strerror(errno));
		if (pid == 0) {
			dup2(devnull, 0);
			dup2(use_pipe ? pfd[1] : devnull, 1);
			dup2(use_pipe ? pfd[1] : devnull, 2);
			execv(cmd[0], cmd);
			_exit(127);
		}
		if (use_pipe) {
			char buf[4096];
			close(pfd[1]);
			for (;;) {
				ssize_t r = read(pfd[0], buf, sizeof buf);
				if (r == 0 || (r < 0 && errno != EINTR))
					break;
			}
			close(pfd[0]);
		}
		int st;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		uint64_t t1 = bench_now_ns();
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			if (!failed)
				fprintf(stderr, "%s: %s exited with status 0x%x\n", prog, cmd[0], st);
			failed = 1;
			continue;
		}
		if (i >= warmup)
			s[n++] = t1 - t0;
	}
	bench_print_samples(s, n);
	free(s);
	return failed;
}
