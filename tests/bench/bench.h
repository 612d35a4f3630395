/* Small helpers shared by the benchmark drivers in tests/bench. */
#ifndef FORCEAI_BENCH_H
#define FORCEAI_BENCH_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void bench_sleep_ns(long ns)
{
	struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

__attribute__((format(printf, 2, 3), noreturn)) static inline void bench_die(const char *prog,
									     const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static inline long bench_atol(const char *prog, const char *opt, const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < 0)
		bench_die(prog, "%s: not a non-negative number: '%s'", opt, s);
	return v;
}

/* All of p[0..n) to a socket, or die. */
static inline void bench_send_all(const char *prog, int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			bench_die(prog, "send: %s", strerror(errno));
		p += w;
		n -= (size_t)w;
	}
}

/* Samples are printed one per line, in nanoseconds, so that the caller can
 * merge interleaved blocks before computing percentiles. */
static inline void bench_print_samples(const uint64_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%llu\n", (unsigned long long)s[i]);
	fflush(stdout);
}

#endif
