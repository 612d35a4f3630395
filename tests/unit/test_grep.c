/* files/grep.c: content search over a real tree (as the user running the test): hits in walk
 * order, the glob, max_results, binary and large files skipped, links not followed, one-file
 * mode, CRLF lines, long lines cut on a character boundary, patterns refused. */
#include "files/grep.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text/glob.h"
#include "unit.h"

static char root[64];

static void put(const char *rel, const char *data, size_t len)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && write(fd, data, len) == (ssize_t)len);
	close(fd);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void rm_tree(void)
{
	nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void tree(void)
{
	if (root[0])
		return;
	atexit(rm_tree);
	snprintf(root, sizeof(root), "/tmp/forceai-grep-XXXXXX");
	CHECK(mkdtemp(root) != NULL);
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/sub", root);
	CHECK(mkdir(p, 0755) == 0);
	put("a.txt", "alpha\nbeta\r\ngamma beta\n", 23);
	put("sub/b.c", "int beta;\nno\n", 13);
	put("bin", "beta\0beta\n", 10);
	char *big = malloc(FILES_GREP_FILE_MAX + 10);
	memset(big, 'b', FILES_GREP_FILE_MAX + 10);
	put("zbig", big, FILES_GREP_FILE_MAX + 10);
	free(big);
	/* a long line of two-byte characters: cut on a boundary */
	char lng[2000];
	for (size_t i = 0; i < sizeof(lng); i += 2)
		lng[i] = (char)0xc3, lng[i + 1] = (char)0xa9; /* é */
	put("sub/long", lng, sizeof(lng));
	snprintf(p, sizeof(p), "%s/link", root);
	CHECK(symlink("/etc", p) == 0);
}

/* Run a search; the hits as a JSON array (new reference), or NULL with *rc. */
static json_t *grep(const char *rel, const char *pattern, const char *glob, size_t max,
		    struct files_grep *g, int *rc)
{
	tree();
	char path[PATH_MAX], err[160];
	snprintf(path, sizeof(path), "%s%s%s", root, rel[0] ? "/" : "", rel);
	struct buf out = {0};
	struct text_glob *gl = NULL;
	*rc = files_grep_init(g, pattern, err, sizeof(err));
	if (*rc < 0)
		return NULL;
	if (glob)
		CHECK(text_glob_compile(&gl, glob, err, sizeof(err)) == 0);
	g->glob = gl;
	g->max_results = max;
	g->out = &out;
	struct stat st;
	int fd;
	*rc = files_open_root(path, &st, &fd);
	if (*rc == 0 && fd < 0)
		fd = open(path, O_RDONLY);
	if (*rc == 0)
		*rc = files_grep_start(g, fd, path, S_ISDIR(st.st_mode));
	unsigned steps = 0;
	/* A deadline in the past: a little work per step, resumed each time. */
	while (*rc == 0 && (*rc = files_grep_step(g, 0)) == 1 && ++steps < 100000)
		*rc = 0;
	text_glob_free(gl);
	struct buf a = {0};
	buf_append_str(&a, "[");
	buf_append(&a, out.data ? out.data : "", out.len);
	buf_append_str(&a, "]");
	json_t *j = json_loadb(a.data, a.len, 0, NULL);
	buf_free(&a);
	buf_free(&out);
	return j;
}

static int hit_line(json_t *a, size_t i)
{
	return (int)json_integer_value(json_object_get(json_array_get(a, i), "line"));
}

static const char *hit_path(json_t *a, size_t i)
{
	const char *p = json_string_value(json_object_get(json_array_get(a, i), "path"));
	return p ? p + strlen(root) : "";
}

TEST(hits_in_walk_order)
{
	struct files_grep g;
	int rc;
	json_t *a = grep("", "beta", NULL, 0, &g, &rc);
	CHECKF(rc == 0, "rc %d", rc);
	CHECKF(json_array_size(a) == 3, "%zu hits", json_array_size(a));
	CHECK_STR(hit_path(a, 0), "/a.txt");
	CHECK(hit_line(a, 0) == 2 && hit_line(a, 1) == 3);
	CHECK_STR(json_string_value(json_object_get(json_array_get(a, 0), "text")), "beta");
	CHECK_STR(hit_path(a, 2), "/sub/b.c");
	CHECK(g.skipped_binary == 1 && g.skipped_large == 1 && !g.truncated);
	json_decref(a);
	files_grep_free(&g);
}

TEST(glob_limit_and_one_file)
{
	struct files_grep g;
	int rc;
	json_t *a = grep("", "beta", "*.c", 0, &g, &rc);
	CHECK(json_array_size(a) == 1 && !strcmp(hit_path(a, 0), "/sub/b.c"));
	json_decref(a);
	files_grep_free(&g);
	a = grep("", "beta", NULL, 2, &g, &rc);
	CHECK(json_array_size(a) == 2 && g.truncated);
	CHECK_STR(g.limit_msg, "max_results reached");
	json_decref(a);
	files_grep_free(&g);
	a = grep("a.txt", "^(alpha|gamma)", NULL, 0, &g, &rc);
	CHECK(json_array_size(a) == 2 && hit_line(a, 0) == 1 && hit_line(a, 1) == 3);
	json_decref(a);
	files_grep_free(&g);
}

TEST(long_lines_are_cut_on_a_character)
{
	struct files_grep g;
	int rc;
	json_t *a = grep("sub", "^\xc3\xa9", NULL, 0, &g, &rc);
	CHECK(json_array_size(a) == 1);
	const char *t = json_string_value(json_object_get(json_array_get(a, 0), "text"));
	CHECK(t && strlen(t) == FILES_GREP_LINE_MAX);
	json_decref(a);
	files_grep_free(&g);
}

TEST(links_are_not_followed)
{
	struct files_grep g;
	int rc;
	json_t *a = grep("", "root", NULL, 0, &g, &rc);
	CHECK(rc == 0 && json_array_size(a) == 0); /* /etc/passwd lies behind link */
	json_decref(a);
	files_grep_free(&g);
	a = grep("link", "root", NULL, 0, &g, &rc);
	CHECK(rc == -ELOOP || (a && json_array_size(a) == 0));
	json_decref(a);
	files_grep_free(&g);
}

TEST(patterns_refused)
{
	static const char *const bad[] = {"", "(", "a[", "(a)\\1", "x\\9"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct files_grep g;
		char err[160] = "";
		CHECKF(files_grep_init(&g, bad[i], err, sizeof(err)) == -EINVAL, "%s", bad[i]);
		CHECKF(err[0], "no reason for %s", bad[i]);
		files_grep_free(&g);
	}
	char longp[FILES_GREP_PATTERN_MAX + 2];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = 0;
	struct files_grep g;
	char err[160];
	CHECK(files_grep_init(&g, longp, err, sizeof(err)) == -EINVAL);
	files_grep_free(&g);
	CHECK(files_grep_init(&g, "\\\\1", err, sizeof(err)) == 0); /* an escaped backslash */
	files_grep_free(&g);
}

/* One line of 1 MiB: the step stops inside the line at its deadline and resumes there (issue 33:
 * glibc's regexec held the loop minutes on such a line). */
TEST(deadline_inside_a_line)
{
	tree();
	size_t n = 1 << 20;
	char *d = malloc(n);
	if (!CHECK(d))
		return;
	memset(d, 'x', n);
	memcpy(d, "TODO", 4);
	memcpy(d + n - 5, "fixme", 5);
	put("oneline", d, n);
	free(d);
	char path[PATH_MAX], err[160];
	snprintf(path, sizeof(path), "%s/oneline", root);
	struct files_grep g;
	struct buf out = {0};
	CHECK(files_grep_init(&g, "TODO.*fixme", err, sizeof(err)) == 0);
	g.out = &out;
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && files_grep_start(&g, fd, path, false) == 0);
	unsigned steps = 0;
	int rc;
	while ((rc = files_grep_step(&g, 0)) == 1 && ++steps < 100000)
		CHECKF(g.results == 0 && g.line == 0, "a hit before the line's end");
	CHECKF(rc == 0 && g.results == 1 && !g.truncated, "rc %d, %zu results", rc, g.results);
	CHECKF(steps >= 8, "the line was searched in %u steps", steps);
	files_grep_free(&g);
	buf_free(&out);
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/oneline", root);
	unlink(p);
}

TEST(pattern_bombs_refused)
{
	static const char *const bad[] = {"((a{1,255}){1,255}){1,255}", "(a{1,255}){1,255}",
					  "(.*.*.*.*.*.*){255}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct files_grep g;
		char err[160] = "";
		CHECKF(files_grep_init(&g, bad[i], err, sizeof(err)) == -EINVAL, "%s", bad[i]);
		CHECKF(strstr(err, "too big") && strstr(err, "4096"), "%s: %s", bad[i], err);
		files_grep_free(&g);
	}
}
