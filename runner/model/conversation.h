/* Conversations of agent tasks (docs/design/model.md#limits-the-same-for-every-engine): every agent
 * task has one (reported as `conversation` in `started`); a later task with "conversation": ID
 * continues it. The runner keeps the table in memory: for the built-in engine the bounded history
 * is an unnamed file held by its fd (O_TMPFILE in the state dir, or a memfd: no task can name or
 * open it, design/security.md#the-state-dir-is-out-of-the-tasks-reach-in-every-mode), for a CLI
 * engine the CLI's own session id (its session files live in the task user's home, where the CLI
 * keeps them). A conversation is used by one task at a time; POST /v1/reset forgets them all. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "model/engine_events.h"

struct runner;
struct error;
struct task;

#define CONV_MAX 256 /* the least recently used idle one goes beyond this */

struct conversation {
	char id[33];
	enum engine_kind engine;
	char session[128]; /* a CLI engine's own session id ("" until it said) */
	char *cwd;
	int history_fd;    /* the built-in engine's saved messages (unnamed), or -1 */
	struct task *busy; /* the agent task using it now, or NULL */
	uint64_t used_ms;  /* last claimed (monotonic) */
	unsigned tasks;    /* tasks that used it */
	bool forgotten;    /* a reset came while it was busy: gone when released */
	struct conversation *next;
};

struct conversations {
	struct conversation *head;
	unsigned n;
};

/* id NULL: a new conversation of engine k (the least recently used idle one
 * may be forgotten to make room). Otherwise: that conversation, which must
 * exist (404 CONVERSATION_NOT_FOUND), be idle (409 CONVERSATION_BUSY) and be
 * of engine k (409 CONVERSATION_MISMATCH). Either way it is busy with t's
 * predecessor until conv_attach; NULL with err set. */
struct conversation *conv_claim(struct runner *r, const char *id, enum engine_kind k,
				const char *cwd, struct error *err);
/* What conv_claim would refuse for an existing conversation id, without claiming it (0, or -1
 * with err set); NULL id: 0. */
int conv_check(struct runner *r, const char *id, enum engine_kind k, struct error *err);
void conv_attach(struct conversation *c, struct task *t);
/* The task is over: the conversation is idle again (it may be forgotten). */
void conv_release(struct runner *r, struct conversation *c);
/* A conversation that never held a task (its task could not start). */
void conv_abandon(struct runner *r, struct conversation *c);

/* The built-in engine's messages (new reference), or NULL when none were saved. */
json_t *conv_load(struct runner *r, const struct conversation *c);
/* 0, or -errno (logged by the caller). */
int conv_save(struct runner *r, struct conversation *c, json_t *messages);

/* POST /v1/reset: every conversation and its saved history. The number forgotten. */
unsigned conv_forget_all(struct runner *r);
void conv_free_all(struct runner *r);
