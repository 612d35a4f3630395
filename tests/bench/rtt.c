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
 * the timed window. Exit status 1 if any request failed. */
#include "bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <strings.h>
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
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
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
	struct pollfd p = { .fd = fd, .events = POLLIN };
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
	size_t scan; /* body offset of the first frame not examined yet */
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
		char *end = r->body.len > r->scan ? memmem(start, r->body.len - r->scan, "\n\n", 2) : NULL;
		if (!end)
			return;
		*end = 0; /* frames are examined once; the body is not needed afterwards */
		if (strstr(start, "\"type\":\"execution_complete\"")) {
			r->terminal = 1;
		} else if (strstr(start, "\"type\":\"error\"") || strstr(start, "event: error\n") ||
			   (strncmp(start, "event: error", 12) == 0)) {
			r->terminal = 2;
		} else if (strstr(start, "event: exit\n") || strncmp(start, "event: exit", 11) == 0) {
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

int main(int argc, char **argv)
{
	long runs = 1000, warmup = 20;
	const char *path = "/command", *body = "{\"command\":\"true\"}";
	struct buf extra = { 0 };
	int opt;
	while ((opt = getopt(argc, argv, "p:n:w:P:b:H:T:")) != -1) {
		switch (opt) {
		case 'p': port = (int)bench_atol(prog, "-p", optarg); break;
		case 'n': runs = bench_atol(prog, "-n", optarg); break;
		case 'w': warmup = bench_atol(prog, "-w", optarg); break;
		case 'P': path = optarg; break;
		case 'b': body = optarg; break;
		case 'H':
			buf_add(&extra, optarg, strlen(optarg));
			buf_add(&extra, "\r\n", 2);
			break;
		case 'T': timeout_ms = (int)bench_atol(prog, "-T", optarg); break;
		default:
			fprintf(stderr, "usage: rtt -p PORT [-n RUNS] [-w WARMUP] [-P PATH] [-b JSON] [-H HDR]... [-T MS]\n");
			return 2;
		}
	}
	if (port <= 0 || port > 65535)
		bench_die(prog, "-p PORT is required");
	signal(SIGPIPE, SIG_IGN);

	char req[8192];
	int reqlen = snprintf(req, sizeof req,
			      "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
			      "Content-Length: %zu\r\n%s\r\n%s",
			      path, port, strlen(body), extra.p ? extra.p : "", body);
	if (reqlen < 0 || reqlen >= (int)sizeof req)
		bench_die(prog, "request too long");

	uint64_t *s = calloc((size_t)runs + 1, sizeof *s);
	if (!s)
		bench_die(prog, "out of memory");
	size_t n = 0;
	int failed = 0, fd = conn_open();
	long reconnects = 0;
	struct buf raw = { 0 };
	struct resp r;
	memset(&r, 0, sizeof r);

	for (long i = 0; i < warmup + runs; i++) {
		free(r.body.p);
		memset(&r, 0, sizeof r);
		raw.len = 0;
		uint64_t t0 = bench_now_ns(), t1 = 0;
		if (write(fd, req, (size_t)reqlen) != reqlen)
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
			int f = fill(fd, &raw);
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
			fprintf(stderr, "%s: request %ld: response ended without a terminal event\n", prog, i);
			failed = 1;
		} else if (r.terminal != 1) {
			if (!failed)
				fprintf(stderr, "%s: request %ld: task failed: %s\n", prog, i, r.detail);
			failed = 1;
		} else if (i >= warmup) {
			s[n++] = t1 - t0;
		}
		if (r.close || eof) {
			close(fd);
			fd = conn_open();
			reconnects++;
		}
	}
	close(fd);
	bench_print_samples(s, n);
	if (reconnects)
		fprintf(stderr, "%s: %ld reconnects (server closed the connection)\n", prog, reconnects);
	return failed;
}
