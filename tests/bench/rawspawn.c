/* rawspawn: the baseline for task round trips - fork + execv + waitpid of a
 * command line, with no runner in between.
 *
 *   rawspawn [-n RUNS] [-w WARMUP] [-p] [-e ERRLOG] -- CMD [ARG...]
 *
 * Prints the duration of each measured run in nanoseconds, one per line
 * (fork -> child reaped, CLOCK_MONOTONIC). The child's stdin is /dev/null; its
 * stdout and stderr are /dev/null, or with -p a pipe that the driver reads to
 * EOF (as the runner does with a task's output). With -e the child's stderr
 * is appended to ERRLOG instead. Runs that exit non-zero are not sampled;
 * they are counted on stderr and make the exit status 1 (the samples of the
 * other runs are still printed). */
#include "bench.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *prog = "rawspawn";

int main(int argc, char **argv)
{
	long runs = 1000, warmup = 10;
	int use_pipe = 0, opt;
	const char *errlog = NULL;
	while ((opt = getopt(argc, argv, "+n:w:pe:")) != -1) {
		switch (opt) {
		case 'n': runs = bench_atol(prog, "-n", optarg); break;
		case 'w': warmup = bench_atol(prog, "-w", optarg); break;
		case 'p': use_pipe = 1; break;
		case 'e': errlog = optarg; break;
		default:
			fprintf(stderr, "usage: rawspawn [-n RUNS] [-w WARMUP] [-p] [-e ERRLOG] -- CMD [ARG...]\n");
			return 2;
		}
	}
	if (optind >= argc)
		bench_die(prog, "no command given");
	char **cmd = argv + optind;
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		bench_die(prog, "/dev/null: %s", strerror(errno));
	int errfd = devnull;
	if (errlog && (errfd = open(errlog, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0)
		bench_die(prog, "%s: %s", errlog, strerror(errno));
	uint64_t *s = calloc((size_t)runs + 1, sizeof *s);
	if (!s)
		bench_die(prog, "out of memory");
	size_t n = 0;
	long failed = 0;
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
			dup2(use_pipe ? pfd[1] : errfd, 2);
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
			failed++;
			continue;
		}
		if (i >= warmup)
			s[n++] = t1 - t0;
	}
	bench_print_samples(s, n);
	free(s);
	if (failed)
		fprintf(stderr, "%s: %ld of %ld runs failed\n", prog, failed, warmup + runs);
	return failed ? 1 : 0;
}
