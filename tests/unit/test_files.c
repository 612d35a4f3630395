#include "files/glob.h"
#include "files/ident.h"
#include "files/info.h"
#include "files/ops.h"
#include "files/path.h"
#include "files/walk.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
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
	struct files_glob *g;
	char err[128];
	if (files_glob_compile(&g, pattern, err, sizeof(err)) < 0)
		return -1;
	int m = files_glob_match(g, name, strlen(name));
	files_glob_free(g);
	return m;
}

static void check_glob(const char *pattern, const char *name, int want)
{
	int got = glob(pattern, name);
	if (got != want)
		fprintf(stderr, "glob(%s, %s) = %d, want %d\n", pattern, name, got, want);
	CHECK(got == want);
}

static char *replace_str(const char *in, const char *old, const char *new_, uint64_t *count)
{
	int a = memfd_create("in", 0), b = memfd_create("out", 0);
	CHECK(a >= 0 && b >= 0);
	CHECK(files_write_all(a, in, strlen(in)) == 0);
	lseek(a, 0, SEEK_SET);
	CHECK(files_replace_stream(a, b, old, strlen(old), new_, strlen(new_), count) == 0);
	off_t n = lseek(b, 0, SEEK_CUR);
	char *out = calloc(1, (size_t)n + 1);
	CHECK(pread(b, out, (size_t)n, 0) == n);
	close(a);
	close(b);
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
	check_glob("a?b", "a\xe2\x98\xba" "b", 1);
	check_glob("a???b", "a\xe2\x98\xba" "b", 0);
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
		struct files_glob *g;
		char err[128];
		CHECK(files_glob_compile(&g, "*.txt", err, sizeof(err)) == 0);
		CHECK(files_glob_subject(g) == GLOB_NAME);
		files_glob_free(g);
		CHECK(files_glob_compile(&g, "src/**/*.c", err, sizeof(err)) == 0);
		CHECK(files_glob_subject(g) == GLOB_REL);
		files_glob_free(g);
		CHECK(files_glob_compile(&g, "/w/**", err, sizeof(err)) == 0);
		CHECK(files_glob_subject(g) == GLOB_ABS);
		files_glob_free(g);
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

/* Line ranges (1-based, newline included, last line may lack one). */
TEST(line_range)
{
	{
		int fd = memfd_create("lines", 0);
		const char *t = "one\ntwo\nthree\nfour";
		CHECK(files_write_all(fd, t, strlen(t)) == 0);
		off_t s, l;
		CHECK(files_line_range(fd, 1, 1, &s, &l) == 0 && s == 0 && l == 4);
		CHECK(files_line_range(fd, 2, 2, &s, &l) == 0 && s == 4 && l == 10);
		CHECK(files_line_range(fd, 3, 100, &s, &l) == 0 && s == 8 && l == 10);
		CHECK(files_line_range(fd, 4, 1, &s, &l) == 0 && s == 14 && l == 4);
		CHECK(files_line_range(fd, 5, 1, &s, &l) == 0 && l == 0);
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
		size_t first_new;
		snprintf(p, sizeof(p), "%s/x/y/z", dir);
		int fd = files_mkdirs(&id, p, 0700, &created, &first_new);
		CHECK(fd >= 0 && created && first_new == strlen(dir) + 2);
		CHECK(files_chown_new(&id, p, first_new, getuid(), (gid_t)-1, false) == 0);
		struct stat st;
		CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0700);
		snprintf(p, sizeof(p), "%s/x", dir);
		CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0755);
		/* A temp file is invisible until committed, and replaces atomically. */
		struct files_tmp t;
		CHECK(files_tmp_open(&t, fd) == 0);
		CHECK(files_write_all(t.fd, "new", 3) == 0);
		int old = openat(fd, "f", O_WRONLY | O_CREAT, 0644);
		CHECK(old >= 0 && write(old, "old", 3) == 3);
		close(old);
		CHECK(files_tmp_commit(&t, "f") == 0);
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
		snprintf(p, sizeof(p), "mkdir -p %s/keep && touch %s/keep/k && ln -s %s/keep %s/x/link",
			 dir, dir, dir, dir);
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
