/* list_directory, search_files, grep: the files layer's resumable walks (files/walk.h,
 * files/grep.h) as the task user, run in the loop's slices like the files API's long scans
 * (files/sched.h), so a large tree never stalls the runner. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text/glob.h"
#include "files/grep.h"
#include "files/path.h"
#include "files/walk.h"
#include "tools/internal.h"

struct walk_state {
	char path[PATH_MAX];
	struct files_walk w;
	struct text_glob *glob;
	struct files_grep g;
	bool grep, grep_init;
	struct buf out; /* JSON objects, comma-separated */
};

static void walk_release(struct tool_call *c)
{
	struct walk_state *s = c->state;
	if (!s)
		return;
	if (s->grep_init)
		files_grep_free(&s->g);
	else
		files_walk_free(&s->w);
	text_glob_free(s->glob);
	buf_free(&s->out);
	free(s);
	c->state = NULL;
}

static struct walk_state *state_new(struct tool_call *c)
{
	struct walk_state *s = calloc(1, sizeof(*s));
	if (!s) {
		tool_result_fail(&c->res, "out of memory");
		return NULL;
	}
	c->state = s;
	c->release = walk_release;
	return s;
}

/* The walk's FileInfo objects as JSON (an array). */
static json_t *entries(struct walk_state *s)
{
	struct buf b = {0};
	buf_append_lit(&b, "[");
	buf_append(&b, s->out.data ? s->out.data : "", s->out.len);
	buf_append_lit(&b, "]");
	json_t *a = b.data ? json_loadb(b.data, b.len, 0, NULL) : NULL;
	buf_free(&b);
	return a ? a : json_array();
}

static int walk_finish(struct tool_call *c, bool list)
{
	struct walk_state *s = c->state;
	json_t *a = entries(s);
	size_t i;
	json_t *e;
	struct buf *t = &c->res.text;
	json_array_foreach(a, i, e) {
		const char *p = json_string_value(json_object_get(e, "path"));
		const char *type = json_string_value(json_object_get(e, "type"));
		if (!p)
			continue;
		if (list)
			buf_appendf(t, "%-9s %10lld  %s%s\n", type ? type : "?",
				    (long long)json_integer_value(json_object_get(e, "size")), p,
				    type && !strcmp(type, "directory") ? "/" : "");
		else
			buf_appendf(t, "%s\n", p);
	}
	if (!json_array_size(a))
		buf_append_str(t, list ? "(empty directory)\n" : "(no files match)\n");
	json_decref(a);
	return 0;
}

static int walk_step(struct tool_call *c, uint64_t deadline_ms)
{
	struct walk_state *s = c->state;
	int rc = files_walk_step(&s->w, deadline_ms);
	if (rc == 1)
		return 1;
	if (rc == -FILES_ELIMIT)
		return tool_result_fail(&c->res,
					"%s %.1024s: %s; narrow it (limits: %d results, %d entries "
					"looked at, %d ms)",
					s->w.search ? "search" : "list", s->path, s->w.limit_msg,
					FILES_MAX_RESULTS, FILES_MAX_VISITED, FILES_MAX_WALK_MS);
	if (rc < 0)
		return tool_fs_error(c, rc, s->w.search ? "search" : "list", s->path);
	return walk_finish(c, !s->w.search);
}

static int list_start(struct tool_call *c, uint64_t deadline_ms)
{
	struct walk_state *s = c->state;
	struct stat st;
	int fd, rc = files_open_root(s->path, &st, &fd);
	if (rc == 0 && fd < 0)
		rc = S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR;
	if (rc < 0)
		return tool_fs_error(c, rc, s->w.search ? "search" : "list", s->path);
	if (files_on_procfs(fd) == 1 && s->w.search) {
		close(fd);
		return tool_result_fail(&c->res, "search %.1024s: not under /proc", s->path);
	}
	s->w.out = &s->out;
	if ((rc = files_walk_start(&s->w, fd, s->path)) < 0)
		return tool_fs_error(c, rc, "list", s->path);
	c->step = walk_step;
	return walk_step(c, deadline_ms);
}

int tool_list_directory(struct tool_call *c, json_t *args)
{
	struct walk_state *s = state_new(c);
	uint64_t depth = 1;
	if (!s || tool_arg_path(c, args, "path", s->path, sizeof(s->path)) < 0 ||
	    tool_arg_uint(c, args, "depth", FILES_MAX_DEPTH, &depth) < 0)
		return 0;
	s->w.max_depth = depth ? (unsigned)depth : 1;
	c->step = list_start;
	return tool_files_run(c);
}

int tool_search_files(struct tool_call *c, json_t *args)
{
	struct walk_state *s = state_new(c);
	const char *pattern;
	if (!s || tool_arg_path(c, args, "path", s->path, sizeof(s->path)) < 0 ||
	    tool_arg_str(c, args, "pattern", true, &pattern, NULL) < 0)
		return 0;
	char err[128];
	if (text_glob_compile(&s->glob, pattern, err, sizeof(err)) < 0)
		return tool_result_fail(&c->res, "invalid pattern %.600s: %s", pattern, err);
	s->w.search = true;
	s->w.glob = s->glob;
	s->w.max_depth = FILES_MAX_DEPTH;
	c->step = list_start;
	return tool_files_run(c);
}

/* ---- grep ---- */

static int grep_step(struct tool_call *c, uint64_t deadline_ms)
{
	struct walk_state *s = c->state;
	int rc = files_grep_step(&s->g, deadline_ms);
	if (rc == 1)
		return 1;
	if (rc < 0)
		return tool_fs_error(c, rc, "grep", s->path);
	json_t *matches = entries(s);
	size_t i;
	json_t *m;
	struct buf *t = &c->res.text;
	json_array_foreach(matches, i, m) {
		buf_appendf(t, "%s:%lld:%s\n", json_string_value(json_object_get(m, "path")),
			    (long long)json_integer_value(json_object_get(m, "line")),
			    json_string_value(json_object_get(m, "text")));
	}
	if (!json_array_size(matches))
		buf_append_str(t, "(no matches)\n");
	if (s->g.truncated)
		buf_appendf(t, "[... search stopped: %s ...]\n", s->g.limit_msg);
	c->res.structured = json_pack("{s:o,s:b,s:I}", "matches", matches, "truncated",
				      s->g.truncated, "files_searched", (json_int_t)s->g.files);
	return 0;
}

static int grep_start(struct tool_call *c, uint64_t deadline_ms)
{
	struct walk_state *s = c->state;
	struct stat st;
	int fd, rc = files_open_root(s->path, &st, &fd);
	if (rc == 0 && fd < 0) {
		if (S_ISLNK(st.st_mode))
			rc = -ELOOP;
		else if (!S_ISREG(st.st_mode))
			return tool_result_fail(&c->res, "grep %.1024s: not a file or directory",
						s->path);
		else
			rc = fd = files_open(AT_FDCWD, s->path,
					     O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW, 0);
	}
	if (rc < 0)
		return tool_fs_error(c, rc, "grep", s->path);
	if ((rc = files_grep_start(&s->g, fd, s->path, S_ISDIR(st.st_mode))) < 0)
		return tool_fs_error(c, rc, "grep", s->path);
	c->step = grep_step;
	return grep_step(c, deadline_ms);
}

int tool_grep(struct tool_call *c, json_t *args)
{
	struct walk_state *s = state_new(c);
	const char *pattern, *glob;
	uint64_t max = 0;
	if (!s || tool_arg_path(c, args, "path", s->path, sizeof(s->path)) < 0 ||
	    tool_arg_str(c, args, "pattern", true, &pattern, NULL) < 0 ||
	    tool_arg_str(c, args, "glob", false, &glob, NULL) < 0 ||
	    tool_arg_uint(c, args, "max_results", FILES_MAX_RESULTS, &max) < 0)
		return 0;
	char err[160];
	int rc = files_grep_init(&s->g, pattern, err, sizeof(err));
	s->grep_init = true;
	if (rc < 0)
		return rc == -EINVAL ? tool_result_fail(&c->res, "grep: %s", err)
				     : tool_result_fail(&c->res, "out of memory");
	if (glob && *glob && text_glob_compile(&s->glob, glob, err, sizeof(err)) < 0)
		return tool_result_fail(&c->res, "invalid glob %.600s: %s", glob, err);
	s->g.glob = s->glob;
	s->g.max_results = (size_t)max;
	s->g.out = &s->out;
	c->step = grep_start;
	return tool_files_run(c);
}
