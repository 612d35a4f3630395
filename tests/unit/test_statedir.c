/* core/statedir.c: the state dir is private, ours, never a symlink, and the
 * fallbacks are tried only when --state-dir was not given. Uses a scratch
 * directory (never the host's /tmp/forceai-runner-*). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "core/statedir.h"
#include "unit.h"

static int open_at(const char *dir, bool given, char *path, size_t n, bool *fb, struct error *e)
{
	struct runner_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.state_dir = dir;
	cfg.state_dir_set = given;
	return statedir_open(&cfg, path, n, fb, e);
}

static mode_t mode_of(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? st.st_mode & 07777 : (mode_t)-1;
}

static char scratch_dir[] = "/tmp/forceai-unit-statedir-XXXXXX";

/* The scratch directory, made by the first case that needs it and removed at exit. */
static const char *scratch(void)
{
	static bool made;
	if (!made && !mkdtemp(scratch_dir)) {
		perror("mkdtemp");
		exit(2);
	}
	made = true;
	return scratch_dir;
}

__attribute__((destructor)) static void remove_scratch(void)
{
	if (strcmp(scratch_dir + strlen(scratch_dir) - 6, "XXXXXX") == 0)
		return;
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup of %s failed\n", scratch_dir);
}

/* given, new: created 0700, no fallback */
TEST(given_new_dir_created_private)
{
	char a[600], path[512];
	bool fb = true;
	struct error e = {0};
	snprintf(a, sizeof(a), "%s/new", scratch());
	int fd = open_at(a, true, path, sizeof(path), &fb, &e);
	CHECK(fd >= 0);
	CHECK_STR(path, a);
	CHECK(!fb);
	CHECK(mode_of(a) == 0700);
	if (fd >= 0)
		close(fd);
}

/* ours with group/other bits: tightened */
TEST(given_loose_mode_tightened)
{
	char a[600], path[512];
	bool fb = true;
	struct error e = {0};
	snprintf(a, sizeof(a), "%s/loose", scratch());
	CHECK(mkdir(a, 0755) == 0);
	chmod(a, 0755);
	int fd = open_at(a, true, path, sizeof(path), &fb, &e);
	CHECK(fd >= 0);
	CHECK(mode_of(a) == 0700);
	if (fd >= 0)
		close(fd);
}

/* a symlink to a directory of ours: refused */
TEST(symlink_refused)
{
	char a[600], path[512], target[600];
	bool fb = true;
	struct error e = {0};
	snprintf(target, sizeof(target), "%s/target", scratch());
	CHECK(mkdir(target, 0700) == 0);
	snprintf(a, sizeof(a), "%s/link", scratch());
	CHECK(symlink(target, a) == 0);
	int fd = open_at(a, true, path, sizeof(path), &fb, &e);
	CHECK(fd < 0);
	CHECK(strstr(e.msg, "symlink") != NULL);
	CHECK_STR(e.code, "STATE_DIR");
	if (fd >= 0)
		close(fd);
}

/* owned by someone else: refused, naming the owner */
TEST(owned_by_other_uid_refused)
{
	if (geteuid() != 0)
		SKIP("not root: cannot make a directory another uid owns");
	char a[600], path[512];
	bool fb = true;
	struct error e = {0};
	snprintf(a, sizeof(a), "%s/theirs", scratch());
	CHECK(mkdir(a, 0700) == 0);
	CHECK(chown(a, 4321, 4321) == 0);
	error_clear(&e);
	int fd = open_at(a, true, path, sizeof(path), &fb, &e);
	CHECK(fd < 0);
	CHECK(strstr(e.msg, "owned by uid 4321") != NULL);
	/* given: no fallback is tried, the message says so */
	CHECK(strstr(e.msg, "set --state-dir") == NULL);
	if (fd >= 0)
		close(fd);
}

/* not given, the default unusable: $XDG_RUNTIME_DIR/forceai-runner */
TEST(fallback_to_xdg_runtime_dir)
{
	char a[600], path[512], xdg[600];
	bool fb = false;
	struct error e = {0};
	snprintf(xdg, sizeof(xdg), "%s/xdg", scratch());
	CHECK(mkdir(xdg, 0700) == 0);
	setenv("XDG_RUNTIME_DIR", xdg, 1);
	snprintf(a, sizeof(a), "%s/missing-parent/state", scratch());
	int fd = open_at(a, false, path, sizeof(path), &fb, &e);
	CHECK(fd >= 0);
	CHECK(fb);
	char want[700];
	snprintf(want, sizeof(want), "%s/forceai-runner", xdg);
	CHECK_STR(path, want);
	CHECK(mode_of(want) == 0700);
	if (fd >= 0)
		close(fd);
	unsetenv("XDG_RUNTIME_DIR");
}

/* a relative XDG_RUNTIME_DIR is ignored (the next fallback is the host's /tmp: not tried here,
 * the default works) */
TEST(relative_xdg_runtime_dir_ignored)
{
	char a[600], path[512];
	bool fb = true;
	struct error e = {0};
	setenv("XDG_RUNTIME_DIR", "relative", 1);
	snprintf(a, sizeof(a), "%s/default", scratch());
	int fd = open_at(a, false, path, sizeof(path), &fb, &e);
	CHECK(fd >= 0 && !fb);
	if (fd >= 0)
		close(fd);
	unsetenv("XDG_RUNTIME_DIR");
}
