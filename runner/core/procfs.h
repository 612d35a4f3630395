/* /proc read in one place: the fields of /proc/PID/stat, the uids of
 * /proc/PID/status, a process's comm, and a walk of /proc's processes.
 * Everything here is async-signal-safe (no malloc, no stdio, no locale): the
 * task shim and post-fork children use it as the runner does. */
#pragma once
#include <stddef.h>
#include <sys/types.h>

struct procfs_stat {
	char state; /* R, S, D, Z, X, T, ... */
	pid_t ppid, pgrp, session;
};

/* Parses one /proc/PID/stat line (NUL-terminated): pure. comm may hold
 * spaces and parentheses, so the fields are read after the last ')'.
 * 0, or -EINVAL when the line is not one. */
int procfs_parse_stat(const char *line, struct procfs_stat *st);

/* A /proc entry's name as a pid: > 0, or 0 when it is not one. */
pid_t procfs_parse_pid(const char *name);

/* Reads and parses /proc/PID/stat. 0 or -errno (-EINVAL: unparsable). */
int procfs_read_stat(pid_t pid, struct procfs_stat *st);

/* /proc/PID/status's real, effective and saved uids. 0 or -errno. */
int procfs_read_uids(pid_t pid, uid_t uid[3]);

/* /proc/PID/comm without its newline ("" when unreadable). */
void procfs_read_comm(pid_t pid, char *out, size_t outlen);

/* Calls fn(pid, procfd, arg) for every process in /proc (procfd: /proc
 * itself, for openat); stops early when fn returns non-zero. 0 or -errno
 * (opening or reading /proc). */
int procfs_scan(int (*fn)(pid_t pid, int procfd, void *arg), void *arg);
