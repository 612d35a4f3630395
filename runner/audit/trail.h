/* The audit trail (docs/design/audit.md): one event for every action through a door of the
 * runner, fed by one call at each door, each JSON line chained to the one before
 * (audit/chain.h), every secret the runner knows masked. Bounded per source where a party
 * without the token can cause events (audit/sources.h); the client's and the control plane's
 * events are never dropped. */
#pragma once
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "audit/chain.h"

struct runner;
struct error;

/* At start, before any door opens: the first chain is announced. The
 * file sink is refused inside a writable root (err set). */
int audit_init(struct runner *r, struct error *err);
void audit_free(struct runner *r);
bool audit_enabled(const struct runner *r);

/* The one call at a door, for an action of the client (a request that
 * proved the token), the control plane or the runner itself: ev (stolen;
 * NULL = {}) holds "who", "outcome" and the action's details; door and
 * what name it. Strings over 4 KiB are cut. Never blocks, never fails the
 * caller, never dropped by the rate bound. Without a "who", the client
 * whose request is being handled (audit_set_client) is filled in. */
void audit_emit(struct runner *r, const char *door, const char *what, json_t *ev);
/* The same for an event a party WITHOUT the token can cause as often as it
 * likes (a task's connection refused at the gate, a task's model call, a
 * request that did not prove the token, a task's refused system call):
 * source names that party, "uid:N" for anything a process inside the box
 * does (its uid), "addr:A" for a peer outside, "unknown:A" for an in-box
 * peer whose owner is unknown. Each source has its own bucket of
 * --audit-rate events a second; beyond, its events are counted and one
 * "events dropped" marker a second says {source, count, by_door}. Never
 * taken from the client's share. source NULL: audit_emit. */
void audit_emit_from(struct runner *r, const char *source, const char *door, const char *what,
		     json_t *ev);
/* The same for an event whose fields the caller wrote itself (a hot door:
 * no JSON object per event): fields is an object's compact text "{...}",
 * keys in jansson's order, with "who" and "outcome" and none of the head's
 * keys, every string audit_str_plain (so the bytes are exactly those
 * audit_emit would write); task is its who.task, or NULL; source as
 * audit_emit_from's (NULL: the client's). */
void audit_emit_text(struct runner *r, const char *source, const char *door, const char *what,
		     const char *fields, size_t len, const char *task);
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

/* Once a second: the "events dropped" markers of the sources that had
 * events dropped (at most one a second each), and every minute the head in
 * the log when it moved. */
void audit_tick(struct runner *r);

/* At shutdown, before the last head is read: the drops not yet in a marker
 * are written in one (the trail says what it dropped, and whose). */
void audit_shutdown(struct runner *r);

/* The trail's head, "SEQ:HASH" (the last event's seq and its line's
 * SHA-256), for a verifier to check a trail was not cut at its end
 * (--verify-audit --audit-head); the lines up to it are written to the
 * sinks first. "" when the trail is off. */
void audit_head(struct runner *r, char out[AUDIT_HEAD_MAX]);

/* A reset: the current chain is closed with an event, a new one starts
 * (the next tenant sees only its own). Returns {chain, last_seq,
 * last_hash, head} of the closed one (new reference). */
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

/* --verify-audit FILE [--audit-head SEQ:HASH] (audit/verify.c): prints
 * the verdict; the exit status (0 unbroken and, with a head, holding it;
 * 1 broken or cut; 2 unreadable). head NULL: none given. */
int audit_verify_file(const char *path, const char *head);
