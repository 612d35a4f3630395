/* A checkpoint's paths, opened by the runner (as the task user when it acts for one)
 * before the worker starts: checked to lie in the writable roots. */
#include "checkpoint/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/runner.h"
#include "files/path.h"
#include "files/userjob.h"
#include "tree/fsops.h"

/* ---- roots ---- */

void checkpoint_close_roots(struct checkpoints *c)
{
	for (unsigned i = 0; i < c->n_roots; i++) {
		if (c->roots[i].pfd >= 0)
			close(c->roots[i].pfd);
		if (c->roots[i].fd >= 0)
			close(c->roots[i].fd);
		free(c->root_paths[i]);
		c->root_paths[i] = NULL;
		free(c->open_paths[i]);
		c->open_paths[i] = NULL;
	}
	c->n_roots = 0;
	json_decref(c->resolved);
	c->resolved = NULL;
}

static int cmp_path(const void *a, const void *b)
{
	return tree_pathcmp(*(char *const *)a, *(char *const *)b);
}

bool checkpoint_in_a_root(struct runner *r, const char *path);

/* Where path is opened: itself (NULL), or for a task's exit diff (c->follow) the directory
 * it names now for the task user when that is another one inside a writable root: the task
 * replaced its cwd by a link, and its work went on there. Recorded in c->resolved. */
static char *followed(struct checkpoints *c, const char *path)
{
	char real[4096];
	if (!c->follow || files_user_realpath(&c->task_id, path, real, sizeof(real)) < 0 ||
	    !strcmp(real, path) || !checkpoint_in_a_root(c->r, real))
		return NULL;
	if (!c->resolved)
		c->resolved = json_array();
	json_array_append_new(c->resolved, json_pack("{s:s,s:s}", "path", path, "now", real));
	return strdup(real);
}

/* The descriptors of one root, opened at `at` (as the task user for a task: files_enter). */
static int open_root_fds(struct checkpoints *c, struct tree_root *ro, const char *at,
			 bool may_be_missing, struct error *e)
{
	struct runner *r = c->r;
	const struct files_ident wid = {.uid = r->cfg.task_uid,
					.gid = r->cfg.task_gid,
					.write_roots = r->cfg.landlock_roots};
	const char *as = c->actor == CHECKPOINT_FOR_TASK ? " (acting as the task user)" : "";
	const char *base;
	int pfd = strcmp(at, "/") ? files_open_parent(at, &base) : -EINVAL;
	if (pfd < 0)
		return error_set(e, 0, pfd == -ENOENT ? "FILE_NOT_FOUND" : "PERMISSION_DENIED",
				 "paths: %.1024s: %s%s", ro->path,
				 pfd == -EINVAL ? "not allowed" : strerror(-pfd), as);
	ro->pfd = pfd;
	ro->name = base;
	struct stat st;
	bool exists = fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
	if (!exists && (errno != ENOENT || !may_be_missing))
		return error_set(e, 0, errno == ENOENT ? "FILE_NOT_FOUND" : "PERMISSION_DENIED",
				 "paths: %.1024s: %s%s", ro->path, strerror(errno), as);
	int check_fd = pfd;
	if (exists && S_ISDIR(st.st_mode)) {
		ro->fd = files_open_last(pfd, base, O_RDONLY | O_DIRECTORY);
		if (ro->fd < 0)
			return error_set(e, 0, "PERMISSION_DENIED", "paths: %.1024s: %s%s",
					 ro->path, strerror(-ro->fd), as);
		check_fd = ro->fd;
	}
	if (files_check_writable(&wid, check_fd) < 0)
		return error_set(e, 0, "PERMISSION_DENIED",
				 "paths: %.1024s is outside the directories tasks may write "
				 "(%.300s)",
				 ro->path, r->cfg.landlock_roots);
	/* A checkpoint's own path is replaced or recreated by a restore
	 * only where its parent is writable too (never a root itself). */
	ro->replaceable = check_fd == pfd || files_check_writable(&wid, pfd) == 0;
	struct kstatx kst;
	int k2 = fs_statx(check_fd, "", AT_EMPTY_PATH, &kst);
	if (k2 < 0)
		return error_set(e, -k2, NULL, "paths: %.1024s", ro->path);
	ro->dev = fs_dev(&kst);
	ro->mnt_id = kst.mnt_id;
	return 0;
}

/* One path of a checkpoint (owned from now): its root opened. For the task, the whole path
 * is resolved with the task user's rights (a directory above it may not be searchable). */
static int open_root(struct checkpoints *c, char *path, bool may_be_missing, struct error *e)
{
	struct tree_root *ro = &c->roots[c->n_roots];
	memset(ro, 0, sizeof(*ro));
	ro->pfd = ro->fd = -1;
	ro->name = "";
	ro->path = path;
	c->root_paths[c->n_roots] = path;
	char *live = followed(c, path);
	c->open_paths[c->n_roots] = live;
	c->n_roots++;
	const char *at = live ? live : path;
	bool as_task = c->actor == CHECKPOINT_FOR_TASK;
	int rc = as_task ? files_enter(&c->task_id) : 0;
	if (rc < 0)
		return error_set(e, -rc, "PERMISSION_DENIED",
				 "paths: %.1024s: cannot act as the task user", path);
	rc = open_root_fds(c, ro, at, may_be_missing, e);
	if (as_task)
		files_leave();
	/* Whether the task user reaches it, whoever acts: what a diff or restore for the
	 * task may show or write back (TREE_TASK_*). */
	if (rc == 0)
		ro->task_reach = as_task || files_user_reaches_parent(&c->task_id, at, ro->pfd);
	return rc;
}

/* Open the paths (clean, absolute, inside the writable roots: the files
 * API's rules, with the configured roots whether Landlock runs or not).
 * `may_be_missing`: a restore brings back a path that is gone. */
int checkpoint_open_roots(struct checkpoints *c, json_t *paths, bool may_be_missing,
			  struct error *e)
{
	char *list[TREE_MAX_ROOTS];
	unsigned n = 0;
	size_t i;
	json_t *v;
	int bad = 0;
	files_task_ident(c->r, &c->task_id);
	json_array_foreach(paths, i, v) {
		const char *p = json_string_value(v);
		char clean[4096];
		if (!p)
			bad = error_set(e, 0, "INVALID_REQUEST_BODY", "paths: strings only");
		else if (n == TREE_MAX_ROOTS)
			bad = error_set(e, 0, "INVALID_REQUEST_BODY", "paths: at most %d",
					TREE_MAX_ROOTS);
		else if (files_clean_path(p, strlen(p), clean, sizeof(clean)) < 0)
			bad = error_set(e, 0, "INVALID_REQUEST_BODY",
					"paths: '%.300s' is not an absolute path", p);
		else if (!(list[n] = strdup(clean)))
			bad = error_set(e, ENOMEM, NULL, "checkpoints");
		else
			n++;
		if (bad < 0) {
			for (unsigned k = 0; k < n; k++)
				free(list[k]);
			return -1;
		}
	}
	qsort(list, n, sizeof(char *), cmp_path);
	int rc = 0;
	for (unsigned k = 0; k < n; k++) {
		/* A path under another one (or the same twice) is that one's. */
		bool inside = false;
		for (unsigned j = 0; j < c->n_roots && !inside; j++) {
			size_t l = strlen(c->root_paths[j]);
			inside = !strncmp(list[k], c->root_paths[j], l) &&
				 (list[k][l] == 0 || list[k][l] == '/' || l == 1);
		}
		if (inside || rc < 0)
			free(list[k]);
		else
			rc = open_root(c, list[k], may_be_missing, e);
	}
	if (rc == 0 && c->n_roots == 0)
		rc = error_set(e, 0, "INVALID_REQUEST_BODY", "paths: none exists");
	return rc;
}

json_t *checkpoint_default_paths(struct runner *r)
{
	json_t *a = json_array();
	char *list = strdup(r->cfg.landlock_roots ? r->cfg.landlock_roots : "");
	if (!a || !list) {
		free(list);
		return a;
	}
	for (char *save, *t = strtok_r(list, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
		struct stat st;
		if (stat(t, &st) == 0 && S_ISDIR(st.st_mode))
			json_array_append_new(a, json_string(t));
	}
	free(list);
	return a;
}

bool checkpoint_in_a_root(struct runner *r, const char *path)
{
	const char *roots = r->cfg.landlock_roots ? r->cfg.landlock_roots : "";
	while (*roots) {
		size_t n = strcspn(roots, ":");
		if (n > 1 && !strncmp(path, roots, n) && (path[n] == 0 || path[n] == '/'))
			return true;
		roots += n + (roots[n] == ':');
	}
	return false;
}
