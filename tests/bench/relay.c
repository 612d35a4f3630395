/* relay: the floor of the stream benchmark - what any program that carries a
 * task's output to an HTTP client must do at the least, with nothing else.
 *
 *   relay -- CMD [ARG...]
 *
 * Listens on an ephemeral loopback port and prints it on stdout, accepts one
 * connection, reads its request head, answers 200 and copies CMD's stdout
 * (a pipe) to the socket 64 KiB at a time until EOF, then closes (an
 * HTTP/1.0 body that ends with the connection). No framing, no escaping, no
 * log: only the two copies the runner cannot avoid (pipe read, TCP send).
 * Exit status: CMD's. */
#include "bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *prog = "relay";

int main(int argc, char **argv)
{
	if (argc < 3 || strcmp(argv[1], "--"))
		bench_die(prog, "usage: relay -- CMD [ARG...]");
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 1) < 0 ||
	    getsockname(ls, (struct sockaddr *)&a, &alen) < 0)
		bench_die(prog, "listen: %s", strerror(errno));
	printf("%d\n", ntohs(a.sin_port));
	fflush(stdout);
	int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0)
		bench_die(prog, "accept: %s", strerror(errno));
	/* The request head ends with an empty line; its body (if any) is not read. */
	char req[8192];
	size_t got = 0;
	while (got < sizeof(req) - 1) {
		ssize_t n = recv(c, req + got, sizeof(req) - 1 - got, 0);
		if (n <= 0)
			bench_die(prog, "recv: %s", n ? strerror(errno) : "closed");
		got += (size_t)n;
		req[got] = 0;
		if (strstr(req, "\r\n\r\n"))
			break;
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		bench_die(prog, "pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		bench_die(prog, "fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(p[1], 1);
		execvp(argv[2], argv + 2);
		_exit(127);
	}
	close(p[1]);
	static const char head[] =
		"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n";
	bench_send_all(prog, c, head, sizeof(head) - 1);
	static char buf[65536];
	for (;;) {
		ssize_t n = read(p[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			bench_die(prog, "read: %s", strerror(errno));
		if (n == 0)
			break;
		bench_send_all(prog, c, buf, (size_t)n);
	}
	close(c);
	int st;
	if (waitpid(pid, &st, 0) < 0)
		bench_die(prog, "waitpid: %s", strerror(errno));
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
