/* wsecho: both ends of the port proxy's WebSocket benchmark.
 *
 *   wsecho -s
 *       Listens on an ephemeral loopback port (printed on stdout) and serves
 *       connections one after another: reads the request head, answers
 *       101 Switching Protocols (websocket) and echoes every byte back until
 *       the client closes its side. The echo moves bytes socket -> pipe ->
 *       socket with splice(2), so the server costs little CPU.
 *   wsecho -c PORT -P PATH -n BYTES
 *       Connects to 127.0.0.1:PORT, sends a WebSocket opening handshake for
 *       PATH, expects 101, then writes BYTES of masked binary frames (64 KiB
 *       payloads) while reading the echo, and checks that every byte comes
 *       back unchanged. Prints the seconds from the first frame written to
 *       the last byte read back.
 *
 * The runner's proxy passes an upgraded connection on as raw bytes, so the
 * server does not parse frames: what is measured is the proxy. */
#include "bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *prog = "wsecho";

#define PAYLOAD (64 * 1024)
#define FRAME (PAYLOAD + 14)

/* Reads a head up to the blank line; bytes after it stay in the socket
 * (read one at a time: heads are small). */
static size_t read_head(int fd, char *buf, size_t max)
{
	size_t n = 0;
	while (n + 1 < max) {
		ssize_t r = recv(fd, buf + n, 1, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return 0;
		n++;
		if (n >= 4 && !memcmp(buf + n - 4, "\r\n\r\n", 4)) {
			buf[n] = 0;
			return n;
		}
	}
	return 0;
}

static void serve(void)
{
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 16) < 0 ||
	    getsockname(ls, (struct sockaddr *)&sa, &sl) < 0)
		bench_die(prog, "listen: %s", strerror(errno));
	printf("%u\n", ntohs(sa.sin_port));
	fflush(stdout);
	for (;;) {
		int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR)
				continue;
			bench_die(prog, "accept: %s", strerror(errno));
		}
		char head[8192];
		if (!read_head(c, head, sizeof(head))) {
			close(c);
			continue;
		}
		static const char ok[] =
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
			"Connection: Upgrade\r\n"
			"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
		bench_send_all(prog, c, ok, sizeof(ok) - 1);
		int pp[2];
		if (pipe2(pp, O_CLOEXEC) < 0)
			bench_die(prog, "pipe: %s", strerror(errno));
		fcntl(pp[1], F_SETPIPE_SZ, 1 << 20);
		for (;;) {
			ssize_t n = splice(c, NULL, pp[1], NULL, 1 << 20, SPLICE_F_MOVE);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			while (n > 0) {
				ssize_t w = splice(pp[0], NULL, c, NULL, (size_t)n, SPLICE_F_MOVE);
				if (w < 0 && errno == EINTR)
					continue;
				if (w <= 0)
					goto done;
				n -= w;
			}
		}
	done:
		close(pp[0]);
		close(pp[1]);
		close(c);
	}
}

static void client(unsigned port, const char *path, uint64_t total)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		bench_die(prog, "connect %u: %s", port, strerror(errno));
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	char req[1024];
	int rl = snprintf(req, sizeof(req),
			  "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nUpgrade: websocket\r\n"
			  "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
			  "Sec-WebSocket-Version: 13\r\n\r\n",
			  path, port);
	bench_send_all(prog, fd, req, (size_t)rl);
	char head[8192];
	if (!read_head(fd, head, sizeof(head)) || strncmp(head, "HTTP/1.1 101", 12))
		bench_die(prog, "no 101 from port %u: %.200s", port, head);

	/* One frame, sent over and over: FIN + binary, 64-bit length, mask. */
	static unsigned char frame[FRAME];
	frame[0] = 0x82;
	frame[1] = 0x80 | 127;
	for (int i = 0; i < 8; i++)
		frame[2 + i] = (unsigned char)((uint64_t)PAYLOAD >> (56 - 8 * i));
	memcpy(frame + 10, "\x12\x34\x56\x78", 4);
	for (size_t i = 0; i < PAYLOAD; i++)
		frame[14 + i] = (unsigned char)(i * 7 + (i >> 8));
	uint64_t frames = (total + PAYLOAD - 1) / PAYLOAD, want = frames * FRAME;
	uint64_t sent = 0, got = 0;
	static unsigned char in[256 * 1024];
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	uint64_t t0 = bench_now_ns();
	while (got < want) {
		struct pollfd pf = {.fd = fd, .events = POLLIN | (sent < want ? POLLOUT : 0)};
		if (poll(&pf, 1, 30000) <= 0)
			bench_die(prog, "stalled: %llu of %llu bytes back", (unsigned long long)got,
				  (unsigned long long)want);
		if (pf.revents & POLLOUT) {
			size_t off = (size_t)(sent % FRAME);
			size_t n = FRAME - off;
			if (n > want - sent)
				n = (size_t)(want - sent);
			ssize_t w = send(fd, frame + off, n, MSG_NOSIGNAL);
			/* No half-close at the end: nginx's proxy ends an upgraded
			 * connection at the first EOF of either side. */
			if (w > 0)
				sent += (uint64_t)w;
			else if (w < 0 && errno != EAGAIN && errno != EINTR)
				bench_die(prog, "send: %s", strerror(errno));
		}
		if (pf.revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t r = recv(fd, in, sizeof(in), 0);
			if (r == 0)
				bench_die(prog, "closed after %llu of %llu bytes",
					  (unsigned long long)got, (unsigned long long)want);
			if (r < 0 && errno != EAGAIN && errno != EINTR)
				bench_die(prog, "recv: %s", strerror(errno));
			for (ssize_t i = 0; i < r;) {
				size_t off = (size_t)(got % FRAME), n = FRAME - off;
				if (n > (size_t)(r - i))
					n = (size_t)(r - i);
				if (memcmp(in + i, frame + off, n))
					bench_die(prog, "the echo differs at byte %llu",
						  (unsigned long long)got);
				i += (ssize_t)n;
				got += n;
			}
		}
	}
	uint64_t t1 = bench_now_ns();
	printf("%.6f %llu\n", (double)(t1 - t0) / 1e9, (unsigned long long)want);
	close(fd);
}

int main(int argc, char **argv)
{
	unsigned port = 0;
	const char *path = "/";
	uint64_t n = 0;
	int opt;
	bool server = false;
	while ((opt = getopt(argc, argv, "sc:P:n:")) != -1) {
		switch (opt) {
		case 's':
			server = true;
			break;
		case 'c':
			port = (unsigned)bench_atol(prog, "-c", optarg);
			break;
		case 'P':
			path = optarg;
			break;
		case 'n':
			n = (uint64_t)bench_atol(prog, "-n", optarg);
			break;
		default:
			bench_die(prog, "usage: wsecho -s | wsecho -c PORT -P PATH -n BYTES");
		}
	}
	if (server)
		serve();
	if (!port || !n)
		bench_die(prog, "usage: wsecho -s | wsecho -c PORT -P PATH -n BYTES");
	client(port, path, n);
	return 0;
}
