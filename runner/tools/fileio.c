/* read_file, write_file, edit_file: as the task user (files/ident.h), through the files
 * layer's checked descriptors (files/path.h, files/ops.h), so the rules are the files API's:
 * no magic links, no content from /proc, the last component of a write never followed,
 * writes only beneath the writable roots. Each is one bounded slice of work. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/fileio.h"
#include "files/ops.h"
#include "files/path.h"
#include "tools/internal.h"

#define READ_SCAN_MAX (16ULL << 20) /* bytes read_file looks at */
#define READ_OUT_MIN (4u << 10)     /* the least of the output bound it uses */
#define READ_DEFAULT_LINES 2000
#define EDIT_MAX (16ULL << 20) /* size of a file edit_file changes */

struct file_args {
	char path[PATH_MAX];
	uint64_t offset, limit;
	const char *content, *old_s, *new_s;
	size_t content_len, old_len, new_len;
	bool replace_all;
};

static void args_release(struct tool_call *c)
{
	free(c->state);
	c->state = NULL;
}

/* The call's arguments, with the path checked (NULL: an error result is set). */
static struct file_args *args_new(struct tool_call *c, json_t *args)
{
	struct file_args *a = calloc(1, sizeof(*a));
	if (!a) {
		tool_result_fail(&c->res, "out of memory");
		return NULL;
	}
	c->state = a;
	c->release = args_release;
	return tool_arg_path(c, args, "path", a->path, sizeof(a->path)) < 0 ? NULL : a;
}

/* ---- read_file ---- */

/* a->path opened for reading, a regular file outside /proc: the fd, or -1 with the call's
 * result set and *rc what the step returns. */
static int open_for_read(struct tool_call *c, const char *path, int *rc)
{
	int fd = files_open(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
	struct stat st;
	if (fd < 0)
		*rc = tool_fs_error(c, fd, "read", path);
	else if (files_on_procfs(fd) == 1)
		*rc = tool_result_fail(&c->res, "read %.1024s: files under /proc are not served",
				       path);
	else if (fstat(fd, &st) < 0)
		*rc = tool_fs_error(c, -errno, "read", path);
	else if (S_ISDIR(st.st_mode))
		*rc = tool_result_fail(&c->res, "read %.1024s: is a directory (use list_directory)",
				       path);
	else if (!S_ISREG(st.st_mode))
		*rc = tool_result_fail(&c->res, "read %.1024s: not a regular file", path);
	else
		return fd;
	if (fd >= 0)
		close(fd);
	return -1;
}

/* Lines first .. first + limit - 1 into out, at most max bytes. */
struct read_scan {
	uint64_t first, limit, line, next;
	bool more, at_line_start;
	size_t max, line_start; /* out->len where the current line began */
	struct buf *out;
};

static void scan_chunk(struct read_scan *rs, const char *p, const char *end)
{
	struct buf *out = rs->out;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *stop = nl ? nl + 1 : end;
		if (rs->at_line_start)
			rs->line_start = out->len;
		if (rs->line >= rs->first + rs->limit) {
			rs->more = true;
			return;
		}
		if (rs->line >= rs->first && out->len + (size_t)(stop - p) > rs->max) {
			rs->more = true;
			if (rs->line_start > 0) {
				out->len = rs->line_start; /* this line on the next read */
			} else {
				/* One line longer than the bound: its head, then on. */
				buf_append(out, p, rs->max - out->len);
				rs->next = rs->line + 1;
			}
			return;
		}
		if (rs->line >= rs->first)
			buf_append(out, p, (size_t)(stop - p));
		rs->at_line_start = nl != NULL;
		if (nl)
			rs->line++;
		p = stop;
	}
}

static int read_step(struct tool_call *c, uint64_t deadline_ms)
{
	(void)deadline_ms;
	struct file_args *a = c->state;
	int rc = 0;
	cleanup_close int fd = open_for_read(c, a->path, &rc);
	if (fd < 0)
		return rc;
	/* The same bound as a command's output (what goes back to a model or client). */
	struct read_scan rs = {
		.first = a->offset ? a->offset : 1,
		.limit = a->limit ? a->limit : READ_DEFAULT_LINES,
		.line = 1,
		.at_line_start = true,
		.max = c->ctx.output_max > READ_OUT_MIN ? (size_t)c->ctx.output_max : READ_OUT_MIN,
		.out = &c->res.text,
	};
	struct buf *out = rs.out;
	static char chunk[64 * 1024];
	for (uint64_t scanned = 0; !rs.more;) {
		if (scanned >= READ_SCAN_MAX) {
			rs.more = true;
			break;
		}
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return tool_fs_error(c, -errno, "read", a->path);
		if (n == 0)
			break;
		scanned += (uint64_t)n;
		if (memchr(chunk, 0, (size_t)n))
			return tool_result_fail(&c->res, "read %.1024s: binary file (a NUL byte)",
						a->path);
		scan_chunk(&rs, chunk, chunk + n);
	}
	uint64_t lines = rs.line - (rs.at_line_start ? 1 : 0);
	if (!rs.more && rs.first > lines + 1)
		return tool_result_fail(&c->res,
					"read %.1024s: offset %llu is past the end (%llu lines)",
					a->path, (unsigned long long)rs.first,
					(unsigned long long)lines);
	if (rs.more && rs.next)
		buf_appendf(
			out,
			"\n[... line %llu is longer than %zu bytes: cut; read on with offset %llu ...]\n",
			(unsigned long long)rs.line, rs.max, (unsigned long long)rs.next);
	else if (rs.more)
		buf_appendf(out, "%s[... more lines follow: read on with offset %llu ...]\n",
			    out->len && out->data[out->len - 1] != '\n' ? "\n" : "",
			    (unsigned long long)rs.line);
	if (!out->data)
		buf_append(out, "", 0);
	return 0;
}

int tool_read_file(struct tool_call *c, json_t *args)
{
	struct file_args *a = args_new(c, args);
	if (!a || tool_arg_uint(c, args, "offset", UINT32_MAX, &a->offset) < 0 ||
	    tool_arg_uint(c, args, "limit", 1000000, &a->limit) < 0)
		return 0;
	c->step = read_step;
	return tool_files_run(c);
}

/* ---- write_file ---- */

static int write_step(struct tool_call *c, uint64_t deadline_ms)
{
	(void)deadline_ms;
	struct file_args *a = c->state;
	if (!strcmp(a->path, "/"))
		return tool_fs_error(c, -EISDIR, "write", a->path);
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", a->path);
	char *slash = strrchr(dir, '/');
	const char *base = a->path + (slash - dir) + 1;
	if (slash == dir)
		dir[1] = 0;
	else
		*slash = 0;
	bool created;
	struct files_made made;
	cleanup_close int dirfd = files_mkdirs(&c->uj.id, dir, 0755, &created, &made);
	files_made_free(&made);
	if (dirfd < 0)
		return tool_fs_error(c, dirfd, "write", a->path);
	int rc = files_check_writable(&c->uj.id, dirfd);
	if (rc < 0)
		return tool_fs_error(c, rc, "write", a->path);
	mode_t mode = 0644;
	struct stat st;
	if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode))
			return tool_fs_error(c, -EISDIR, "write", a->path);
		if (S_ISREG(st.st_mode))
			mode = st.st_mode & 07777; /* the file keeps its mode */
	}
	struct files_tmp tmp;
	if ((rc = files_tmp_open(&tmp, dirfd)) < 0)
		return tool_fs_error(c, rc, "write", a->path);
	rc = write_all(tmp.fd, a->content, a->content_len);
	if (rc == 0 && fchmod(tmp.fd, mode) < 0)
		rc = -errno;
	if (rc == 0)
		rc = files_tmp_commit(&tmp, base);
	files_tmp_discard(&tmp);
	if (rc < 0)
		return tool_fs_error(c, rc, "write", a->path);
	buf_appendf(&c->res.text, "wrote %zu bytes to %s", a->content_len, a->path);
	return 0;
}

int tool_write_file(struct tool_call *c, json_t *args)
{
	struct file_args *a = args_new(c, args);
	if (!a || tool_arg_str(c, args, "content", true, &a->content, &a->content_len) < 0)
		return 0;
	c->step = write_step;
	return tool_files_run(c);
}

/* ---- edit_file ---- */

static uint64_t count_of(const char *s, size_t n, const char *pat, size_t plen)
{
	uint64_t k = 0;
	const char *p = s, *end = s + n;
	while ((size_t)(end - p) >= plen) {
		const char *m = memmem(p, (size_t)(end - p), pat, plen);
		if (!m)
			break;
		k++;
		p = m + plen;
	}
	return k;
}

static int edit_step(struct tool_call *c, uint64_t deadline_ms)
{
	(void)deadline_ms;
	struct file_args *a = c->state;
	struct files_replace rp;
	int rc = files_replace_open(&rp, &c->uj.id, a->path, a->old_s, a->old_len, a->new_s,
				    a->new_len);
	if (rc < 0) {
		files_replace_close(&rp);
		return tool_fs_error(c, rc, "edit", a->path);
	}
	if ((uint64_t)rp.st.st_size > EDIT_MAX) {
		files_replace_close(&rp);
		return tool_result_fail(&c->res, "edit %.1024s: larger than %llu bytes", a->path,
					(unsigned long long)EDIT_MAX);
	}
	/* Count first: an ambiguous edit leaves the file as it was. */
	size_t size = (size_t)rp.st.st_size;
	char *data = malloc(size + 1);
	if (!data) {
		files_replace_close(&rp);
		return tool_result_fail(&c->res, "out of memory");
	}
	size_t got = 0;
	while (got < size) {
		ssize_t n = pread(rp.fd, data + got, size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	uint64_t k = count_of(data, got, a->old_s, a->old_len);
	free(data);
	if (k == 0 || (k > 1 && !a->replace_all)) {
		files_replace_close(&rp);
		if (k == 0)
			return tool_result_fail(&c->res, "edit %.1024s: old_string not found",
						a->path);
		return tool_result_fail(&c->res,
					"edit %.1024s: old_string occurs %llu times; give more "
					"context to make it unique, or set replace_all",
					a->path, (unsigned long long)k);
	}
	while ((rc = files_replace_step(&rp, UINT64_MAX)) == 1)
		;
	uint64_t done = rp.count;
	files_replace_close(&rp);
	if (rc < 0)
		return tool_fs_error(c, rc, "edit", a->path);
	buf_appendf(&c->res.text, "replaced %llu occurrence%s in %s", (unsigned long long)done,
		    done == 1 ? "" : "s", a->path);
	return 0;
}

int tool_edit_file(struct tool_call *c, json_t *args)
{
	struct file_args *a = args_new(c, args);
	if (!a || tool_arg_str(c, args, "old_string", true, &a->old_s, &a->old_len) < 0 ||
	    tool_arg_str(c, args, "new_string", true, &a->new_s, &a->new_len) < 0 ||
	    tool_arg_bool(c, args, "replace_all", &a->replace_all) < 0)
		return 0;
	if (!a->old_len)
		return tool_result_fail(&c->res, "argument 'old_string' must not be empty");
	if (a->old_len == a->new_len && !memcmp(a->old_s, a->new_s, a->old_len))
		return tool_result_fail(&c->res, "old_string and new_string are the same");
	c->step = edit_step;
	return tool_files_run(c);
}
