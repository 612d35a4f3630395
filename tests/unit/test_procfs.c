#include "core/procfs.h"
#include "core/closefds.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

TEST(stat_plain)
{
	struct procfs_stat st;
	CHECK(procfs_parse_stat("1234 (bash) S 1200 1234 1100 34816 1234 4194560 ...", &st) == 0);
	CHECK(st.state == 'S');
	CHECK(st.ppid == 1200);
	CHECK(st.pgrp == 1234);
	CHECK(st.session == 1100);
}

/* A task names its process: spaces and parentheses in comm must not move the
 * fields (a fake ") R 1 1 1" in comm would otherwise pose as the parent). */
TEST(stat_comm_spaces_and_parens)
{
	struct procfs_stat st;
	CHECK(procfs_parse_stat("77 (a) R 1 1 1 (b) S 42 43 44 0 0", &st) == 0);
	CHECK(st.state == 'S');
	CHECK(st.ppid == 42 && st.pgrp == 43 && st.session == 44);
	CHECK(procfs_parse_stat("77 ( x y ) Z 9 8 7", &st) == 0);
	CHECK(st.state == 'Z' && st.ppid == 9 && st.pgrp == 8 && st.session == 7);
	CHECK(procfs_parse_stat("77 ()) T 0 -1 5", &st) == 0);
	CHECK(st.state == 'T' && st.ppid == 0 && st.pgrp == -1 && st.session == 5);
}

TEST(stat_malformed)
{
	struct procfs_stat st;
	const char *bad[] = {"",
			     "1234 bash S 1 2 3",
			     "1234 (bash)",
			     "1234 (bash) ",
			     "1234 (bash) S",
			     "1234 (bash) S ",
			     "1234 (bash) S x 2 3",
			     "1234 (bash) S 1 2",
			     "1234 (bash) S 1  2 3",
			     "1234 (bash)S 1 2 3",
			     "1234 (bash) S 99999999999999999999 2 3"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECKF(procfs_parse_stat(bad[i], &st) == -EINVAL, "accepted '%s'", bad[i]);
}

TEST(pid_names)
{
	CHECK(procfs_parse_pid("1") == 1);
	CHECK(procfs_parse_pid("4194304") == 4194304);
	CHECK(procfs_parse_pid("0") == 0);
	CHECK(procfs_parse_pid("") == 0);
	CHECK(procfs_parse_pid("self") == 0);
	CHECK(procfs_parse_pid("12a") == 0);
	CHECK(procfs_parse_pid("-1") == 0);
	CHECK(procfs_parse_pid("99999999999999999999") == 0);
}

TEST(read_self)
{
	struct procfs_stat st;
	CHECK(procfs_read_stat(getpid(), &st) == 0);
	CHECK(st.ppid == getppid());
	CHECK(st.pgrp == getpgrp());
	CHECK(st.session == getsid(0));
	uid_t u[3];
	CHECK(procfs_read_uids(getpid(), u) == 0);
	CHECK(u[0] == getuid() && u[1] == geteuid());
	char comm[32];
	procfs_read_comm(getpid(), comm, sizeof(comm));
	CHECK(comm[0] != 0 && !strchr(comm, '\n'));
	CHECK(procfs_read_stat(0, &st) < 0);
}

struct find {
	pid_t want;
	int seen;
};

static int find_cb(pid_t pid, int procfd, void *arg)
{
	struct find *f = arg;
	CHECK(procfd >= 0);
	if (pid == f->want)
		f->seen++;
	return 0;
}

static int stop_cb(pid_t pid, int procfd, void *arg)
{
	(void)pid;
	(void)procfd;
	++*(int *)arg;
	return 1;
}

TEST(scan_finds_self_and_stops)
{
	struct find f = {getpid(), 0};
	CHECK(procfs_scan(find_cb, &f) == 0);
	CHECK(f.seen == 1);
	int calls = 0;
	CHECK(procfs_scan(stop_cb, &calls) == 0);
	CHECK(calls == 1);
}

/* In a child: keep[] survives, everything else >= lowfd is closed. */
TEST(closefds_except_keeps_only_those)
{
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		int a = open("/dev/null", O_RDONLY), b = open("/dev/null", O_RDONLY),
		    c = open("/dev/null", O_RDONLY), d = open("/dev/null", O_RDONLY);
		int keep[] = {c, -1, a, c, 1};
		if (closefds_except(3, keep, 5) < 0)
			_exit(2);
		bool ok = fcntl(a, F_GETFD) >= 0 && fcntl(c, F_GETFD) >= 0 &&
			  fcntl(b, F_GETFD) < 0 && errno == EBADF && fcntl(d, F_GETFD) < 0 &&
			  fcntl(2, F_GETFD) >= 0;
		_exit(ok ? 0 : 1);
	}
	int st;
	CHECK(waitpid(p, &st, 0) == p);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(closefds_range(10, 9) == 0);
}
