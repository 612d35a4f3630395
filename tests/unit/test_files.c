#include "core/buf.h"
#include "core/fileio.h"
#include "files/fserror.h"
#include "text/glob.h"
#include "files/ident.h"
#include "files/info.h"
#include "files/ops.h"
#include "files/path.h"
#include "files/walk.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"

static void check_clean(const char *in, const char *want)
{
	char out[PATH_MAX];
	int rc = files_clean_path(in, strlen(in), out, sizeof(out));
	if (!want) {
		CHECK(rc < 0);
		return;
	}
	CHECK(rc == 0);
	if (rc == 0 && strcmp(out, want))
		fprintf(stderr, "clean(%s) = %s, want %s\n", in, out, want);
	CHECK(rc == 0 && !strcmp(out, want));
}

static int glob(const char *pattern, const char *name)
{
	struct text_glob *g;
	char err[128];
	if (text_glob_compile(&g, pattern, err, sizeof(err)) < 0)
		return -1;
	int m = text_glob_match(g, name, strlen(name));
	text_glob_free(g);
	return m;
}

static void check_glob(const char *pattern, const char *name, int want)
{
	int got = glob(pattern, name);
	if (got != want)
		fprintf(stderr, "glob(%s, %s) = %d, want %d\n", pattern, name, got, want);
	CHECK(got == want);
}

/* Through the real entry point: a file in a scratch directory, replaced
 * step by step (files_replace_open/step), read back. */
static char *replace_str(const char *in, const char *old, const char *new_, uint64_t *count)
{
	char dir[] = "/tmp/test_files_rs.XXXXXX", p[PATH_MAX];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(p, sizeof(p), "%s/f", dir);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0 && write_all(fd, in, strlen(in)) == 0);
	close(fd);
	struct files_ident id = {.uid = getuid(), .gid = getgid(), .write_roots = NULL};
	struct files_replace rp;
	CHECK(files_replace_open(&rp, &id, p, old, strlen(old), new_, strlen(new_)) == 0);
	int rc;
	while ((rc = files_replace_step(&rp, UINT64_MAX)) > 0)
		;
	CHECK(rc == 0);
	*count = rp.count;
	files_replace_close(&rp);
	char *out = NULL;
	size_t n;
	CHECK(read_regular(AT_FDCWD, p, 0, SIZE_MAX, &out, &n, NULL) == 0);
	CHECK(unlink(p) == 0 && rmdir(dir) == 0);
	return out;
}

/* Paths: absolute, cleaned like Go's filepath.Clean. */
TEST(clean_path)
{
	check_clean("/", "/");
	check_clean("//a//b/", "/a/b");
	check_clean("/a/./b/../c", "/a/c");
	check_clean("/../..", "/");
	check_clean("/a/..", "/");
	check_clean("/a/b/../../..", "/");
	check_clean("/...", "/...");
	check_clean("/a/.b/..c", "/a/.b/..c");
	check_clean("a/b", NULL);
	check_clean("", NULL);
	check_clean("./x", NULL);
	{
		char out[PATH_MAX];
		CHECK(files_clean_path("/a\0b", 4, out, sizeof(out)) == -EINVAL);
	}
}

/* Globs: doublestar's semantics (a subset of its table). */
TEST(glob_match)
{
	check_glob("*", "abc", 1);
	check_glob("*", "", 1);
	check_glob("*c", "abc", 1);
	check_glob("a*", "ab/c", 0);
	check_glob("a*/b", "abc/b", 1);
	check_glob("a*/b", "a/c/b", 0);
	check_glob("a*b*c*d*e*/f", "axbxcxdxexxx/f", 1);
	check_glob("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", 0);
	check_glob("a*b?c*x", "abxbbxdbxebxczzx", 1);
	check_glob("a*b?c*x", "abxbbxdbxebxczzy", 0);
	check_glob("ab[c]", "abc", 1);
	check_glob("ab[b-d]", "abc", 1);
	check_glob("ab[e-g]", "abc", 0);
	check_glob("ab[^c]", "abc", 0);
	check_glob("ab[!e-g]", "abc", 1);
	check_glob("a?b",
		   "a\xe2\x98\xba"
		   "b",
		   1);
	check_glob("a???b",
		   "a\xe2\x98\xba"
		   "b",
		   0);
	check_glob("a?b", "a/b", 0);
	check_glob("a*b", "a/b", 0);
	check_glob("[\\]a]", "]", 1);
	check_glob("[x\\-]", "-", 1);
	check_glob("[x\\-]", "z", 0);
	check_glob("*x", "xxx", 1);
	check_glob("a\\*b", "a*b", 1);
	check_glob("a\\*b", "ab", 0);
	check_glob("**", "", 1);
	check_glob("**", "a/b/c", 1);
	check_glob("a/**", "a", 1);
	check_glob("a/**", "a/", 1);
	check_glob("a/**", "a/b/c", 1);
	check_glob("a/**", "ab", 0);
	check_glob("**/c", "c", 1);
	check_glob("**/c", "a/b/c", 1);
	check_glob("**/c", "a/b", 0);
	check_glob("**/c", "abcd", 0);
	check_glob("**/c", "a/abc", 0);
	check_glob("a/**/b", "a/b", 1);
	check_glob("a/**/d", "a/b/c/d", 1);
	check_glob("a/**/d", "a/b/c/e", 0);
	check_glob("abc**", "abc/b", 0);
	check_glob("**/*.txt", "abc/x.txt", 1);
	check_glob("**/*.txt", "x.txt", 1);
	check_glob("**/*.txt", "abc/x.txt/y", 0);
	check_glob("ab{c,d}", "abc", 1);
	check_glob("ab{c,d,*}", "abcde", 1);
	check_glob("a{,bc}", "a", 1);
	check_glob("a{,bc}", "abc", 1);
	check_glob("a/{b/c,c/b}", "a/c/b", 1);
	check_glob("{a/{b,c},abc}", "a/c", 1);
	check_glob("{a/{b,c},abc}", "a/b/c", 0);
	check_glob("*.{c,h}", "x.h", 1);
	check_glob("*.{c,h}", "x.o", 0);
}

/* Bad patterns are refused, not guessed at. */
TEST(glob_bad_patterns_refused)
{
	check_glob("[", "a", -1);
	check_glob("a[", "a", -1);
	check_glob("[]a]", "]", -1);
	check_glob("\\", "a", -1);
	check_glob("ab{c,d", "abc", -1);
	check_glob("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}", "acegikm", -1); /* 128 alternatives */
}

TEST(glob_no_exponential_blowup)
{
	{
		/* No exponential blow-up: many stars against a long non-match. */
		char name[4001];
		memset(name, 'a', 4000);
		name[4000] = 0;
		check_glob("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", name, 0);
		check_glob("**/*a*a*a*a*a*a*a*a*b", name, 0);
	}
}

TEST(glob_subject)
{
	{
		struct text_glob *g;
		char err[128];
		CHECK(text_glob_compile(&g, "*.txt", err, sizeof(err)) == 0);
		CHECK(text_glob_subject(g) == GLOB_NAME);
		text_glob_free(g);
		CHECK(text_glob_compile(&g, "src/**/*.c", err, sizeof(err)) == 0);
		CHECK(text_glob_subject(g) == GLOB_REL);
		text_glob_free(g);
		CHECK(text_glob_compile(&g, "/w/**", err, sizeof(err)) == 0);
		CHECK(text_glob_subject(g) == GLOB_ABS);
		text_glob_free(g);
	}
}

/* Replace: Go's strings.ReplaceAll, across chunk boundaries. */
TEST(replace_stream)
{
	{
		uint64_t n;
		char *o = replace_str("aaa", "aa", "b", &n);
		CHECK_STR(o, "ba");
		CHECK(n == 1);
		free(o);
		o = replace_str("hello world, hello", "hello", "bye", &n);
		CHECK_STR(o, "bye world, bye");
		CHECK(n == 2);
		free(o);
		o = replace_str("abc", "x", "y", &n);
		CHECK_STR(o, "abc");
		CHECK(n == 0);
		free(o);
		o = replace_str("abcabc", "abc", "", &n);
		CHECK_STR(o, "");
		CHECK(n == 2);
		free(o);
		/* 300 KiB with a 5-byte needle every 1000 bytes (some straddle
		 * the 64 KiB chunks). */
		size_t big = 300 * 1024;
		char *in = malloc(big + 1);
		for (size_t i = 0; i < big; i++)
			in[i] = (char)('a' + i % 7);
		size_t want = 0;
		for (size_t i = 997; i + 5 <= big; i += 1000) {
			memcpy(in + i, "NEEDL", 5);
			want++;
		}
		in[big] = 0;
		o = replace_str(in, "NEEDL", "X", &n);
		CHECK(n == want);
		CHECK(strlen(o) == big - 4 * want);
		CHECK(strstr(o, "NEEDL") == NULL);
		free(o);
		free(in);
	}
}

static int line_range(int fd, uint64_t first, uint64_t count, off_t *start, off_t *len)
{
	struct files_lines l;
	files_lines_init(&l, first, count);
	int rc;
	while ((rc = files_lines_step(&l, fd, UINT64_MAX)) > 0)
		;
	*start = l.start;
	*len = l.len;
	return rc;
}

/* Line ranges (1-based, newline included, last line may lack one). */
TEST(line_range)
{
	{
		int fd = memfd_create("lines", 0);
		const char *t = "one\ntwo\nthree\nfour";
		CHECK(write_all(fd, t, strlen(t)) == 0);
		off_t s, l;
		CHECK(line_range(fd, 1, 1, &s, &l) == 0 && s == 0 && l == 4);
		CHECK(line_range(fd, 2, 2, &s, &l) == 0 && s == 4 && l == 10);
		CHECK(line_range(fd, 3, 100, &s, &l) == 0 && s == 8 && l == 10);
		CHECK(line_range(fd, 4, 1, &s, &l) == 0 && s == 14 && l == 4);
		CHECK(line_range(fd, 5, 1, &s, &l) == 0 && l == 0);
		close(fd);
	}
}

/* rm -rf, mkdir -p and temp files in a scratch directory. */
TEST(mkdirs_tmp_rmrf)
{
	{
		char dir[] = "/tmp/test_files.XXXXXX";
		CHECK(mkdtemp(dir) != NULL);
		struct files_ident id = {.uid = getuid(), .gid = getgid(), .write_roots = NULL};
		char p[PATH_MAX];
		bool created;
		struct files_made made;
		snprintf(p, sizeof(p), "%s/x/y/z", dir);
		int fd = files_mkdirs(&id, p, 0700, &created, &made);
		CHECK(fd >= 0 && created && made.n == 3 && made.first == strlen(dir) + 1);
		CHECK(files_chown_made(&id, p, &made, getuid(), (gid_t)-1, false) == 0);
		files_made_free(&made);
		struct stat st;
		CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0700);
		snprintf(p, sizeof(p), "%s/x", dir);
		CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0755);
		/* A temp file is invisible until committed, and replaces atomically. */
		struct files_tmp t;
		CHECK(files_tmp_open(&t, fd) == 0);
		CHECK(write_all(t.fd, "new", 3) == 0);
		int old = openat(fd, "f", O_WRONLY | O_CREAT, 0644);
		CHECK(old >= 0 && write(old, "old", 3) == 3);
		close(old);
		CHECK(files_tmp_commit(&t, "f") == 0);
		CHECK(t.fd >= 0); /* still open, for an owner change */
		files_tmp_discard(&t);
		char buf[8] = {0};
		int rfd = openat(fd, "f", O_RDONLY);
		CHECK(rfd >= 0 && read(rfd, buf, sizeof(buf)) == 3 && !strcmp(buf, "new"));
		close(rfd);
		CHECK(files_tmp_open(&t, fd) == 0);
		files_tmp_discard(&t);
		/* Nothing but "f" in the directory: no temp left behind. */
		snprintf(p, sizeof(p), "ls -A %s/x/y/z | wc -l | grep -qx 1", dir);
		CHECK(system(p) == 0);
		close(fd);
		/* A symlink inside the tree is removed, its target is not. */
		snprintf(p, sizeof(p),
			 "mkdir -p %s/keep && touch %s/keep/k && ln -s %s/keep %s/x/link", dir, dir,
			 dir, dir);
		CHECK(system(p) == 0);
		int dfd = open(dir, O_PATH | O_DIRECTORY);
		CHECK(files_rmrf(dfd, "x") == 0);
		CHECK(files_rmrf(dfd, "nonexistent") == 0);
		CHECK(fstatat(dfd, "x", &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT);
		CHECK(fstatat(dfd, "keep/k", &st, 0) == 0);
		CHECK(files_rmrf(dfd, "keep") == 0);
		close(dfd);
		CHECK(rmdir(dir) == 0);
	}
}

/* FileInfo: execd's field order and forms. */
TEST(info_json)
{
	{
		struct stat st = {0};
		st.st_mode = S_IFREG | 0640;
		st.st_size = 42;
		st.st_mtim.tv_sec = 1700000000;
		st.st_mtim.tv_nsec = 120000000;
		st.st_ctim.tv_sec = 1700000000;
		st.st_uid = 4242424;
		st.st_gid = 4242425;
		struct buf b = {0};
		struct files_names nc = {0};
		files_info_json(&b, "/w/a", &st, &nc);
		buf_append(&b, "", 1);
		CHECK_STR(b.data, "{\"path\":\"/w/a\",\"type\":\"file\",\"size\":42,"
				  "\"modified_at\":\"2023-11-14T22:13:20.12Z\","
				  "\"created_at\":\"2023-11-14T22:13:20Z\",\"owner\":\"4242424\","
				  "\"group\":\"4242425\",\"mode\":640}");
		buf_free(&b);
	}
}

/* A scratch directory holding a small world: root/ (a write root) with a
 * file, a FIFO, links; out/ beside it. */
static void mkfile(const char *dir, const char *name, const char *content)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && write_all(fd, content, strlen(content)) == 0);
	close(fd);
}

static char *slurp(const char *dir, const char *name)
{
	static char buf[256];
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	int fd = open(p, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	buf[n > 0 ? n : 0] = 0;
	if (fd >= 0)
		close(fd);
	return buf;
}

/* Resolution: no magic link, no link at the last component of a write,
 * the write roots judged from the directory held. */
TEST(resolution)
{
	char dir[] = "/tmp/test_files_res.XXXXXX", p[PATH_MAX], roots[PATH_MAX];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(p, sizeof(p),
		 "mkdir -p %s/root/sub %s/out && ln -s ../out %s/root/up && "
		 "ln -s %s/out/f %s/root/lnk && ln -s /proc/self %s/root/self",
		 dir, dir, dir, dir, dir, dir);
	CHECK(system(p) == 0);
	snprintf(p, sizeof(p), "%s/out", dir);
	mkfile(p, "f", "outside\n");
	snprintf(roots, sizeof(roots), "/nonexistent:%s/root", dir);
	struct files_ident id = {.uid = getuid(), .gid = getgid(), .write_roots = roots};

	/* The roots, from what is held: inside, the root itself, outside,
	 * and "inside" by name but outside in fact (through a link). */
	snprintf(p, sizeof(p), "%s/root/sub", dir);
	int fd = files_open(AT_FDCWD, p, O_PATH | O_DIRECTORY, 0);
	CHECK(fd >= 0 && files_check_writable(&id, fd) == 0);
	close(fd);
	snprintf(p, sizeof(p), "%s/root", dir);
	fd = files_open(AT_FDCWD, p, O_PATH | O_DIRECTORY, 0);
	CHECK(fd >= 0 && files_check_writable(&id, fd) == 0);
	close(fd);
	snprintf(p, sizeof(p), "%s/root/up", dir);
	fd = files_open(AT_FDCWD, p, O_PATH | O_DIRECTORY, 0);
	CHECK(fd >= 0 && files_check_writable(&id, fd) == -FILES_EOUTSIDE);
	close(fd);
	fd = files_open(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0);
	CHECK(fd >= 0 && files_check_writable(&id, fd) == -FILES_EOUTSIDE);
	struct files_ident anywhere = id;
	anywhere.write_roots = NULL;
	CHECK(files_check_writable(&anywhere, fd) == 0);
	close(fd);

	/* The last component of a write is never followed. */
	snprintf(p, sizeof(p), "%s/root", dir);
	int dfd = files_open(AT_FDCWD, p, O_PATH | O_DIRECTORY, 0);
	CHECK(files_open_last(dfd, "lnk", O_RDWR) == -ELOOP);
	fd = files_open_last(dfd, "lnk", O_PATH);
	struct stat st;
	CHECK(fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode));
	close(fd);
	CHECK(files_open_last(dfd, "sub/x", O_RDONLY) == -EINVAL);
	CHECK(files_open_last(dfd, "..", O_PATH) < 0);

	/* Magic links are not followed, however reached; /proc is known. */
	char self[64];
	int probe = open("/dev/null", O_RDONLY);
	snprintf(self, sizeof(self), "/proc/self/fd/%d", probe);
	CHECK(files_open(AT_FDCWD, self, O_RDONLY, 0) == -ELOOP);
	snprintf(p, sizeof(p), "%s/root/self/fd/%d", dir, probe);
	CHECK(files_open(AT_FDCWD, p, O_RDONLY, 0) == -ELOOP);
	snprintf(p, sizeof(p), "%s/root/self/status", dir);
	fd = files_open(AT_FDCWD, p, O_PATH, 0);
	CHECK(fd >= 0 && files_on_procfs(fd) == 1);
	close(fd);
	CHECK(files_on_procfs(dfd) == 0);

	/* The same without openat2. */
	snprintf(p, sizeof(p), "%s/root/self/fd/%d", dir, probe);
	CHECK(files_open_compat(AT_FDCWD, p, O_RDONLY, 0) == -ELOOP);
	CHECK(files_open_compat(AT_FDCWD, self, O_PATH, 0) == -ELOOP);
	close(probe);
	snprintf(p, sizeof(p), "%s/root/self/status", dir);
	fd = files_open_compat(AT_FDCWD, p, O_RDONLY, 0);
	CHECK(fd >= 0 && files_on_procfs(fd) == 1);
	close(fd);
	snprintf(p, sizeof(p), "%s/root/up/f", dir);
	fd = files_open_compat(AT_FDCWD, p, O_RDONLY, 0);
	char b[16] = {0};
	CHECK(fd >= 0 && read(fd, b, sizeof(b) - 1) == 8 && !strcmp(b, "outside\n"));
	close(fd);
	CHECK(files_open_compat(AT_FDCWD, p, O_RDONLY, RESOLVE_NO_SYMLINKS) == -ELOOP);
	CHECK(files_open_compat(dfd, "lnk", O_RDONLY | O_NOFOLLOW, 0) == -ELOOP);
	fd = files_open_compat(dfd, "lnk", O_PATH | O_NOFOLLOW, 0);
	CHECK(fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode));
	close(fd);
	CHECK(files_open_compat(dfd, "../out", O_PATH, RESOLVE_BENEATH) == -EXDEV);
	fd = files_open_compat(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0);
	CHECK(fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode));
	close(fd);
	snprintf(p, sizeof(p), "%s/root/sub", dir);
	CHECK(files_open_compat(AT_FDCWD, p, O_RDONLY | O_DIRECTORY, 0) >= 0);

	/* Owner and mode through a descriptor (O_PATH will do). */
	snprintf(p, sizeof(p), "%s/root", dir);
	mkfile(p, "m", "x");
	fd = files_open_last(dfd, "m", O_PATH);
	CHECK(fd >= 0 && files_chmod_fd(fd, dfd, "m", 0600) == 0);
	CHECK(fstat(fd, &st) == 0 && (st.st_mode & 07777) == 0600);
	CHECK(files_chown_fd(&id, fd, getuid(), (gid_t)-1, false) == 0);
	close(fd);
	close(dfd);
	snprintf(p, sizeof(p), "rm -rf %s", dir);
	CHECK(system(p) == 0);
}

/* Replace acts on the descriptor it checked: links and FIFOs refused (a
 * FIFO without blocking), in place through the descriptor when the file
 * has other names, by temp and rename when not. */
TEST(replace_file)
{
	char dir[] = "/tmp/test_files_rep.XXXXXX", p[PATH_MAX];
	CHECK(mkdtemp(dir) != NULL);
	struct files_ident id = {.uid = getuid(), .gid = getgid(), .write_roots = NULL};
	mkfile(dir, "f", "one two one");
	mkfile(dir, "other", "other");
	snprintf(p, sizeof(p), "cd %s && ln f f2 && ln -s other lnk && mkfifo fifo", dir);
	CHECK(system(p) == 0);
	struct files_replace rp;
	snprintf(p, sizeof(p), "%s/lnk", dir);
	CHECK(files_replace_open(&rp, &id, p, "o", 1, "0", 1) == -ELOOP);
	files_replace_close(&rp);
	snprintf(p, sizeof(p), "%s/fifo", dir);
	CHECK(files_replace_open(&rp, &id, p, "o", 1, "0", 1) == -EINVAL);
	files_replace_close(&rp);
	snprintf(p, sizeof(p), "%s", dir);
	CHECK(files_replace_open(&rp, &id, p, "o", 1, "0", 1) == -EISDIR);
	files_replace_close(&rp);
	/* In place (two names): the inode stays, both names see it. */
	struct stat before, after;
	snprintf(p, sizeof(p), "%s/f", dir);
	CHECK(stat(p, &before) == 0);
	CHECK(files_replace_open(&rp, &id, p, "one", 3, "1", 1) == 0 && !rp.use_tmp);
	int rc;
	while ((rc = files_replace_step(&rp, 0)) > 0) /* one chunk per step */
		;
	CHECK(rc == 0 && rp.count == 2);
	files_replace_close(&rp);
	CHECK(stat(p, &after) == 0 && after.st_ino == before.st_ino);
	CHECK_STR(slurp(dir, "f2"), "1 two 1");
	/* By temp and rename (one name): a new inode, the same mode. */
	snprintf(p, sizeof(p), "%s/f2", dir);
	CHECK(unlink(p) == 0);
	snprintf(p, sizeof(p), "%s/f", dir);
	CHECK(chmod(p, 0640) == 0);
	CHECK(files_replace_open(&rp, &id, p, "two", 3, "deux", 4) == 0 && rp.use_tmp);
	while ((rc = files_replace_step(&rp, 0)) > 0)
		;
	CHECK(rc == 0 && rp.count == 1);
	files_replace_close(&rp);
	CHECK(stat(p, &after) == 0 && after.st_ino != before.st_ino &&
	      (after.st_mode & 07777) == 0640);
	CHECK_STR(slurp(dir, "f"), "1 deux 1");
	/* Swapped after the check: the rename is refused, nothing changes. */
	CHECK(files_replace_open(&rp, &id, p, "deux", 4, "two", 3) == 0 && rp.use_tmp);
	char q[PATH_MAX];
	snprintf(q, sizeof(q), "%s/other", dir);
	CHECK(renameat2(AT_FDCWD, p, AT_FDCWD, q, RENAME_EXCHANGE) == 0);
	while ((rc = files_replace_step(&rp, 0)) > 0)
		;
	CHECK(rc == -ESTALE);
	files_replace_close(&rp);
	CHECK_STR(slurp(dir, "f"), "other");
	CHECK_STR(slurp(dir, "other"), "1 deux 1");
	snprintf(p, sizeof(p), "ls -A %s | wc -l | grep -qx 4", dir); /* no temp left */
	CHECK(system(p) == 0);
	snprintf(p, sizeof(p), "rm -rf %s", dir);
	CHECK(system(p) == 0);
}

/* mkdir -p records what it made; an owner change finds exactly those again
 * and refuses one swapped meanwhile. */
TEST(mkdirs_made)
{
	char dir[] = "/tmp/test_files_mk.XXXXXX", p[PATH_MAX], q[PATH_MAX];
	CHECK(mkdtemp(dir) != NULL);
	struct files_ident id = {.uid = getuid(), .gid = getgid(), .write_roots = NULL};
	struct files_made made;
	bool created;
	snprintf(p, sizeof(p), "%s/a/b/c", dir);
	int fd = files_mkdirs(&id, p, 0750, &created, &made);
	CHECK(fd >= 0 && created && made.n == 3);
	close(fd);
	struct stat st;
	CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0750);
	CHECK(files_chown_made(&id, p, &made, getuid(), getgid(), false) == 0);
	/* The task swaps a/b for another directory: not the one made. */
	snprintf(p, sizeof(p), "%s/a/b", dir);
	snprintf(q, sizeof(q), "%s/a/x", dir);
	CHECK(rename(p, q) == 0 && mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/a/b/c", dir);
	CHECK(files_chown_made(&id, p, &made, getuid(), getgid(), false) == -ESTALE);
	files_made_free(&made);
	/* Nothing new: nothing recorded. */
	snprintf(p, sizeof(p), "%s/a", dir);
	fd = files_mkdirs(&id, p, 0755, &created, &made);
	CHECK(fd >= 0 && !created && made.n == 0);
	close(fd);
	files_made_free(&made);
	snprintf(p, sizeof(p), "rm -rf %s", dir);
	CHECK(system(p) == 0);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A walk in the smallest steps gives the same answer as in one: sorted,
 * parents before children, every entry once. */
TEST(walk_steps)
{
	char dir[] = "/tmp/test_files_walk.XXXXXX", p[PATH_MAX];
	CHECK(mkdtemp(dir) != NULL);
	enum { N = 700 };
	char *want[N + 1];
	unsigned seed = 12345;
	for (int i = 0; i < N; i++) {
		seed = seed * 1103515245 + 12345;
		char name[32];
		snprintf(name, sizeof(name), "n%08x-%d", seed, i);
		mkfile(dir, name, "");
		want[i] = strdup(name);
	}
	snprintf(p, sizeof(p), "%s/d", dir);
	CHECK(mkdir(p, 0755) == 0);
	mkfile(p, "inner", "");
	want[N] = strdup("d");
	qsort(want, N + 1, sizeof(char *), cmp_str);
	for (int steps = 0; steps < 2; steps++) {
		struct buf out = {0};
		struct files_walk w = {.max_depth = 2, .out = &out};
		int fd = open(dir, O_RDONLY | O_DIRECTORY);
		CHECK(files_walk_start(&w, fd, dir) == 0);
		int rc, n = 0;
		while ((rc = files_walk_step(&w, steps ? 0 : UINT64_MAX)) > 0)
			n++;
		CHECK(rc == 0 && w.results == N + 2);
		CHECK(steps ? n > 10 : n == 0);
		buf_append(&out, "", 1);
		/* The entries in order, "d/inner" right after "d". */
		const char *at = out.data;
		for (int i = 0; i <= N && at; i++) {
			char key[PATH_MAX];
			snprintf(key, sizeof(key), "\"path\":\"%s/%s\"", dir, want[i]);
			at = strstr(at, key);
			CHECK(at != NULL);
			if (at && !strcmp(want[i], "d")) {
				snprintf(key, sizeof(key), "\"path\":\"%s/d/inner\"", dir);
				const char *next = strstr(at + 1, "\"path\"");
				CHECK(next && !strncmp(next, key, strlen(key)));
			}
		}
		files_walk_free(&w);
		buf_free(&out);
	}
	for (int i = 0; i <= N; i++)
		free(want[i]);
	snprintf(p, sizeof(p), "rm -rf %s", dir);
	CHECK(system(p) == 0);
}

/* A line scan in the smallest steps finds what one scan finds, and stops
 * at FILES_LINES_SCAN_MAX. */
TEST(lines_steps)
{
	int fd = memfd_create("lines", 0);
	/* 200,000 short lines: many chunks. */
	struct buf text = {0};
	for (int i = 0; i < 200000; i++)
		buf_appendf(&text, "%d\n", i);
	CHECK(text.data && write_all(fd, text.data, text.len) == 0);
	buf_free(&text);
	off_t s1, l1;
	CHECK(line_range(fd, 150001, 3, &s1, &l1) == 0);
	struct files_lines l;
	files_lines_init(&l, 150001, 3);
	int rc, steps = 0;
	while ((rc = files_lines_step(&l, fd, 0)) > 0)
		steps++;
	CHECK(rc == 0 && steps > 10 && l.start == s1 && l.len == l1);
	char buf[32] = {0};
	CHECK(pread(fd, buf, (size_t)l.len, l.start) == l.len);
	CHECK_STR(buf, "150000\n150001\n150002\n");
	close(fd);
	/* No newline in the first FILES_LINES_SCAN_MAX bytes: bounded. */
	fd = memfd_create("hole", 0);
	CHECK(ftruncate(fd, (off_t)FILES_LINES_SCAN_MAX + 4096) == 0);
	CHECK(line_range(fd, 2, 1, &s1, &l1) == -FILES_ELIMIT);
	close(fd);
}

/* rm -rf in the smallest steps: everything goes, links are removed, not
 * followed; too deep a tree is refused. */
TEST(rmrf_steps)
{
	char dir[] = "/tmp/test_files_rm.XXXXXX", p[PATH_MAX];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(p, sizeof(p),
		 "cd %s && mkdir -p t/a/b/c keep && touch keep/k && ln -s ../../keep t/a/l "
		 "&& for i in $(seq 300); do touch t/f$i t/a/b/g$i; done",
		 dir);
	CHECK(system(p) == 0);
	int dfd = open(dir, O_PATH | O_DIRECTORY);
	struct files_rmrf rm;
	int rc = files_rmrf_start(&rm, dfd, "t"), steps = 0;
	CHECK(rc == 1);
	while ((rc = files_rmrf_step(&rm, 0)) > 0)
		steps++;
	CHECK(rc == 0 && steps > 10);
	files_rmrf_free(&rm);
	struct stat st;
	CHECK(fstatat(dfd, "t", &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT);
	CHECK(fstatat(dfd, "keep/k", &st, 0) == 0);
	/* Nothing at all: done at start. */
	CHECK(files_rmrf_start(&rm, dfd, "nothing") == 0);
	files_rmrf_free(&rm);
	/* Deeper than FILES_RMRF_MAX_DEPTH levels. */
	snprintf(p, sizeof(p),
		 "cd %s && mkdir deep && cd deep && for i in $(seq %d); do mkdir d && "
		 "cd d; done",
		 dir, FILES_RMRF_MAX_DEPTH + 1);
	CHECK(system(p) == 0);
	CHECK(files_rmrf(dfd, "deep") == -FILES_ELIMIT);
	close(dfd);
	snprintf(p, sizeof(p), "rm -rf %s", dir);
	CHECK(system(p) == 0);
}

/* The one wording of the files layer's errors (files/fserror.h): the files API's codes and
 * messages, which the file tools show too. */
TEST(files_error_words)
{
	struct files_ident id = {.uid = 1000, .gid = 1000, .write_roots = "/workspace:/tmp"};
	struct error e;
	CHECK(files_error(&e, -ENOENT, "read", "/x", &id, false) == -1);
	CHECK_STR(error_code(&e), "FILE_NOT_FOUND");
	CHECK_STR(e.msg, "read /x: file not found");
	CHECK(e.errnum == ENOENT);
	files_error(&e, -EACCES, "read", "/root/.bashrc", &id, false);
	CHECK_STR(error_code(&e), "PERMISSION_DENIED");
	CHECK_STR(e.msg, "read /root/.bashrc: not permitted (Permission denied, acting as the task "
			 "user, uid 1000)");
	files_error(&e, -FILES_EOUTSIDE, "write", "/etc/x", &id, false);
	CHECK_STR(error_code(&e), "PERMISSION_DENIED");
	CHECK_STR(e.msg, "write /etc/x: outside the directories tasks may write (/workspace:/tmp)");
	CHECK(e.errnum == 0); /* not an errno */
	files_error(&e, ENOTDIR, "upload", "/a/b", &id, true);
	CHECK_STR(e.msg, "upload /a/b: a parent is not a directory");
	files_error(&e, -EEXIST, "mkdir", "/a", &id, false);
	CHECK_STR(error_code(&e), "FILE_EXISTS");
	files_error(&e, -EEXIST, "upload", "/a", &id, true); /* the upload's own: its strerror */
	CHECK_STR(error_code(&e), "RUNTIME_ERROR");
	files_error(&e, -EFBIG, "upload", "/a", &id, true);
	CHECK_STR(error_code(&e), "INSUFFICIENT_STORAGE");
	files_error(&e, -ESTALE, "replace", "/a", &id, false);
	CHECK_STR(error_code(&e), "CONFLICT");
	CHECK_STR(e.msg, "replace /a: changed while it was being worked on; try again");
	files_error(&e, -FILES_ELIMIT, "delete", "/a", &id, false);
	CHECK_STR(e.msg, "delete /a: directory tree deeper than 256 levels");
	CHECK(files_error(NULL, -ENOENT, "read", "/x", &id, false) == -1);
}
