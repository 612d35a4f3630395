/* The checkpoint worker: a process that does an operation's filesystem work (tree/tree.h)
 * and writes its answer, a JSON object, to a memfd the loop reads when it exits. */
#include "checkpoint/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/closefds.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/fileio.h"
#include "text/udiff.h"
#include "files/userjob.h"
#include "tree/changes.h"

#define LIST_MAX 10000          /* changes named in one answer */
#define PATCH_FILE_MAX 262144   /* a file's bytes diffed for ?patch=1 */
#define PATCH_TOTAL_MAX 1048576 /* patch text in one answer */
#define UNREADABLE_MAX 100

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
	const struct tree_manifest *a, *b;
	struct tree_store *store;
	bool b_is_current;
	json_t *list;
	unsigned n, added, modified, deleted, attrs;
	bool truncated;
	size_t patch_bytes;
	bool patch_truncated;
};

/* One side's content for a patch: NULL (with *why) when not shown. */
static char *side(struct diffctx *d, const struct tree_manifest *m, const struct tree_ent *e,
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
	if (!(e->flags & TREE_TASK_OK))
		return *why = "not readable by the task user", NULL;
	char *buf = NULL;
	int rc = -ENOENT;
	if (current) {
		rc = files_enter(&d->c->task_id);
		if (rc == 0) {
			rc = tree_read_current(d->c->roots, d->c->n_roots, tree_path(m, e),
					       PATCH_FILE_MAX, &buf, len);
			files_leave();
		}
	} else if (e->flags & TREE_STORED)
		rc = tree_object_read(d->store, e->sha, PATCH_FILE_MAX, &buf, len);
	if (rc < 0)
		return *why = "could not be read", NULL;
	if (!udiff_is_text(buf, *len)) {
		free(buf);
		return *why = "binary", NULL;
	}
	return buf;
}

static void add_patch(struct diffctx *d, json_t *o, const struct tree_ent *a,
		      const struct tree_ent *b)
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
	const char *pa = a ? tree_path(d->a, a) : NULL, *pb = b ? tree_path(d->b, b) : NULL;
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

static void on_change(void *arg, const struct tree_ent *a, const struct tree_ent *b, unsigned what)
{
	struct diffctx *d = arg;
	const char *change;
	if (d->c->actor == CHECKPOINT_FOR_TASK) {
		/* For the task, each side as it could see it: what lay beyond a directory it
		 * could not list and enter is not there for it. */
		if (a && !(a->flags & TREE_TASK_SEEN))
			a = NULL;
		if (b && !(b->flags & TREE_TASK_SEEN))
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
	} else if (what & (TREE_D_CONTENT | TREE_D_TYPE | TREE_D_TARGET)) {
		change = "modified";
		d->modified++;
	} else {
		/* A directory's mtime moves with every entry added or removed in
		 * it: those are listed themselves. */
		if (a->type == TREE_DIR && !(what & ~TREE_D_MTIME))
			return;
		change = "attributes";
		d->attrs++;
	}
	if (d->n >= LIST_MAX) {
		d->truncated = true;
		return;
	}
	d->n++;
	const struct tree_ent *e = b ? b : a;
	const struct tree_manifest *m = b ? d->b : d->a;
	json_t *o = json_pack("{s:s,s:s,s:s,s:I}", "path", tree_path(m, e), "change", change,
			      "type", type_name(e->type), "size", (json_int_t)e->size);
	if (a && b) {
		json_t *w = json_array();
		static const struct {
			unsigned bit;
			const char *name;
		} bits[] = {{TREE_D_CONTENT, "content"}, {TREE_D_TYPE, "type"},
			    {TREE_D_TARGET, "target"},   {TREE_D_MODE, "mode"},
			    {TREE_D_OWNER, "owner"},     {TREE_D_XATTRS, "xattrs"},
			    {TREE_D_MTIME, "mtime"}};
		for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
			if (what & bits[i].bit)
				json_array_append_new(w, json_string(bits[i].name));
		json_object_set_new(o, "what", w);
		json_object_set_new(o, "old_size", json_integer((json_int_t)a->size));
		if (a->type != b->type)
			json_object_set_new(o, "old_type", json_string(type_name(a->type)));
		if (what & TREE_D_MODE)
			json_object_set_new(o, "mode",
					    json_pack("{s:i,s:i}", "old", a->mode & 07777, "new",
						      b->mode & 07777));
		if (what & TREE_D_OWNER)
			json_object_set_new(o, "owner",
					    json_pack("{s:[i,i],s:[i,i]}", "old", (int)a->uid,
						      (int)a->gid, "new", (int)b->uid,
						      (int)b->gid));
	}
	if (d->store && (e->type == TREE_REG) && (!a || !b || (what & TREE_D_CONTENT)) &&
	    (!a || a->type == TREE_REG) && (!b || b->type == TREE_REG))
		add_patch(d, o, a, b);
	json_array_append_new(d->list, o);
}

static void unreadable_list(const struct tree_manifest *m, json_t *o)
{
	json_t *a = json_array();
	for (size_t i = 0; i < m->n && json_array_size(a) < UNREADABLE_MAX; i++)
		if (m->ent[i].flags & TREE_UNREADABLE)
			json_array_append_new(a, json_string(tree_path(m, &m->ent[i])));
	json_object_set_new(o, "unreadable", a);
}

/* The full manifest file base ("m-<id>": a checkpoint's, which a delete removes) under a name
 * of its own ("b-<id>": removed when no manifest is a delta against it, do_delete): the name a
 * delta names. NULL: none (a full file is written). */
static const char *base_link(int dir_fd, const char *base, char link[48])
{
	if (!strncmp(base, "b-", 2))
		return base;
	if (strncmp(base, "m-", 2))
		return NULL;
	snprintf(link, 48, "b-%s", base + 2);
	struct stat a, b;
	if (linkat(dir_fd, base, dir_fd, link, 0) == 0)
		return link;
	return errno == EEXIST && fstatat(dir_fd, base, &a, AT_SYMLINK_NOFOLLOW) == 0 &&
			       fstatat(dir_fd, link, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
			       a.st_ino == b.st_ino && a.st_dev == b.st_dev
		       ? link
		       : NULL;
}

/* m as the manifest file name: a link to pname (unchanged), a delta against base, or full. */
static int save_manifest(int dir_fd, const char *name, const char *pname, const char *base,
			 const struct tree_manifest *m, const char **how, uint64_t *bytes,
			 struct error *e)
{
	*how = "linked";
	if (pname && linkat(dir_fd, pname, dir_fd, name, 0) == 0)
		return 0;
	char link[48];
	bool delta;
	if (tree_manifest_save(dir_fd, name, m, base_link(dir_fd, base, link), bytes, &delta, e) <
	    0)
		return -1;
	*how = delta ? "delta" : "full";
	return 0;
}

static json_t *do_create(struct checkpoints *c, struct tree_store *s, struct error *e)
{
	struct tree_manifest prev = {0}, m = {0};
	bool have_prev = false;
	struct checkpoint *last = NULL;
	for (struct checkpoint *k = c->head; k; k = k->next)
		last = k;
	if (last) {
		char name[40];
		snprintf(name, sizeof(name), "m-%s", last->id);
		struct error le = {0};
		have_prev = tree_manifest_load(s->dir_fd, name, &prev, &le) == 0;
	}
	char base[sizeof(prev.base)] = "";
	if (have_prev)
		memcpy(base, prev.base, sizeof(base));
	struct tree_capture_stats ts;
	checkpoint_dirty_worker(c, s, have_prev ? last->id : NULL);
	/* Nothing changed: the previous manifest file is this one's too (writing a large manifest
	 * is most of an unchanged checkpoint's cost). */
	bool same = have_prev && s->reuse &&
		    tree_unchanged(s->changes, c->roots, c->n_roots, &prev, &ts);
	int rc = 0;
	if (same) {
		m = prev;
		prev = (struct tree_manifest){0};
	} else {
		rc = tree_capture(s, false, c->roots, c->n_roots, have_prev ? &prev : NULL, &m, &ts,
				  e);
		same = rc == 0 && have_prev && ts.reused && tree_manifest_same(&prev, &m);
	}
	tree_manifest_free(&prev);
	if (rc < 0) {
		bool full = e->errnum == TREE_EFULL;
		tree_store_rollback(s);
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
		} else {
			error_wrap(e, "checkpoint");
		}
		return NULL;
	}
	char name[40], pname[40];
	snprintf(name, sizeof(name), "m-%s", c->pending->id);
	snprintf(pname, sizeof(pname), "m-%s", last ? last->id : "");
	const char *how;
	uint64_t bytes = 0;
	if (save_manifest(s->dir_fd, name, same ? pname : NULL, base, &m, &how, &bytes, e) < 0) {
		tree_store_rollback(s);
		tree_manifest_free(&m);
		return NULL;
	}
	json_t *o = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "files",
			      (json_int_t)ts.files, "dirs", (json_int_t)ts.dirs, "symlinks",
			      (json_int_t)ts.links, "other", (json_int_t)ts.other, "bytes",
			      (json_int_t)ts.bytes, "read_files", (json_int_t)ts.read_files,
			      "read_bytes", (json_int_t)ts.read_bytes, "cloned_files",
			      (json_int_t)ts.cloned_files, "stored_bytes", (json_int_t)s->added,
			      "stored_objects", (json_int_t)s->new_objects, "store_bytes",
			      (json_int_t)(s->used + s->added), "reused", (json_int_t)ts.reused,
			      "listed_dirs", (json_int_t)ts.listed_dirs);
	json_object_set_new(o, "manifest",
			    json_pack("{s:s,s:I}", "written", how, "bytes", (json_int_t)bytes));
	unreadable_list(&m, o);
	tree_manifest_free(&m);
	return o;
}

static json_t *do_diff(struct checkpoints *c, struct tree_store *s, struct error *e)
{
	struct tree_manifest a = {0}, b = {0};
	char name[40];
	snprintf(name, sizeof(name), "m-%s", c->target->id);
	if (tree_manifest_load(s->dir_fd, name, &a, e) < 0)
		return NULL;
	int rc;
	struct tree_capture_stats ts = {0};
	if (c->to) {
		snprintf(name, sizeof(name), "m-%s", c->to->id);
		rc = tree_manifest_load(s->dir_fd, name, &b, e);
	} else {
		checkpoint_dirty_worker(c, s, c->target->id);
		rc = tree_capture(s, true, c->roots, c->n_roots, &a, &b, &ts, e);
	}
	if (rc < 0) {
		tree_manifest_free(&a);
		return NULL;
	}
	struct diffctx d = {.c = c,
			    .a = &a,
			    .b = &b,
			    .store = c->patch ? s : NULL,
			    .b_is_current = !c->to,
			    .list = json_array()};
	tree_compare(&a, &b, on_change, &d);
	json_t *o = json_pack("{s:s,s:s?,s:o,s:{s:i,s:i,s:i,s:i},s:b}", "from", c->target->id, "to",
			      c->to ? c->to->id : NULL, "changes", d.list, "counts", "added",
			      d.added, "modified", d.modified, "deleted", d.deleted, "attributes",
			      d.attrs, "truncated", d.truncated);
	if (!c->to)
		json_object_set_new(o, "read_files", json_integer((json_int_t)ts.read_files));
	if (!c->to)
		json_object_set_new(o, "reused", json_integer((json_int_t)ts.reused));
	json_object_set(o, "paths", c->target->paths);
	if (c->resolved) /* a task's exit diff that followed its cwd */
		json_object_set(o, "resolved", c->resolved);
	if (d.patch_truncated)
		json_object_set_new(o, "patch_truncated", json_true());
	tree_manifest_free(&a);
	tree_manifest_free(&b);
	return o;
}

static json_t *do_restore(struct checkpoints *c, struct tree_store *s, struct error *e)
{
	struct tree_manifest m = {0};
	char name[40];
	snprintf(name, sizeof(name), "m-%s", c->target->id);
	if (tree_manifest_load(s->dir_fd, name, &m, e) < 0)
		return NULL;
	struct notes nt = {.list = json_array(), .counts = json_object()};
	unsigned failures;
	/* For the task, the tree is worked on as the task user: the kernel refuses what it
	 * may not do, each refusal a failure named in the answer. */
	s->as_task = c->actor == CHECKPOINT_FOR_TASK;
	if (s->as_task && files_enter(&c->task_id) < 0) {
		note(&nt, "failed", "", "cannot act as the task user");
		failures = 1;
	} else {
		failures = tree_restore(s, &m, c->roots, c->n_roots, note, &nt, NULL);
		if (s->as_task)
			files_leave();
	}
	tree_manifest_free(&m);
	return json_pack("{s:s,s:b,s:o,s:o,s:b,s:i}", "id", c->target->id, "complete",
			 failures == 0, "changes", nt.list, "counts", nt.counts, "truncated",
			 nt.truncated, "failures", (int)failures);
}

/* The base names ("b-<id>") no manifest left is a delta against. */
static void drop_bases(int dir_fd, const struct tree_manifest *keep, unsigned n)
{
	int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "b-", 2))
			continue;
		bool used = false;
		for (unsigned i = 0; i < n && !used; i++)
			used = !strcmp(keep[i].base, de->d_name);
		if (!used && unlinkat(dir_fd, de->d_name, 0) < 0 && errno != ENOENT)
			log_errno("checkpoints: cannot remove an unused base manifest", errno,
				  NULL);
	}
	closedir(d);
}

static json_t *do_delete(struct checkpoints *c, struct tree_store *s, struct error *e)
{
	char name[40];
	snprintf(name, sizeof(name), "m-%s", c->target->id);
	if (unlinkat(s->dir_fd, name, 0) < 0 && errno != ENOENT) {
		error_set(e, errno, NULL, "checkpoints: cannot remove the manifest");
		return NULL;
	}
	struct tree_manifest *keep = calloc(c->n + 1, sizeof(*keep));
	unsigned n = 0;
	for (struct checkpoint *k = c->head; k && keep; k = k->next) {
		snprintf(name, sizeof(name), "m-%s", k->id);
		if (tree_manifest_load(s->dir_fd, name, &keep[n], e) < 0) {
			for (unsigned i = 0; i < n; i++)
				tree_manifest_free(&keep[i]);
			free(keep);
			return NULL;
		}
		n++;
	}
	uint64_t bytes = 0;
	int rc = keep ? tree_store_gc(s, keep, n, &bytes, e) : error_set(e, ENOMEM, NULL, "gc");
	if (rc == 0)
		drop_bases(s->dir_fd, keep, n);
	for (unsigned i = 0; i < n; i++)
		tree_manifest_free(&keep[i]);
	free(keep);
	if (rc < 0)
		return NULL;
	return json_pack("{s:s,s:b,s:I}", "id", c->target->id, "deleted", 1, "store_bytes",
			 (json_int_t)bytes);
}

_Noreturn void checkpoint_worker_main(struct checkpoints *c)
{
	struct runner *r = c->r;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != r->self_pid)
		_exit(1);
	signals_reset_child();
	int keep[2 * TREE_MAX_ROOTS + 3];
	unsigned nk = 0;
	keep[nk++] = c->out_fd;
	if (c->changes) /* the watches it adds are the runner's instance's */
		keep[nk++] = tree_changes_fd(c->changes);
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
	tree_store_purge_dead(r->state_dir_fd);
	struct tree_store s = {.used = c->store_bytes,
			       .max = r->cfg.checkpoint_max_bytes,
			       .task = &c->task_id};
	struct error e = {0};
	json_t *o = NULL;
	if (tree_store_open(&s, r->state_dir_fd, &e) == 0) {
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
	tree_store_close(&s);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	json_t *w = json_pack("{s:b,s:s,s:s,s:I,s:I}", "ok", o != NULL, "code", error_code(&e),
			      "error", e.msg, "ms", (json_int_t)(monotonic_ms() - t0),
			      "worker_peak_rss_kib", (json_int_t)ru.ru_maxrss);
	if (o)
		json_object_set_new(w, "result", o);
	if (w && c->changes)
		checkpoint_dirty_report(c, w);
	char *str = w ? json_dumps(w, JSON_COMPACT) : NULL;
	/* A failed write shows as an unreadable answer to the parent. */
	if (str)
		(void)write_all(c->out_fd, str, strlen(str));
	_exit(o ? 0 : 1);
}
