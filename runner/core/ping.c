/* `forceai-runner --ping`: see ping.h. */
#include "core/ping.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"

#define PING_TIMEOUT_MS 3000

static long ms_left(const struct timespec *t0)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	long spent = (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
	return PING_TIMEOUT_MS - spent;
}

/* Wait for fd to become ready for `ev` within the overall timeout. */
static int wait_fd(int fd, short ev, const struct timespec *t0)
{
	for (;;) {
		long left = ms_left(t0);
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = ev};
		int n = poll(&p, 1, (int)left);
		if (n > 0)
			return 0;
		if (n == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

/* The URL probed, for every message: which runner was meant is the first
 * question when a probe fails. */
static char probed[128] = "(no address)";

static int fail(const char *what, int err)
{
	fprintf(stderr,
		"forceai-runner --ping: GET %s: %s%s%s (the address is --listen's, or "
		"FORCEAI_RUNNER_LISTEN's, with 0.0.0.0 and [::] probed on loopback; give the "
		"runner's own)\n",
		probed, what, err ? ": " : "", err ? strerror(err) : "");
	return 1;
}

/* The address --listen names, a wildcard probed on loopback; the URL into `probed`. 0, or the
 * exit status. */
static int probe_address(const struct runner_config *cfg, struct sockaddr_storage *ss,
			 socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, cfg->listen_host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)cfg->listen_port);
		if (s4->sin_addr.s_addr == htonl(INADDR_ANY))
			s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		*len = sizeof(*s4);
	} else if (inet_pton(AF_INET6, cfg->listen_host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)cfg->listen_port);
		if (IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr))
			s6->sin6_addr = in6addr_loopback;
		*len = sizeof(*s6);
	} else {
		return fail("the listen address is not numeric", 0);
	}
	char host[INET6_ADDRSTRLEN] = "";
	if (ss->ss_family == AF_INET)
		inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
	else
		inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
	snprintf(probed, sizeof(probed),
		 ss->ss_family == AF_INET6 ? "http://[%s]:%u/ping" : "http://%s:%u/ping", host,
		 cfg->listen_port);
	if (cfg->listen_port == 0)
		return fail("the listen port is 0 (ephemeral): nothing to probe", 0);
	return 0;
}

static int connect_within(int fd, const struct sockaddr_storage *ss, socklen_t len,
			  const struct timespec *t0)
{
	if (connect(fd, (const struct sockaddr *)ss, len) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return fail("connect", errno);
	int e = wait_fd(fd, POLLOUT, t0), soerr = 0;
	socklen_t sl = sizeof(soerr);
	if (e == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
		e = -errno;
	return e < 0 || soerr ? fail("connect", e < 0 ? -e : soerr) : 0;
}

/* GET /ping, the token included; the request is wiped once sent. */
static int send_request(int fd, const struct runner_config *cfg, const struct timespec *t0)
{
	char req[1024];
	int n = snprintf(req, sizeof(req),
			 "GET /ping HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%s%s%s\r\n",
			 cfg->token ? "X-EXECD-ACCESS-TOKEN: " : "", cfg->token ? cfg->token : "",
			 cfg->token ? "\r\n" : "");
	int rc = n < 0 || (size_t)n >= sizeof(req) ? fail("the token is too long", 0) : 0;
	for (size_t off = 0; rc == 0 && off < (size_t)n;) {
		ssize_t w = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
		if (w > 0) {
			off += (size_t)w;
			continue;
		}
		int e = w < 0 && (errno == EAGAIN || errno == EINTR) ? wait_fd(fd, POLLOUT, t0)
								     : -(w < 0 ? errno : EPIPE);
		if (e < 0)
			rc = fail("send", -e);
	}
	explicit_bzero(req, sizeof(req));
	return rc;
}

/* The status line is all we need: 200, or the answer told. */
static int read_status(int fd, const struct timespec *t0)
{
	char resp[64];
	size_t got = 0;
	while (got < sizeof(resp) - 1 && !memchr(resp, '\n', got)) {
		ssize_t r = recv(fd, resp + got, sizeof(resp) - 1 - got, 0);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0)
			break;
		int e = errno == EAGAIN || errno == EINTR ? wait_fd(fd, POLLIN, t0) : -errno;
		if (e < 0)
			return fail("no answer", -e);
	}
	resp[got] = '\0';
	resp[strcspn(resp, "\r\n")] = '\0';
	if (!strncmp(resp, "HTTP/1.1 200 ", 13) || !strncmp(resp, "HTTP/1.0 200 ", 13))
		return 0;
	fprintf(stderr, "forceai-runner --ping: GET %s answered '%.60s'%s\n", probed, resp,
		strstr(resp, " 401 ") ? " (the token: give the runner's, in "
					"EXECD_ACCESS_TOKEN or --token-file)"
				      : "");
	return 1;
}

int ping_run(const struct runner_config *cfg)
{
	/* It holds the token: not readable through /proc by anyone else. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return fail("prctl(PR_SET_DUMPABLE)", errno);
	struct sockaddr_storage ss;
	socklen_t len;
	int rc = probe_address(cfg, &ss, &len);
	if (rc)
		return rc;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return fail("socket", errno);
	rc = connect_within(fd, &ss, len, &t0);
	if (rc == 0)
		rc = send_request(fd, cfg, &t0);
	if (rc == 0)
		rc = read_status(fd, &t0);
	close(fd);
	return rc;
}
