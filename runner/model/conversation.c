/* Conversations of agent tasks: see conversation.h. */
#include "model/conversation.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/statedir.h"
#include "core/randomid.h"
#include "task/task.h"

static struct conversations *table(struct runner *r)
{
	if (!r->conversations)
		r->conversations = calloc(1, sizeof(*r->conversations));
	return r->conversations;
}

/* The history is dropped with its fd: an unnamed file is gone when closed. */
static void unlink_history(struct runner *r, struct conversation *c)
{
	(void)r;
	if (c->history_fd >= 0 && close(c->history_fd) < 0)
		log_errno("close of a conversation's history failed", errno, c->id);
	c->history_fd = -1;
}

static void unlink_conv(struct runner *r, struct conversation *c)
{
	struct conversations *tb = r->conversations;
	for (struct conversation **pp = &tb->head; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			tb->n--;
			break;
		}
	unlink_history(r, c);
	free(c->cwd);
	free(c);
}

/* Room for one more: the least recently used idle conversation goes. */
static int make_room(struct runner *r, struct error *err)
{
	struct conversations *tb = r->conversations;
	if (tb->n < CONV_MAX)
		return 0;
	struct conversation *lru = NULL;
	for (struct conversation *c = tb->head; c; c = c->next)
		if (!c->busy && (!lru || c->used_ms < lru->used_ms))
			lru = c;
	if (!lru)
		return error_set(err, 0, "TOO_MANY_TASKS",
				 "%u conversations are in use at once: none can be forgotten",
				 CONV_MAX);
	log_info("conversation forgotten to make room", "{s:s}", "conversation", lru->id);
	unlink_conv(r, lru);
	return 0;
}

/* A placeholder marks a claimed conversation until conv_attach. */
#define CLAIMED ((struct task *)1)

/* The conversation id names, if conv_claim may take it; NULL with err set. */
static struct conversation *claimable(struct conversations *tb, const char *id, enum engine_kind k,
				      struct error *err)
{
	struct conversation *c = tb->head;
	while (c && (c->forgotten || strcmp(c->id, id)))
		c = c->next;
	if (!c) {
		error_set(err, 0, "CONVERSATION_NOT_FOUND",
			  "conversation not found: %.64s (unknown, forgotten by a reset, or "
			  "from another box)",
			  id);
		return NULL;
	}
	if (c->busy) {
		error_set(err, 0, "CONVERSATION_BUSY",
			  "conversation %s is in use by task %s: wait for it to end", c->id,
			  c->busy == CLAIMED ? "(starting)" : c->busy->id);
		return NULL;
	}
	if (c->engine != k) {
		error_set(err, 0, "CONVERSATION_MISMATCH",
			  "conversation %s belongs to engine %s, not %s", c->id,
			  engine_kind_name(c->engine), engine_kind_name(k));
		return NULL;
	}
	return c;
}

int conv_check(struct runner *r, const char *id, enum engine_kind k, struct error *err)
{
	struct conversations *tb = table(r);
	if (!id || !tb)
		return 0; /* a new one: conv_claim says what it lacks */
	return claimable(tb, id, k, err) ? 0 : -1;
}

struct conversation *conv_claim(struct runner *r, const char *id, enum engine_kind k,
				const char *cwd, struct error *err)
{
	struct conversations *tb = table(r);
	if (!tb) {
		error_set(err, ENOMEM, "RUNTIME_ERROR", "conversations");
		return NULL;
	}
	if (id) {
		struct conversation *c = claimable(tb, id, k, err);
		if (!c)
			return NULL;
		c->busy = CLAIMED;
		c->used_ms = monotonic_ms();
		return c;
	}
	if (make_room(r, err) < 0)
		return NULL;
	struct conversation *c = calloc(1, sizeof(*c));
	if (!c || random_id(c->id) < 0 || !(c->cwd = strdup(cwd ? cwd : ""))) {
		if (c)
			free(c->cwd);
		free(c);
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot make a conversation");
		return NULL;
	}
	c->engine = k;
	c->history_fd = -1;
	c->busy = CLAIMED;
	c->used_ms = monotonic_ms();
	c->next = tb->head;
	tb->head = c;
	tb->n++;
	return c;
}

void conv_attach(struct conversation *c, struct task *t)
{
	c->busy = t;
	c->tasks++;
}

void conv_release(struct runner *r, struct conversation *c)
{
	c->busy = NULL;
	c->used_ms = monotonic_ms();
	if (c->forgotten)
		unlink_conv(r, c);
}

void conv_abandon(struct runner *r, struct conversation *c)
{
	if (!c->tasks)
		unlink_conv(r, c);
	else
		conv_release(r, c);
}

json_t *conv_load(struct runner *r, const struct conversation *c)
{
	(void)r;
	if (c->history_fd < 0)
		return NULL;
	if (lseek(c->history_fd, 0, SEEK_SET) < 0) {
		log_errno("lseek of a conversation's history failed", errno, c->id);
		return NULL;
	}
	json_t *m = json_loadfd(c->history_fd, 0, NULL);
	if (m && !json_is_array(m)) {
		json_decref(m);
		return NULL;
	}
	return m;
}

int conv_save(struct runner *r, struct conversation *c, json_t *messages)
{
	if (c->forgotten)
		return 0; /* a reset came first: nothing of it is kept */
	/* A new unnamed file each time, swapped in when whole: a failed write
	 * leaves the last history as it was. Named files (conv-ID.json, 0600)
	 * were readable by every task in non-root mode, whose uid is ours. */
	int fd = statedir_tmpfile(r->state_dir_fd, "forceai-conversation");
	if (fd < 0)
		return fd;
	if (json_dumpfd(messages, fd, JSON_COMPACT) < 0) {
		close(fd);
		return -EIO;
	}
	unlink_history(r, c);
	c->history_fd = fd;
	return 0;
}

unsigned conv_forget_all(struct runner *r)
{
	struct conversations *tb = r->conversations;
	unsigned n = 0;
	if (!tb)
		return 0;
	/* Busy ones belong to tasks the reset is killing: their drivers still
	 * hold them, so they are only marked gone (released when they end). */
	struct conversation **pp = &tb->head;
	while (*pp) {
		struct conversation *c = *pp;
		unlink_history(r, c);
		c->session[0] = 0;
		n += !c->forgotten;
		if (c->busy) {
			c->forgotten = true;
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		tb->n--;
		free(c->cwd);
		free(c);
	}
	return n;
}

void conv_free_all(struct runner *r)
{
	struct conversations *tb = r->conversations;
	if (!tb)
		return;
	while (tb->head) {
		struct conversation *c = tb->head;
		tb->head = c->next;
		unlink_history(r, c);
		free(c->cwd);
		free(c);
	}
	free(tb);
	r->conversations = NULL;
}
