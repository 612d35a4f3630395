/* The audit trail (docs/design.md §13): one event for every action through
 * a door of the runner, fed by one call at each door. Each event is a JSON
 * line {"audit":true, seq, ts, chain, prev, door, what, who, outcome, ...}
 * whose "prev" is the SHA-256 of the line before (core/auditchain.h), with
 * every secret the runner knows masked. Sinks: stderr (always), a ring for
 * GET /v1/audit, --audit-file. Bounded: --audit-rate events per second,
 * the rest counted in an "events dropped" marker that is itself chained. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/auditchain.h"

struct runner;
struct error;

/* At start, before any door opens: the first chain is announced. The
 * file sink is refused inside a writable root (err set). */
int audit_init(struct runner *r, struct error *err);
void audit_free(struct runner *r);
bool audit_enabled(const struct runner *r);

/* The one call at a door: ev (stolen; NULL = {}) holds "who", "outcome"
 * and the action's details; door and what name it. Strings over 4 KiB are
 * cut. Never blocks, never fails the caller: what cannot be kept is
 * counted. Without a "who", the client whose request is being handled
 * (audit_set_client) is filled in. */
void audit_emit(struct runner *r, const char *door, const char *what, json_t *ev);
/* The same for an event whose fields the caller wrote itself (a hot door:
 * no JSON object per event): fields is an object's compact text "{...}",
 * keys in jansson's order, with "who" and "outcome" and none of the head's
 * keys, every string audit_str_plain (so the bytes are exactly those
 * audit_emit would write); task is its who.task, or NULL. */
void audit_emit_text(struct runner *r, const char *door, const char *what, const char *fields,
		     size_t len, const char *task);
#define AUDIT_STR_MAX 4096 /* a longer string in an event is cut */
/* s needs no escape in JSON and no cut: printable ASCII without '"' or
 * '\\', at most AUDIT_STR_MAX bytes. */
bool audit_str_plain(const char *s);
/* The client whose request a door is handling now (the HTTP layer sets it
 * around each handler; NULL after), so events a handler causes deeper down
 * (a task started) name who asked. */
void audit_set_client(struct runner *r, const char *addr);
const char *audit_client(const struct runner *r);

/* Values never to appear in any sink (the access token, the gateway key,
 * per-task model tokens): masked as "***" wherever they appear. add copies
 * s; remove forgets it (by value). */
void audit_secret_add(struct runner *r, const char *s);
void audit_secret_remove(struct runner *r, const char *s);

/* Attributes of the sandbox (its id, from runtime init), stolen (NULL:
 * none): a "resource set" event now, then in every chain's first event and
 * every OTLP batch's resource. String values only. */
void audit_set_resource(struct runner *r, json_t *attrs);

/* The attributes audit_set_resource gave (borrowed; NULL: none). */
json_t *audit_resource(const struct runner *r);

/* Once a second: the "events dropped" marker, when events were dropped
 * and the flood has passed. */
void audit_tick(struct runner *r);

/* A reset: the current chain is closed with an event, a new one starts
 * (the next tenant sees only its own). Returns {chain, last_seq,
 * last_hash} of the closed one (new reference). */
json_t *audit_chain_restart(struct runner *r, json_t *why);

/* Reading the ring (GET /v1/audit). */
struct audit_rec {
	uint64_t seq;
	uint32_t chain;
	uint32_t len;
	char task[33]; /* who.task, for ?task= */
	char *line;    /* as written, no newline */
};
/* The current chain: its number and first seq; last = the last seq written
 * (0: none yet); oldest = the oldest seq still kept (of any chain). */
void audit_position(const struct runner *r, uint32_t *chain, uint64_t *chain_first,
		    uint64_t *oldest, uint64_t *last);
const struct audit_rec *audit_get(const struct runner *r, uint64_t seq);
/* Counters: emitted, dropped (by door), sinks' failures, ring. */
json_t *audit_status(const struct runner *r);

/* A live reader (SSE tail): wake runs after each event. */
struct audit_watcher {
	void (*wake)(struct audit_watcher *w);
	struct audit_watcher *next, *prev;
};
void audit_watch(struct runner *r, struct audit_watcher *w);
void audit_unwatch(struct runner *r, struct audit_watcher *w);

/* --verify-audit FILE: prints the verdict; the exit status (0 unbroken,
 * 1 broken, 2 unreadable). */
int audit_verify_file(const char *path);
