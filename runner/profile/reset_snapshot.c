/* The writable roots as they were at start, and their restoration, on the file-tree engine
 * (tree/tree.h): the snapshot is a manifest like a checkpoint's, its content in a pack store
 * (one unnamed file in the state dir, or a memfd without one: never a file a task could open
 * by name, gone with the runner), restored strictly (an entry whose inode or ctime moved is
 * replaced; a task cannot set a ctime) and recording what it made again, so that the next
 * reset finds it unchanged. The manifest lives in shared memory for that: the restore runs in
 * a worker process. Roots are held open from the start; a root whose path names another
 * directory at reset time fails the reset. */
#include "profile/reset_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/statedir.h"
#include "tree/fsops.h"

#define SNAP_MAX_ENTRIES 200000u
#define SNAP_MAX_DEPTH 256 /* of the tree at start; a tenant's deeper trees are still removed */

void reset_snapshot_init(struct reset_snapshot *s)
{
	memset(s, 0, sizeof(*s));
	s->store.dir_fd = s->store.obj_fd = s->store.pack_fd = -1;
	for (unsigned i = 0; i < TREE_MAX_ROOTS; i++)
		s->roots[i].pfd = s->roots[i].fd = -1;
}

/* A missing root is named in *skipped (colon-separated). */
static int skip_root(char **skipped, const char *path)
{
	size_t len = *skipped ? strlen(*skipped) : 0, l = strlen(path);
	char *ns = realloc(*skipped, len + l + 2);
	if (!ns)
		return -ENOMEM;
	if (len)
		ns[len++] = ':';
	memcpy(ns + len, path, l + 1);
	*skipped = ns;
	return 0;
}

/* The root path held open from now on, with its parent (the same directory named twice:
 * once). */
static int open_root(struct reset_snapshot *s, const char *path, char **skipped, struct error *e)
{
	if (s->n_roots == TREE_MAX_ROOTS)
		return error_set(e, 0, NULL, "more than %d writable roots", TREE_MAX_ROOTS);
	if (path[0] != '/')
		return error_set(e, 0, NULL, "writable root '%s' is not an absolute path", path);
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
		return skip_root(skipped, path) < 0 ? error_set(e, ENOMEM, NULL, "reset snapshot")
						    : 0;
	if (fd < 0)
		return error_set(e, errno, NULL, "cannot open writable root '%s'", path);
	struct tree_root *ro = &s->roots[s->n_roots];
	ro->fd = fd;
	struct kstatx st;
	int rc = fs_statx(fd, "", AT_EMPTY_PATH, &st);
	if (rc < 0)
		return error_set(e, -rc, NULL, "cannot examine '%s'", path);
	for (unsigned j = 0; j < s->n_roots; j++)
		if (s->roots[j].dev == fs_dev(&st) && s->ino[j] == st.ino) {
			close(fd);
			ro->fd = -1;
			return 0;
		}
	char *p = strdup(path), *slash = p ? strrchr(p, '/') : NULL;
	if (!p)
		return error_set(e, ENOMEM, NULL, "reset snapshot");
	ro->path = p;
	ro->name = slash[1] ? slash + 1 : ".";
	/* Its parent: where the engine starts (the root itself is never replaced). */
	char *parent = strndup(p, slash == p ? 1 : (size_t)(slash - p));
	ro->pfd = parent ? open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	free(parent);
	if (ro->pfd < 0)
		return error_set(e, parent ? errno : ENOMEM, NULL, "cannot open the parent of '%s'",
				 path);
	ro->dev = fs_dev(&st);
	ro->mnt_id = st.mnt_id;
	s->ino[s->n_roots++] = st.ino;
	s->store.excl[s->store.n_excl++] = (struct tree_inode){ro->dev, st.ino};
	return 0;
}

/* What the walk found but could not read: the reset could not put it back. */
static int unreadable(const struct tree_manifest *m, struct error *e)
{
	for (size_t i = 0; i < m->n; i++)
		if (m->ent[i].flags & TREE_UNREADABLE)
			return error_set(e, EACCES, NULL, "cannot read '%s'",
					 tree_path(m, &m->ent[i]));
	return 0;
}

int reset_snapshot_take(struct reset_snapshot *s, const char *const *roots, unsigned n_roots,
			int state_fd, uint64_t max_bytes, char **skipped, struct error *e)
{
	reset_snapshot_init(s);
	struct tree_store *st = &s->store;
	*skipped = NULL;
	struct kstatx sst;
	int rc = state_fd >= 0 ? fs_statx(state_fd, "", AT_EMPTY_PATH, &sst) : 0;
	if (rc < 0)
		return error_set(e, -rc, NULL, "cannot examine the state dir");
	if (state_fd >= 0)
		st->excl[st->n_excl++] = (struct tree_inode){fs_dev(&sst), sst.ino};
	for (unsigned i = 0; i < n_roots; i++)
		if (open_root(s, roots[i], skipped, e) < 0)
			return -1;
	if ((st->pack_fd = statedir_tmpfile(state_fd, "forceai-reset-store")) < 0) {
		rc = st->pack_fd;
		st->pack_fd = -1;
		return error_set(e, -rc, NULL, "cannot create the reset snapshot store");
	}
	st->max = max_bytes;
	st->max_entries = SNAP_MAX_ENTRIES;
	st->max_depth = SNAP_MAX_DEPTH;
	st->strict = true;
	struct tree_capture_stats ts;
	rc = tree_capture(st, false, s->roots, s->n_roots, NULL, &s->m, &ts, e);
	if (rc < 0 && e->errnum == TREE_EFULL) {
		char at[ERROR_MSG_MAX];
		snprintf(at, sizeof(at), "%s", e->msg);
		error_clear(e);
		return error_set(e, 0, NULL,
				 "the writable roots hold more than --reset-snapshot-max (%llu "
				 "bytes) of files that --allow-reset may keep (at %.300s): raise "
				 "--reset-snapshot-max or shrink the roots (--landlock-roots, or "
				 "what the image puts in them)",
				 (unsigned long long)max_bytes, at);
	}
	if (rc < 0 || unreadable(&s->m, e) < 0)
		return -1;
	rc = tree_manifest_share(&s->m);
	return rc < 0 ? error_set(e, -rc, NULL, "reset snapshot: mmap") : 0;
}

/* The first failure, for the answer. */
static void note(void *arg, const char *action, const char *path, const char *detail)
{
	char *first = arg;
	if (!strcmp(action, "failed") && !first[0])
		snprintf(first, ERROR_MSG_MAX, "%s: %s", path, detail ? detail : "failed");
}

int reset_snapshot_restore(struct reset_snapshot *s, struct tree_restore_stats *st, struct error *e)
{
	memset(st, 0, sizeof(*st));
	/* Each root's path must still name the directory held open since start. */
	for (unsigned i = 0; i < s->n_roots; i++) {
		struct kstatx now;
		int k = fs_statx(AT_FDCWD, s->roots[i].path, 0, &now);
		if (k < 0 || fs_dev(&now) != s->roots[i].dev || now.ino != s->ino[i])
			return error_set(e, k < 0 ? -k : 0, NULL,
					 "writable root '%s' is no longer the directory it was",
					 s->roots[i].path);
	}
	char first[ERROR_MSG_MAX] = "";
	unsigned failures = tree_restore(&s->store, &s->m, s->roots, s->n_roots, note, first, st);
	return failures ? error_set(e, 0, NULL, "%s", first) : 0;
}

unsigned reset_snapshot_fds(const struct reset_snapshot *s, int *fds, unsigned max)
{
	unsigned n = 0;
	if (s->store.pack_fd >= 0 && n < max)
		fds[n++] = s->store.pack_fd;
	for (unsigned i = 0; i < s->n_roots && n + 2 <= max; i++) {
		fds[n++] = s->roots[i].pfd;
		fds[n++] = s->roots[i].fd;
	}
	return n;
}

void reset_snapshot_free(struct reset_snapshot *s)
{
	for (unsigned i = 0; i < TREE_MAX_ROOTS; i++) {
		if (s->roots[i].pfd >= 0)
			close(s->roots[i].pfd);
		if (s->roots[i].fd >= 0)
			close(s->roots[i].fd);
		free((char *)s->roots[i].path);
	}
	tree_store_close(&s->store);
	tree_manifest_free(&s->m);
	reset_snapshot_init(s);
}
