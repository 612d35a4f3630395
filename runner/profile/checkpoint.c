/* Workspace checkpoints on the loop (docs/design.md §12.1): the list, the
 * request that waits, and the worker process that does the filesystem
 * work (files/ckpt.c) so the loop never waits for the disk. One operation
 * at a time; its answer is a JSON object the worker writes to a memfd. */
#include "profile/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/closefds.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/signals.h"
#include "core/util.h"
#include "tree/tree.h"
#include "tree/fsx.h"
#include "files/ident.h"
#include "files/path.h"
#include "files/udiff.h"
#include "files/userjob.h"
#include "profile/profile.h"
#include "task/task.h"

#define LIST_MAX 10000          /* changes named in one answer */
#define PATCH_FILE_MAX 262144   /* a file's bytes diffed for ?patch=1 */
#define PATCH_TOTAL_MAX 1048576 /* patch text in one answer */
#define UNREADABLE_MAX 100
#define STOP_WAIT_MS 10000
#define MAX_CHECKPOINTS 1000
#define TASK_CHANGES_WAIT_MS 60000 /* a task's exit event waits this long for its diff */

struct ckpt {
	char id[20];
	char *label;
	uint64_t created_ms;
	json_t *paths; /* array of strings */
	json_t *info;  /* the worker's figures */
	struct ckpt *next;
};

enum op { OP_NONE, OP_CREATE, OP_DIFF, OP_RESTORE, OP_DELETE };

/* An operation for a task's changes that found another running: it starts when that one
 * ends (a client's request is answered 409 instead: it can retry, a task's exit cannot). */
struct queued {
	enum ckpt_op op;
	char id[20];
	json_t *args; /* a create's body (owned), or NULL */
	ckpt_done_fn done;
	void *arg;
	struct queued *next;
};

struct checkpoints {
	struct runner *r;
	struct ckpt *head; /* oldest first */
	unsigned n;
	uint64_t store_bytes;
	bool store_known; /* store_bytes measured (after a delete: by the worker) */
	const char *unavailable;
	/* the operation running */
	enum op op;
	enum ckpt_actor actor; /* for whom it acts */
	bool follow;           /* a task's exit diff: its path as the task user resolves it now */
	struct files_ident task_id;
	char *open_paths[CK_MAX_ROOTS]; /* where a root was opened, when not its path */
	json_t *resolved;               /* [{path, now}]: the paths followed */
	pid_t worker;
	bool worker_running;
	int out_fd;
	ckpt_done_fn done; /* who waits for the answer (NULL: gone) */
	void *done_arg;
	struct ckpt *pending; /* being created */
	struct ckpt *target;  /* diff/restore: the checkpoint; delete: the one removed */
	struct ckpt *to;      /* diff ?to= */
	bool patch;
	struct ck_root roots[CK_MAX_ROOTS];
	char *root_paths[CK_MAX_ROOTS];
	unsigned n_roots;
	uint64_t t0;
	struct loop_timer stop_timer; /* restore with stop_tasks: waits for them */
	bool timer_open;
	uint64_t stop_t0;
	struct queued *queue; /* FIFO */
};

static struct checkpoints *cs_of(struct runner *r)
{
	return r->profile ? r->profile->ckpt : NULL;
}

/* ---- roots ---- */

static void close_roots(struct checkpoints *c)
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
	return ck_pathcmp(*(char *const *)a, *(char *const *)b);
}

static bool in_a_root(struct runner *r, const char *path);

/* Where path is opened: itself (NULL), or for a task's exit diff (c->follow) the directory
 * it names now for the task user when that is another one inside a writable root: the task
 * replaced its cwd by a link, and its work went on there. Recorded in c->resolved. */
static char *followed(struct checkpoints *c, const char *path)
{
	char real[4096];
	if (!c->follow || files_user_realpath(&c->task_id, path, real, sizeof(real)) < 0 ||
	    !strcmp(real, path) || !in_a_root(c->r, real))
		return NULL;
	if (!c->resolved)
		c->resolved = json_array();
	json_array_append_new(c->resolved, json_pack("{s:s,s:s}", "path", path, "now", real));
	return strdup(real);
}

/* The descriptors of one root, opened at `at` (as the task user for a task: files_enter). */
static int open_root_fds(struct checkpoints *c, struct ck_root *ro, const char *at,
			 bool may_be_missing, struct error *e)
{
	struct runner *r = c->r;
	const struct files_ident wid = {.uid = r->cfg.task_uid,
					.gid = r->cfg.task_gid,
					.write_roots = r->cfg.landlock_roots};
	const char *as = c->actor == CKPT_FOR_TASK ? " (acting as the task user)" : "";
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
	int k2 = fsx_statx(check_fd, "", AT_EMPTY_PATH, &kst);
	if (k2 < 0)
		return error_set(e, -k2, NULL, "paths: %.1024s", ro->path);
	ro->dev = fsx_dev(&kst);
	ro->mnt_id = kst.mnt_id;
	return 0;
}

/* One path of a checkpoint (owned from now): its root opened. For the task, the whole path
 * is resolved with the task user's rights (a directory above it may not be searchable). */
static int open_root(struct checkpoints *c, char *path, bool may_be_missing, struct error *e)
{
	struct ck_root *ro = &c->roots[c->n_roots];
	memset(ro, 0, sizeof(*ro));
	ro->pfd = ro->fd = -1;
	ro->name = "";
	ro->path = path;
	c->root_paths[c->n_roots] = path;
	char *live = followed(c, path);
	c->open_paths[c->n_roots] = live;
	c->n_roots++;
	const char *at = live ? live : path;
	bool as_task = c->actor == CKPT_FOR_TASK;
	int rc = as_task ? files_enter(&c->task_id) : 0;
	if (rc < 0)
		return error_set(e, -rc, "PERMISSION_DENIED",
				 "paths: %.1024s: cannot act as the task user", path);
	rc = open_root_fds(c, ro, at, may_be_missing, e);
	if (as_task)
		files_leave();
	/* Whether the task user reaches it, whoever acts: what a diff or restore for the
	 * task may show or write back (CK_TASK_*). */
	if (rc == 0)
		ro->task_reach = as_task || files_user_reaches_parent(&c->task_id, at, ro->pfd);
	return rc;
}

/* Open the paths (clean, absolute, inside the writable roots: the files
 * API's rules, with the configured roots whether Landlock runs or not).
 * `may_be_missing`: a restore brings back a path that is gone. */
static int open_roots(struct checkpoints *c, json_t *paths, bool may_be_missing, struct error *e)
{
	char *list[CK_MAX_ROOTS];
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
		else if (n == CK_MAX_ROOTS)
			bad = error_set(e, 0, "INVALID_REQUEST_BODY", "paths: at most %d",
					CK_MAX_ROOTS);
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

static json_t *default_paths(struct runner *r)
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

/* ---- answers ---- */

static void respond(struct checkpoints *c, unsigned status, json_t *body)
{
	ckpt_done_fn done = c->done;
	c->done = NULL;
	if (!done) {
		json_decref(body);
		return;
	}
	done(c->done_arg, status, body);
}

static void respond_error(struct checkpoints *c, unsigned status, const char *code, const char *msg)
{
	(void)status;
	struct error e = {0};
	error_set(&e, 0, code, "%s", msg);
	json_t *b = json_pack("{s:s,s:s}", "code", error_code(&e), "message", e.msg);
	respond(c, error_http_status(&e), b);
}

static json_t *ckpt_json(const struct checkpoints *c, const struct ckpt *k)
{
	(void)c;
	json_t *o = json_pack("{s:s,s:s?,s:I,s:O}", "id", k->id, "label", k->label, "created_ms",
			      (json_int_t)k->created_ms, "paths", k->paths);
	if (o && k->info)
		json_object_update(o, k->info);
	return o;
}

static struct ckpt *find(struct checkpoints *c, const char *id)
{
	for (struct ckpt *k = c->head; k; k = k->next)
		if (id && !strcmp(k->id, id))
			return k;
	return NULL;
}

static void ckpt_free(struct ckpt *k)
{
	if (!k)
		return;
	free(k->label);
	json_decref(k->paths);
	json_decref(k->info);
	free(k);
}

static void end_op(struct checkpoints *c)
{
	if (c->worker_running) {
		if (kill(c->worker, SIGKILL) < 0 && errno != ESRCH)
			log_errno("checkpoints: SIGKILL to the worker failed", errno, NULL);
		reaper_forget(&c->r->reaper, c->worker);
		c->worker_running = false;
	}
	if (c->out_fd >= 0)
		close(c->out_fd);
	c->out_fd = -1;
	if (c->timer_open)
		loop_timer_stop(&c->r->loop, &c->stop_timer);
	close_roots(c);
	ckpt_free(c->pending);
	c->pending = NULL;
	if (c->op == OP_DELETE)
		ckpt_free(c->target);
	c->target = c->to = NULL;
	c->op = OP_NONE;
	c->actor = CKPT_FOR_GATEWAY;
	c->follow = false;
}

/* ---- the worker ---- */

struct notes {
	json_t *list;
	json_t *counts;
	unsigned n;
	bool truncated;
};

static void note(void *arg, const char *action, const char *path, const char *detail)
{
	struct notes *nt = arg;
	json_t *cnt = json_object_get(nt->counts, action);
	json_object_set_new(nt->counts, action,
			    json_integer(cnt ? json_integer_value(cnt) + 1 : 1));
	if (nt->n >= LIST_MAX) {
		nt->truncated = true;
		return;
	}
	nt->n++;
	json_array_append_new(nt->list, json_pack("{s:s,s:s,s:s?}", "action", action, "path", path,
						  "reason", detail));
}

static const char *type_name(unsigned t)
{
	static const char *const n[] = {"?",    "directory", "file",   "symlink",    "fifo",
					"char", "block",     "socket", "mount point"};
	return t < sizeof(n) / sizeof(n[0]) ? n[t] : "?";
}

struct diffctx {
	struct checkpoints *c;
	const struct ck_manifest *a, *b;
	struct ck_store *store;
	bool b_is_current;
	json_t *list;
	unsigned n, added, modified, deleted, attrs;
	bool truncated;
	size_t patch_bytes;
	bool patch_truncated;
};

/* One side's content for a patch: NULL (with *why) when not shown. */
static char *side(struct diffctx *d, const struct ck_manifest *m, const struct ck_ent *e,
		  bool current, size_t *len, const char **why)
{
	*len = 0;
	if (!e) {
		char *b = malloc(1);
		if (b)
			b[0] = 0;
		return b;
	}
	if (e->type != TREE_REG)
		return *why = "not a regular file", NULL;
	if (e->size > PATCH_FILE_MAX)
		return *why = "larger than 256 KiB", NULL;
	/* What the files API would not show the client, a patch does not either: the task
	 * user's rights on the whole path, as the kernel decided them when the side was
	 * examined (the store's copy: when captured; the tree: now), and a current side read
	 * as that user. */
	if (!(e->flags & CK_TASK_OK))
		return *why = "not readable by the task user", NULL;
	char *buf = NULL;
	int rc = -ENOENT;
	if (current) {
		rc = files_enter(&d->c->task_id);
		if (rc == 0) {
			rc = ck_read_current(d->c->roots, d->c->n_roots, ck_path(m, e),
					     PATCH_FILE_MAX, &buf, len);
			files_leave();
		}
	} else if (e->flags & CK_HAS_SHA)
		rc = ck_object_read(d->store, e->sha, PATCH_FILE_MAX, &buf, len);
	if (rc < 0)
		return *why = "could not be read", NULL;
	if (!udiff_is_text(buf, *len)) {
		free(buf);
		return *why = "binary", NULL;
	}
	return buf;
}

static void add_patch(struct diffctx *d, json_t *o, const struct ck_ent *a, const struct ck_ent *b)
{
	if (d->patch_truncated) {
		json_object_set_new(o, "patch_omitted", json_string("the answer's patch bound"));
		return;
	}
	const char *why = NULL;
	size_t la, lb;
	char *ta = side(d, d->a, a, false, &la, &why);
	char *tb = ta ? side(d, d->b, b, d->b_is_current, &lb, &why) : NULL;
	if (!ta || !tb) {
		json_object_set_new(o, "patch_omitted", json_string(why ? why : "unreadable"));
		free(ta);
		free(tb);
		return;
	}
	const char *pa = a ? ck_path(d->a, a) : NULL, *pb = b ? ck_path(d->b, b) : NULL;
	size_t n;
	char *p = udiff(ta, la, tb, lb, pa ? pa : "/dev/null", pb ? pb : "/dev/null", &n);
	free(ta);
	free(tb);
	if (!p)
		return;
	if (d->patch_bytes + n > PATCH_TOTAL_MAX) {
		d->patch_truncated = true;
		json_object_set_new(o, "patch_omitted", json_string("the answer's patch bound"));
	} else {
		d->patch_bytes += n;
		json_object_set_new(o, "patch", json_stringn(p, n));
	}
	free(p);
}

static void on_change(void *arg, const struct ck_ent *a, const struct ck_ent *b, unsigned what)
{
	struct diffctx *d = arg;
	const char *change;
	if (d->c->actor == CKPT_FOR_TASK) {
		/* For the task, each side as it could see it: what lay beyond a directory it
		 * could not list and enter is not there for it. */
		if (a && !(a->flags & CK_TASK_SEEN))
			a = NULL;
		if (b && !(b->flags & CK_TASK_SEEN))
			b = NULL;
		if (!a && !b)
			return;
	}
	if (!a) {
		change = "added";
		d->added++;
	} else if (!b) {
		change = "deleted";
		d->deleted++;
	} else if (what & (CK_D_CONTENT | CK_D_TYPE | CK_D_TARGET)) {
		change = "modified";
		d->modified++;
	} else {
		/* A directory's mtime moves with every entry added or removed in
		 * it: those are listed themselves. */
		if (a->type == TREE_DIR && !(what & ~CK_D_MTIME))
			return;
		change = "attributes";
		d->attrs++;
	}
	if (d->n >= LIST_MAX) {
		d->truncated = true;
		return;
	}
	d->n++;
	const struct ck_ent *e = b ? b : a;
	const struct ck_manifest *m = b ? d->b : d->a;
	json_t *o = json_pack("{s:s,s:s,s:s,s:I}", "path", ck_path(m, e), "change", change, "type",
			      type_name(e->type), "size", (json_int_t)e->size);
	if (a && b) {
		json_t *w = json_array();
		static const struct {
			unsigned bit;
			const char *name;
		} bits[] = {{CK_D_CONTENT, "content"}, {CK_D_TYPE, "type"},
			    {CK_D_TARGET, "target"},   {CK_D_MODE, "mode"},
			    {CK_D_OWNER, "owner"},     {CK_D_XATTRS, "xattrs"},
			    {CK_D_MTIME, "mtime"}};
		for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
			if (what & bits[i].bit)
				json_array_append_new(w, json_string(bits[i].name));
		json_object_set_new(o, "what", w);
		json_object_set_new(o, "old_size", json_integer((json_int_t)a->size));
		if (a->type != b->type)
			json_object_set_new(o, "old_type", json_string(type_name(a->type)));
		if (what & CK_D_MODE)
			json_object_set_new(o, "mode",
					    json_pack("{s:i,s:i}", "old", a->mode & 07777, "new",
						      b->mode & 07777));
		if (what & CK_D_OWNER)
			json_object_set_new(o, "owner",
					    json_pack("{s:[i,i],s:[i,i]}", "old", (int)a->uid,
						      (int)a->gid, "new", (int)b->uid,
						      (int)b->gid));
	}
	if (d->store && (e->type == TREE_REG) && (!a || !b || (what & CK_D_CONTENT)) &&
	    (!a || a->type == TREE_REG) && (!b || b->type == TREE_REG))
		add_patch(d, o, a, b);
	json_array_append_new(d->list, o);
}

static void unreadable_list(const struct ck_manifest *m, json_t *o)
{
	json_t *a = json_array();
	for (size_t i = 0; i < m->n && json_array_size(a) < UNREADABLE_MAX; i++)
		if (m->ent[i].flags & CK_UNREADABLE)
			json_array_append_new(a, json_string(ck_path(m, &m->ent[i])));
	json_object_set_new(o, "unreadable", a);
}

static json_t *do_create(struct checkpoints *c, struct ck_store *s, struct error *e)
{
	struct ck_manifest prev = {0}, m = {0};
	bool have_prev = false;
	struct ckpt *last = NULL;
	for (struct ckpt *k = c->head; k; k = k->next)
		last = k;
	if (last) {
		char name[40];
		snprintf(name, sizeof(name), "m-%s", last->id);
		struct error le = {0};
		have_prev = ck_load(s->dir_fd, name, &prev, &le) == 0;
	}
	struct ck_take_stats ts;
	int rc = ck_take(s, false, c->roots, c->n_roots, have_prev ? &prev : NULL, &m, &ts, e);
	ck_manifest_free(&prev);
	if (rc < 0) {
		bool full = e->errnum == CK_EFULL;
		ck_store_rollback(s);
		if (full) {
			char at[ERROR_MSG_MAX];
			snprintf(at, sizeof(at), "%s", e->msg);
			memset(e, 0, sizeof(*e));
			error_set(
				e, 0, "INSUFFICIENT_STORAGE",
				"the checkpoint store would hold more than --checkpoint-max-bytes "
				"(%llu bytes; %llu in use) at %.500s: delete checkpoints "
				"(DELETE /v1/checkpoints/{id}) or raise the bound",
				(unsigned long long)s->max, (unsigned long long)s->used, at);
		}
		return NULL;
	}
	char name[40];
	snprintf(name, sizeof(name), "m-%s", c->pending->id);
	if (ck_save(s->dir_fd, name, &m, e) < 0) {
		ck_store_rollback(s);
		ck_manifest_free(&m);
		return NULL;
	}
	json_t *o = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "files",
			      (json_int_t)ts.files, "dirs", (json_int_t)ts.dirs, "symlinks",
			      (json_int_t)ts.links, "other", (json_int_t)ts.other, "bytes",
			      (json_int_t)ts.bytes, "read_files", (json_int_t)ts.read_files,
			      "read_bytes", (json_int_t)ts.read_bytes, "cloned_files",
			      (json_int_t)ts.cloned_files, "stored_bytes", (json_int_t)s->added,
			      "stored_objects", (json_int_t)s->new_objects, "store_bytes",
			      (json_int_t)(s->used + s->added));
	unreadable_list(&m, o);
	ck_manifest_free(&m);
	return o;
}

static json_t *do_diff(struct checkpoints *c, struct ck_store *s, struct error *e)
{
	struct ck_manifest a = {0}, b = {0};
	char name[40];
	snprintf(name, sizeof(name), "m-%s", c->target->id);
	if (ck_load(s->dir_fd, name, &a, e) < 0)
		return NULL;
	int rc;
	struct ck_take_stats ts = {0};
	if (c->to) {
		snprintf(name, sizeof(name), "m-%s", c->to->id);
		rc = ck_load(s->dir_fd, name, &b, e);
	} else {
		rc = ck_take(s, true, c->roots, c->n_roots, &a, &b, &ts, e);
	}
	if (rc < 0) {
		ck_manifest_free(&a);
		return NULL;
	}
	struct diffctx d = {.c = c,
			    .a = &a,
			    .b = &b,
			    .store = c->patch ? s : NULL,
			    .b_is_current = !c->to,
			    .list = json_array()};
	ck_diff(&a, &b, on_change, &d);
	json_t *o = json_pack("{s:s,s:s?,s:o,s:{s:i,s:i,s:i,s:i},s:b}", "from", c->target->id, "to",
			      c->to ? c->to->id : NULL, "changes", d.list, "counts", "added",
			      d.added, "modified", d.modified, "deleted", d.deleted, "attributes",
			      d.attrs, "truncated", d.truncated);
	if (!c->to)
		json_object_set_new(o, "read_files", json_integer((json_int_t)ts.read_files));
	json_object_set(o, "paths", c->target->paths);
	if (c->resolved) /* a task's exit diff that followed its cwd */
		json_object_set(o, "resolved", c->resolved);
	if (d.patch_truncated)
		json_object_set_new(o, "patch_truncated", json_true());
	ck_manifest_free(&a);
	ck_manifest_free(&b);
	return o;
}

static json_t *do_restore(struct checkpoints *c, struct ck_store *s, struct error *e)
{
	struct ck_manifest m = {0};
	char name[40];
	snprintf(name, sizeof(name), "m-%s", c->target->id);
	if (ck_load(s->dir_fd, name, &m, e) < 0)
		return NULL;
	struct notes nt = {.list = json_array(), .counts = json_object()};
	unsigned failures;
	/* For the task, the tree is worked on as the task user: the kernel refuses what it
	 * may not do, each refusal a failure named in the answer. */
	s->as_task = c->actor == CKPT_FOR_TASK;
	if (s->as_task && files_enter(&c->task_id) < 0) {
		note(&nt, "failed", "", "cannot act as the task user");
		failures = 1;
	} else {
		failures = ck_restore(s, &m, c->roots, c->n_roots, note, &nt);
		if (s->as_task)
			files_leave();
	}
	ck_manifest_free(&m);
	return json_pack("{s:s,s:b,s:o,s:o,s:b,s:i}", "id", c->target->id, "complete",
			 failures == 0, "changes", nt.list, "counts", nt.counts, "truncated",
			 nt.truncated, "failures", (int)failures);
}

static json_t *do_delete(struct checkpoints *c, struct ck_store *s, struct error *e)
{
	char name[40];
	snprintf(name, sizeof(name), "m-%s", c->target->id);
	if (unlinkat(s->dir_fd, name, 0) < 0 && errno != ENOENT) {
		error_set(e, errno, NULL, "checkpoints: cannot remove the manifest");
		return NULL;
	}
	struct ck_manifest *keep = calloc(c->n + 1, sizeof(*keep));
	unsigned n = 0;
	for (struct ckpt *k = c->head; k && keep; k = k->next) {
		snprintf(name, sizeof(name), "m-%s", k->id);
		if (ck_load(s->dir_fd, name, &keep[n], e) < 0) {
			for (unsigned i = 0; i < n; i++)
				ck_manifest_free(&keep[i]);
			free(keep);
			return NULL;
		}
		n++;
	}
	uint64_t bytes = 0;
	int rc = keep ? ck_store_gc(s, keep, n, &bytes, e) : error_set(e, ENOMEM, NULL, "gc");
	for (unsigned i = 0; i < n; i++)
		ck_manifest_free(&keep[i]);
	free(keep);
	if (rc < 0)
		return NULL;
	return json_pack("{s:s,s:b,s:I}", "id", c->target->id, "deleted", 1, "store_bytes",
			 (json_int_t)bytes);
}

static _Noreturn void worker_main(struct checkpoints *c)
{
	struct runner *r = c->r;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != r->self_pid)
		_exit(1);
	signals_reset_child();
	int keep[2 * CK_MAX_ROOTS + 2];
	unsigned nk = 0;
	keep[nk++] = c->out_fd;
	keep[nk++] = r->state_dir_fd;
	for (unsigned i = 0; i < c->n_roots; i++) {
		keep[nk++] = c->roots[i].pfd;
		keep[nk++] = c->roots[i].fd;
	}
	int crc = closefds_except(3, keep, (int)nk);
	if (crc < 0) /* the worker goes on: what stays open only lingers */
		log_errno("checkpoint worker: closing fds failed", -crc, NULL);
	umask(0);
	uint64_t t0 = monotonic_ms();
	ck_purge_dead(r->state_dir_fd);
	struct ck_store s = {.used = c->store_bytes,
			     .max = r->cfg.checkpoint_max_bytes,
			     .task = &c->task_id};
	struct error e = {0};
	json_t *o = NULL;
	if (ck_store_open(&s, r->state_dir_fd, &e) == 0) {
		switch (c->op) {
		case OP_CREATE:
			o = do_create(c, &s, &e);
			break;
		case OP_DIFF:
			o = do_diff(c, &s, &e);
			break;
		case OP_RESTORE:
			o = do_restore(c, &s, &e);
			break;
		case OP_DELETE:
			o = do_delete(c, &s, &e);
			break;
		default:
			break;
		}
	}
	ck_store_close(&s);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	json_t *w = json_pack("{s:b,s:s,s:s,s:I,s:I}", "ok", o != NULL, "code", error_code(&e),
			      "error", e.msg, "ms", (json_int_t)(monotonic_ms() - t0),
			      "worker_peak_rss_kib", (json_int_t)ru.ru_maxrss);
	if (o)
		json_object_set_new(w, "result", o);
	char *str = w ? json_dumps(w, JSON_COMPACT) : NULL;
	/* A failed write shows as an unreadable answer to the parent. */
	if (str)
		(void)write_all(c->out_fd, str, strlen(str));
	_exit(o ? 0 : 1);
}

static json_t *read_out(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size > (64 << 20))
		return NULL;
	char *buf = malloc((size_t)st.st_size + 1);
	size_t n = 0;
	while (buf && n < (size_t)st.st_size) {
		ssize_t k = pread(fd, buf + n, (size_t)st.st_size - n, (off_t)n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	json_t *j = buf ? json_loadb(buf, n, 0, NULL) : NULL;
	free(buf);
	return j;
}

static void run_queue(struct checkpoints *c);

static void on_worker_exit(void *arg, pid_t pid, int status)
{
	(void)pid;
	struct checkpoints *c = arg;
	c->worker_running = false;
	json_t *w = read_out(c->out_fd);
	json_t *res = json_object_get(w, "result");
	uint64_t ms = monotonic_ms() - c->t0;
	if (!res) {
		const char *msg = json_string_value(json_object_get(w, "error"));
		const char *code = json_string_value(json_object_get(w, "code"));
		char why[160];
		if (WIFSIGNALED(status))
			snprintf(why, sizeof(why), "the checkpoint worker was killed by signal %d",
				 WTERMSIG(status));
		else
			snprintf(why, sizeof(why), "the checkpoint worker failed (exit %d)",
				 WEXITSTATUS(status));
		log_warn("checkpoint operation failed", "{s:s,s:s}", "error",
			 msg && *msg ? msg : why, "code", code ? code : "RUNTIME_ERROR");
		respond_error(c, 500, code ? code : "RUNTIME_ERROR", msg && *msg ? msg : why);
		json_decref(w);
		end_op(c);
		run_queue(c);
		return;
	}
	json_incref(res);
	json_object_set_new(res, "duration_ms", json_integer((json_int_t)ms));
	unsigned st = 200;
	switch (c->op) {
	case OP_CREATE: {
		struct ckpt *k = c->pending;
		c->pending = NULL;
		c->store_bytes = (uint64_t)json_integer_value(json_object_get(res, "store_bytes"));
		k->info = json_deep_copy(res);
		json_object_del(k->info, "store_bytes");
		struct ckpt **tail = &c->head;
		while (*tail)
			tail = &(*tail)->next;
		*tail = k;
		c->n++;
		json_t *o = ckpt_json(c, k);
		json_object_set_new(o, "store_bytes", json_integer((json_int_t)c->store_bytes));
		json_decref(res);
		res = o;
		st = 201;
		log_info("checkpoint taken", "{s:s,s:O,s:I}", "id", k->id, "files",
			 json_object_get(k->info, "files"), "ms", (json_int_t)ms);
		break;
	}
	case OP_DELETE:
		c->store_bytes = (uint64_t)json_integer_value(json_object_get(res, "store_bytes"));
		break;
	case OP_RESTORE:
		if (!json_is_true(json_object_get(res, "complete"))) {
			/* What it did and what it left: the client decides. */
			json_object_set_new(res, "code", json_string("RESTORE_INCOMPLETE"));
			json_object_set_new(res, "message",
					    json_string(
						    "the restore could not put everything back: "
						    "see changes (action \"failed\")"));
			st = 500;
		}
		log_info("checkpoint restored", "{s:s,s:O,s:I}", "id", c->target->id, "counts",
			 json_object_get(res, "counts"), "ms", (json_int_t)ms);
		break;
	default:
		break;
	}
	json_decref(w);
	respond(c, st, res);
	end_op(c);
	run_queue(c);
}

static int spawn(struct checkpoints *c, struct error *e)
{
	c->out_fd = memfd_create("forceai-ckpt-answer", MFD_CLOEXEC);
	if (c->out_fd < 0)
		return error_set(e, errno, NULL, "checkpoints: memfd_create");
	c->t0 = monotonic_ms();
	pid_t pid = fork();
	if (pid < 0)
		return error_set(e, errno, NULL, "checkpoints: fork");
	if (pid == 0)
		worker_main(c);
	c->worker = pid;
	c->worker_running = true;
	if (reaper_watch(&c->r->reaper, pid, on_worker_exit, c) < 0) {
		end_op(c);
		return error_set(e, ENOMEM, NULL, "checkpoints: watching the worker");
	}
	return 0;
}

/* ---- requests ---- */

static void wait_on(struct checkpoints *c, ckpt_done_fn done, void *arg)
{
	c->done = done;
	c->done_arg = arg;
}

void ckpt_forget_waiter(struct runner *r, void *arg)
{
	struct checkpoints *c = cs_of(r);
	if (c && c->done && c->done_arg == arg)
		c->done = NULL; /* it went away: the operation still ends */
	for (struct queued **pp = c ? &c->queue : NULL; pp && *pp;) {
		struct queued *q = *pp;
		if (q->arg == arg) {
			*pp = q->next;
			json_decref(q->args);
			free(q);
		} else {
			pp = &q->next;
		}
	}
}

static int ready(struct checkpoints *c, struct error *e)
{
	if (!c)
		return error_set(e, 0, "CAPABILITY_UNAVAILABLE", "checkpoints are not available");
	if (c->unavailable)
		return error_set(e, 0, "CAPABILITY_UNAVAILABLE",
				 "checkpoints are not available: %s", c->unavailable);
	if (c->op != OP_NONE)
		return error_set(e, 0, "CHECKPOINT_BUSY",
				 "another checkpoint operation is running: retry when it is done");
	return 0;
}

static json_t *running_tasks(struct runner *r)
{
	json_t *a = json_array();
	/* Tasks with a process: an agent's own (driven) task writes nothing
	 * itself, its commands are tasks of their own. */
	for (struct task *t = r->tasks->head; t; t = t->next)
		if (!t->finished && t->proc_running)
			json_array_append_new(a, json_string(t->id));
	return a;
}

/* 0 when every key of body is one of fields (NULL-terminated); else -1
 * with UNKNOWN_FIELD naming the first other one. */
static int only_fields(json_t *body, const char *const *fields, struct error *e)
{
	const char *key;
	json_t *v;
	json_object_foreach(body, key, v) {
		const char *const *f = fields;
		while (*f && strcmp(key, *f))
			f++;
		if (!*f)
			return error_set(e, 0, "UNKNOWN_FIELD", "unknown field '%.100s'", key);
	}
	return 0;
}

static int ckpt_create(struct runner *r, json_t *body, ckpt_done_fn done, void *arg,
		       struct error *e)
{
	struct checkpoints *c = cs_of(r);
	if (ready(c, e) < 0)
		return -1;
	static const char *const fields[] = {"paths", "label", NULL};
	if (only_fields(body, fields, e) < 0)
		return -1;
	json_incref(body);
	json_t *paths = json_object_get(body, "paths");
	json_t *label = json_object_get(body, "label");
	if ((paths && !json_is_array(paths)) || (label && !json_is_string(label)) ||
	    (label && json_string_length(label) > 256)) {
		json_decref(body);
		return error_set(e, 0, "INVALID_REQUEST_BODY",
				 "paths must be an array of absolute paths, label a string of at "
				 "most 256 bytes");
	}
	if (c->n >= MAX_CHECKPOINTS) {
		json_decref(body);
		return error_set(e, 0, "INSUFFICIENT_STORAGE",
				 "%d checkpoints are kept already: delete some", MAX_CHECKPOINTS);
	}
	json_t *list = paths && json_array_size(paths) ? json_incref(paths) : default_paths(r);
	int rc = open_roots(c, list, false, e);
	struct ckpt *k = rc == 0 ? calloc(1, sizeof(*k)) : NULL;
	char rid[33];
	if (rc == 0 && (!k || random_id(rid) < 0))
		rc = error_set(e, ENOMEM, NULL, "checkpoints");
	if (rc < 0) {
		free(k);
		json_decref(list);
		json_decref(body);
		close_roots(c);
		return -1;
	}
	snprintf(k->id, sizeof(k->id), "ck_%.16s", rid);
	k->label = label ? strdup(json_string_value(label)) : NULL;
	k->created_ms = now_ms();
	k->paths = json_array();
	for (unsigned i = 0; i < c->n_roots; i++)
		json_array_append_new(k->paths, json_string(c->roots[i].path));
	json_decref(list);
	json_decref(body);
	c->pending = k;
	c->op = OP_CREATE;
	if (spawn(c, e) < 0) {
		end_op(c);
		return -1;
	}
	wait_on(c, done, arg);
	return 0;
}

json_t *ckpt_list(struct runner *r, struct error *e)
{
	struct checkpoints *c = cs_of(r);
	if (!c || c->unavailable) {
		ready(c, e);
		return NULL;
	}
	json_t *a = json_array();
	for (struct ckpt *k = c->head; k; k = k->next)
		json_array_append_new(a, ckpt_json(c, k));
	return json_pack("{s:o,s:I,s:I}", "checkpoints", a, "store_bytes",
			 (json_int_t)c->store_bytes, "max_bytes",
			 (json_int_t)r->cfg.checkpoint_max_bytes);
}

json_t *ckpt_get(struct runner *r, const char *id, struct error *e)
{
	struct checkpoints *c = cs_of(r);
	if (!c || c->unavailable) {
		ready(c, e);
		return NULL;
	}
	struct ckpt *k = find(c, id);
	if (!k) {
		error_set(e, 0, "CHECKPOINT_NOT_FOUND", "no checkpoint '%.64s'", id ? id : "");
		return NULL;
	}
	return ckpt_json(c, k);
}

static int start_on(struct runner *r, const char *id, enum op op, ckpt_done_fn done, void *arg,
		    struct error *e)
{
	struct checkpoints *c = cs_of(r);
	if (ready(c, e) < 0)
		return -1;
	struct ckpt *k = find(c, id);
	if (!k) {
		c->to = NULL;
		return error_set(e, 0, "CHECKPOINT_NOT_FOUND", "no checkpoint '%.64s'",
				 id ? id : "");
	}
	c->target = k;
	c->op = op;
	if (op == OP_DELETE) {
		/* Off the list at once (its id answers 404 from now); its objects
		 * are collected by the worker. */
		struct ckpt **pp = &c->head;
		while (*pp != k)
			pp = &(*pp)->next;
		*pp = k->next;
		c->n--;
	} else if (open_roots(c, k->paths, op == OP_RESTORE, e) < 0) {
		end_op(c);
		return -1;
	}
	if (spawn(c, e) < 0) {
		end_op(c);
		return -1;
	}
	wait_on(c, done, arg);
	return 0;
}

static int ckpt_diff(struct runner *r, const char *id, json_t *args, ckpt_done_fn done, void *arg,
		     struct error *e)
{
	struct checkpoints *c = cs_of(r);
	if (ready(c, e) < 0)
		return -1;
	/* follow: a task's exit diff (ckpt_task_watch; no door passes it on from a client). */
	static const char *const fields[] = {"to", "patch", "follow", NULL};
	if (only_fields(args, fields, e) < 0)
		return -1;
	json_t *tj = json_object_get(args, "to"), *pj = json_object_get(args, "patch");
	json_t *fj = json_object_get(args, "follow");
	if ((tj && !json_is_string(tj) && !json_is_null(tj)) || (pj && !json_is_boolean(pj)) ||
	    (fj && !json_is_boolean(fj)))
		return error_set(e, 0, "INVALID_REQUEST_BODY",
				 "to must be a checkpoint id, patch a boolean");
	const char *to = json_string_value(tj);
	c->patch = json_is_true(pj);
	c->follow = json_is_true(fj) && c->actor == CKPT_FOR_TASK;
	struct ckpt *keep_to = NULL;
	if (to && *to && !(keep_to = find(c, to)))
		return error_set(e, 0, "CHECKPOINT_NOT_FOUND", "no checkpoint '%.64s' (to)", to);
	c->to = keep_to; /* before the worker is forked */
	return start_on(r, id, OP_DIFF, done, arg, e);
}

static void stop_wait(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct checkpoints *c = t->arg;
	if (c->op != OP_RESTORE || c->worker_running)
		return;
	bool all = true;
	for (struct task *k = c->r->tasks->head; k; k = k->next)
		if (!k->finished && k->proc_running)
			all = false;
	if (!all && monotonic_ms() - c->stop_t0 < STOP_WAIT_MS)
		return;
	loop_timer_stop(&c->r->loop, &c->stop_timer);
	struct error e = {0};
	if (!all) {
		respond_error(c, 409, "TASKS_RUNNING",
			      "tasks did not end within 10 s of being stopped: nothing restored");
		end_op(c);
		return;
	}
	if (spawn(c, &e) < 0) {
		respond_error(c, 500, "RUNTIME_ERROR", e.msg);
		end_op(c);
	}
}

static int ckpt_restore(struct runner *r, const char *id, json_t *body, ckpt_done_fn done,
			void *arg, struct error *e)
{
	struct checkpoints *c = cs_of(r);
	if (ready(c, e) < 0)
		return -1;
	static const char *const fields[] = {"stop_tasks", NULL};
	if (only_fields(body, fields, e) < 0)
		return -1;
	json_incref(body);
	json_t *st = json_object_get(body, "stop_tasks");
	if (st && !json_is_boolean(st)) {
		json_decref(body);
		return error_set(e, 0, "INVALID_REQUEST_BODY", "stop_tasks must be a boolean");
	}
	bool stop = json_is_true(st);
	json_decref(body);
	struct ckpt *k = find(c, id);
	if (!k)
		return error_set(e, 0, "CHECKPOINT_NOT_FOUND", "no checkpoint '%.64s'",
				 id ? id : "");
	json_t *running = running_tasks(r);
	size_t n = json_array_size(running);
	if (n && !stop) {
		char *ids = json_dumps(running, JSON_COMPACT);
		json_decref(running);
		error_set(
			e, 0, "TASKS_RUNNING",
			"%zu task(s) are running and could be writing there: %.600s; end them, or "
			"pass {\"stop_tasks\": true}",
			n, ids ? ids : "");
		free(ids);
		return -1;
	}
	json_decref(running);
	if (!n)
		return start_on(r, id, OP_RESTORE, done, arg, e);
	/* Stopped first; the worker starts once every one has ended. */
	c->target = k;
	c->op = OP_RESTORE;
	if (open_roots(c, k->paths, true, e) < 0) {
		end_op(c);
		return -1;
	}
	for (struct task *t = r->tasks->head; t; t = t->next)
		if (!t->finished && t->proc_running)
			task_kill(t, TS_CANCELLED);
	c->stop_t0 = monotonic_ms();
	if (loop_timer_start(&r->loop, &c->stop_timer, 20, 20) < 0) {
		end_op(c);
		return error_set(e, errno, NULL, "checkpoints: timer");
	}
	wait_on(c, done, arg);
	return 0;
}

int ckpt_start(struct runner *r, enum ckpt_op op, enum ckpt_actor actor, const char *id,
	       json_t *args, ckpt_done_fn done, void *arg, struct error *e)
{
	struct checkpoints *c = cs_of(r);
	if (ready(c, e) < 0)
		return -1;
	c->actor = actor; /* reset by end_op */
	c->follow = false;
	files_task_ident(r, &c->task_id);
	json_t *empty = args ? NULL : json_object();
	if (!args)
		args = empty;
	int rc;
	switch (op) {
	case CKPT_CREATE:
		rc = ckpt_create(r, args, done, arg, e);
		break;
	case CKPT_DIFF:
		rc = ckpt_diff(r, id, args, done, arg, e);
		break;
	case CKPT_RESTORE:
		rc = ckpt_restore(r, id, args, done, arg, e);
		break;
	default:
		rc = start_on(r, id, OP_DELETE, done, arg, e);
		break;
	}
	json_decref(empty);
	return rc;
}

bool ckpt_restoring(struct runner *r)
{
	struct checkpoints *c = cs_of(r);
	return c && c->op == OP_RESTORE;
}

void ckpt_drop_all(struct runner *r)
{
	struct checkpoints *c = cs_of(r);
	if (!c)
		return;
	if (c->op != OP_NONE) {
		respond_error(c, 503, "RESETTING",
			      "a reset (POST /v1/reset) dropped every checkpoint");
		end_op(c);
	}
	unsigned n = c->n;
	while (c->head) {
		struct ckpt *k = c->head;
		c->head = k->next;
		ckpt_free(k);
	}
	c->n = 0;
	c->store_bytes = 0;
	/* Out of the way at once (renamed); removed by the reset's worker or
	 * the next checkpoint's. */
	if (!c->unavailable && ck_store_retire(r->state_dir_fd) < 0)
		log_errno("checkpoints: cannot retire the store", errno, NULL);
	if (n)
		log_info("checkpoints dropped", "{s:i}", "checkpoints", (int)n);
	run_queue(c); /* they answer CHECKPOINT_NOT_FOUND or take a fresh store */
}

int ckpt_init(struct runner *r, struct error *e)
{
	struct checkpoints *c = calloc(1, sizeof(*c));
	if (!c)
		return error_set(e, ENOMEM, NULL, "checkpoints");
	c->r = r;
	c->out_fd = -1;
	r->profile->ckpt = c;
	if (r->state_dir_fd < 0)
		c->unavailable =
			"the state dir is not usable (non-root mode with the default state "
			"dir inside a writable root): give the runner --state-dir outside "
			"the writable roots";
	else if (ck_store_retire(r->state_dir_fd) < 0) /* a previous run's */
		return error_set(e, errno, NULL, "checkpoints: cannot retire an old store");
	if (loop_timer_init(&r->loop, &c->stop_timer, stop_wait, c) < 0)
		return error_set(e, errno, NULL, "checkpoints: timerfd");
	c->timer_open = true;
	return 0;
}

void ckpt_abort(struct runner *r)
{
	struct checkpoints *c = cs_of(r);
	if (c && c->op != OP_NONE) {
		respond_error(c, 503, "UNAVAILABLE", "the runner is shutting down");
		end_op(c);
	}
	while (c && c->queue) {
		struct queued *q = c->queue;
		c->queue = q->next;
		q->done(q->arg, 503,
			json_pack("{s:s,s:s}", "code", "UNAVAILABLE", "message",
				  "the runner is shutting down"));
		json_decref(q->args);
		free(q);
	}
}

void ckpt_free_all(struct runner *r)
{
	struct checkpoints *c = cs_of(r);
	if (!c)
		return;
	end_op(c);
	while (c->head) {
		struct ckpt *k = c->head;
		c->head = k->next;
		ckpt_free(k);
	}
	if (c->timer_open)
		loop_timer_close(&r->loop, &c->stop_timer);
	while (c->queue) {
		struct queued *q = c->queue;
		c->queue = q->next;
		json_decref(q->args);
		free(q);
	}
	free(c);
	r->profile->ckpt = NULL;
}

/* ---- a task's changes (POST /v1/tasks "changes"; docs/design.md §10.2) ---- */

/* Start op, or queue it behind the one running; done as for ckpt_start. */
static int start_queued(struct runner *r, enum ckpt_op op, const char *id, json_t *args,
			ckpt_done_fn done, void *arg, struct error *e)
{
	struct checkpoints *c = cs_of(r);
	if (ckpt_start(r, op, CKPT_FOR_TASK, id, args, done, arg, e) == 0)
		return 0;
	if (!c || strcmp(error_code(e), "CHECKPOINT_BUSY"))
		return -1;
	struct queued *q = calloc(1, sizeof(*q));
	if (!q)
		return error_set(e, ENOMEM, NULL, "checkpoints");
	q->op = op;
	q->args = json_incref(args);
	snprintf(q->id, sizeof(q->id), "%s", id ? id : "");
	q->done = done;
	q->arg = arg;
	struct queued **tail = &c->queue;
	while (*tail)
		tail = &(*tail)->next;
	*tail = q;
	return 0;
}

static void run_queue(struct checkpoints *c)
{
	while (c->queue && c->op == OP_NONE) {
		struct queued *q = c->queue;
		c->queue = q->next;
		struct error e = {0};
		int rc = ckpt_start(c->r, q->op, CKPT_FOR_TASK, q->id[0] ? q->id : NULL, q->args,
				    q->done, q->arg, &e);
		json_decref(q->args);
		if (rc < 0)
			q->done(q->arg, error_http_status(&e),
				json_pack("{s:s,s:s}", "code", error_code(&e), "message", e.msg));
		free(q);
	}
}

/* Is path (absolute, clean as the API took it) one of the writable roots or beneath one? */
static bool in_a_root(struct runner *r, const char *path)
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

int ckpt_task_before(struct runner *r, const char *cwd, ckpt_done_fn done, void *arg,
		     struct error *e)
{
	/* The task's working directory when it lies in a writable root (an agent works in its
	 * workspace): cheaper than every root, and what a client shows and rolls back; else
	 * every root (docs/design.md §10.2). */
	struct stat st;
	if (!cwd && stat("/workspace", &st) == 0 && S_ISDIR(st.st_mode))
		cwd = "/workspace"; /* the task's own default (task/task.c) */
	/* Resolved once, as the task will (its chdir follows links, with its rights): a cwd the
	 * task made a link to another directory is checkpointed where it leads, and that path
	 * is what the checkpoint records (its paths), not the link. */
	char real[4096];
	struct files_ident id;
	files_task_ident(r, &id);
	const char *at = cwd && cwd[0] == '/' &&
					 files_user_realpath(&id, cwd, real, sizeof(real)) == 0
				 ? real
				 : NULL;
	json_t *a = at && in_a_root(r, at) ? json_pack("{s:s,s:[s]}", "label", "task", "paths", at)
					   : json_pack("{s:s}", "label", "task");
	int rc = start_queued(r, CKPT_CREATE, NULL, a, done, arg, e);
	json_decref(a);
	return rc;
}

struct ckpt_watch {
	struct runner *r;
	struct task *t;               /* once its exit event is held */
	char ck[20];                  /* the checkpoint before it ("": none) */
	char why[ERROR_MSG_MAX + 64]; /* none: why */
	uint64_t from_ms;             /* the window: the checkpoint asked for ... */
	struct loop_timer timer;
	bool timer_open, waiting;
};

static void watch_free(struct ckpt_watch *w)
{
	if (w->waiting)
		ckpt_forget_waiter(w->r, w);
	if (w->timer_open)
		loop_timer_close(&w->r->loop, &w->timer);
	free(w);
}

/* The exit event goes out with changes (or why not) and the watch ends. */
static void watch_end(struct ckpt_watch *w, json_t *changes)
{
	struct task *t = w->t;
	if (t->held_ev) {
		if (w->ck[0])
			json_object_set_new(t->held_ev, "checkpoint", json_string(w->ck));
		json_object_set_new(t->held_ev, "changes", changes);
	} else {
		json_decref(changes);
	}
	t->exit_hold = NULL;
	watch_free(w);
	task_exit_release(t);
}

/* Other tasks that ran in [from, to] (the diff says the tree changed, not who changed it). An
 * agent's commands are tasks of their own (TASK_API_TOOL): counted for an exec task, not for an
 * agent, whose own they are likeliest to be. */
static json_t *others_in(struct runner *r, const struct task *t, uint64_t from, uint64_t to)
{
	bool agent = t->cap && t->cap->goal;
	json_t *a = json_array();
	for (struct task *u = r->tasks->head; u; u = u->next) {
		if (u == t || (agent && u->api == TASK_API_TOOL) || u->started_ms > to ||
		    (u->finished && u->finished_ms < from))
			continue;
		json_array_append_new(a, json_string(u->id));
	}
	return a;
}

void ckpt_change_lists(json_t *diff, json_t *lists[3])
{
	static const char *const kinds[3] = {"added", "modified", "deleted"};
	for (int j = 0; j < 3; j++)
		lists[j] = json_array();
	size_t i;
	json_t *ch;
	json_array_foreach(json_object_get(diff, "changes"), i, ch) {
		const char *k = json_string_value(json_object_get(ch, "change"));
		for (int j = 0; j < 3; j++)
			if (k && !strcmp(k, kinds[j]) &&
			    json_array_size(lists[j]) < CKPT_CHANGES_LISTED)
				json_array_append(lists[j], json_object_get(ch, "path"));
	}
}

static void on_task_diff(void *arg, unsigned status, json_t *body)
{
	struct ckpt_watch *w = arg;
	w->waiting = false;
	if (status != 200) {
		json_t *ch = json_pack("{s:s,s:s?}", "error", "the diff failed", "message",
				       json_string_value(json_object_get(body, "message")));
		json_decref(body);
		watch_end(w, ch);
		return;
	}
	static const char *const kinds[3] = {"added", "modified", "deleted"};
	json_t *lists[3];
	ckpt_change_lists(body, lists);
	json_t *counts = json_object_get(body, "counts");
	bool truncated = json_is_true(json_object_get(body, "truncated"));
	for (int j = 0; j < 3; j++)
		if (json_integer_value(json_object_get(counts, kinds[j])) >
		    (json_int_t)json_array_size(lists[j]))
			truncated = true;
	json_t *others = others_in(w->r, w->t, w->from_ms, now_ms());
	json_t *o = json_pack("{s:o,s:o,s:o,s:O,s:b,s:b,s:O}", "added", lists[0], "modified",
			      lists[1], "deleted", lists[2], "counts", counts, "truncated",
			      truncated, "exclusive", json_array_size(others) == 0, "duration_ms",
			      json_object_get(body, "duration_ms"));
	if (json_array_size(others))
		json_object_set_new(o, "others_running", others);
	else
		json_decref(others);
	/* What was checkpointed (the cwd resolved), and where it leads now if the task moved
	 * it: the lists are of what it holds there. */
	json_object_set(o, "paths", json_object_get(body, "paths"));
	if (json_object_get(body, "resolved"))
		json_object_set(o, "resolved", json_object_get(body, "resolved"));
	json_decref(body);
	watch_end(w, o);
}

static void on_watch_timer(struct loop *loop, struct loop_timer *timer)
{
	(void)loop;
	struct ckpt_watch *w = timer->arg;
	watch_end(w, json_pack("{s:s,s:s}", "error", "the diff took too long", "message",
			       "the exit event waited 60 s for the diff: ask "
			       "POST /v1/checkpoints/{checkpoint}/diff"));
}

/* The task's terminal event is due (gone: the record goes away first). */
static void on_task_exit_hold(struct task *t, void *arg, bool gone)
{
	struct ckpt_watch *w = arg;
	if (gone) {
		watch_free(w);
		return;
	}
	w->t = t;
	if (!w->ck[0]) {
		watch_end(w, json_pack("{s:s}", "error", w->why));
		return;
	}
	struct error e = {0};
	int rc = loop_timer_init(&w->r->loop, &w->timer, on_watch_timer, w);
	if (rc < 0) {
		watch_end(w, json_pack("{s:s,s:s}", "error", "the diff could not start", "message",
				       strerror(-rc)));
		return;
	}
	w->timer_open = true;
	/* Its paths as the task resolves them now: it may have replaced its cwd by a link. */
	json_t *follow = json_pack("{s:b}", "follow", 1);
	if (loop_timer_start(&w->r->loop, &w->timer, TASK_CHANGES_WAIT_MS, 0) < 0 ||
	    start_queued(w->r, CKPT_DIFF, w->ck, follow, on_task_diff, w, &e) < 0) {
		json_decref(follow);
		watch_end(w, json_pack("{s:s,s:s}", "error", "the diff could not start", "message",
				       e.msg[0] ? e.msg : "timerfd"));
		return;
	}
	json_decref(follow);
	w->waiting = true;
}

int ckpt_task_watch(struct runner *r, struct task_spec *spec, const char *ck_id, const char *why,
		    uint64_t from_ms)
{
	struct ckpt_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->r = r;
	w->timer.w.fd = -1;
	w->from_ms = from_ms;
	snprintf(w->ck, sizeof(w->ck), "%s", ck_id ? ck_id : "");
	snprintf(w->why, sizeof(w->why), "no checkpoint before the task: %s",
		 why ? why : "unknown");
	spec->exit_hold = on_task_exit_hold;
	spec->exit_hold_arg = w;
	return 0;
}

void ckpt_task_unwatch(struct task_spec *spec)
{
	if (spec->exit_hold == on_task_exit_hold)
		watch_free(spec->exit_hold_arg);
	spec->exit_hold = NULL;
	spec->exit_hold_arg = NULL;
}
