/* rtt: round-trip latency of a task through the runner's HTTP API, over one
 * keep-alive connection (reopened only when the server closes it).
 *
 *   rtt -p PORT [-n RUNS] [-w WARMUP] [-P PATH] [-b JSON] [-H 'Name: value']...
 *
 * Defaults: PATH /command, JSON {"command":"true"}. Each sample is the time
 * from just before the request is written to the moment the terminal event
 * has been received in full (CLOCK_MONOTONIC, nanoseconds, one per line).
 * Terminal events understood: execd frames {"type":"execution_complete"} (ok)
 * and {"type":"error"} (failed); native SSE "event: exit" (ok when it says
 * "status":"succeeded") and "event: error" (failed). The rest of the response
 * (end of the chunked body) is read before the next request is sent, outside
 * the timed window. Exit status 1 if any request failed.
 *
 *   rtt -p PORT -c CLIENTS -d SECONDS [-P PATH] [-b JSON] [-H HDR]...
 *
 * Load mode: CLIENTS threads, each with its own keep-alive connection, loop
 * the request back to back for SECONDS; prints one JSON object (tasks done,
 * wall time from the common start to the last response, tasks per second,
 * latency percentiles over every request, in ns). Exit status 1 if any
 * request failed. */
#include "bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *prog = "rtt";

struct buf {
	char *p;
	size_t len, cap;
};

static void buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (!b->p)
			bench_die(prog, "out of memory");
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void buf_consume(struct buf *b, size_t n)
{
	memmove(b->p, b->p + n, b->len - n);
	b->len -= n;
	b->p[b->len] = 0;
}

static int port;
static int timeout_ms = 30000;

static int conn_open(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		bench_die(prog, "socket: %s", strerror(errno));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
		bench_die(prog, "connect 127.0.0.1:%d: %s", port, strerror(errno));
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

/* Reads more bytes into raw; 0 on EOF, -1 on error/timeout. */
static int fill(int fd, struct buf *raw)
{
	char tmp[65536];
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int pr = poll(&p, 1, timeout_ms);
	if (pr == 0) {
		fprintf(stderr, "%s: no data for %d ms\n", prog, timeout_ms);
		return -1;
	}
	if (pr < 0)
		return -1;
	ssize_t r = read(fd, tmp, sizeof tmp);
	if (r < 0)
		return -1;
	buf_add(raw, tmp, (size_t)r);
	return r > 0;
}

enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE };

struct resp {
	int status, chunked, close;
	long long clen; /* -1: until EOF */
	int chstate;
	size_t chleft;
	struct buf body;
	size_t scan;  /* body offset of the first frame not examined yet */
	int terminal; /* 0 none, 1 ok, 2 failed */
	char detail[200];
};

/* Moves decoded body bytes from raw into r->body. Returns 1 when the body is complete. */
static int decode(struct resp *r, struct buf *raw)
{
	if (!r->chunked) {
		size_t n = raw->len;
		if (r->clen >= 0 && (long long)(r->body.len + n) > r->clen)
			n = (size_t)(r->clen - (long long)r->body.len);
		buf_add(&r->body, raw->p, n);
		buf_consume(raw, n);
		return r->clen >= 0 && (long long)r->body.len == r->clen;
	}
	for (;;) {
		if (r->chstate == CH_DONE)
			return 1;
		if (r->chstate == CH_DATA) {
			size_t n = raw->len < r->chleft ? raw->len : r->chleft;
			if (!n)
				return 0;
			buf_add(&r->body, raw->p, n);
			buf_consume(raw, n);
			r->chleft -= n;
			if (!r->chleft)
				r->chstate = CH_DATA_END;
			continue;
		}
		char *eol = raw->len ? memmem(raw->p, raw->len, "\r\n", 2) : NULL;
		if (!eol)
			return 0;
		size_t linelen = (size_t)(eol - raw->p);
		if (r->chstate == CH_SIZE) {
			r->chleft = strtoul(raw->p, NULL, 16);
			r->chstate = r->chleft ? CH_DATA : CH_TRAILER;
		} else if (r->chstate == CH_DATA_END) {
			if (linelen)
				bench_die(prog, "bad chunked encoding");
			r->chstate = CH_SIZE;
		} else if (r->chstate == CH_TRAILER && linelen == 0) {
			r->chstate = CH_DONE;
		}
		buf_consume(raw, linelen + 2);
	}
}

/* Looks at complete frames ("...\n\n") not seen yet for a terminal event. */
static void scan_frames(struct resp *r)
{
	while (!r->terminal) {
		char *start = r->body.p + r->scan;
		char *end = r->body.len > r->scan ? memmem(start, r->body.len - r->scan, "\n\n", 2)
						  : NULL;
		if (!end)
			return;
		*end = 0; /* frames are examined once; the body is not needed afterwards */
		if (strstr(start, "\"type\":\"execution_complete\"")) {
			r->terminal = 1;
		} else if (strstr(start, "\"type\":\"error\"") || strstr(start, "event: error\n") ||
			   (strncmp(start, "event: error", 12) == 0)) {
			r->terminal = 2;
		} else if (strstr(start, "event: exit\n") ||
			   strncmp(start, "event: exit", 11) == 0) {
			r->terminal = strstr(start, "\"status\":\"succeeded\"") ? 1 : 2;
		}
		if (r->terminal == 2)
			snprintf(r->detail, sizeof r->detail, "%s", start);
		*end = '\n';
		r->scan = (size_t)(end - r->body.p) + 2;
	}
}

static int parse_headers(struct resp *r, struct buf *raw)
{
	char *hend = memmem(raw->p, raw->len, "\r\n\r\n", 4);
	if (!hend)
		return 0;
	*hend = 0;
	if (sscanf(raw->p, "HTTP/1.%*d %d", &r->status) != 1)
		bench_die(prog, "bad status line: %.80s", raw->p);
	r->clen = -1;
	for (char *line = strstr(raw->p, "\r\n"); line; line = strstr(line, "\r\n")) {
		line += 2;
		if (!strncasecmp(line, "Transfer-Encoding:", 18) && strstr(line, "chunked"))
			r->chunked = 1;
		else if (!strncasecmp(line, "Content-Length:", 15))
			r->clen = atoll(line + 15);
		else if (!strncasecmp(line, "Connection:", 11) && strcasestr(line, "close"))
			r->close = 1;
	}
	buf_consume(raw, (size_t)(hend - raw->p) + 4);
	if (r->clen < 0 && !r->chunked)
		r->close = 1;
	return 1;
}

/* One request on *fd (reopened when the server closes it). Returns 0 when the
 * task succeeded, with its round trip in *lat; 1 when it failed. */
static int one_request(int *fd, const char *req, int reqlen, long i, uint64_t *lat,
		       long *reconnects)
{
	struct buf raw = {0};
	struct resp r;
	memset(&r, 0, sizeof r);
	int failed = 0;
	uint64_t t0 = bench_now_ns(), t1 = 0;
	if (write(*fd, req, (size_t)reqlen) != reqlen)
		bench_die(prog, "write: %s", strerror(errno));
	int eof = 0, got_headers = 0;
	for (;;) {
		if (!got_headers)
			got_headers = parse_headers(&r, &raw);
		if (got_headers) {
			int done = decode(&r, &raw);
			if (r.status == 200) {
				scan_frames(&r);
				if (r.terminal && !t1)
					t1 = bench_now_ns();
			}
			if (done)
				break;
		}
		if (eof) {
			if (got_headers && !r.chunked && r.clen < 0)
				break; /* body delimited by the end of the connection */
			bench_die(prog, "request %ld: connection closed mid-response", i);
		}
		int f = fill(*fd, &raw);
		if (f < 0)
			bench_die(prog, "request %ld: read failed (%s)", i, strerror(errno));
		if (f == 0)
			eof = 1;
	}
	if (r.status != 200) {
		fprintf(stderr, "%s: request %ld: HTTP %d: %.300s\n", prog, i, r.status,
			r.body.p ? r.body.p : "");
		failed = 1;
	} else if (!t1) {
		fprintf(stderr, "%s: request %ld: response ended without a terminal event\n", prog,
			i);
		failed = 1;
	} else if (r.terminal != 1) {
		fprintf(stderr, "%s: request %ld: task failed: %s\n", prog, i, r.detail);
		failed = 1;
	} else {
		*lat = t1 - t0;
	}
	if (r.close || eof) {
		close(*fd);
		*fd = conn_open();
		(*reconnects)++;
	}
	free(r.body.p);
	free(raw.p);
	return failed;
}

/* Load mode (-c CLIENTS -d SECONDS): CLIENTS threads, each with its own
 * keep-alive connection, send requests back to back until SECONDS have passed
 * since they all started; a request under way at the deadline is finished
 * and counted. */
struct client {
	pthread_t th;
	const char *req;
	int reqlen;
	uint64_t deadline;
	uint64_t *lat;
	size_t n, cap;
	long failed, reconnects;
	uint64_t end;
};

static pthread_barrier_t start_barrier;
static uint64_t load_t0;
static uint64_t load_ns;

static void *client_main(void *arg)
{
	struct client *c = arg;
	int fd = conn_open();
	pthread_barrier_wait(&start_barrier);
	uint64_t deadline = load_t0 + load_ns;
	for (long i = 0; bench_now_ns() < deadline; i++) {
		uint64_t lat = 0;
		if (one_request(&fd, c->req, c->reqlen, i, &lat, &c->reconnects)) {
			c->failed++;
			continue;
		}
		if (c->n == c->cap) {
			c->cap = c->cap ? c->cap * 2 : 4096;
			c->lat = realloc(c->lat, c->cap * sizeof *c->lat);
			if (!c->lat)
				bench_die(prog, "out of memory");
		}
		c->lat[c->n++] = lat;
	}
	c->end = bench_now_ns();
	close(fd);
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

static int run_load(long clients, long seconds, const char *req, int reqlen)
{
	struct client *c = calloc((size_t)clients, sizeof *c);
	if (!c)
		bench_die(prog, "out of memory");
	load_ns = (uint64_t)seconds * 1000000000ull;
	pthread_barrier_init(&start_barrier, NULL, (unsigned)clients + 1);
	for (long i = 0; i < clients; i++) {
		c[i].req = req;
		c[i].reqlen = reqlen;
		int e = pthread_create(&c[i].th, NULL, client_main, &c[i]);
		if (e)
			bench_die(prog, "pthread_create: %s", strerror(e));
	}
	load_t0 = bench_now_ns();
	pthread_barrier_wait(&start_barrier);
	size_t total = 0;
	long failed = 0, reconnects = 0;
	uint64_t end = load_t0;
	for (long i = 0; i < clients; i++) {
		pthread_join(c[i].th, NULL);
		total += c[i].n;
		failed += c[i].failed;
		reconnects += c[i].reconnects;
		if (c[i].end > end)
			end = c[i].end;
	}
	uint64_t *all = malloc((total + 1) * sizeof *all);
	if (!all)
		bench_die(prog, "out of memory");
	size_t k = 0;
	double sum = 0;
	for (long i = 0; i < clients; i++) {
		memcpy(all + k, c[i].lat, c[i].n * sizeof *all);
		k += c[i].n;
		free(c[i].lat);
	}
	for (size_t i = 0; i < total; i++)
		sum += (double)all[i];
	qsort(all, total, sizeof *all, cmp_u64);
	struct rusage self;
	getrusage(RUSAGE_SELF, &self);
	double wall = (double)(end - load_t0) / 1e9;
	printf("{\"clients\":%ld,\"seconds\":%ld,\"wall_s\":%.6f,\"tasks\":%zu,\"failed\":%ld,"
	       "\"reconnects\":%ld,\"tasks_per_s\":%.3f,\"p50_ns\":%llu,\"p90_ns\":%llu,\"p99_ns\":%llu,"
	       "\"max_ns\":%llu,\"mean_ns\":%.0f,\"self_cpu_s\":%.6f}\n",
	       clients, seconds, wall, total, failed, reconnects,
	       wall > 0 ? (double)total / wall : 0.0, (unsigned long long)pctl(all, total, 50),
	       (unsigned long long)pctl(all, total, 90), (unsigned long long)pctl(all, total, 99),
	       (unsigned long long)(total ? all[total - 1] : 0), total ? sum / (double)total : 0.0,
	       (double)self.ru_utime.tv_sec + (double)self.ru_utime.tv_usec / 1e6 +
		       (double)self.ru_stime.tv_sec + (double)self.ru_stime.tv_usec / 1e6);
	fflush(stdout);
	if (failed)
		fprintf(stderr, "%s: %ld of %zu requests failed\n", prog, failed,
			total + (size_t)failed);
	free(all);
	free(c);
	return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	long runs = 1000, warmup = 20, clients = 0, seconds = 10;
	const char *path = "/command", *body = "{\"command\":\"true\"}";
	struct buf extra = {0};
	int opt;
	while ((opt = getopt(argc, argv, "p:n:w:P:b:H:T:c:d:")) != -1) {
		switch (opt) {
		case 'p':
			port = (int)bench_atol(prog, "-p", optarg);
			break;
		case 'n':
			runs = bench_atol(prog, "-n", optarg);
			break;
		case 'w':
			warmup = bench_atol(prog, "-w", optarg);
			break;
		case 'P':
			path = optarg;
			break;
		case 'b':
			body = optarg;
			break;
		case 'H':
			buf_add(&extra, optarg, strlen(optarg));
			buf_add(&extra, "\r\n", 2);
			break;
		case 'T':
			timeout_ms = (int)bench_atol(prog, "-T", optarg);
			break;
		case 'c':
			clients = bench_atol(prog, "-c", optarg);
			break;
		case 'd':
			seconds = bench_atol(prog, "-d", optarg);
			break;
		default:
			fprintf(stderr,
				"usage: rtt -p PORT [-n RUNS] [-w WARMUP] [-P PATH] [-b JSON] [-H HDR]... [-T MS]\n"
				"       rtt -p PORT -c CLIENTS -d SECONDS [-P PATH] [-b JSON] [-H HDR]... [-T MS]\n");
			return 2;
		}
	}
	if (port <= 0 || port > 65535)
		bench_die(prog, "-p PORT is required");
	signal(SIGPIPE, SIG_IGN);

	char req[8192];
	int reqlen = snprintf(
		req, sizeof req,
		"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
		"Content-Length: %zu\r\n%s\r\n%s",
		path, port, strlen(body), extra.p ? extra.p : "", body);
	if (reqlen < 0 || reqlen >= (int)sizeof req)
		bench_die(prog, "request too long");
	if (clients > 0) {
		if (seconds <= 0)
			bench_die(prog, "-d SECONDS must be positive");
		return run_load(clients, seconds, req, reqlen);
	}

	uint64_t *s = calloc((size_t)runs + 1, sizeof *s);
	if (!s)
		bench_die(prog, "out of memory");
	size_t n = 0;
	int failed = 0, fd = conn_open();
	long reconnects = 0;
	for (long i = 0; i < warmup + runs; i++) {
		uint64_t lat = 0;
		if (one_request(&fd, req, reqlen, i, &lat, &reconnects))
			failed = 1;
		else if (i >= warmup)
			s[n++] = lat;
	}
	close(fd);
	bench_print_samples(s, n);
	if (reconnects)
		fprintf(stderr, "%s: %ld reconnects (server closed the connection)\n", prog,
			reconnects);
	return failed;
}
