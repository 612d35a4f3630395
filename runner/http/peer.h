/* Who is at the other end of an accepted TCP connection: an address, and,
 * when the connecting socket lives in our own network namespace (inside the
 * box), the uid that owns it, found with sock_diag (NETLINK_SOCK_DIAG,
 * inet_diag looked up by the connection's 4-tuple: idiag_uid).
 *
 * Outcomes:
 *   PEER_IN_BOX   the connecting socket is ours to see: uid is its owner
 *   PEER_OUTSIDE  no such socket here and the address is not the box's own:
 *                 a client outside the box (through its network)
 *   PEER_UNKNOWN  the address is loopback or one of the box's own, but the
 *                 owner could not be established (lookup failed, or the
 *                 socket is already closed: a TIME_WAIT socket has no
 *                 owner). Callers treat it as a task (fail closed). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

enum peer_kind { PEER_OUTSIDE, PEER_IN_BOX, PEER_UNKNOWN };

struct peer {
	enum peer_kind kind;
	uid_t uid;        /* PEER_IN_BOX only */
	char addr[48];    /* numeric, for logs and per-client accounting */
	int lookup_errno; /* PEER_UNKNOWN: why (ENOENT: no owner found) */
};

/* A NETLINK_SOCK_DIAG socket, reused for every lookup. */
struct peer_diag {
	int fd;
	uint32_t seq;
};

/* Open it (fd -1 and -errno on failure). */
int peer_diag_open(struct peer_diag *d);
void peer_diag_close(struct peer_diag *d);
/* Does the lookup work here? Looks up a loopback connection of our own;
 * 0, or -errno (e.g. no inet_diag in the kernel: every in-box peer would
 * then be PEER_UNKNOWN). */
int peer_diag_selftest(struct peer_diag *d);
/* Identify the peer of the connected socket fd. Never fails: what could
 * not be established is PEER_UNKNOWN (or PEER_OUTSIDE for a foreign
 * address). */
void peer_identify(struct peer_diag *d, int fd, struct peer *out);

/* The pure part, for tests: is this address loopback (127/8, ::1, or
 * IPv4-mapped 127/8)? */
bool peer_addr_is_loopback(const struct sockaddr *sa);

/* A client's numeric address, as inet_ntop writes it (IPv4 without printf:
 * this runs for every API request). False, and out "?", for another family
 * or a buffer too small (len >= INET6_ADDRSTRLEN always fits). */
bool sockaddr_text(const struct sockaddr *sa, char *out, size_t len);
