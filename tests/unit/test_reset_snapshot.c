/* The reset snapshot: a scratch tree is snapshotted, changed in every way a
 * tenant could change it, restored, and must then list exactly as before
 * (types, modes, owners, mtimes, contents, symlink targets, hard links);
 * nothing outside the roots may change. */
#include "profile/reset_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "unit.h"

static char base[256];

static void path(char *out, const char *rel)
{
	if (snprintf(out, PATH_MAX, "%s/%s", base, rel) >= PATH_MAX)
		abort();
}

static void put(const char *rel, const char *content, mode_t mode)
{
	char p[PATH_MAX];
	path(p, rel);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK(write(fd, content, strlen(content)) == (ssize_t)strlen(content));
	fchmod(fd, mode);
	close(fd);
}

static void mk(const char *rel, mode_t mode)
{
	char p[PATH_MAX];
	path(p, rel);
	CHECK(mkdir(p, mode) == 0);
	chmod(p, mode);
}

/* A canonical listing of a tree: one line per entry, sorted by name. */
static void list(const char *dir, const char *rel, FILE *out)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	char **names = NULL;
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    (!*rel && !strcmp(de->d_name, "state")))
			continue;
		names = realloc(names, (n + 1) * sizeof(*names));
		names[n++] = strdup(de->d_name);
	}
	closedir(d);
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			if (strcmp(names[i], names[j]) > 0) {
				char *t = names[i];
				names[i] = names[j];
				names[j] = t;
			}
	for (size_t i = 0; i < n; i++) {
		char p[PATH_MAX], r[PATH_MAX];
		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		snprintf(r, sizeof(r), "%s/%s", rel, names[i]);
		struct stat st;
		if (lstat(p, &st) < 0)
			continue;
		fprintf(out, "%s %o %d:%d %lld.%09ld", r, st.st_mode, st.st_uid, st.st_gid,
			(long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
		if (S_ISREG(st.st_mode)) {
			fprintf(out, " n%lu [", (unsigned long)st.st_nlink);
			FILE *f = fopen(p, "r");
			int ch;
			while (f && (ch = fgetc(f)) != EOF)
				fputc(ch, out);
			if (f)
				fclose(f);
			fputc(']', out);
		} else if (S_ISLNK(st.st_mode)) {
			char t[PATH_MAX];
			ssize_t l = readlink(p, t, sizeof(t) - 1);
			t[l > 0 ? l : 0] = 0;
			fprintf(out, " -> %s", t);
		}
		fputc('\n', out);
		if (S_ISDIR(st.st_mode))
			list(p, r, out);
		free(names[i]);
	}
	free(names);
}

static char *listing(const char *rel)
{
	char p[PATH_MAX], *buf = NULL;
	size_t len = 0;
	path(p, rel);
	FILE *out = open_memstream(&buf, &len);
	list(p, "", out);
	fclose(out);
	return buf;
}

static void deep(const char *rel, int levels)
{
	char p[PATH_MAX];
	path(p, rel);
	int fd = open(p, O_RDONLY | O_DIRECTORY);
	for (int i = 0; i < levels && fd >= 0; i++) {
		mkdirat(fd, "d", 0755);
		int n = openat(fd, "d", O_RDONLY | O_DIRECTORY);
		close(fd);
		fd = n;
	}
	if (fd >= 0) {
		int f = openat(fd, "bottom", O_WRONLY | O_CREAT, 0644);
		close(f);
		close(fd);
	}
	CHECK(fd >= 0);
}

/* A scratch tree: roots a (with the state dir inside) and b, a directory outside the roots, and
 * a snapshot of a, b and a root that does not exist. */
struct fixture {
	int state;
	const char *roots[3];
	char ra[PATH_MAX], rb[PATH_MAX];
	struct reset_snapshot s;
	bool taken; /* snapshot_take ran: s is initialised */
	char *before_a, *before_b, *before_out;
};

static bool setup(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	f->state = -1;
	snprintf(base, sizeof(base), "/tmp/forceai-unit-snapshot-XXXXXX");
	if (!CHECK(mkdtemp(base) != NULL))
		return false;
	mk("a", 0755);
	mk("a/state", 0700); /* the state dir inside a root: left out */
	mk("a/sub", 0750);
	mk("a/sub/inner", 0700);
	put("a/keep", "unchanged\n", 0644);
	put("a/edit", "original\n", 0600);
	put("a/chmod", "mode\n", 0644);
	put("a/sub/gone", "deleted by the tenant\n", 0640);
	put("a/sub/inner/x", "x\n", 04755);
	put("a/hl1", "linked\n", 0644);
	char p1[PATH_MAX], p2[PATH_MAX];
	path(p1, "a/hl1");
	path(p2, "a/sub/hl2");
	CHECK(link(p1, p2) == 0);
	path(p1, "a/link");
	CHECK(symlink("keep", p1) == 0);
	path(p1, "a/fifo");
	CHECK(mkfifo(p1, 0620) == 0);
	mk("b", 01777);
	put("b/file", "b\n", 0666);
	mk("outside", 0755);
	put("outside/sentinel", "must survive\n", 0644);
	/* Fixed times, so a listing shows any time not put back. */
	f->before_a = listing("a");
	f->before_b = listing("b");
	f->before_out = listing("outside");
	if (getenv("SNAP_SHOW"))
		fprintf(stderr, "%s", f->before_a);

	char rs[PATH_MAX];
	path(f->ra, "a");
	path(f->rb, "b");
	path(rs, "a/state");
	f->state = open(rs, O_RDONLY | O_DIRECTORY);
	f->roots[0] = f->ra;
	f->roots[1] = f->rb;
	f->roots[2] = "/nonexistent-forceai-root";
	return CHECK(f->state >= 0);
}

static bool take(struct fixture *f)
{
	struct error e = {0};
	char *skipped = NULL;
	f->taken = true;
	int rc = reset_snapshot_take(&f->s, f->roots, 3, f->state, 1 << 20, &skipped, &e);
	if (rc < 0)
		unit_diag("snapshot_take: %s", e.msg);
	CHECK(rc == 0);
	CHECK(skipped && !strcmp(skipped, "/nonexistent-forceai-root"));
	free(skipped);
	return CHECK(f->s.n_roots == 2) && rc == 0;
}

static void teardown(struct fixture *f)
{
	if (f->taken)
		reset_snapshot_free(&f->s);
	if (f->state >= 0)
		close(f->state);
	free(f->before_a);
	free(f->before_b);
	free(f->before_out);
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup of %s failed\n", base);
}

/* The tenant: every kind of change. */
static void tenant_changes(void)
{
	char p1[PATH_MAX], p2[PATH_MAX];
	put("a/edit", "changed by the tenant\n", 0600);
	path(p1, "a/chmod");
	chmod(p1, 0777);
	path(p1, "a/sub/gone");
	unlink(p1);
	path(p1, "a/sub/inner/x");
	unlink(p1);
	path(p1, "a/sub/inner");
	rmdir(p1);
	put("a/new", "added\n", 0644);
	mk("a/newdir", 0755);
	put("a/newdir/f", "f\n", 0644);
	path(p1, "a/keep");
	path(p2, "a/newdir/hardlink-to-keep");
	CHECK(link(p1, p2) == 0); /* changes keep's ctime: it is put back too */
	/* A symlink to outside in place of a file and as a directory. */
	path(p1, "a/hl1");
	unlink(p1);
	path(p2, "outside");
	CHECK(symlink(p2, p1) == 0);
	path(p1, "a/escape");
	CHECK(symlink(p2, p1) == 0);
	path(p1, "a/link");
	unlink(p1);
	path(p2, "outside/sentinel");
	CHECK(symlink(p2, p1) == 0);
	deep("a/newdir", 300); /* deeper than the hoisting depth */
	put("b/tenant", "b\n", 0600);
	path(p1, "b/file");
	CHECK(truncate(p1, 0) == 0);
	put("a/state/mine", "the runner's\n", 0600);
}

/* A restore of an untouched tree changes nothing. */
TEST(restore_of_untouched_tree_changes_nothing)
{
	struct fixture f;
	if (setup(&f) && take(&f)) {
		struct tree_restore_stats st;
		struct error e = {0};
		int rc = reset_snapshot_restore(&f.s, &st, &e);
		CHECK(rc == 0);
		CHECK(st.removed_files == 0 && st.restored_files == 0 && st.removed_dirs == 0);
		char *again = listing("a");
		CHECK(!strcmp(again, f.before_a));
		free(again);
	}
	teardown(&f);
}

TEST(restore_undoes_every_change)
{
	struct fixture f;
	if (setup(&f) && take(&f)) {
		tenant_changes();
		struct tree_restore_stats st;
		struct error e = {0};
		int rc = reset_snapshot_restore(&f.s, &st, &e);
		if (rc < 0)
			unit_diag("snapshot_restore: %s", e.msg);
		CHECK(rc == 0);
		char *after_a = listing("a"), *after_b = listing("b"),
		     *after_out = listing("outside");
		/* The state dir's content is not the snapshot's business: compare
		 * without it. */
		char p1[PATH_MAX];
		path(p1, "a/state/mine");
		CHECK(access(p1, F_OK) == 0);
		if (strcmp(after_a, f.before_a))
			unit_diag("--- before\n%s--- after\n%s", f.before_a, after_a);
		CHECK(!strcmp(after_a, f.before_a));
		CHECK(!strcmp(after_b, f.before_b));
		CHECK(!strcmp(after_out, f.before_out));
		CHECK(st.removed_files >= 4 && st.removed_dirs >= 300 && st.removed_links == 3);
		CHECK(st.restored_files >= 4); /* edit, gone, x, keep (+ the hard links) */
		CHECK(st.restored_dirs == 1);
		CHECK(st.attrs_fixed == 0 || st.attrs_fixed == 1);
		fprintf(stderr,
			"restore: removed %llu files %llu dirs %llu links; restored %llu files %llu "
			"dirs %llu links; unchanged %llu\n",
			(unsigned long long)st.removed_files, (unsigned long long)st.removed_dirs,
			(unsigned long long)st.removed_links, (unsigned long long)st.restored_files,
			(unsigned long long)st.restored_dirs, (unsigned long long)st.restored_links,
			(unsigned long long)st.unchanged);
		free(after_a);
		free(after_b);
		free(after_out);
	}
	teardown(&f);
}

/* Once restored, a second restore recognises everything as unchanged. */
TEST(second_restore_finds_nothing_to_do)
{
	struct fixture f;
	if (setup(&f) && take(&f)) {
		tenant_changes();
		struct tree_restore_stats st;
		struct error e = {0};
		CHECK(reset_snapshot_restore(&f.s, &st, &e) == 0);
		int rc = reset_snapshot_restore(&f.s, &st, &e);
		CHECK(rc == 0);
		CHECK(st.restored_files == 0 && st.removed_files == 0 && st.restored_links == 0);
	}
	teardown(&f);
}

/* Over the size bound: refused with a message naming it. */
TEST(size_bound_refused)
{
	struct fixture f;
	if (setup(&f)) {
		struct error e = {0};
		char *skipped = NULL;
		f.taken = true;
		int rc = reset_snapshot_take(&f.s, f.roots, 2, f.state, 10, &skipped, &e);
		CHECK(rc < 0 && strstr(e.msg, "--reset-snapshot-max"));
		free(skipped);
	}
	teardown(&f);
}
