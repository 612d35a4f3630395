/* The ports scanner behind GET /v1/ports (docs/design/interactive.md#the-listening-ports; the
 * route: api/ports.c): the TCP ports listening in the box, from /proc/net/tcp and /proc/net/tcp6
 * (state 0A), each with the process holding the socket (socket inode -> /proc/PID/fd) and the task
 * whose tree that process is in (parent links up to the task's shim). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/procfs.h"
#include "core/runner.h"
#include "task/ports.h"
#include "task/task.h"

#define MAX_LISTEN 4096 /* listening sockets reported at most */

/* The owner walk reads every fd of every process, on the loop: a task with
 * thousands of processes and fds must not stall the runner through it. */
#define OWNER_WALK_MS 50

/* One line of /proc/net/tcp{,6}: "sl: local rem st tx:rx tr:when retr uid
 * timeout inode ...", addresses as hex words in host order. */
static int parse_line(const char *line, bool v6, struct port_listen *out)
{
	char local[40];
	unsigned port, state, uid;
	unsigned long inode;
	if (sscanf(line, " %*u: %39[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*s %*s %*s %u %*u %lu",
		   local, &port, &state, &uid, &inode) != 5)
		return -1;
	if (state != 0x0A || port == 0 || port > 65535)
		return 0; /* not listening */
	size_t words = v6 ? 4 : 1;
	if (strlen(local) != words * 8)
		return -1;
	uint32_t a[4];
	for (size_t i = 0; i < words; i++) {
		char w[9];
		memcpy(w, local + i * 8, 8);
		w[8] = 0;
		a[i] = (uint32_t)strtoul(w, NULL, 16);
	}
	memset(out, 0, sizeof(*out));
	out->port = port;
	out->v6 = v6;
	out->uid = (uid_t)uid;
	out->inode = inode;
	if (!inet_ntop(v6 ? AF_INET6 : AF_INET, a, out->addr, sizeof(out->addr)))
		return -1;
	return 1;
}

static void read_table(const char *path, bool v6, struct port_list *ls)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		if (errno != ENOENT) /* tcp6 is absent without IPv6 */
			log_errno("cannot read the listening sockets", errno, path);
		return;
	}
	char line[512];
	if (!fgets(line, sizeof(line), f)) { /* the header */
		fclose(f);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		struct port_listen s;
		if (parse_line(line, v6, &s) != 1)
			continue;
		if (ls->n == MAX_LISTEN) {
			ls->truncated = true;
			break;
		}
		ls->v[ls->n++] = s;
	}
	fclose(f);
}

/* Open /proc/PID/fd. A process of another uid needs ptrace-read access:
 * without CAP_SYS_PTRACE (containers drop it) the runner takes the
 * process's file-system identity for the open, as the files API does. */
static DIR *open_fd_dir(int procfd, pid_t pid)
{
	char path[32], dir[16];
	snprintf(dir, sizeof(dir), "%d", (int)pid);
	snprintf(path, sizeof(path), "%d/fd", (int)pid);
	int fd = openat(procfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == EACCES) {
		struct stat st;
		if (fstatat(procfd, dir, &st, 0) == 0) {
			setfsgid(st.st_gid);
			setfsuid(st.st_uid);
			fd = openat(procfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			int saved = errno;
			setfsuid(geteuid());
			setfsgid(getegid());
			errno = saved;
		}
	}
	if (fd < 0)
		return NULL;
	DIR *d = fdopendir(fd);
	if (!d)
		close(fd);
	return d;
}

struct owner_walk {
	struct port_list *ls;
	size_t left;
	uint64_t deadline;
	unsigned steps;
};

/* One process of the walk: its socket fds. Non-zero stops the walk. */
static int owner_of(pid_t pid, int procfd, void *arg)
{
	struct owner_walk *w = arg;
	struct port_list *ls = w->ls;
	if (!w->left)
		return 1;
	if (monotonic_ms() > w->deadline) {
		ls->owners_partial = true;
		return 1;
	}
	DIR *fds = open_fd_dir(procfd, pid);
	if (!fds)
		return 0;
	struct dirent *fe;
	while (w->left && (fe = readdir(fds))) {
		if (++w->steps % 1024 == 0 && monotonic_ms() > w->deadline) {
			ls->owners_partial = true;
			break;
		}
		if (fe->d_name[0] == '.')
			continue;
		char link[64];
		ssize_t n = readlinkat(dirfd(fds), fe->d_name, link, sizeof(link) - 1);
		if (n <= 8 || memcmp(link, "socket:[", 8))
			continue;
		link[n] = 0;
		unsigned long inode = strtoul(link + 8, NULL, 10);
		for (size_t i = 0; i < ls->n; i++) {
			if (ls->v[i].inode == inode && !ls->v[i].pid) {
				ls->v[i].pid = pid;
				w->left--;
			}
		}
	}
	closedir(fds);
	return 0;
}

/* inode -> pid for every listening socket, from one /proc walk. */
static void find_owners(struct port_list *ls)
{
	struct owner_walk w = {ls, ls->n, monotonic_ms() + OWNER_WALK_MS, 0};
	if (w.left)
		(void)procfs_scan(owner_of, &w); /* best effort: owners stay unknown */
}

static pid_t read_ppid(pid_t pid)
{
	struct procfs_stat st;
	return procfs_read_stat(pid, &st) == 0 ? st.ppid : 0;
}

/* The task whose tree holds pid: every process of a task descends from its
 * shim (orphans are reparented to it). */
static struct task *owner_task(struct runner *r, pid_t pid)
{
	for (int depth = 0; pid > 1 && depth < 64; depth++) {
		if (pid == r->self_pid)
			return NULL;
		for (struct task *t = r->tasks->head; t; t = t->next)
			if (t->proc_running && t->shim_pid == pid &&
			    (t->api != TASK_API_TOOL || task_left_running(t)))
				return t;
		pid = read_ppid(pid);
	}
	return NULL;
}

static int cmp_lsock(const void *a, const void *b)
{
	const struct port_listen *x = a, *y = b;
	if (x->port != y->port)
		return x->port < y->port ? -1 : 1;
	if (x->v6 != y->v6)
		return x->v6 ? 1 : -1;
	return strcmp(x->addr, y->addr);
}

int ports_scan(struct runner *r, struct port_list *out, struct error *err)
{
	memset(out, 0, sizeof(*out));
	if (!(out->v = calloc(MAX_LISTEN, sizeof(*out->v))))
		return error_set(err, ENOMEM, "RUNTIME_ERROR", "listing ports");
	read_table("/proc/net/tcp", false, out);
	read_table("/proc/net/tcp6", true, out);
	find_owners(out);
	qsort(out->v, out->n, sizeof(*out->v), cmp_lsock);
	for (size_t i = 0; i < out->n; i++) {
		struct port_listen *s = &out->v[i];
		if (!s->pid)
			continue;
		procfs_read_comm(s->pid, s->process, sizeof(s->process));
		s->runner = s->pid == r->self_pid;
		struct task *t = s->runner ? NULL : owner_task(r, s->pid);
		if (t)
			snprintf(s->task_id, sizeof(s->task_id), "%s", t->id);
	}
	return 0;
}

void ports_free(struct port_list *l)
{
	free(l->v);
	l->v = NULL;
	l->n = 0;
}
