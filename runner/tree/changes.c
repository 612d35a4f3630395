/* The change tracker of checkpoints: inotify watches on the walked directories, what happened
 * in each since the last checkpoint. See changes.h. */
#include "tree/changes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define WATCH_MASK                                                                                 \
	(IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_OPEN | IN_MOVED_FROM |     \
	 IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
#define UNKNOWN_MAX 4096 /* events of watches not adopted yet, remembered */
#define MOVES_MAX 64     /* open files moved away, waiting for their IN_MOVED_TO */

enum { N_DIRTY = 1, N_FULL = 2 };

struct open_name {
	char *name;
	unsigned n;
};

struct node {
	char *path;
	int wd;
	unsigned flags;
	struct open_name *open;
	size_t n_open, cap_open;
	struct node *next_wd, *next_path;
};

struct added {
	int wd;
	char *path;
};

struct tree_changes {
	int fd;
	unsigned max_watches;
	struct node **by_wd, **by_path; /* chained hashes, cap buckets each */
	size_t n, cap;
	char base[24], pending[24];
	bool valid; /* base is a checkpoint the state is relative to */
	bool lost;  /* something was lost since the mark: the pending one cannot be a base */
	int unknown[UNKNOWN_MAX]; /* watches (not adopted yet) something changed in */
	size_t n_unknown;
	struct open_name unknown_open[UNKNOWN_MAX]; /* "wd/name" opened there, not closed */
	size_t n_unknown_open;
	struct {
		uint32_t cookie;
		unsigned n;
	} moves[MOVES_MAX];
	size_t n_moves;
	struct added *added; /* a worker's own watches */
	size_t n_added, cap_added;
};

static size_t hash_path(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return (size_t)h;
}

static struct node *by_wd(const struct tree_changes *t, int wd)
{
	for (struct node *n = t->by_wd[(size_t)wd & (t->cap - 1)]; n; n = n->next_wd)
		if (n->wd == wd)
			return n;
	return NULL;
}

static struct node *by_path(const struct tree_changes *t, const char *path)
{
	for (struct node *n = t->by_path[hash_path(path) & (t->cap - 1)]; n; n = n->next_path)
		if (!strcmp(n->path, path))
			return n;
	return NULL;
}

static void link_node(struct tree_changes *t, struct node *n)
{
	size_t w = (size_t)n->wd & (t->cap - 1), p = hash_path(n->path) & (t->cap - 1);
	n->next_wd = t->by_wd[w];
	t->by_wd[w] = n;
	n->next_path = t->by_path[p];
	t->by_path[p] = n;
}

static int grow(struct tree_changes *t)
{
	size_t cap = t->cap ? t->cap * 2 : 1024;
	struct node **w = calloc(cap, sizeof(*w)), **p = calloc(cap, sizeof(*p));
	if (!w || !p) {
		free(w);
		free(p);
		return -ENOMEM;
	}
	struct node **ow = t->by_wd, **op = t->by_path;
	size_t ocap = t->cap;
	t->by_wd = w;
	t->by_path = p;
	t->cap = cap;
	for (size_t i = 0; i < ocap; i++)
		for (struct node *n = ow[i], *nx; n; n = nx) {
			nx = n->next_wd;
			link_node(t, n);
		}
	free(ow);
	free(op);
	return 0;
}

static void node_free(struct node *n)
{
	for (size_t i = 0; i < n->n_open; i++)
		free(n->open[i].name);
	free(n->open);
	free(n->path);
	free(n);
}

static void unlink_node(struct tree_changes *t, struct node *n)
{
	struct node **pp = &t->by_wd[(size_t)n->wd & (t->cap - 1)];
	while (*pp != n)
		pp = &(*pp)->next_wd;
	*pp = n->next_wd;
	pp = &t->by_path[hash_path(n->path) & (t->cap - 1)];
	while (*pp != n)
		pp = &(*pp)->next_path;
	*pp = n->next_path;
	t->n--;
}

struct tree_changes *tree_changes_new(unsigned max_watches)
{
	struct tree_changes *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->max_watches = max_watches;
	t->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (t->fd < 0 || grow(t) < 0) {
		int err = t->fd < 0 ? errno : ENOMEM;
		if (t->fd >= 0)
			close(t->fd);
		free(t);
		errno = err;
		return NULL;
	}
	return t;
}

void tree_changes_free(struct tree_changes *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->cap; i++)
		for (struct node *n = t->by_wd[i], *nx; n; n = nx) {
			nx = n->next_wd;
			node_free(n);
		}
	for (size_t i = 0; i < t->n_added; i++)
		free(t->added[i].path);
	free(t->added);
	for (size_t i = 0; i < t->n_unknown_open; i++)
		free(t->unknown_open[i].name);
	free(t->by_wd);
	free(t->by_path);
	close(t->fd);
	free(t);
}

int tree_changes_fd(const struct tree_changes *t)
{
	return t->fd;
}

static void lose(struct tree_changes *t)
{
	t->valid = false;
	t->lost = true;
}

/* Every watch at path or beneath it: its path is no longer its place (moved, removed). */
static void drop_subtree(struct tree_changes *t, const char *path)
{
	size_t l = strlen(path);
	for (size_t i = 0; i < t->cap; i++)
		for (struct node *n = t->by_wd[i], *nx; n; n = nx) {
			nx = n->next_wd;
			if (strncmp(n->path, path, l) || (n->path[l] && n->path[l] != '/'))
				continue;
			unlink_node(t, n);
			inotify_rm_watch(t->fd, n->wd); /* its IN_IGNORED finds no node */
			node_free(n);
		}
}

static struct open_name *open_find(struct node *n, const char *name)
{
	for (size_t i = 0; i < n->n_open; i++)
		if (!strcmp(n->open[i].name, name))
			return &n->open[i];
	return NULL;
}

static void open_add(struct tree_changes *t, struct node *n, const char *name, unsigned k)
{
	struct open_name *o = open_find(n, name);
	if (o) {
		o->n += k;
		return;
	}
	if (n->n_open == n->cap_open) {
		size_t cap = n->cap_open ? n->cap_open * 2 : 4;
		struct open_name *v = realloc(n->open, cap * sizeof(*v));
		if (!v) {
			lose(t); /* an open file not remembered: no base */
			return;
		}
		n->open = v;
		n->cap_open = cap;
	}
	char *s = strdup(name);
	if (!s) {
		lose(t);
		return;
	}
	n->open[n->n_open++] = (struct open_name){s, k};
}

/* Closed (k: 1), or moved away (k: all): how many opens it had. */
static unsigned open_del(struct node *n, const char *name, bool all)
{
	struct open_name *o = open_find(n, name);
	if (!o)
		return 0;
	unsigned k = all ? o->n : 1;
	o->n -= k;
	if (!o->n) {
		free(o->name);
		*o = n->open[--n->n_open];
	}
	return k;
}

/* A name created: a hard link made to a file (more than one link) may be changed through
 * its other name, whose directory sees nothing. */
static void check_link(struct tree_changes *t, const struct node *n, const char *name)
{
	char p[4096];
	struct stat st;
	if ((size_t)snprintf(p, sizeof(p), "%s/%s", n->path, name) >= sizeof(p) ||
	    (fstatat(AT_FDCWD, p, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
	     st.st_nlink > 1))
		lose(t);
}

static void child_event(struct tree_changes *t, struct node *n, const struct inotify_event *ev)
{
	uint32_t m = ev->mask;
	bool dir = m & IN_ISDIR;
	if (m & IN_OPEN) {
		if (!dir)
			open_add(t, n, ev->name, 1);
		return; /* an open changes nothing yet (the walker's own opens too) */
	}
	if (m & (IN_CLOSE_WRITE | IN_CLOSE_NOWRITE) && !dir)
		open_del(n, ev->name, false);
	if (m & IN_CLOSE_NOWRITE)
		return;
	n->flags |= N_DIRTY;
	if (m & IN_MOVED_FROM && !dir) {
		unsigned k = open_del(n, ev->name, true);
		if (k && t->n_moves < MOVES_MAX)
			t->moves[t->n_moves++] = (typeof(t->moves[0])){ev->cookie, k};
		else if (k)
			lose(t);
	}
	if (m & IN_MOVED_TO && !dir)
		for (size_t i = 0; i < t->n_moves; i++)
			if (t->moves[i].cookie == ev->cookie) {
				open_add(t, n, ev->name, t->moves[i].n);
				t->moves[i] = t->moves[--t->n_moves];
				break;
			}
	if (m & IN_CREATE && !dir)
		check_link(t, n, ev->name);
	if (m & (IN_MOVED_FROM | IN_DELETE) && dir) {
		char p[4096];
		if ((size_t)snprintf(p, sizeof(p), "%s/%s", n->path, ev->name) < sizeof(p))
			drop_subtree(t, p);
		else
			lose(t);
	}
}

/* An open or a close in a watch not adopted yet (the walker's own reads make most): kept
 * as "wd/name" until its adoption. */
static void unknown_open(struct tree_changes *t, const struct inotify_event *ev)
{
	char key[300];
	snprintf(key, sizeof(key), "%d/%s", ev->wd, ev->name);
	for (size_t i = 0; i < t->n_unknown_open; i++)
		if (!strcmp(t->unknown_open[i].name, key)) {
			struct open_name *o = &t->unknown_open[i];
			if (ev->mask & IN_OPEN) {
				o->n++;
			} else if (!--o->n) {
				free(o->name);
				*o = t->unknown_open[--t->n_unknown_open];
			}
			return;
		}
	if (!(ev->mask & IN_OPEN))
		return;
	char *s = t->n_unknown_open < UNKNOWN_MAX ? strdup(key) : NULL;
	if (!s) {
		lose(t);
		return;
	}
	t->unknown_open[t->n_unknown_open++] = (struct open_name){s, 1};
}

static void note_unknown(struct tree_changes *t, const struct inotify_event *ev)
{
	int wd = ev->wd;
	uint32_t m = ev->mask;
	if (ev->len && (m & (IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE)) && !(m & IN_ISDIR))
		unknown_open(t, ev);
	if ((m & (IN_OPEN | IN_CLOSE_NOWRITE)) || (!ev->len && (m & IN_CLOSE_WRITE)))
		return; /* nothing changed */
	for (size_t i = 0; i < t->n_unknown; i++)
		if (t->unknown[i] == wd)
			return;
	if (t->n_unknown == UNKNOWN_MAX) {
		lose(t);
		return;
	}
	t->unknown[t->n_unknown++] = wd;
}

static void one_event(struct tree_changes *t, const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW) {
		lose(t); /* events were dropped: nothing can be vouched for */
		return;
	}
	struct node *n = by_wd(t, ev->wd);
	if (!n) {
		if (!(ev->mask & IN_IGNORED))
			note_unknown(t, ev);
		return;
	}
	if (ev->mask & (IN_IGNORED | IN_UNMOUNT)) {
		unlink_node(t, n); /* the directory is gone (or its file system) */
		node_free(n);
		return;
	}
	if (ev->len) {
		child_event(t, n, ev);
		return;
	}
	if (ev->mask & IN_MOVE_SELF) {
		char *p = strdup(n->path);
		if (p)
			drop_subtree(t, p);
		else
			lose(t);
		free(p);
	} else if (ev->mask & (IN_ATTRIB | IN_DELETE_SELF)) {
		n->flags |= N_FULL | N_DIRTY; /* its own rights: what is below may be seen anew */
	}
}

void tree_changes_read(struct tree_changes *t)
{
	char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
	for (;;) {
		ssize_t k = read(t->fd, buf, sizeof(buf));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			if (k < 0 && errno != EAGAIN)
				lose(t);
			return;
		}
		for (char *p = buf; p < buf + k;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			one_event(t, ev);
			p += sizeof(*ev) + ev->len;
		}
	}
}

void tree_changes_mark(struct tree_changes *t, const char *id)
{
	for (size_t i = 0; i < t->cap; i++)
		for (struct node *n = t->by_wd[i]; n; n = n->next_wd)
			n->flags = n->n_open ? N_DIRTY : 0;
	snprintf(t->pending, sizeof(t->pending), "%s", id);
	t->lost = false;
}

void tree_changes_taken(struct tree_changes *t, const char *id, bool ok)
{
	t->valid = ok && !t->lost && !strcmp(t->pending, id);
	snprintf(t->base, sizeof(t->base), "%s", t->valid ? id : "");
	t->pending[0] = 0;
	t->n_unknown = 0; /* applied by the adoptions before this */
}

void tree_changes_invalidate(struct tree_changes *t)
{
	t->valid = false;
	t->base[0] = 0;
}

void tree_changes_adopt(struct tree_changes *t, int wd, const char *path)
{
	struct node *old = by_wd(t, wd);
	if (old) { /* the same directory under another path: neither is vouched for */
		unlink_node(t, old);
		node_free(old);
		inotify_rm_watch(t->fd, wd);
		return;
	}
	if ((old = by_path(t, path))) {
		unlink_node(t, old);
		node_free(old);
	}
	struct node *n = calloc(1, sizeof(*n));
	if (!n || !(n->path = strdup(path)) || (t->n + 1 > t->cap && grow(t) < 0)) {
		free(n ? n->path : NULL);
		free(n);
		inotify_rm_watch(t->fd, wd); /* not kept: walked again */
		return;
	}
	n->wd = wd;
	for (size_t i = 0; i < t->n_unknown; i++)
		if (t->unknown[i] == wd)
			n->flags = N_DIRTY | N_FULL; /* something happened there meanwhile */
	char key[32];
	size_t kl = (size_t)snprintf(key, sizeof(key), "%d/", wd);
	for (size_t i = 0; i < t->n_unknown_open;)
		if (!strncmp(t->unknown_open[i].name, key, kl)) {
			struct open_name *o = &t->unknown_open[i];
			open_add(t, n, o->name + kl, o->n);
			free(o->name);
			*o = t->unknown_open[--t->n_unknown_open];
		} else {
			i++;
		}
	link_node(t, n);
	t->n++;
}

bool tree_changes_valid_for(const struct tree_changes *t, const char *prev_id)
{
	return t && t->valid && prev_id && !strcmp(t->base, prev_id);
}

enum changes_dir_state tree_changes_dir(const struct tree_changes *t, const char *path)
{
	const struct node *n = by_path(t, path);
	if (!n || (n->flags & N_FULL))
		return CHANGES_DIR_WALK;
	return (n->flags & N_DIRTY) || n->n_open ? CHANGES_DIR_LIST : CHANGES_DIR_CLEAN;
}

bool tree_changes_open(const struct tree_changes *t, const char *dir_path, const char *name)
{
	struct node *n = by_path(t, dir_path);
	return n && open_find(n, name);
}

/* Local file systems whose every change goes through this kernel's inodes (a watch sees it
 * whatever mount or namespace it came from); overlayfs: through its own inodes (a change made
 * beneath it, in a layer, is not supported by overlayfs itself). */
static bool fs_trusted(int fd)
{
	static const unsigned long ok[] = {0xEF53,     0x58465342, 0x9123683E,
					   0x01021994, 0x794c7630, 0xF2F52010};
	struct statfs s;
	if (fstatfs(fd, &s) < 0)
		return false;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if ((unsigned long)s.f_type == ok[i])
			return true;
	return false;
}

int tree_changes_watch(struct tree_changes *t, int fd, const char *path)
{
	if (by_path(t, path))
		return 0;
	if (t->max_watches && t->n + t->n_added >= t->max_watches)
		return -ENOSPC;
	if (!fs_trusted(fd))
		return -EXDEV;
	char p[64];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	int wd = inotify_add_watch(t->fd, p, WATCH_MASK);
	if (wd < 0)
		return -errno;
	if (t->n_added == t->cap_added) {
		size_t cap = t->cap_added ? t->cap_added * 2 : 256;
		struct added *v = realloc(t->added, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		t->added = v;
		t->cap_added = cap;
	}
	char *s = strdup(path);
	if (!s)
		return -ENOMEM;
	t->added[t->n_added++] = (struct added){wd, s};
	return 0;
}

bool tree_changes_added(const struct tree_changes *t, size_t i, int *wd, const char **path)
{
	if (!t || i >= t->n_added)
		return false;
	*wd = t->added[i].wd;
	*path = t->added[i].path;
	return true;
}
