/* The watch engine: a directory's changes from inotify on the runner's loop, as the
 * server-sent events of GET /files/watch (its route: api/watch.c) or to another face's sink
 * (E2B envd's WatchDir). The events, the path checks (as the task user, so a client sees
 * changes only where the task user may read) and the bounds (never buffered without bound):
 * docs/design/interactive.md#directory-watch. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/list.h"
#include "files/ident.h"
#include "files/path.h"
#include "files/sched.h"
#include "files/userjob.h"
#include "http/sse.h"
#include "watch/watch.h"

#define WATCH_MAX_STREAMS 32
#define WATCH_MAX_DIRS 8192
#define WATCH_MAX_DIRS_TOTAL 65536
#define WATCH_QUEUE_MAX (256u * 1024)
#define WATCH_READS_PER_WAKE 4 /* inotify reads per loop wake: a flood never holds the loop */
#define WATCH_MASK                                                                                 \
	(IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |             \
	 IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)

struct wdir {
	int wd;
	char *path;
};

/* A directory whose subdirectories are still to be added, and how deep it is. */
struct pending_dir {
	char *path;
	int depth;
};

struct watch_table {
	struct watch_stream *head;
	unsigned streams;
	unsigned dirs;
};

struct watch_stream {
	struct http_stream hs; /* first: the stream callbacks cast back */
	struct runner *r;
	struct files_ident id;
	int ifd;
	struct loop_watch w;
	bool recursive, ended, watching;
	struct wdir *dirs; /* sorted by wd (inotify hands them out increasing) */
	size_t ndirs, cap;
	int root_wd;
	struct buf q;     /* formatted events the client has not taken yet */
	uint64_t dropped; /* events lost since the last overflow event */
	bool limit_hit;   /* a recursive walk stopped at WATCH_MAX_DIRS */
	char *last_write; /* the path of the last queued write (coalesced) */
	/* Another face's sink instead of the SSE stream (watch_open: envd's WatchDir and
	 * polling watchers): each event goes to it as it is read, nothing queued here. */
	const struct watch_sink *sink;
	void *sink_arg;
	/* A recursive watch grows in slices on the files layer's scheduler: the directories
	 * still to be read (a stack), the one being read across slices, so that a big tree, or
	 * one a task moves in again and again, never holds the loop. */
	struct pending_dir *pending;
	size_t npending, pending_cap;
	DIR *reading;
	struct pending_dir cur; /* reading's name and depth */
	struct files_job grow;
	bool opening; /* watch_new's first slice: the opener reports the limit */
	struct watch_stream *next, *prev;
};

static struct watch_table *table(struct runner *r)
{
	if (!r->watches)
		r->watches = calloc(1, sizeof(*r->watches));
	return r->watches;
}

/* ---- events ---- */

static void wake(struct watch_stream *s)
{
	if (!s->hs.closed)
		http_stream_wake(&s->hs);
}

/* An event for a sink: its fields as the engine made them. */
static void put_sink(struct watch_stream *s, json_t *ev)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!type)
		return;
	if (!strcmp(type, "end"))
		s->sink->end(s->sink_arg, json_string_value(json_object_get(ev, "reason")));
	else
		s->sink->event(s->sink_arg, type, json_string_value(json_object_get(ev, "path")),
			       json_string_value(json_object_get(ev, "old_path")),
			       json_is_true(json_object_get(ev, "is_dir")));
}

static void put(struct watch_stream *s, json_t *ev)
{
	if (!ev)
		return;
	if (s->sink) {
		put_sink(s, ev);
		json_decref(ev);
		return;
	}
	if (!json_object_get(ev, "time"))
		json_object_set_new(ev, "time", json_integer((json_int_t)now_ms()));
	char *js = json_dumps(ev, JSON_COMPACT);
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (js && type) {
		sse_event(&s->q, SSE_NO_ID, type, js, strlen(js));
		wake(s);
	}
	free(js);
	json_decref(ev); /* after the last use of type, which it owns */
}

static void emit(struct watch_stream *s, const char *type, const char *path, const char *old,
		 bool is_dir)
{
	if (s->ended)
		return;
	if (!strcmp(type, "write")) {
		/* A writer's run of write()s is one event until something else
		 * happens (the queue would hold nothing but the same line). */
		if (s->last_write && !strcmp(s->last_write, path))
			return;
		free(s->last_write);
		s->last_write = strdup(path);
	} else {
		free(s->last_write);
		s->last_write = NULL;
	}
	if (buf_avail(&s->q) >= WATCH_QUEUE_MAX) {
		s->dropped++;
		return;
	}
	if (s->dropped) {
		put(s, json_pack("{s:s,s:s,s:I}", "type", "overflow", "reason",
				 "the client fell behind", "dropped", (json_int_t)s->dropped));
		s->dropped = 0;
	}
	json_t *ev = json_pack("{s:s,s:s,s:b}", "type", type, "path", path, "is_dir", is_dir);
	if (ev && old)
		json_object_set_new(ev, "old_path", json_string(old));
	put(s, ev);
}

static void end_stream(struct watch_stream *s, const char *reason)
{
	if (s->ended)
		return;
	put(s, json_pack("{s:s,s:s}", "type", "end", "reason", reason));
	s->ended = true;
	if (s->watching) {
		loop_watch_del(&s->r->loop, &s->w);
		s->watching = false;
	}
	wake(s);
}

/* ---- the directory table ---- */

static struct wdir *find_wd(struct watch_stream *s, int wd)
{
	size_t lo = 0, hi = s->ndirs;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->dirs[mid].wd == wd)
			return &s->dirs[mid];
		if (s->dirs[mid].wd < wd)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static void drop_wd(struct watch_stream *s, int wd)
{
	struct wdir *d = find_wd(s, wd);
	if (!d)
		return;
	free(d->path);
	size_t i = (size_t)(d - s->dirs);
	memmove(d, d + 1, (s->ndirs - i - 1) * sizeof(*d));
	s->ndirs--;
	s->r->watches->dirs--;
}

/* Watch the directory open as fd (path: its name for events). Called as
 * the task user: the kernel checks that user's read permission. 1: added,
 * 0: already watched or over a limit, -errno. */
static int add_dir(struct watch_stream *s, int fd, const char *path)
{
	if (s->ndirs >= WATCH_MAX_DIRS || s->r->watches->dirs >= WATCH_MAX_DIRS_TOTAL) {
		s->limit_hit = true;
		return 0;
	}
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	int wd = inotify_add_watch(s->ifd, proc, WATCH_MASK);
	if (wd < 0)
		return -errno;
	if (find_wd(s, wd))
		return 0; /* the same directory by another name (a bind mount) */
	if (s->ndirs == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		struct wdir *n = realloc(s->dirs, cap * sizeof(*n));
		if (!n) {
			inotify_rm_watch(s->ifd, wd);
			return -ENOMEM;
		}
		s->dirs = n;
		s->cap = cap;
	}
	char *p = strdup(path);
	if (!p) {
		inotify_rm_watch(s->ifd, wd);
		return -ENOMEM;
	}
	/* Increasing wds keep the table sorted; a wrapped one is inserted. */
	size_t i = s->ndirs;
	while (i > 0 && s->dirs[i - 1].wd > wd)
		i--;
	memmove(&s->dirs[i + 1], &s->dirs[i], (s->ndirs - i) * sizeof(*s->dirs));
	s->dirs[i] = (struct wdir){wd, p};
	s->ndirs++;
	s->r->watches->dirs++;
	return 1;
}

/* ---- growing a recursive watch, in slices ---- */

#define WATCH_MAX_DEPTH 64

static int push_pending(struct watch_stream *s, const char *path, int depth)
{
	if (depth > WATCH_MAX_DEPTH)
		return 0;
	if (s->npending == s->pending_cap) {
		size_t cap = s->pending_cap ? s->pending_cap * 2 : 16;
		struct pending_dir *n = realloc(s->pending, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->pending = n;
		s->pending_cap = cap;
	}
	char *p = strdup(path);
	if (!p)
		return -ENOMEM;
	s->pending[s->npending++] = (struct pending_dir){p, depth};
	return 0;
}

static void stop_reading(struct watch_stream *s)
{
	if (s->reading)
		closedir(s->reading);
	s->reading = NULL;
	free(s->cur.path);
	s->cur.path = NULL;
}

static void drop_pending(struct watch_stream *s)
{
	stop_reading(s);
	for (size_t i = 0; i < s->npending; i++)
		free(s->pending[i].path);
	free(s->pending);
	s->pending = NULL;
	s->npending = s->pending_cap = 0;
}

/* The next directory to read, opened as the task user by its current name (a rename in the
 * tree rewrites the pending names, rename_dirs). false when none is left. */
static bool next_reading(struct watch_stream *s)
{
	while (!s->reading && s->npending) {
		struct pending_dir d = s->pending[--s->npending];
		int fd = files_open(AT_FDCWD, d.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
		DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
		if (!dir) {
			if (fd >= 0)
				close(fd);
			free(d.path);
			continue; /* gone, or no longer a directory the user may read */
		}
		s->reading = dir;
		s->cur = d;
	}
	return s->reading != NULL;
}

static void report_limit(struct watch_stream *s);

/* One slice: subdirectories of the pending directories watched until the deadline, never
 * through a symbolic link. 1: more to do. */
static int grow_step(struct files_job *j, uint64_t deadline_ms)
{
	struct watch_stream *s =
		(struct watch_stream *)((char *)j - offsetof(struct watch_stream, grow));
	if (s->ended || files_enter(&s->id) < 0)
		return 0;
	unsigned n = 0;
	while (!s->limit_hit && next_reading(s)) {
		if ((++n & 31) == 0 && monotonic_ms() >= deadline_ms)
			break;
		struct dirent *de = readdir(s->reading);
		if (!de) {
			stop_reading(s);
			continue;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			continue;
		cleanup_close int sub = openat(dirfd(s->reading), de->d_name,
					       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0)
			continue; /* not a directory, a link, or not the user's to read */
		char child[PATH_MAX];
		if ((size_t)snprintf(child, sizeof(child), "%s/%s",
				     strcmp(s->cur.path, "/") ? s->cur.path : "",
				     de->d_name) >= sizeof(child))
			continue;
		if (add_dir(s, sub, child) > 0 && push_pending(s, child, s->cur.depth + 1) < 0)
			break;
	}
	files_leave();
	return !s->ended && !s->limit_hit && (s->reading || s->npending);
}

/* The growth ended (all read, the limit hit, the stream ended): its memory back, and the
 * limit said once. */
static void grow_done(struct files_job *j)
{
	struct watch_stream *s =
		(struct watch_stream *)((char *)j - offsetof(struct watch_stream, grow));
	drop_pending(s);
	if (!s->opening && !s->ended)
		report_limit(s);
}

/* Grow from path (just watched): on opening one slice at once (a small tree is watched whole
 * before the first event), the rest on the scheduler; from an event, all of it there (an
 * event batch never walks). */
static void grow_from(struct watch_stream *s, const char *path, int depth)
{
	if (push_pending(s, path, depth) < 0 || s->grow.queued)
		return;
	if (s->opening && !grow_step(&s->grow, monotonic_ms() + FILES_SLICE_MS)) {
		grow_done(&s->grow);
		return;
	}
	s->grow.step = grow_step;
	s->grow.done = grow_done;
	if (files_sched_add(s->r->files_sched, &s->r->loop, &s->grow) < 0) {
		log_warn("directory watch: cannot schedule a recursive walk", NULL);
		grow_done(&s->grow);
	}
}

/* A directory that appeared inside a recursive watch (created or moved
 * in): watched with what is beneath it. */
/* The directory limit was hit while adding directories: one overflow event says so. */
static void report_limit(struct watch_stream *s)
{
	if (s->limit_hit)
		put(s, json_pack("{s:s,s:s,s:i}", "type", "overflow", "reason",
				 "directory limit reached: deeper changes are not watched",
				 "max_dirs", WATCH_MAX_DIRS));
	s->limit_hit = false;
}

static void add_new_dir(struct watch_stream *s, const char *path)
{
	if (files_enter(&s->id) < 0)
		return;
	int added = 0;
	int fd = files_open(AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
	if (fd >= 0) {
		added = add_dir(s, fd, path);
		close(fd);
	}
	files_leave();
	if (added > 0)
		grow_from(s, path, 0);
	else
		report_limit(s);
}

static bool under(const char *p, const char *from, size_t fl)
{
	return !strncmp(p, from, fl) && (!p[fl] || p[fl] == '/');
}

/* *p renamed when it is from or beneath it. */
static void rename_one(char **p, const char *from, size_t fl, const char *to)
{
	char *n;
	if (!*p || !under(*p, from, fl) || asprintf(&n, "%s%s", to, *p + fl) < 0)
		return;
	free(*p);
	*p = n;
}

/* A watched directory renamed inside the tree: its and its subtree's names, watched and still
 * to be read. */
static void rename_dirs(struct watch_stream *s, const char *from, const char *to)
{
	size_t fl = strlen(from);
	for (size_t i = 0; i < s->ndirs; i++)
		rename_one(&s->dirs[i].path, from, fl, to);
	for (size_t i = 0; i < s->npending; i++)
		rename_one(&s->pending[i].path, from, fl, to);
	rename_one(&s->cur.path, from, fl, to);
}

/* Moved out of the tree: what was watched beneath it is no longer ours. */
static void forget_dirs(struct watch_stream *s, const char *from)
{
	size_t fl = strlen(from);
	if (s->cur.path && under(s->cur.path, from, fl))
		stop_reading(s);
	for (size_t i = 0; i < s->npending;) {
		if (under(s->pending[i].path, from, fl)) {
			free(s->pending[i].path);
			s->pending[i] = s->pending[--s->npending];
			continue;
		}
		i++;
	}
	/* One pass that keeps the order (a tree of thousands moved out, again and again, is not
	 * a memmove of the table per directory). */
	size_t keep = 0;
	for (size_t i = 0; i < s->ndirs; i++) {
		struct wdir d = s->dirs[i];
		if (under(d.path, from, fl) && d.wd != s->root_wd) {
			inotify_rm_watch(s->ifd, d.wd);
			free(d.path);
			s->r->watches->dirs--;
			continue;
		}
		s->dirs[keep++] = d;
	}
	s->ndirs = keep;
}

/* ---- reading inotify ---- */

static void handle(struct watch_stream *s, const struct inotify_event *e, char *moved_from,
		   uint32_t *moved_cookie, bool *moved_dir)
{
	if (e->mask & IN_Q_OVERFLOW) {
		put(s, json_pack("{s:s,s:s}", "type", "overflow", "reason",
				 "the kernel's event queue overflowed"));
		return;
	}
	struct wdir *d = find_wd(s, e->wd);
	if (!d)
		return;
	bool is_dir = (e->mask & IN_ISDIR) != 0;
	if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED)) {
		if (e->wd == s->root_wd) {
			emit(s, "remove", d->path, NULL, true);
			end_stream(s, e->mask & IN_MOVE_SELF ? "the directory was moved away"
							     : "the directory was removed");
		} else if (e->mask & IN_IGNORED) {
			drop_wd(s, e->wd);
		}
		return;
	}
	char path[PATH_MAX];
	if (!e->len ||
	    (size_t)snprintf(path, sizeof(path), "%s/%s", strcmp(d->path, "/") ? d->path : "",
			     e->name) >= sizeof(path))
		return;
	if (e->mask & IN_CREATE) {
		emit(s, "create", path, NULL, is_dir);
		if (is_dir && s->recursive)
			add_new_dir(s, path);
	} else if (e->mask & IN_MODIFY) {
		emit(s, "write", path, NULL, false);
	} else if (e->mask & IN_DELETE) {
		emit(s, "remove", path, NULL, is_dir);
	} else if (e->mask & IN_ATTRIB) {
		emit(s, "chmod", path, NULL, is_dir);
	} else if (e->mask & IN_MOVED_FROM) {
		if (*moved_cookie) { /* the previous one left the tree */
			emit(s, "rename", moved_from, NULL, *moved_dir);
			if (*moved_dir)
				forget_dirs(s, moved_from);
		}
		snprintf(moved_from, PATH_MAX, "%s", path);
		*moved_cookie = e->cookie ? e->cookie : 1;
		*moved_dir = is_dir;
	} else if (e->mask & IN_MOVED_TO) {
		if (*moved_cookie && *moved_cookie == e->cookie) {
			emit(s, "rename", path, moved_from, is_dir);
			if (is_dir)
				rename_dirs(s, moved_from, path);
			*moved_cookie = 0;
		} else {
			emit(s, "rename", path, NULL, is_dir); /* moved in */
			if (is_dir && s->recursive)
				add_new_dir(s, path);
		}
	}
}

static void on_inotify(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	struct watch_stream *s = w->arg;
	char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
	char moved_from[PATH_MAX];
	uint32_t cookie = 0;
	bool moved_dir = false;
	for (int round = 0; round < WATCH_READS_PER_WAKE && !s->ended; round++) {
		ssize_t n = read(s->ifd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (char *p = buf; p < buf + n && !s->ended;) {
			const struct inotify_event *e = (const struct inotify_event *)p;
			handle(s, e, moved_from, &cookie, &moved_dir);
			p += sizeof(*e) + e->len;
		}
	}
	/* A move whose other half did not come in the same reads left the tree
	 * (the kernel queues both halves together). */
	if (cookie && !s->ended) {
		emit(s, "rename", moved_from, NULL, moved_dir);
		if (moved_dir)
			forget_dirs(s, moved_from);
	}
}

/* ---- the stream ---- */

static void w_produce(struct http_stream *hs)
{
	struct watch_stream *s = (struct watch_stream *)hs;
	if (s->dropped && buf_avail(&s->q) < WATCH_QUEUE_MAX) {
		/* The client caught up: it learns what it lost now, not only
		 * when the next change comes (there may be none). */
		put(s, json_pack("{s:s,s:s,s:I}", "type", "overflow", "reason",
				 "the client fell behind", "dropped", (json_int_t)s->dropped));
		s->dropped = 0;
	}
	if (buf_avail(&s->q)) {
		buf_append(&hs->out, s->q.data + s->q.off, buf_avail(&s->q));
		if (s->q.cap > 64 * 1024)
			buf_free(&s->q);
		else
			buf_reset(&s->q);
	}
	if (s->ended || hs->r->shutting_down || hs->ending)
		hs->done = true;
}

static void w_close(struct http_stream *hs)
{
	struct watch_stream *s = (struct watch_stream *)hs;
	struct watch_table *t = s->r->watches;
	if (s->grow.queued)
		files_sched_remove(s->r->files_sched, &s->grow);
	drop_pending(s);
	if (s->watching)
		loop_watch_del(&s->r->loop, &s->w);
	if (s->ifd >= 0)
		close(s->ifd);
	for (size_t i = 0; i < s->ndirs; i++)
		free(s->dirs[i].path);
	if (t) {
		t->dirs -= (unsigned)s->ndirs;
		t->streams--;
		LIST_UNLINK(t->head, s);
		if (!t->streams) { /* no table outlives its last stream */
			free(t);
			s->r->watches = NULL;
		}
	}
	free(s->dirs);
	free(s->last_write);
	buf_free(&s->q);
	free(s);
}

static const struct http_stream_ops watch_ops = {.produce = w_produce,
						 .close = w_close,
						 .keepalive_ms = SSE_KEEPALIVE_MS,
						 .keepalive = SSE_KEEPALIVE};

/* Open and watch the root (and, recursive, what is beneath it) as the task
 * user. 0 or -1 with err. */
static int watch_root(struct watch_stream *s, const char *path, struct error *err)
{
	int e = files_enter(&s->id);
	if (e < 0)
		return error_set(err, -e, "RUNTIME_ERROR", "cannot act as the task user");
	int rc = 0;
	cleanup_close int fd = files_open(AT_FDCWD, path, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0) {
		rc = fd == -ENOTDIR
			     ? error_set(err, 0, "INVALID_FILE", "%.1024s: not a directory", path)
		     : fd == -ENOENT
			     ? error_set(err, 0, "FILE_NOT_FOUND", "%.1024s: file not found", path)
		     : fd == -EACCES || fd == -EPERM
			     ? error_set(err, 0, "PERMISSION_DENIED",
					 "%.1024s: permission denied (acting as the task user, uid "
					 "%u)",
					 path, (unsigned)s->id.uid)
			     : error_set(err, -fd, "RUNTIME_ERROR", "cannot open %.1024s", path);
	} else if (files_on_procfs(fd) != 0) {
		rc = error_set(err, 0, "PERMISSION_DENIED", "%.1024s: procfs is not served", path);
	} else {
		int a = add_dir(s, fd, path);
		if (a <= 0)
			rc = a == 0 ? error_set(err, 0, "TOO_MANY_WATCHES",
						"the runner watches %u directories, its limit",
						s->r->watches->dirs)
			     : a == -EACCES
				     ? error_set(err, 0, "PERMISSION_DENIED",
						 "%.1024s: the task user may not read it", path)
			     : a == -ENOSPC
				     ? error_set(err, 0, "TOO_MANY_WATCHES",
						 "the kernel's inotify watch limit is reached "
						 "(fs.inotify.max_user_watches)")
				     : error_set(err, -a, "RUNTIME_ERROR",
						 "inotify_add_watch %.1024s failed", path);
		else
			s->root_wd = s->dirs[0].wd;
	}
	files_leave();
	if (!rc && s->recursive)
		grow_from(s, path, 0);
	return rc;
}

/* A watch of path as the task user, its events to sink (NULL: the SSE stream's queue).
 * NULL with err (TOO_MANY_WATCHES, FILE_NOT_FOUND, INVALID_FILE, PERMISSION_DENIED...). */
static struct watch_stream *watch_new(struct runner *r, const char *path, bool recursive,
				      const struct watch_sink *sink, void *arg, struct error *err)
{
	struct watch_table *t = table(r);
	if (!t) {
		error_set(err, ENOMEM, NULL, "watch table");
		return NULL;
	}
	if (t->streams >= WATCH_MAX_STREAMS) {
		error_set(err, 0, "TOO_MANY_WATCHES",
			  "%u directory watches are open, the runner's limit", t->streams);
		return NULL;
	}
	struct watch_stream *s = calloc(1, sizeof(*s));
	if (!s) {
		error_set(err, ENOMEM, NULL, "watch");
		return NULL;
	}
	s->r = r;
	s->recursive = recursive;
	s->sink = sink;
	s->sink_arg = arg;
	files_task_ident(r, &s->id);
	s->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (s->ifd < 0) {
		int e = errno;
		free(s);
		if (e == EMFILE)
			error_set(err, 0, "TOO_MANY_WATCHES",
				  "the kernel's inotify instance limit is reached");
		else
			error_set(err, e, "RUNTIME_ERROR", "inotify_init1");
		return NULL;
	}
	LIST_PUSH(t->head, s);
	t->streams++;
	s->opening = true;
	int rc = watch_root(s, path, err);
	s->opening = false;
	if (rc < 0) {
		w_close(&s->hs);
		return NULL;
	}
	if (loop_watch_add(&r->loop, &s->w, s->ifd, EPOLLIN, on_inotify, s) < 0) {
		w_close(&s->hs);
		error_set(err, 0, "RUNTIME_ERROR", "cannot watch the inotify descriptor");
		return NULL;
	}
	s->watching = true;
	return s;
}

struct watch_stream *watch_open(struct runner *r, const char *path, bool recursive,
				const struct watch_sink *sink, void *arg, struct error *err)
{
	struct watch_stream *s = watch_new(r, path, recursive, sink, arg, err);
	if (s && s->limit_hit) {
		sink->event(arg, "overflow", path, NULL, true);
		s->limit_hit = false;
	}
	return s;
}

void watch_close(struct watch_stream *s)
{
	if (s)
		w_close(&s->hs);
}

struct watch_stream *watch_sse_open(struct runner *r, const char *path, bool recursive,
				    struct error *err)
{
	struct watch_stream *s = watch_new(r, path, recursive, NULL, NULL, err);
	if (!s)
		return NULL;
	put(s, json_pack("{s:s,s:s,s:b,s:I}", "type", "watching", "path", path, "recursive",
			 recursive, "dirs", (json_int_t)s->ndirs));
	report_limit(s);
	log_info("directory watch started", "{s:s,s:b,s:I}", "path", path, "recursive", recursive,
		 "dirs", (json_int_t)s->ndirs);
	return s;
}

enum MHD_Result watch_sse_start(struct http_req *req, struct watch_stream *s)
{
	return http_stream_start(req, &s->hs, &watch_ops, SSE_CONTENT_TYPE);
}
