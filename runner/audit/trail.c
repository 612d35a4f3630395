/* The audit trail's state and sinks (trail.h; docs/design/audit.md). */
#include "audit/trail.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit/sources.h"
#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/jsonesc.h"
#include "core/list.h"

#define AUDIT_FLUSH_MS 10             /* the sinks are at most this far behind the events */
#define AUDIT_OUT_MAX (256 * 1024)    /* lines held for the sinks before a write */
#define AUDIT_RING_COUNT 65536        /* events kept at most, whatever their size */
#define HEAD_LOG_US (60ULL * 1000000) /* the head in the log at most this often */

struct audit {
	uint64_t seq; /* the last written */
	uint32_t chain;
	uint64_t chain_first;
	char prev[AUDIT_HASH_HEX];

	struct audit_rec *ring; /* AUDIT_RING_COUNT slots, by seq % count */
	uint64_t oldest;        /* the oldest seq kept (0: none) */
	size_t ring_bytes, ring_max;

	/* The bound on what a party without the token can cause: a bucket of
	 * cfg.audit_rate per source, its drops counted for its marker
	 * (sources.h). The client's events are not bound. */
	struct audit_srcs srcs;
	uint64_t dropped_total; /* by the bound: the sum of the markers' counts */
	uint64_t head_logged_seq, head_logged_us;

	int file_fd;
	uint64_t emitted, stderr_failed, file_failed, mask_failed;
	/* Lines for stderr and the file, written AUDIT_FLUSH_MS after the first
	 * of them (one system call for a burst instead of one per event);
	 * whole lines only. */
	struct buf out;
	struct loop_timer flush_timer;
	bool timer_ok, flush_armed;

	char **secrets;
	size_t n_secrets, cap_secrets;
	json_t *resource;
	const char *client; /* borrowed, for the handler being run */

	struct audit_watcher *watchers;
};

bool audit_enabled(const struct runner *r)
{
	return r->audit != NULL;
}

void audit_set_client(struct runner *r, const char *addr)
{
	if (r->audit)
		r->audit->client = addr;
}

const char *audit_client(const struct runner *r)
{
	return r->audit ? r->audit->client : NULL;
}

/* Strings cut at AUDIT_STR_MAX bytes (at a character boundary), in place. */
static void cap_strings(json_t *v, int depth)
{
	if (depth > 8)
		return;
	if (json_is_string(v)) {
		size_t n = json_string_length(v);
		if (n <= AUDIT_STR_MAX)
			return;
		const char *s = json_string_value(v);
		size_t cut = AUDIT_STR_MAX;
		while (cut && ((unsigned char)s[cut] & 0xC0) == 0x80)
			cut--;
		char *t = malloc(cut + 32);
		if (!t)
			return;
		memcpy(t, s, cut);
		snprintf(t + cut, 32, "...(%zu)", n);
		json_string_set(v, t);
		free(t);
		return;
	}
	const char *k;
	json_t *x;
	size_t i;
	if (json_is_object(v))
		json_object_foreach(v, k, x)
			cap_strings(x, depth + 1);
	else if (json_is_array(v))
		json_array_foreach(v, i, x)
			cap_strings(x, depth + 1);
}

static void ring_drop_oldest(struct audit *a)
{
	struct audit_rec *rec = &a->ring[a->oldest % AUDIT_RING_COUNT];
	a->ring_bytes -= rec->len;
	free(rec->line);
	memset(rec, 0, sizeof(*rec));
	a->oldest = a->oldest < a->seq ? a->oldest + 1 : 0;
}

static void ring_put(struct audit *a, char *line, size_t len, const char *task)
{
	while (a->oldest &&
	       (a->seq - a->oldest + 1 >= AUDIT_RING_COUNT || a->ring_bytes + len > a->ring_max))
		ring_drop_oldest(a);
	struct audit_rec *rec = &a->ring[a->seq % AUDIT_RING_COUNT];
	rec->seq = a->seq;
	rec->chain = a->chain;
	rec->len = (uint32_t)len;
	rec->line = line;
	snprintf(rec->task, sizeof(rec->task), "%s", task ? task : "");
	a->ring_bytes += len;
	if (!a->oldest)
		a->oldest = a->seq;
}

static void sink_write(int fd, const char *data, size_t len, uint64_t *failed)
{
	/* Whole lines in one write: the lines of other writers never cut one.
	 * A short or failed write is counted, never retried (no sink stalls
	 * the loop). */
	ssize_t n = write(fd, data, len);
	if (n != (ssize_t)len)
		(*failed)++;
}

static void flush_out(struct audit *a)
{
	if (!a->out.len)
		return;
	sink_write(STDERR_FILENO, a->out.data, a->out.len, &a->stderr_failed);
	if (a->file_fd >= 0)
		sink_write(a->file_fd, a->out.data, a->out.len, &a->file_failed);
	buf_reset(&a->out);
	if (a->out.cap > AUDIT_OUT_MAX)
		buf_free(&a->out);
}

static void on_flush_timer(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	struct runner *r = t->arg;
	if (!r->audit)
		return;
	r->audit->flush_armed = false;
	flush_out(r->audit);
}

/* Write one event: numbered, chained, masked, into every sink. fields is
 * the event's body, a JSON object's text "{...}" with at least "outcome"
 * in it (NULL: it could not be serialized); task is its who.task (the
 * ring's ?task= key), or NULL. */
static void write_line(struct runner *r, const char *door, const char *what, const char *fields,
		       size_t flen, const char *task)
{
	struct audit *a = r->audit;
	a->seq++;
	struct buf lb = {0};
	size_t dl = strlen(door), wl = strlen(what);
	/* One allocation for the whole line (it is kept in the ring as it is):
	 * the head's numbers, the two names escaped at worst, the fields. */
	int rc = fields ? 0 : -1;
	rc |= buf_reserve(&lb, 128 + AUDIT_HASH_HEX + JSON_STR_MAX(dl) + JSON_STR_MAX(wl) + flen);
	/* The head by hand, no printf: the same bytes as
	 * {"audit":true,"seq":%llu,"ts":%llu,"chain":%u,"prev":"%s","door":. */
	rc |= buf_append_lit(&lb, "{\"audit\":true,\"seq\":");
	rc |= buf_append_u64(&lb, a->seq);
	rc |= buf_append_lit(&lb, ",\"ts\":");
	rc |= buf_append_u64(&lb, now_ms());
	rc |= buf_append_lit(&lb, ",\"chain\":");
	rc |= buf_append_u64(&lb, a->chain);
	rc |= buf_append_lit(&lb, ",\"prev\":\"");
	rc |= buf_append(&lb, a->prev, AUDIT_HASH_HEX - 1);
	rc |= buf_append_lit(&lb, "\",\"door\":");
	rc |= buf_append_json_str(&lb, door, dl);
	rc |= buf_append_lit(&lb, ",\"what\":");
	rc |= buf_append_json_str(&lb, what, wl);
	/* fields is "{...}" with at least "outcome" in it. */
	if (fields && flen > 2 && fields[0] == '{' && fields[1] != '}')
		rc |= buf_append_lit(&lb, ",") | buf_append(&lb, fields + 1, flen - 1);
	else
		rc |= buf_append_lit(&lb, "}");
	rc |= buf_append(&lb, "", 1);
	char *line = rc == 0 ? lb.data : NULL;
	if (!line)
		buf_free(&lb);
	size_t len = line ? lb.len - 1 : 0;
	bool failed = false;
	char *masked = line ? auditchain_mask(line, len, (const char *const *)a->secrets,
					      a->n_secrets, &len, &failed)
			    : NULL;
	if (masked) {
		free(line);
		line = masked;
	}
	if (!line || failed) {
		/* Never a line that might hold a secret: the seq is skipped (the
		 * verifier then names the gap) and counted. */
		free(line);
		a->mask_failed++;
		return;
	}
	auditchain_hash(line, len, a->prev);
	a->emitted++;
	if (buf_reserve(&a->out, len + 1) < 0) {
		a->stderr_failed++;
	} else {
		buf_append(&a->out, line, len);
		buf_append_lit(&a->out, "\n");
	}
	if (a->out.len >= AUDIT_OUT_MAX || !a->timer_ok) {
		flush_out(a);
	} else if (!a->flush_armed) {
		if (loop_timer_start(&r->loop, &a->flush_timer, AUDIT_FLUSH_MS, 0) < 0)
			flush_out(a);
		else
			a->flush_armed = true;
	}
	ring_put(a, line, len, task);
	for (struct audit_watcher *w = a->watchers, *next; w; w = next) {
		next = w->next;
		w->wake(w);
	}
}

/* An event from its fields as JSON: strings capped, the head's keys the
 * runner's alone, "who" and "outcome" filled in when missing. */
static void write_event(struct runner *r, const char *door, const char *what, json_t *ev)
{
	struct audit *a = r->audit;
	/* The head is written by hand and the fields serialized once: no
	 * second object per event (a JSON object per request was most of the
	 * trail's cost, docs/design/audit.md#on-by-default-the-test-only-switch-what-is-not-done).
	 */
	json_t *own = ev ? NULL : json_object();
	json_t *body = ev ? ev : own;
	if (!body) {
		/* Out of memory: like a failed mask, its seq is skipped (the
		 * verifier names the gap) and counted, never lost unseen. */
		write_line(r, door, what, NULL, 0, NULL);
		return;
	}
	cap_strings(body, 0);
	/* The head's keys are the runner's alone: a field cannot forge them. */
	static const char *const head_keys[] = {"audit", "seq",  "ts",  "chain",
						"prev",  "door", "what"};
	for (size_t i = 0; i < sizeof(head_keys) / sizeof(head_keys[0]); i++)
		json_object_del(body, head_keys[i]);
	if (!json_object_get(body, "who") && a->client)
		json_object_set_new(body, "who", json_pack("{s:s}", "client", a->client));
	if (!json_object_get(body, "outcome"))
		json_object_set_new(body, "outcome", json_string("ok"));
	char *fields = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
	const char *task = json_string_value(json_object_get(json_object_get(ev, "who"), "task"));
	write_line(r, door, what, fields, fields ? strlen(fields) : 0, task);
	free(fields);
	json_decref(own);
}

/* The "events dropped" markers of the sources whose drops are due (all:
 * every source with drops, a chain is being closed): one per source, naming
 * it, with its counts by door. A marker is the runner's own event: never
 * rate bound (at most one a second per source, AUDIT_SOURCES sources). */
static void flush_dropped(struct runner *r, bool all)
{
	struct audit *a = r->audit;
	uint64_t now = monotonic_us();
	int i = -1;
	for (struct audit_src *s; (s = audit_srcs_due(&a->srcs, &i, now, all));) {
		json_t *doors = json_object();
		for (unsigned k = 0; doors && k < s->n_by; k++)
			json_object_set_new(doors, s->by[k].door,
					    json_integer((json_int_t)s->by[k].n));
		if (doors && s->by_other)
			json_object_set_new(doors, "other", json_integer((json_int_t)s->by_other));
		json_t *ev = json_pack("{s:{s:s},s:s,s:s,s:I,s:o*}", "who", "runner", "audit",
				       "outcome", "dropped", "source", s->key, "count",
				       (json_int_t)s->pending, "by_door", doors);
		audit_src_marked(s, now);
		write_event(r, "audit", "events dropped", ev);
		json_decref(ev);
	}
}

/* The bound (docs/design/audit.md#bounds-tasks-cannot-read-write-suppress-flood-or-crowd-it): the
 * client's and the runner's own events (source NULL) are all kept; a source's beyond its bucket are
 * counted for its marker, written at the 1 s tick. */
static bool admit(struct runner *r, const char *source, const char *door)
{
	struct audit *a = r->audit;
	if (!source)
		return true;
	if (audit_srcs_admit(&a->srcs, source, door, r->cfg.audit_rate, monotonic_us()))
		return true;
	a->dropped_total++;
	return false;
}

void audit_emit(struct runner *r, const char *door, const char *what, json_t *ev)
{
	audit_emit_from(r, NULL, door, what, ev);
}

void audit_emit_from(struct runner *r, const char *source, const char *door, const char *what,
		     json_t *ev)
{
	if (r->audit && admit(r, source, door))
		write_event(r, door, what, ev);
	json_decref(ev);
}

void audit_emit_text(struct runner *r, const char *source, const char *door, const char *what,
		     const char *fields, size_t len, const char *task)
{
	if (r->audit && admit(r, source, door))
		write_line(r, door, what, fields, len, task);
}

bool audit_str_plain(const char *s)
{
	size_t i = 0;
	for (; s[i] && i <= AUDIT_STR_MAX; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f || s[i] == '"' ||
		    s[i] == '\\')
			return false;
	return i <= AUDIT_STR_MAX;
}

void audit_head(struct runner *r, char out[AUDIT_HEAD_MAX])
{
	struct audit *a = r->audit;
	if (!a) {
		out[0] = 0;
		return;
	}
	/* Published only once its line is in the sinks: a verifier given it
	 * finds it there unless the trail was cut. */
	flush_out(a);
	auditchain_head_format(a->seq, a->prev, out);
}

void audit_shutdown(struct runner *r)
{
	if (r->audit)
		flush_dropped(r, true);
}

void audit_tick(struct runner *r)
{
	struct audit *a = r->audit;
	if (!a)
		return;
	flush_dropped(r, false);
	/* The head in the container log now and then, so a runner killed
	 * without its last line still left a recent one. */
	uint64_t now = monotonic_us();
	if (a->seq != a->head_logged_seq && now - a->head_logged_us >= HEAD_LOG_US) {
		char head[AUDIT_HEAD_MAX];
		audit_head(r, head);
		log_info("audit head", "{s:s,s:i}", "head", head, "chain", a->chain);
		a->head_logged_seq = a->seq;
		a->head_logged_us = now;
	}
}

static void chain_start(struct runner *r, json_t *why)
{
	struct audit *a = r->audit;
	a->chain++;
	a->chain_first = a->seq + 1;
	json_t *ev = json_pack("{s:{s:s}}", "who", "runner", "audit");
	if (a->resource)
		json_object_set(ev, "resource", a->resource);
	if (why)
		json_object_set(ev, "after", why);
	write_event(r, "audit", "chain started", ev);
	json_decref(ev);
}

json_t *audit_chain_restart(struct runner *r, json_t *why)
{
	struct audit *a = r->audit;
	if (!a)
		return json_null();
	flush_dropped(r, true);
	json_t *ev = json_pack("{s:{s:s}}", "who", "runner", "audit");
	if (why)
		json_object_set(ev, "reason", why);
	write_event(r, "audit", "chain closed", ev);
	json_decref(ev);
	char head[AUDIT_HEAD_MAX];
	audit_head(r, head); /* the log line after the event it names */
	json_t *closed = json_pack("{s:i,s:I,s:s,s:s}", "chain", a->chain, "last_seq",
				   (json_int_t)a->seq, "last_hash", a->prev, "head", head);
	log_info("audit chain closed", "{s:i,s:I,s:s,s:s}", "chain", a->chain, "last_seq",
		 (json_int_t)a->seq, "last_hash", a->prev, "head", head);
	/* The new tenant's chain says it follows one (its prev is that one's
	 * last hash), not what the old tenant left. */
	json_t *after = json_pack("{s:i,s:I}", "chain", a->chain, "last_seq", (json_int_t)a->seq);
	chain_start(r, after);
	json_decref(after);
	return closed;
}

/* Is path (resolved) under one of the writable roots? */
static bool in_writable_root(const struct runner *r, const char *path)
{
	cleanup_free char *list = strdup(r->cfg.landlock_roots ? r->cfg.landlock_roots : "");
	if (!list)
		return true; /* cannot tell: refuse */
	const char *extra = "/dev/shm";
	for (char *save, *tok = strtok_r(list, ":", &save);; tok = strtok_r(NULL, ":", &save)) {
		const char *root = tok ? tok : extra;
		char real[PATH_MAX];
		const char *cmp = realpath(root, real) ? real : root;
		size_t n = strlen(cmp);
		while (n > 1 && cmp[n - 1] == '/')
			n--;
		if (!strncmp(path, cmp, n) && (path[n] == '/' || path[n] == 0 || n == 1))
			return true;
		if (!tok)
			break;
	}
	return false;
}

static int open_file_sink(struct runner *r, struct error *err)
{
	const char *path = r->cfg.audit_file;
	cleanup_free char *d = strdup(path), *b = strdup(path);
	if (!d || !b)
		return error_set(err, ENOMEM, NULL, "--audit-file");
	char dir[PATH_MAX], full[PATH_MAX + 256];
	if (!realpath(dirname(d), dir))
		return error_set(err, errno, "AUDIT_FILE", "--audit-file %s: its directory", path);
	snprintf(full, sizeof(full), "%s/%s", strcmp(dir, "/") ? dir : "", basename(b));
	if (in_writable_root(r, full))
		return error_set(
			err, 0, "AUDIT_FILE",
			"--audit-file %s is inside a root tasks may write (--landlock-roots "
			"or /dev/shm): a task could rewrite or remove the trail; put it on "
			"the runner's own volume",
			path);
	/* No symlink, no FIFO or device (O_NONBLOCK: a FIFO without a reader
	 * fails instead of blocking), created private. */
	int fd =
		open(full,
		     O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NONBLOCK,
		     0600);
	if (fd < 0)
		return error_set(err, errno, "AUDIT_FILE", "--audit-file %s", path);
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int e = errno;
		close(fd);
		return error_set(err, S_ISREG(st.st_mode) ? e : 0, "AUDIT_FILE",
				 "--audit-file %s: not a regular file", path);
	}
	r->audit->file_fd = fd;
	return 0;
}

int audit_init(struct runner *r, struct error *err)
{
	if (r->cfg.insecure_no_audit) {
		log_warn("TEST ONLY: no audit trail (--insecure-no-audit)", NULL);
		return 0;
	}
	struct audit *a = calloc(1, sizeof(*a));
	struct audit_rec *ring = calloc(AUDIT_RING_COUNT, sizeof(*ring));
	if (!a || !ring) {
		free(a);
		free(ring);
		return error_set(err, ENOMEM, NULL, "audit trail");
	}
	a->ring = ring;
	a->ring_max = r->cfg.audit_ring_max;
	a->file_fd = -1;
	a->head_logged_us = monotonic_us();
	memcpy(a->prev, AUDIT_HASH_ZERO, sizeof(a->prev));
	r->audit = a;
	if (r->cfg.audit_file && open_file_sink(r, err) < 0) {
		audit_free(r);
		return -1;
	}
	a->flush_timer.w.fd = -1;
	if (loop_timer_init(&r->loop, &a->flush_timer, on_flush_timer, r) == 0)
		a->timer_ok = true;
	else
		log_warn("audit: no flush timer: every event is written at once", NULL);
	if (r->cfg.token)
		audit_secret_add(r, r->cfg.token);
	if (r->cfg.gateway_key)
		audit_secret_add(r, r->cfg.gateway_key);
	chain_start(r, NULL);
	return 0;
}

void audit_free(struct runner *r)
{
	struct audit *a = r->audit;
	if (!a)
		return;
	flush_out(a);
	buf_free(&a->out);
	if (a->timer_ok)
		loop_timer_close(&r->loop, &a->flush_timer);
	for (size_t i = 0; i < AUDIT_RING_COUNT; i++)
		free(a->ring[i].line);
	free(a->ring);
	for (size_t i = 0; i < a->n_secrets; i++) {
		explicit_bzero(a->secrets[i], strlen(a->secrets[i]));
		free(a->secrets[i]);
	}
	free(a->secrets);
	if (a->file_fd >= 0 && close(a->file_fd) < 0)
		log_errno("close(--audit-file) failed", errno, NULL);
	json_decref(a->resource);
	free(a);
	r->audit = NULL;
}

void audit_secret_add(struct runner *r, const char *s)
{
	struct audit *a = r->audit;
	if (!a || !s || strlen(s) < AUDIT_SECRET_MIN)
		return;
	if (a->n_secrets == a->cap_secrets) {
		size_t cap = a->cap_secrets ? a->cap_secrets * 2 : 8;
		char **ns = realloc(a->secrets, cap * sizeof(*ns));
		if (!ns)
			return;
		a->secrets = ns;
		a->cap_secrets = cap;
	}
	char *c = strdup(s);
	if (c)
		a->secrets[a->n_secrets++] = c;
}

void audit_secret_remove(struct runner *r, const char *s)
{
	struct audit *a = r->audit;
	if (!a || !s)
		return;
	for (size_t i = 0; i < a->n_secrets; i++)
		if (!strcmp(a->secrets[i], s)) {
			explicit_bzero(a->secrets[i], strlen(a->secrets[i]));
			free(a->secrets[i]);
			a->secrets[i] = a->secrets[--a->n_secrets];
			return;
		}
}

void audit_set_resource(struct runner *r, json_t *attrs)
{
	struct audit *a = r->audit;
	if (!a) {
		json_decref(attrs);
		return;
	}
	json_decref(a->resource);
	a->resource = attrs;
	/* A box bound (or unbound) mid-chain: said in the chain, so every later
	 * line is attributable from the chain alone; a marker, not rate bound. */
	json_t *ev = json_pack("{s:{s:s},s:O?}", "who", "runner", "audit", "resource", attrs);
	write_event(r, "audit", "resource set", ev);
	json_decref(ev);
}

json_t *audit_resource(const struct runner *r)
{
	return r->audit ? r->audit->resource : NULL;
}

void audit_position(const struct runner *r, uint32_t *chain, uint64_t *chain_first,
		    uint64_t *oldest, uint64_t *last)
{
	const struct audit *a = r->audit;
	*chain = a ? a->chain : 0;
	*chain_first = a ? a->chain_first : 0;
	*oldest = a ? a->oldest : 0;
	*last = a ? a->seq : 0;
}

const struct audit_rec *audit_get(const struct runner *r, uint64_t seq)
{
	const struct audit *a = r->audit;
	if (!a || !a->oldest || seq < a->oldest || seq > a->seq)
		return NULL;
	return &a->ring[seq % AUDIT_RING_COUNT];
}

json_t *audit_status(const struct runner *r)
{
	const struct audit *a = r->audit;
	if (!a)
		return json_pack("{s:b}", "enabled", 0);
	return json_pack("{s:b,s:I,s:I,s:I,s:{s:I},s:{s:b,s:I},s:{s:I,s:I,s:I},s:i}", "enabled", 1,
			 "emitted", (json_int_t)a->emitted, "dropped", (json_int_t)a->dropped_total,
			 "mask_failed", (json_int_t)a->mask_failed, "stderr", "failed",
			 (json_int_t)a->stderr_failed, "file", "on", a->file_fd >= 0, "failed",
			 (json_int_t)a->file_failed, "ring", "events",
			 (json_int_t)(a->oldest ? a->seq - a->oldest + 1 : 0), "bytes",
			 (json_int_t)a->ring_bytes, "max_bytes", (json_int_t)a->ring_max, "rate",
			 (int)r->cfg.audit_rate);
}

void audit_watch(struct runner *r, struct audit_watcher *w)
{
	struct audit *a = r->audit;
	if (!a)
		return;
	LIST_PUSH(a->watchers, w);
}

void audit_unwatch(struct runner *r, struct audit_watcher *w)
{
	struct audit *a = r->audit;
	if (!a)
		return;
	LIST_UNLINK(a->watchers, w);
}
