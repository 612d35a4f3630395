/* The TCP ports listening in the box (task/ports.c): /proc/net/tcp and tcp6, each socket's
 * process (a bounded /proc walk) and the task whose tree holds it. For GET /v1/ports. */
#pragma once
#include <arpa/inet.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/error.h"

struct runner;

struct port_listen {
	unsigned port;
	bool v6;
	char addr[INET6_ADDRSTRLEN];
	uid_t uid;
	unsigned long inode;
	pid_t pid;        /* 0 = not found */
	char process[32]; /* the process's comm, when pid */
	bool runner;      /* the runner's own socket */
	char task_id[33]; /* the task whose tree holds pid ("" = none) */
};

struct port_list {
	struct port_listen *v; /* sorted by port, IPv4 first, then address */
	size_t n;
	bool truncated;      /* more listening sockets than are reported */
	bool owners_partial; /* the owner walk ran out of its time budget */
};

/* Every listening socket now, owners found where the walk's budget allows. 0, or -1 with err
 * (out of memory); ports_free in both cases. */
int ports_scan(struct runner *r, struct port_list *out, struct error *err);
void ports_free(struct port_list *l);
