/* The change tracker of checkpoints (tree/changes.h; docs/design/checkpoints.md, "Change tracking")
 * on the loop: its events read as they come, its state handed to the worker (the fork's copy), the
 * watches the worker added adopted from its answer. Without it (no inotify) every checkpoint walks
 * all. */
#include "checkpoint/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "core/log.h"
#include "core/runner.h"
#include "tree/changes.h"

#define WATCHED_MAX 500000 /* directories reported by one worker */

static void on_events(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	struct checkpoints *c = w->arg;
	tree_changes_read(c->changes);
}

void checkpoint_dirty_init(struct checkpoints *c)
{
	/* A cap below the kernel's (max_user_watches): a tracker shares it with the box, and each
	 * watch pins its directory's inode in kernel memory, so a task making a million
	 * directories must not make the runner hold a million watches. Past the cap
	 * (--checkpoint-max-watches, 65,536 by default: about a million files in 16 per
	 * directory) a directory is walked at every checkpoint, as without a tracker. */
	c->changes = tree_changes_new((unsigned)c->r->cfg.checkpoint_max_watches);
	if (!c->changes) {
		log_errno("checkpoints: no change tracker (every checkpoint walks its tree)", errno,
			  NULL);
		return;
	}
	int rc = loop_watch_add(&c->r->loop, &c->changes_w, tree_changes_fd(c->changes), EPOLLIN,
				on_events, c);
	if (rc < 0) {
		log_errno("checkpoints: no change tracker (every checkpoint walks its tree)", -rc,
			  NULL);
		tree_changes_free(c->changes);
		c->changes = NULL;
	}
}

void checkpoint_dirty_free(struct checkpoints *c)
{
	if (!c->changes)
		return;
	loop_watch_del(&c->r->loop, &c->changes_w);
	tree_changes_free(c->changes);
	c->changes = NULL;
}

void checkpoint_dirty_before_fork(struct checkpoints *c)
{
	if (c->changes)
		tree_changes_read(
			c->changes); /* every change made before the fork is in the copy */
}

void checkpoint_dirty_forked(struct checkpoints *c)
{
	if (c->changes && c->op == OP_CREATE && c->pending)
		tree_changes_mark(c->changes, c->pending->id);
}

void checkpoint_dirty_drop(struct checkpoints *c)
{
	if (c->changes)
		tree_changes_invalidate(c->changes);
}

/* In the worker: may the walk take from prev (checkpoint prev_id) what did not change? */
void checkpoint_dirty_worker(struct checkpoints *c, struct tree_store *s, const char *prev_id)
{
	s->changes = c->changes;
	s->watch = c->changes && c->op == OP_CREATE;
	s->reuse = tree_changes_valid_for(c->changes, prev_id);
	for (unsigned i = 0; i < c->n_roots; i++)
		if (c->open_paths[i]) /* opened elsewhere than its path: the tracker's paths differ
				       */
			s->reuse = false;
}

/* In the worker: the watches it added, for the runner to keep ([[wd, path], ...]). */
void checkpoint_dirty_report(struct checkpoints *c, json_t *w)
{
	int wd;
	const char *path;
	json_t *a = json_array();
	for (size_t i = 0; i < WATCHED_MAX && tree_changes_added(c->changes, i, &wd, &path); i++)
		json_array_append_new(a, json_pack("[i,s]", wd, path));
	json_object_set_new(w, "watched", a);
}

/* The worker's answer w (its result ok or not): its watches adopted; a create's checkpoint
 * the base when taken. */
void checkpoint_dirty_answer(struct checkpoints *c, json_t *w, bool ok)
{
	if (!c->changes)
		return;
	tree_changes_read(c->changes); /* events of its watches until now: applied on adoption */
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(w, "watched"), i, v) {
		const char *p = json_string_value(json_array_get(v, 1));
		if (p)
			tree_changes_adopt(c->changes,
					   (int)json_integer_value(json_array_get(v, 0)), p);
	}
	if (c->op == OP_CREATE && c->pending)
		tree_changes_taken(c->changes, c->pending->id, ok);
}
