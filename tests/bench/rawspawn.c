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
 * other runs are still printed).
 *
 *   rawspawn -c LOOPS -d SECONDS [-p] [-e ERRLOG] -- CMD [ARG...]
 *
 * Load mode, the baseline of the runner's load figures: LOOPS threads each
 * run the command back to back for SECONDS; prints one JSON object (runs
 * done, wall time, runs per second, latency percentiles in ns, and the CPU
 * time of this driver and of its reaped children). Exit status 1 if any run
 * failed. */
#include "bench.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *prog = "rawspawn";

/* One fork+execv+waitpid; 0 with the duration in *lat when it exited 0, else 1. */
static int one_spawn(char **cmd, int devnull, int errfd, int use_pipe, uint64_t *lat, int *st_out)
{
	int pfd[2] = {-1, -1};
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
	*lat = bench_now_ns() - t0;
	*st_out = st;
	return !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}

/* Load mode (-c LOOPS -d SECONDS): LOOPS threads each spawn the command back
 * to back until SECONDS have passed since they all started. */
struct loop {
	pthread_t th;
	char **cmd;
	int devnull, errfd, use_pipe;
	uint64_t *lat;
	size_t n, cap;
	long failed;
	uint64_t end;
};

static pthread_barrier_t start_barrier;
static uint64_t load_t0, load_ns;

static void *loop_main(void *arg)
{
	struct loop *l = arg;
	pthread_barrier_wait(&start_barrier);
	uint64_t deadline = load_t0 + load_ns;
	while (bench_now_ns() < deadline) {
		uint64_t lat;
		int st;
		if (one_spawn(l->cmd, l->devnull, l->errfd, l->use_pipe, &lat, &st)) {
			if (!l->failed)
				fprintf(stderr, "%s: %s exited with status 0x%x\n", prog, l->cmd[0],
					st);
			l->failed++;
			continue;
		}
		if (l->n == l->cap) {
			l->cap = l->cap ? l->cap * 2 : 4096;
			l->lat = realloc(l->lat, l->cap * sizeof *l->lat);
			if (!l->lat)
				bench_die(prog, "out of memory");
		}
		l->lat[l->n++] = lat;
	}
	l->end = bench_now_ns();
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted samples, as bench.py computes it. */
static uint64_t pctl(const uint64_t *s, size_t n, double p)
{
	if (!n)
		return 0;
	double k = p / 100.0 * (double)n;
	size_t i = (size_t)k;
	if ((double)i < k)
		i++;
	return s[i ? i - 1 : 0];
}

static double tv_s(struct timeval tv)
{
	return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static int run_load(long loops, long seconds, char **cmd, int devnull, int errfd, int use_pipe)
{
	struct loop *l = calloc((size_t)loops, sizeof *l);
	if (!l)
		bench_die(prog, "out of memory");
	load_ns = (uint64_t)seconds * 1000000000ull;
	pthread_barrier_init(&start_barrier, NULL, (unsigned)loops + 1);
	for (long i = 0; i < loops; i++) {
		l[i].cmd = cmd;
		l[i].devnull = devnull;
		l[i].errfd = errfd;
		l[i].use_pipe = use_pipe;
		int e = pthread_create(&l[i].th, NULL, loop_main, &l[i]);
		if (e)
			bench_die(prog, "pthread_create: %s", strerror(e));
	}
	load_t0 = bench_now_ns();
	pthread_barrier_wait(&start_barrier);
	size_t total = 0;
	long failed = 0;
	uint64_t end = load_t0;
	for (long i = 0; i < loops; i++) {
		pthread_join(l[i].th, NULL);
		total += l[i].n;
		failed += l[i].failed;
		if (l[i].end > end)
			end = l[i].end;
	}
	uint64_t *all = malloc((total + 1) * sizeof *all);
	if (!all)
		bench_die(prog, "out of memory");
	size_t k = 0;
	double sum = 0;
	for (long i = 0; i < loops; i++) {
		memcpy(all + k, l[i].lat, l[i].n * sizeof *all);
		k += l[i].n;
		free(l[i].lat);
	}
	for (size_t i = 0; i < total; i++)
		sum += (double)all[i];
	qsort(all, total, sizeof *all, cmp_u64);
	struct rusage self, kids;
	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &kids);
	double wall = (double)(end - load_t0) / 1e9;
	printf("{\"clients\":%ld,\"seconds\":%ld,\"wall_s\":%.6f,\"tasks\":%zu,\"failed\":%ld,"
	       "\"tasks_per_s\":%.3f,\"p50_ns\":%llu,\"p90_ns\":%llu,\"p99_ns\":%llu,\"max_ns\":%llu,"
	       "\"mean_ns\":%.0f,\"self_cpu_s\":%.6f,\"children_cpu_s\":%.6f}\n",
	       loops, seconds, wall, total, failed, wall > 0 ? (double)total / wall : 0.0,
	       (unsigned long long)pctl(all, total, 50), (unsigned long long)pctl(all, total, 90),
	       (unsigned long long)pctl(all, total, 99),
	       (unsigned long long)(total ? all[total - 1] : 0), total ? sum / (double)total : 0.0,
	       tv_s(self.ru_utime) + tv_s(self.ru_stime),
	       tv_s(kids.ru_utime) + tv_s(kids.ru_stime));
	fflush(stdout);
	if (failed)
		fprintf(stderr, "%s: %ld of %zu runs failed\n", prog, failed,
			total + (size_t)failed);
	free(all);
	free(l);
	return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	long runs = 1000, warmup = 10, loops = 0, seconds = 10;
	int use_pipe = 0, opt;
	const char *errlog = NULL;
	while ((opt = getopt(argc, argv, "+n:w:pe:c:d:")) != -1) {
		switch (opt) {
		case 'n':
			runs = bench_atol(prog, "-n", optarg);
			break;
		case 'w':
			warmup = bench_atol(prog, "-w", optarg);
			break;
		case 'p':
			use_pipe = 1;
			break;
		case 'e':
			errlog = optarg;
			break;
		case 'c':
			loops = bench_atol(prog, "-c", optarg);
			break;
		case 'd':
			seconds = bench_atol(prog, "-d", optarg);
			break;
		default:
			fprintf(stderr,
				"usage: rawspawn [-n RUNS] [-w WARMUP] [-p] [-e ERRLOG] -- CMD [ARG...]\n"
				"       rawspawn -c LOOPS -d SECONDS [-p] [-e ERRLOG] -- CMD [ARG...]\n");
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
	if (loops > 0) {
		if (seconds <= 0)
			bench_die(prog, "-d SECONDS must be positive");
		return run_load(loops, seconds, cmd, devnull, errfd, use_pipe);
	}
	uint64_t *s = calloc((size_t)runs + 1, sizeof *s);
	if (!s)
		bench_die(prog, "out of memory");
	size_t n = 0;
	long failed = 0;
	for (long i = 0; i < warmup + runs; i++) {
		uint64_t lat;
		int st;
		if (one_spawn(cmd, devnull, errfd, use_pipe, &lat, &st)) {
			if (!failed)
				fprintf(stderr, "%s: %s exited with status 0x%x\n", prog, cmd[0],
					st);
			failed++;
			continue;
		}
		if (i >= warmup)
			s[n++] = lat;
	}
	bench_print_samples(s, n);
	free(s);
	if (failed)
		fprintf(stderr, "%s: %ld of %ld runs failed\n", prog, failed, warmup + runs);
	return failed ? 1 : 0;
}
