/* peer.c: the owner of the other end of a loopback TCP connection, as
 * sock_diag reports it; closed owners and foreign addresses. Needs root for
 * the other-uid case (a SKIP otherwise). */
#include "http/peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

static int listener(struct sockaddr_in *a)
{
	socklen_t len = sizeof(*a);
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)a, sizeof(*a)) < 0 || listen(fd, 8) < 0 ||
	    getsockname(fd, (struct sockaddr *)a, &len) < 0)
		return -1;
	return fd;
}

/* Connect as uid (fork, setuid), keep the socket open until told. */
static pid_t connect_as(uid_t uid, const struct sockaddr_in *a, int hold_fd)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	if (uid != geteuid() && setresuid(uid, uid, uid) < 0)
		_exit(2);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (const struct sockaddr *)a, sizeof(*a)) < 0)
		_exit(3);
	char b;
	if (read(hold_fd, &b, 1) < 0) /* until the parent is done looking */
		_exit(4);
	_exit(0);
}

static void identify_uid(struct peer_diag *d, int lfd, const struct sockaddr_in *a, uid_t uid)
{
	int p[2];
	CHECK(pipe(p) == 0);
	pid_t pid = connect_as(uid, a, p[0]);
	int s = accept(lfd, NULL, NULL);
	CHECK(s >= 0);
	struct peer pr;
	peer_identify(d, s, &pr);
	CHECK(pr.kind == PEER_IN_BOX);
	CHECK(pr.uid == uid);
	CHECK_STR(pr.addr, "127.0.0.1");
	CHECK(write(p[1], "x", 1) == 1);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* Its owner has closed it: no owner to name (fail closed upstream). */
	usleep(100 * 1000);
	peer_identify(d, s, &pr);
	CHECK(pr.kind == PEER_UNKNOWN);
	close(s);
	close(p[0]);
	close(p[1]);
}

TEST(loopback_addresses)
{
	struct sockaddr_in v4 = {.sin_family = AF_INET};
	v4.sin_addr.s_addr = htonl(0x7f000002);
	CHECK(peer_addr_is_loopback((struct sockaddr *)&v4));
	v4.sin_addr.s_addr = htonl(0x0a000001);
	CHECK(!peer_addr_is_loopback((struct sockaddr *)&v4));
	struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	CHECK(peer_addr_is_loopback((struct sockaddr *)&v6));
	inet_pton(AF_INET6, "::ffff:127.0.0.1", &v6.sin6_addr);
	CHECK(peer_addr_is_loopback((struct sockaddr *)&v6));
	inet_pton(AF_INET6, "::ffff:10.1.2.3", &v6.sin6_addr);
	CHECK(!peer_addr_is_loopback((struct sockaddr *)&v6));
	inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr);
	CHECK(!peer_addr_is_loopback((struct sockaddr *)&v6));
}

/* A sock_diag socket and a loopback listener. */
static bool setup(struct peer_diag *d, int *lfd, struct sockaddr_in *a)
{
	if (!CHECK(peer_diag_open(d) == 0))
		return false;
	CHECK(peer_diag_selftest(d) == 0);
	*lfd = listener(a);
	return CHECK(*lfd >= 0);
}

TEST(owner_uid_of_own_connection)
{
	struct peer_diag d;
	struct sockaddr_in a;
	int lfd;
	if (!setup(&d, &lfd, &a))
		return;
	identify_uid(&d, lfd, &a, geteuid());
	close(lfd);
	peer_diag_close(&d);
}

TEST(owner_uid_of_other_user)
{
	if (geteuid() != 0)
		SKIP("not root: cannot connect as another uid");
	struct peer_diag d;
	struct sockaddr_in a;
	int lfd;
	if (!setup(&d, &lfd, &a))
		return;
	identify_uid(&d, lfd, &a, 12345);
	close(lfd);
	peer_diag_close(&d);
}

/* A socket that is not TCP has no peer to name. */
TEST(non_tcp_socket_unknown)
{
	struct peer_diag d;
	if (!CHECK(peer_diag_open(&d) == 0))
		return;
	int sp[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
	struct peer pr;
	peer_identify(&d, sp[0], &pr);
	CHECK(pr.kind == PEER_UNKNOWN);
	close(sp[0]);
	close(sp[1]);
	peer_diag_close(&d);
}

/* A closed diag socket: every lookup fails, and fails closed. */
TEST(closed_diag_socket_fails_closed)
{
	struct peer_diag d;
	struct sockaddr_in a;
	int lfd;
	if (!setup(&d, &lfd, &a))
		return;
	peer_diag_close(&d);
	struct peer pr;
	int p[2];
	CHECK(pipe(p) == 0);
	pid_t pid = connect_as(geteuid(), &a, p[0]);
	int s = accept(lfd, NULL, NULL);
	peer_identify(&d, s, &pr);
	CHECK(pr.kind == PEER_UNKNOWN);
	CHECK(write(p[1], "x", 1) == 1);
	waitpid(pid, NULL, 0);
	close(s);
	close(p[0]);
	close(p[1]);
	close(lfd);
}
