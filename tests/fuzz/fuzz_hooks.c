/* Linked into the fuzz targets that take the runner's objects without
 * main.c (libFuzzer brings main()), each through -Wl,--wrap (mk/fuzz.mk):
 * a spawn_task that must never be reached unless the target says so
 * (fuzz_http's fake tasks, made before fuzzing starts); libmicrohttpd's
 * suspend/resume contract; every close(). A broken rule aborts with a line
 * on fuzz_diag_fd. */
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "task/spawn.h"

/* Set by a target that installs its own fake spawner. */
pid_t (*fuzz_spawn_hook)(struct confine_plan *plan, const struct spawn_io *io);
/* Where findings are written: a target that closes stderr (-close_fd_mask=2)
 * points this at a copy of it. */
int fuzz_diag_fd = STDERR_FILENO;

pid_t __wrap_spawn_task(struct spawn_shim *sh, struct confine_plan *plan,
			const struct spawn_io *io);
pid_t __wrap_spawn_task(struct spawn_shim *sh, struct confine_plan *plan, const struct spawn_io *io)
{
	(void)sh;
	if (fuzz_spawn_hook)
		return fuzz_spawn_hook(plan, io);
	static const char msg[] = "fuzz: a request reached spawn_task: no process may be spawned\n";
	(void)!write(fuzz_diag_fd, msg, sizeof(msg) - 1);
	abort();
}

/* libmicrohttpd's suspend/resume contract, checked on every call (fuzz_http
 * links with -Wl,--wrap=MHD_suspend_connection,--wrap=MHD_resume_connection):
 * suspending a connection that is suspended corrupts the library's lists,
 * and resuming one that is not is undefined (0.9.75 then skips the next
 * suspend). Either is a finding here, with the call's stack, instead of a
 * panic far away. A connection is freed only when not suspended, so its
 * address may come back as a new connection: the set holds suspended ones. */
#define FUZZ_SUSP_MAX 1024
static struct MHD_Connection *fuzz_suspended[FUZZ_SUSP_MAX];
static unsigned fuzz_n_suspended;

static int susp_find(struct MHD_Connection *c)
{
	for (unsigned i = 0; i < fuzz_n_suspended; i++)
		if (fuzz_suspended[i] == c)
			return (int)i;
	return -1;
}

static void susp_die(const char *what, struct MHD_Connection *c)
{
	dprintf(fuzz_diag_fd, "fuzz: %s (connection %p)\n", what, (void *)c);
	abort();
}

void __real_MHD_suspend_connection(struct MHD_Connection *c);
void __wrap_MHD_suspend_connection(struct MHD_Connection *c);
void __wrap_MHD_suspend_connection(struct MHD_Connection *c)
{
	if (susp_find(c) >= 0)
		susp_die("MHD_suspend_connection of a suspended connection", c);
	if (fuzz_n_suspended == FUZZ_SUSP_MAX)
		susp_die("more suspended connections than the harness tracks", c);
	fuzz_suspended[fuzz_n_suspended++] = c;
	__real_MHD_suspend_connection(c);
}

void __real_MHD_resume_connection(struct MHD_Connection *c);
void __wrap_MHD_resume_connection(struct MHD_Connection *c);
void __wrap_MHD_resume_connection(struct MHD_Connection *c)
{
	int i = susp_find(c);
	if (i < 0)
		susp_die("MHD_resume_connection of a connection that is not suspended", c);
	fuzz_suspended[i] = fuzz_suspended[--fuzz_n_suspended];
	__real_MHD_resume_connection(c);
}

/* close(), checked (-Wl,--wrap=close): an fd closed twice is a bug even when
 * the second close happens to find the number taken by someone else's file
 * (then it closes that): EBADF is a finding. So is closing a connection
 * socket of the runner's own server (local port fuzz_http_port, not the
 * listener): libmicrohttpd owns those, and finding one closed under it is a
 * panic ("Close socket failed", "Failed to remove FD from epoll set"). */
int fuzz_http_port; /* 0: not known (the check is off) */

int __real_close(int fd);
int __wrap_close(int fd);
int __wrap_close(int fd)
{
	if (fd >= 0 && fuzz_http_port > 0) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int acc = 0;
		socklen_t al = sizeof(acc);
		if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_INET &&
		    ntohs(((struct sockaddr_in *)&ss)->sin_port) == fuzz_http_port &&
		    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) == 0 && !acc) {
			dprintf(fuzz_diag_fd,
				"fuzz: close(%d) of a connection socket libmicrohttpd owns\n", fd);
			abort();
		}
	}
	int rc = __real_close(fd);
	if (rc < 0 && errno == EBADF && fd >= 0) {
		dprintf(fuzz_diag_fd, "fuzz: close(%d) of an fd that is not open (closed twice?)\n",
			fd);
		abort();
	}
	return rc;
}
