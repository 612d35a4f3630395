/* Content search: see grep.h. */
#include "files/grep.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "core/jsonesc.h"
#include "files/path.h"

#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif
#ifndef SYSFS_MAGIC
#define SYSFS_MAGIC 0x62656572
#endif

static uint64_t grep_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void grep_limit(struct files_grep *g, const char *why)
{
	g->truncated = true;
	if (!g->limit_msg[0])
		snprintf(g->limit_msg, sizeof(g->limit_msg), "%s", why);
}

int files_grep_init(struct files_grep *g, const char *pattern, char *err, size_t errlen)
{
	memset(g, 0, sizeof(*g));
	g->single_fd = -1;
	size_t n = strlen(pattern);
	if (!n || n > FILES_GREP_PATTERN_MAX) {
		snprintf(err, errlen, "the pattern must be 1 to %d bytes", FILES_GREP_PATTERN_MAX);
		return -EINVAL;
	}
	for (size_t i = 0; i + 1 < n; i++) {
		if (pattern[i] != '\\')
			continue;
		if (pattern[i + 1] >= '1' && pattern[i + 1] <= '9') {
			snprintf(err, errlen, "back-references (\\%c) are not supported",
				 pattern[i + 1]);
			return -EINVAL;
		}
		i++;
	}
	char m[128];
	int rc = text_regex_compile(&g->re, pattern, n, m, sizeof(m));
	if (rc == -EINVAL)
		snprintf(err, errlen, "invalid regular expression: %s", m);
	return rc;
}

/* Read the file held by fd (taken) for scanning; 0 also when it is skipped. */
static int load(struct files_grep *g, int fd, const char *path)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return 0;
	}
	if ((uint64_t)st.st_size > FILES_GREP_FILE_MAX) {
		g->skipped_large++;
		close(fd);
		return 0;
	}
	size_t cap = (size_t)st.st_size + 1;
	char *d = malloc(cap);
	if (!d) {
		close(fd);
		return -ENOMEM;
	}
	size_t len = 0;
	for (;;) {
		/* The file may grow while it is read: never past what was stat'ed. */
		if (len == cap - 1)
			break;
		ssize_t k = read(fd, d + len, cap - 1 - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break; /* unreadable files are searched as far as they read */
		len += (size_t)k;
	}
	close(fd);
	d[len] = 0;
	if (memchr(d, 0, len)) {
		g->skipped_binary++;
		free(d);
		return 0;
	}
	char *p = strdup(path);
	if (!p) {
		free(d);
		return -ENOMEM;
	}
	free(g->data);
	free(g->path);
	g->data = d;
	g->len = len;
	g->pos = 0;
	g->line = 0;
	g->in_line = false;
	g->path = p;
	g->files++;
	return 0;
}

static int on_file(void *arg, int dirfd, const char *name, const char *path, const struct stat *st)
{
	struct files_grep *g = arg;
	if (!S_ISREG(st->st_mode))
		return 0;
	if ((uint64_t)st->st_size > FILES_GREP_FILE_MAX) {
		g->skipped_large++;
		return 0;
	}
	/* Only pseudo-files live on procfs and sysfs: reading them as the runner would show
	 * the runner's own state (and some block or act). */
	struct statfs sf;
	if (fstatfs(dirfd, &sf) == 0 && (sf.f_type == PROC_SUPER_MAGIC || sf.f_type == SYSFS_MAGIC))
		return 0;
	int fd = files_open_last(dirfd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return fd == -ENOMEM || fd == -EMFILE || fd == -ENFILE ? fd : 0;
	int rc = load(g, fd, path);
	if (rc < 0)
		return rc;
	return g->data ? 1 : 0;
}

int files_grep_start(struct files_grep *g, int fd, const char *path, bool is_dir)
{
	if (!g->max_results || g->max_results > FILES_MAX_RESULTS)
		g->max_results = g->max_results ? FILES_MAX_RESULTS : FILES_GREP_DEFAULT_RESULTS;
	if (!is_dir) {
		struct statfs sf;
		if (fstatfs(fd, &sf) == 0 &&
		    (sf.f_type == PROC_SUPER_MAGIC || sf.f_type == SYSFS_MAGIC)) {
			close(fd);
			return -EPERM;
		}
		return load(g, fd, path);
	}
	g->w.max_depth = FILES_MAX_DEPTH;
	g->w.search = true;
	g->w.glob = g->glob;
	g->w.take = on_file;
	g->w.take_arg = g;
	int rc = files_walk_start(&g->w, fd, path);
	if (rc < 0)
		return rc;
	g->walking = true;
	return 0;
}

static void hit(struct files_grep *g, const char *line, size_t n)
{
	if (n > FILES_GREP_LINE_MAX) {
		n = FILES_GREP_LINE_MAX;
		/* Never cut a UTF-8 character in two. */
		while (n > 0 && ((unsigned char)line[n] & 0xC0) == 0x80)
			n--;
	}
	struct buf *o = g->out;
	if (g->results++)
		buf_append_lit(o, ",");
	buf_append_lit(o, "{\"path\":");
	buf_append_json_str(o, g->path, strlen(g->path));
	buf_appendf(o, ",\"line\":%llu,\"text\":", (unsigned long long)g->line);
	buf_append_json_str(o, line, n);
	buf_append_lit(o, "}");
}

/* Work units (text/regex.h) between looks at the clock: about 100 us of matching. A line
 * costs GREP_LINE_WORK more, so a file of empty lines is timed too. */
#define GREP_SLICE_WORK (64u << 10)
#define GREP_LINE_WORK 16u

/* Scan the loaded file on: 1 at the deadline, 0 at its end or at max_results. The deadline is
 * honoured inside a line too: the match stops and resumes where it stood. */
static int scan(struct files_grep *g, uint64_t deadline_us)
{
	size_t work = GREP_SLICE_WORK;
	while (g->pos < g->len) {
		if (!work) {
			if (grep_now_us() >= deadline_us)
				return 1;
			work = GREP_SLICE_WORK;
		}
		char *s = g->data + g->pos;
		if (!g->in_line) {
			char *nl = memchr(s, '\n', g->len - g->pos);
			g->line_len = nl ? (size_t)(nl - s) : g->len - g->pos;
			memset(&g->cur, 0, sizeof(g->cur));
			g->in_line = true;
			work = work > GREP_LINE_WORK ? work - GREP_LINE_WORK : 0;
		}
		size_t n = g->line_len;
		bool nl = g->pos + n < g->len;
		int m = text_regex_search(g->re, s, n, &g->cur, &work);
		if (m == TEXT_REGEX_MORE)
			continue;
		g->in_line = false;
		g->line++;
		g->pos += n + (nl ? 1 : 0);
		if (m == TEXT_REGEX_MATCH) {
			size_t tn = n && s[n - 1] == '\r' ? n - 1 : n;
			hit(g, s, tn);
			if (g->results >= g->max_results) {
				grep_limit(g, "max_results reached");
				break;
			}
		}
	}
	free(g->data);
	g->data = NULL;
	return 0;
}

int files_grep_step(struct files_grep *g, uint64_t deadline_ms)
{
	const uint64_t limit = (uint64_t)FILES_GREP_MAX_MS * 1000u;
	uint64_t start = grep_now_us(), deadline = deadline_ms * 1000u;
	if (start + (limit > g->work_us ? limit - g->work_us : 0) < deadline)
		deadline = start + (limit > g->work_us ? limit - g->work_us : 0);
	int rc = 0;
	for (;;) {
		if (g->truncated) {
			rc = 0;
			break;
		}
		if (g->data) {
			if (scan(g, deadline) == 1) {
				rc = 1;
				break;
			}
			continue;
		}
		if (!g->walking) {
			rc = 0;
			break;
		}
		/* No deadline check first: every step makes progress (the walk looks at some
		 * entries, the scan at some lines, whatever the deadline). */
		rc = files_walk_step(&g->w, (deadline + 999) / 1000);
		if (rc == -FILES_ELIMIT) {
			grep_limit(g, g->w.limit_msg);
			rc = 0;
			break;
		}
		if (rc < 0)
			break;
		if (rc == 0)
			g->walking = false;
		else if (!g->data)
			break; /* the walk's deadline */
	}
	g->work_us += grep_now_us() - start;
	if (rc == 1 && g->work_us >= limit) {
		snprintf(g->limit_msg, sizeof(g->limit_msg), "took longer than %d ms",
			 FILES_GREP_MAX_MS);
		g->truncated = true;
		rc = 0;
	}
	return rc;
}

void files_grep_free(struct files_grep *g)
{
	text_regex_free(g->re);
	g->re = NULL;
	if (g->walking || g->w.frames)
		files_walk_free(&g->w);
	g->walking = false;
	free(g->data);
	free(g->path);
	g->data = g->path = NULL;
	if (g->single_fd >= 0)
		close(g->single_fd);
	g->single_fd = -1;
}
