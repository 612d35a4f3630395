/* The peer of an accepted connection: see peer.h. */
#include "http/peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef TCP_NEW_SYN_RECV
#define TCP_NEW_SYN_RECV 12
#endif

int peer_diag_open(struct peer_diag *d)
{
	d->seq = 0;
	d->fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	return d->fd < 0 ? -errno : 0;
}

void peer_diag_close(struct peer_diag *d)
{
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
}

/* IPv4-mapped IPv6 (a v4 client of a dual-stack listener) as plain IPv4:
 * the connecting socket is hashed (and found) as IPv4. */
static void unmap(struct sockaddr_storage *ss)
{
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
		return;
	struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = s6->sin6_port};
	memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, &s4, sizeof(s4));
}

bool peer_addr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
			return true;
		return IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && s6->sin6_addr.s6_addr[12] == 127;
	}
	return false;
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr *b)
{
	if (a->ss_family != b->sa_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr,
			       sizeof(struct in6_addr));
	return false;
}

/* One of the box's own addresses? Only asked when the owner lookup failed,
 * so the cost of getifaddrs() is paid rarely. Fails closed. */
static bool is_own_addr(const struct sockaddr_storage *peer, const struct sockaddr_storage *local)
{
	if (peer_addr_is_loopback((const struct sockaddr *)peer) ||
	    same_addr(peer, (const struct sockaddr *)local))
		return true;
	struct ifaddrs *ifs;
	if (getifaddrs(&ifs) < 0)
		return true;
	bool own = false;
	for (struct ifaddrs *i = ifs; i && !own; i = i->ifa_next)
		if (i->ifa_addr && same_addr(peer, i->ifa_addr))
			own = true;
	freeifaddrs(ifs);
	return own;
}

static void put_addr(struct inet_diag_sockid *id, bool src, const struct sockaddr_storage *ss)
{
	__be32 *dst = src ? id->idiag_src : id->idiag_dst;
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
		dst[0] = s4->sin_addr.s_addr;
		if (src)
			id->idiag_sport = s4->sin_port;
		else
			id->idiag_dport = s4->sin_port;
	} else {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
		memcpy(dst, &s6->sin6_addr, 16);
		if (src)
			id->idiag_sport = s6->sin6_port;
		else
			id->idiag_dport = s6->sin6_port;
	}
}

/* The owner of the socket whose local end is `peer` and remote end `local`
 * (the other end of our connection). 0 with *uid; -ENOENT: no such socket
 * here (or only a listener: a coincidence of ports); -ENOTCONN: it exists
 * but has no owner any more (closed: TIME_WAIT, or orphaned); else -errno. */
static int diag_owner(struct peer_diag *d, const struct sockaddr_storage *peer,
		      const struct sockaddr_storage *local, uid_t *uid)
{
	if (d->fd < 0)
		return -EBADF;
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg;
	memset(&msg, 0, sizeof(msg));
	uint32_t seq = ++d->seq;
	msg.nlh.nlmsg_len = sizeof(msg);
	msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	msg.nlh.nlmsg_flags = NLM_F_REQUEST;
	msg.nlh.nlmsg_seq = seq;
	msg.req.sdiag_family = (uint8_t)peer->ss_family;
	msg.req.sdiag_protocol = IPPROTO_TCP;
	msg.req.idiag_states = ~0u;
	put_addr(&msg.req.id, true, peer);
	put_addr(&msg.req.id, false, local);
	msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	if (sendto(d->fd, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -errno;
	/* The kernel answers inside sendto: the reply is queued already, so
	 * the loop never blocks on it. Replies to older requests (none are
	 * left behind normally) are skipped by their sequence number. */
	for (;;) {
		union {
			struct nlmsghdr h;
			char buf[1024];
		} rep;
		ssize_t n = recv(d->fd, &rep, sizeof(rep), MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		for (struct nlmsghdr *h = &rep.h; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != seq)
				continue;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				return e->error ? e->error : -ENOENT;
			}
			if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
			    h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
				return -EPROTO;
			const struct inet_diag_msg *m = NLMSG_DATA(h);
			if (m->idiag_state == TCP_LISTEN ||
			    m->id.idiag_dport != msg.req.id.idiag_dport ||
			    m->id.idiag_sport != msg.req.id.idiag_sport)
				return -ENOENT;
			/* No file behind it: closed by its owner (a TIME_WAIT
			 * socket reports uid 0, which would be a lie). */
			if (m->idiag_state == TCP_TIME_WAIT || m->idiag_state == TCP_NEW_SYN_RECV ||
			    m->idiag_inode == 0)
				return -ENOTCONN;
			*uid = (uid_t)m->idiag_uid;
			return 0;
		}
	}
}

static void fmt_addr(const struct sockaddr_storage *ss, char *out, size_t len)
{
	const void *a = ss->ss_family == AF_INET
				? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
				: (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;
	if (!inet_ntop(ss->ss_family, a, out, (socklen_t)len))
		snprintf(out, len, "?");
}

void peer_identify(struct peer_diag *d, int fd, struct peer *out)
{
	struct sockaddr_storage peer, local;
	socklen_t plen = sizeof(peer), llen = sizeof(local);
	memset(out, 0, sizeof(*out));
	out->kind = PEER_UNKNOWN;
	snprintf(out->addr, sizeof(out->addr), "?");
	if (getpeername(fd, (struct sockaddr *)&peer, &plen) < 0 ||
	    getsockname(fd, (struct sockaddr *)&local, &llen) < 0) {
		out->lookup_errno = errno;
		return;
	}
	unmap(&peer);
	unmap(&local);
	if ((peer.ss_family != AF_INET && peer.ss_family != AF_INET6) ||
	    peer.ss_family != local.ss_family) {
		out->lookup_errno = EAFNOSUPPORT;
		return;
	}
	fmt_addr(&peer, out->addr, sizeof(out->addr));
	uid_t uid = (uid_t)-1;
	int rc = diag_owner(d, &peer, &local, &uid);
	if (rc == 0) {
		out->kind = PEER_IN_BOX;
		out->uid = uid;
		return;
	}
	out->lookup_errno = -rc;
	if (rc == -ENOENT && !is_own_addr(&peer, &local))
		out->kind = PEER_OUTSIDE;
}

int peer_diag_selftest(struct peer_diag *d)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	int rc = 0, cfd = -1, afd = -1;
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen) < 0)
		goto fail;
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cfd < 0 || connect(cfd, (struct sockaddr *)&a, sizeof(a)) < 0)
		goto fail;
	afd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (afd < 0)
		goto fail;
	struct peer p;
	peer_identify(d, afd, &p);
	if (p.kind != PEER_IN_BOX)
		rc = -(p.lookup_errno ? p.lookup_errno : EPROTO);
	else if (p.uid != geteuid())
		rc = -EPROTO;
	goto out;
fail:
	rc = -errno;
out:
	if (afd >= 0)
		close(afd);
	if (cfd >= 0)
		close(cfd);
	if (lfd >= 0)
		close(lfd);
	return rc;
}

bool sockaddr_text(const struct sockaddr *sa, char *out, size_t len)
{
	if (sa && sa->sa_family == AF_INET && len >= INET_ADDRSTRLEN) {
		/* musl's inet_ntop is a snprintf: two of them were 3% of a proxied
		 * request's CPU. */
		const unsigned char *b =
			(const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
		char *p = out;
		for (int i = 0; i < 4; i++) {
			unsigned v = b[i];
			if (v >= 100)
				*p++ = (char)('0' + v / 100);
			if (v >= 10)
				*p++ = (char)('0' + v / 10 % 10);
			*p++ = (char)('0' + v % 10);
			*p++ = i < 3 ? '.' : 0;
		}
		return true;
	}
	if (sa && sa->sa_family == AF_INET6 &&
	    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)len))
		return true;
	if (len >= 2)
		memcpy(out, "?", 2);
	return false;
}
