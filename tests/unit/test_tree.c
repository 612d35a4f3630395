/* tree/tree.h (checkpoints): tree order of paths, a checkpoint of a scratch tree (as the user
 * running the test) into a store, a second one that reads nothing, the diff of every kind of
 * change, the restore making the tree list exactly as before (contents, modes, mtimes, symlinks,
 * empty directories, hard links; what was added removed), shared objects, the bound (TREE_EFULL
 * with nothing left behind), and the store's garbage collection. */
#include "tree/tree.h"

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

static void put(const char *rel, const char *content, mode_t mode)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", base, rel);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK(write(fd, content, strlen(content)) == (ssize_t)strlen(content));
	fchmod(fd, mode);
	close(fd);
}

static void list(const char *dir, const char *rel, FILE *out)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	char *names[256];
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d)) && n < 256)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			names[n++] = strdup(de->d_name);
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
		if (lstat(p, &st) == 0) {
			fprintf(out, "%s %o %lld.%09ld n%lu", r, st.st_mode,
				(long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
				(unsigned long)(S_ISDIR(st.st_mode) ? 0 : st.st_nlink));
			if (S_ISREG(st.st_mode)) {
				FILE *f = fopen(p, "r");
				int ch;
				fputc('[', out);
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
		}
		free(names[i]);
	}
}

static char *listing(void)
{
	char p[PATH_MAX], *buf = NULL;
	size_t len = 0;
	snprintf(p, sizeof(p), "%s/ws", base);
	FILE *out = open_memstream(&buf, &len);
	list(p, "", out);
	fclose(out);
	return buf;
}

struct fx {
	int state;
	struct tree_store st;
	struct tree_root root;
	char wpath[PATH_MAX];
};

static bool setup(struct fx *f, uint64_t max)
{
	snprintf(base, sizeof(base), "/tmp/ckpt-unit-XXXXXX");
	if (!CHECK(mkdtemp(base) != NULL))
		return false;
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/ws", base);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/state", base);
	mkdir(p, 0700);
	f->state = open(p, O_RDONLY | O_DIRECTORY);
	memset(&f->st, 0, sizeof(f->st));
	struct error e = {0};
	if (!CHECKF(tree_store_open(&f->st, f->state, &e) == 0, "%s", e.msg))
		return false;
	f->st.max = max;
	snprintf(f->wpath, sizeof(f->wpath), "%s/ws", base);
	f->root.path = f->wpath;
	f->root.name = "ws";
	f->root.pfd = open(base, O_RDONLY | O_DIRECTORY);
	f->root.fd = open(f->wpath, O_RDONLY | O_DIRECTORY);
	struct stat st;
	fstat(f->root.fd, &st);
	f->root.dev = st.st_dev;
	f->root.replaceable = true;
	f->root.mnt_id = 0; /* st_dev decides */
	return true;
}

static void teardown(struct fx *f)
{
	tree_store_close(&f->st);
	close(f->state);
	close(f->root.pfd);
	close(f->root.fd);
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "chmod -R u+rwx %s; rm -rf %s", base, base);
	CHECK(system(cmd) == 0);
}

TEST(tree_order)
{
	CHECK(tree_pathcmp("/a", "/a/b") < 0);
	CHECK(tree_pathcmp("/a/b", "/a-b") < 0); /* children right after their parent */
	CHECK(tree_pathcmp("/a-b", "/a/b") > 0);
	CHECK(tree_pathcmp("/a", "/a") == 0);
	CHECK(tree_pathcmp("/a/z", "/aa") < 0);
}

struct counts {
	int added, deleted, modified, attrs;
	unsigned what_all;
};

static void count(void *arg, const struct tree_ent *a, const struct tree_ent *b, unsigned what)
{
	struct counts *c = arg;
	if (!a)
		c->added++;
	else if (!b)
		c->deleted++;
	else if (what & (TREE_D_CONTENT | TREE_D_TYPE | TREE_D_TARGET))
		c->modified++;
	else if (a->type != TREE_DIR)
		c->attrs++;
	c->what_all |= what;
}

static void note(void *arg, const char *action, const char *path, const char *detail)
{
	(void)path;
	(void)detail;
	if (!strcmp(action, "failed"))
		++*(int *)arg;
}

TEST(take_diff_restore)
{
	struct fx f;
	if (!setup(&f, 1 << 20))
		return;
	put("ws/a.txt", "alpha\n", 0644);
	put("ws/b.txt", "alpha\n", 0600); /* same content: one object */
	char p[PATH_MAX], q[PATH_MAX];
	snprintf(p, sizeof(p), "%s/ws/dir", base);
	mkdir(p, 0750);
	snprintf(p, sizeof(p), "%s/ws/empty", base);
	mkdir(p, 0700);
	put("ws/dir/c", "gamma\n", 0640);
	snprintf(p, sizeof(p), "%s/ws/link", base);
	CHECK(symlink("a.txt", p) == 0);
	snprintf(p, sizeof(p), "%s/ws/a.txt", base);
	snprintf(q, sizeof(q), "%s/ws/hard", base);
	CHECK(link(p, q) == 0);
	char *before = listing();

	struct tree_manifest m1, m2, cur;
	struct tree_capture_stats ts;
	struct error e = {0};
	if (!CHECKF(tree_capture(&f.st, false, &f.root, 1, NULL, &m1, &ts, &e) == 0, "%s", e.msg))
		return;
	CHECKF(ts.files == 4 && ts.dirs == 3 && ts.links == 1,
	       "files %llu dirs %llu links %llu n %zu type %d", (unsigned long long)ts.files,
	       (unsigned long long)ts.dirs, (unsigned long long)ts.links, m1.n,
	       m1.n ? m1.ent[0].type : -1);
	CHECK(f.st.new_objects == 2); /* alpha (three names), gamma */
	f.st.used += f.st.added;
	f.st.added = f.st.new_objects = 0;
	CHECK(tree_find(&m1, f.wpath) == 0);
	CHECK(tree_capture(&f.st, false, &f.root, 1, &m1, &m2, &ts, &e) == 0);
	CHECK(ts.read_files == 0 && f.st.added == 0); /* nothing changed: nothing read */

	/* A tenant: content, mode, a deletion, an addition, a symlink, a type change. */
	put("ws/a.txt", "ALPHA!\n", 0644);
	snprintf(p, sizeof(p), "%s/ws/b.txt", base);
	chmod(p, 0666);
	snprintf(p, sizeof(p), "%s/ws/dir/c", base);
	unlink(p);
	put("ws/dir/new", "new\n", 0644);
	snprintf(p, sizeof(p), "%s/ws/link", base);
	unlink(p);
	CHECK(symlink("/etc/passwd", p) == 0);
	snprintf(p, sizeof(p), "%s/ws/empty", base);
	rmdir(p);
	put("ws/empty", "not a dir\n", 0644);
	CHECK(tree_capture(&f.st, true, &f.root, 1, &m1, &cur, &ts, &e) == 0);
	struct counts c = {0};
	tree_compare(&m1, &cur, count, &c);
	CHECKF(c.added == 1 && c.deleted == 1 && c.modified == 4 && c.attrs == 1,
	       "added %d deleted %d modified %d attrs %d", c.added, c.deleted, c.modified, c.attrs);
	CHECK(c.what_all & TREE_D_MODE);
	CHECK(c.what_all & TREE_D_TYPE);

	int failures = 0;
	CHECK(tree_restore(&f.st, &m1, &f.root, 1, note, &failures, NULL) == 0);
	CHECK(failures == 0);
	char *after = listing();
	CHECKF(!strcmp(before, after), "before:\n%s\nafter:\n%s", before, after);
	free(before);
	free(after);

	/* The collection keeps what m1 names, drops the rest. */
	uint64_t bytes = 0;
	CHECK(tree_store_gc(&f.st, &m1, 1, &bytes, &e) == 0);
	CHECK(bytes == 12); /* "alpha\n" + "gamma\n" */
	CHECK(tree_store_gc(&f.st, NULL, 0, &bytes, &e) == 0 && bytes == 0);
	tree_manifest_free(&m1);
	tree_manifest_free(&m2);
	tree_manifest_free(&cur);
	teardown(&f);
}

TEST(bound_leaves_nothing)
{
	struct fx f;
	if (!setup(&f, 10))
		return;
	put("ws/small", "12345", 0644);
	put("ws/zbig", "1234567890abc", 0644);
	struct tree_manifest m;
	struct tree_capture_stats ts;
	struct error e = {0};
	CHECK(tree_capture(&f.st, false, &f.root, 1, NULL, &m, &ts, &e) < 0);
	CHECK(e.errnum == TREE_EFULL);
	CHECKF(strstr(e.msg, "zbig") != NULL, "%s", e.msg);
	tree_store_rollback(&f.st);
	uint64_t bytes = 1;
	CHECK(tree_store_gc(&f.st, NULL, 0, &bytes, &e) == 0 && bytes == 0);
	teardown(&f);
}
