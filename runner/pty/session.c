/* OpenSandbox execd's PTY sessions (components/execd/PTY.md), wire compatible: the engine
 * behind POST /pty, GET /pty/{id}, DELETE /pty/{id} and the WebSocket GET /pty/{id}/ws (their
 * routes: api/pty.c). The frames both ways, one driving client (?takeover=1) and read-only
 * viewers: docs/design/interactive.md#execd-pty-sessions.
 *
 * A session is a record; its shell is an ordinary confined task (same spawn path and
 * confinement as any task), so replay (?since=) is a cursor into the task's spool and a slow
 * client holds the shell back exactly as a slow SSE client holds a command back; a slow viewer
 * never does (it reads the spool as a non-live reader and may miss what it no longer keeps). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/randomid.h"
#include "core/list.h"
#include "files/ident.h"
#include "files/ops.h"
#include "files/path.h"
#include "files/userjob.h"
#include "http/ws.h"
#include "task/pty.h"
#include "task/task.h"
#include "pty/session.h"

#define PTY_MAX_SESSIONS 256
#define REPLAY_CHUNK (64u * 1024)
#define CLOSE_TAKEN_OVER 4001

struct pty_client;

struct pty_session {
	char id[33];
	char *cwd, *command;
	struct task *task;      /* the current shell, kept by `pin` */
	struct task_reader pin; /* holds the record while the session lives */
	uint64_t base;          /* output bytes of the session's earlier shells */
	/* The shell before this one, kept for replay (?since= before it ended,
	 * also once it exited: execd's replay buffer outlives its shell). */
	struct task *last_shell;
	struct task_reader last_pin;
	uint64_t last_base; /* session offset where last_shell's output starts */
	bool launch_attempted, launch_failed, pipe_mode;
	struct pty_client *holder;  /* connected, or connecting */
	struct pty_client *clients; /* every client that refers to the session */
	struct pty_session *next, *prev;
};

struct pty_table {
	struct pty_session *head;
	unsigned count;
	struct pty_client *all; /* every client, until freed: a reset ends them all */
};

struct pty_client {
	struct runner *r;
	struct pty_session *s; /* NULL once evicted or the session was deleted */
	struct ws_conn *ws;
	struct task_reader rd; /* rd.task: the shell this client watches */
	uint64_t base;         /* the session's base for rd.task */
	uint64_t since;
	uint64_t live_from;     /* task offset where replay ends and live output starts */
	uint32_t skip;          /* bytes of the first record before `since` */
	struct task_reader old; /* replay from the session's previous shell, first */
	uint64_t old_base;
	uint32_t old_skip;
	bool want_pipe, evicted, connected_sent, done, viewer;
	struct buf replay; /* replay bytes gathered into one frame */
	uint64_t replay_off;
	struct task_input_waiter w;
	struct pty_client *cnext, *cprev; /* in s->clients */
	struct pty_client *anext, *aprev; /* in the table's `all` */
};

static struct pty_table *ptys(struct runner *r)
{
	if (!r->ptys)
		r->ptys = calloc(1, sizeof(*r->ptys));
	return r->ptys;
}

struct pty_session *pty_session_find(struct runner *r, const char *id)
{
	if (!r->ptys || !id || !is_hex_id(id))
		return NULL;
	for (struct pty_session *s = r->ptys->head; s; s = s->next)
		if (!strcmp(s->id, id))
			return s;
	return NULL;
}

static uint64_t session_offset(struct pty_session *s)
{
	return s->base + (s->task ? s->task->spool.next_off : 0);
}

static bool session_running(struct pty_session *s)
{
	return s->task && !s->task->finished;
}

/* ---- the shell ---- */

static int start_shell(struct runner *r, struct pty_session *s, bool pipe_mode, struct error *err)
{
	if (s->task) {
		/* A new shell after the last one ended, as execd does; offsets
		 * go on from where it stopped, and its output stays for replay. */
		task_reader_detach(&s->last_pin);
		s->last_shell = s->task;
		s->last_base = s->base;
		memset(&s->last_pin, 0, sizeof(s->last_pin));
		task_reader_attach(s->last_shell, &s->last_pin, false);
		s->base += s->task->spool.next_off;
		task_reader_detach(&s->pin);
		s->task = NULL;
	}
	const char *term = getenv("TERM");
	if (!term || !*term || !strcmp(term, "dumb"))
		term = "xterm-256color";
	cleanup_json json_t *env = json_pack("{s:s}", "TERM", term);
	struct task_spec spec = {
		.api = TASK_API_PTY,
		.command = s->command ? s->command : "",
		.cwd = s->cwd,
		.env = env,
		.tty = !pipe_mode,
		.keep_stdin = pipe_mode,
		.cols = 80,
		.rows = 24,
		.state_in_fd = -1,
		.state_out_fd = -1,
	};
	s->launch_attempted = true;
	struct task *t = task_start(r, &spec, err);
	s->launch_failed = t == NULL;
	if (!t)
		return error_wrap(err, "cannot start the shell");
	s->task = t;
	s->pipe_mode = pipe_mode;
	memset(&s->pin, 0, sizeof(s->pin));
	task_reader_attach(t, &s->pin, false);
	return 0;
}

/* ---- frames to the client ---- */

static void send_json(struct pty_client *c, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return;
	ws_send(c->ws, WS_TEXT, s, strlen(s));
	free(s);
}

static void send_error(struct pty_client *c, const char *code, const char *msg)
{
	send_json(c, json_pack("{s:s,s:s,s:s}", "type", "error", "error", msg, "code", code));
}

static void flush_replay(struct pty_client *c)
{
	if (!c->replay.len)
		return;
	unsigned char head[9] = {0x03};
	for (int i = 0; i < 8; i++)
		head[1 + i] = (unsigned char)(c->replay_off >> (56 - 8 * i));
	ws_send2(c->ws, WS_BINARY, head, sizeof(head), c->replay.data, c->replay.len);
	buf_reset(&c->replay);
}

static void send_connected(struct pty_client *c)
{
	flush_replay(c);
	c->connected_sent = true;
	struct pty_session *s = c->s;
	json_t *j = json_pack("{s:s,s:s,s:s}", "type", "connected", "session_id", s ? s->id : "",
			      "mode", s && s->pipe_mode ? "pipe" : "pty");
	if (j && c->viewer)
		json_object_set_new(j, "viewer", json_true());
	send_json(c, j);
}

static void finish(struct pty_client *c, int exit_code)
{
	if (!c->connected_sent)
		send_connected(c);
	send_json(c, json_pack("{s:s,s:i}", "type", "exit", "exit_code", exit_code));
	ws_close(c->ws, 1000, "process exited");
	c->done = true;
}

/* Missed output (session offset off): gathered into replay frames. */
static void gather_replay(struct pty_client *c, uint64_t off, const char *data, uint32_t len)
{
	if (c->replay.len && c->replay.len + len > REPLAY_CHUNK)
		flush_replay(c);
	if (!c->replay.len)
		c->replay_off = off;
	buf_append(&c->replay, data, len);
}

/* Replay from the previous shell (it has ended: all of it is there);
 * false while some is owed and the window is full. */
static bool pump_old(struct pty_client *c, char *rbuf)
{
	while (c->old.task && !c->done && ws_has_room(c->ws)) {
		struct spool_rec rec;
		int rc = task_reader_next(&c->old, &rec, rbuf);
		if (rc <= 0) {
			if (rc < 0)
				log_errno("reading a pty session's output failed", -rc,
					  c->old.task->id);
			task_reader_detach(&c->old);
			break;
		}
		uint32_t skip = c->old_skip;
		c->old_skip = 0;
		if (rec.type != SPOOL_EVENT && rec.len > skip)
			gather_replay(c, c->old_base + rec.off + skip, rbuf + skip, rec.len - skip);
	}
	return !c->old.task;
}

/* Move output from the spool to the client while its window has room. */
static void pump(struct pty_client *c)
{
	static char rbuf[SPOOL_MAX_REC];
	struct task *t = c->rd.task;
	if (!pump_old(c, rbuf))
		return;
	while (t && !c->done && ws_has_room(c->ws)) {
		struct spool_rec rec;
		int rc = task_reader_next(&c->rd, &rec, rbuf);
		if (rc < 0) {
			log_errno("reading a pty session's output failed", -rc, t->id);
			break;
		}
		if (rc == 0) {
			if (!c->connected_sent)
				send_connected(c);
			if (task_reader_at_end(&c->rd))
				finish(c, t->exit_code); /* the exit record was lost */
			break;
		}
		if (rec.type == SPOOL_EVENT) {
			if (rec.len >= 5 && !memcmp(rbuf, "exit\n", 5))
				finish(c, t->exit_code);
			continue;
		}
		const char *data = rbuf + c->skip;
		uint32_t len = rec.len - c->skip;
		uint64_t off = rec.off + c->skip;
		c->skip = 0;
		if (!len)
			continue;
		if (off < c->live_from) {
			gather_replay(c, c->base + off, data, len);
			continue;
		}
		if (!c->connected_sent)
			send_connected(c);
		unsigned char ch = rec.type == SPOOL_STDERR ? 0x02 : 0x01;
		ws_send2(c->ws, WS_BINARY, &ch, 1, data, len);
	}
}

static void client_wake(struct task_reader *rd)
{
	struct pty_client *c = (struct pty_client *)((char *)rd - offsetof(struct pty_client, rd));
	pump(c);
}

/* ---- the connection ---- */

static void input_ready(struct task_input_waiter *w)
{
	struct pty_client *c = (struct pty_client *)((char *)w - offsetof(struct pty_client, w));
	ws_pause_input(c->ws, false);
}

/* The client no longer drives the session (evicted, session gone, closed). */
static void client_detach(struct pty_client *c)
{
	if (c->rd.task) {
		task_input_unwait(c->rd.task, &c->w);
		task_reader_detach(&c->rd);
	}
	task_reader_detach(&c->old);
	struct pty_session *s = c->s;
	if (s) {
		if (s->holder == c)
			s->holder = NULL;
		LIST_UNLINK_AT(s->clients, c, cnext, cprev);
	}
	c->s = NULL;
}

static void evict(struct pty_client *old)
{
	old->evicted = true;
	client_detach(old);
	old->done = true;
	if (old->ws)
		ws_close(old->ws, CLOSE_TAKEN_OVER, "TAKEN_OVER");
}

static void on_open(struct ws_conn *ws)
{
	struct pty_client *c = ws_arg(ws);
	c->ws = ws;
	struct pty_session *s = c->s;
	if (c->evicted) {
		ws_close(ws, CLOSE_TAKEN_OVER, "TAKEN_OVER");
		c->done = true;
		return;
	}
	if (!s) {
		send_error(c, "SESSION_GONE", "the pty session was deleted");
		ws_close(ws, 1011, "session gone");
		c->done = true;
		return;
	}
	if (c->viewer && !s->task) {
		send_error(c, "NOT_STARTED",
			   "the pty session has no shell yet: a viewer waits for a "
			   "client to connect without ?mode=viewer first");
		ws_close(ws, 1011, "no shell");
		client_detach(c);
		c->done = true;
		return;
	}
	if (!c->viewer) {
		if (s->holder && s->holder != c)
			evict(s->holder);
		s->holder = c;
	}
	if (!c->viewer && !session_running(s)) {
		struct error err;
		if (start_shell(c->r, s, c->want_pipe, &err) < 0) {
			log_warn("pty shell start failed", "{s:s,s:s}", "session", s->id, "error",
				 err.msg);
			send_error(c, "START_FAILED", err.msg);
			ws_close(ws, 1011, "start failed");
			client_detach(c);
			c->done = true;
			return;
		}
	}
	struct task *t = s->task;
	c->base = s->base;
	/* Replay from `since` (session offsets) to what exists now. */
	uint64_t first = spool_first_off(&t->spool);
	uint64_t since = c->since > c->base ? c->since - c->base : 0;
	if (since < first)
		since = first; /* older output was not retained */
	c->live_from = t->spool.next_off;
	if (since > c->live_from)
		since = c->live_from;
	spool_seek_off(&t->spool, &c->rd.cur, since, &c->skip);
	struct task *last = s->last_shell;
	if (last && last != t && c->since < s->base) {
		/* The replay begins in the previous shell's output. */
		uint64_t from = c->since > s->last_base ? c->since - s->last_base : 0;
		if (from < spool_first_off(&last->spool))
			from = spool_first_off(&last->spool);
		spool_seek_off(&last->spool, &c->old.cur, from, &c->old_skip);
		task_reader_attach(last, &c->old, false);
		c->old.off_read = from;
		c->old_base = s->last_base;
	}
	c->rd.wake = client_wake;
	task_reader_attach(t, &c->rd, !c->viewer);
	c->rd.off_read = since;
	pump(c);
}

void pty_frame_free(struct pty_frame *f)
{
	json_decref(f->json);
	f->json = NULL;
}

int pty_parse_frame(int opcode, const uint8_t *data, size_t len, struct pty_frame *f)
{
	memset(f, 0, sizeof(*f));
	f->kind = PTY_FRAME_IGNORE;
	if (opcode == WS_BINARY) {
		if (len && data[0] == 0x00) { /* only stdin goes this way */
			f->kind = PTY_FRAME_STDIN;
			f->data = data + 1;
			f->len = len - 1;
		}
		return f->kind;
	}
	f->json = json_loadb((const char *)data, len, 0, NULL);
	if (!json_is_object(f->json))
		return f->kind; /* not a frame: ignored, as execd does */
	json_t *jt = json_object_get(f->json, "type");
	const char *type = json_is_string(jt) ? json_string_value(jt) : "";
	if (!strcmp(type, "ping")) {
		f->kind = PTY_FRAME_PING;
	} else if (!strcmp(type, "resize")) {
		json_int_t cols = json_integer_value(json_object_get(f->json, "cols"));
		json_int_t rows = json_integer_value(json_object_get(f->json, "rows"));
		if (cols > 0 && rows > 0) { /* else ignored, as execd does */
			f->kind = PTY_FRAME_RESIZE;
			f->cols = (unsigned)(cols > 65535 ? 65535 : cols);
			f->rows = (unsigned)(rows > 65535 ? 65535 : rows);
		}
	} else if (!strcmp(type, "signal")) {
		f->kind = PTY_FRAME_SIGNAL;
		f->sig = task_signal_parse(json_string_value(json_object_get(f->json, "signal")));
	} else if (!strcmp(type, "stdin")) {
		json_t *d = json_object_get(f->json, "data");
		if (json_is_string(d)) {
			f->kind = PTY_FRAME_STDIN;
			f->data = (const uint8_t *)json_string_value(d);
			f->len = json_string_length(d);
		}
	} else {
		f->kind = PTY_FRAME_INVALID;
		snprintf(f->message, sizeof(f->message), "unknown frame type \"%.40s\"", type);
	}
	return f->kind;
}

static void on_message(struct ws_conn *ws, int opcode, const uint8_t *data, size_t len)
{
	struct pty_client *c = ws_arg(ws);
	struct pty_session *s = c->s;
	struct task *t = c->rd.task;
	if (!s || !t || c->done)
		return;
	struct error err;
	struct pty_frame f;
	int kind = pty_parse_frame(opcode, data, len, &f);
	if (c->viewer && kind != PTY_FRAME_PING && kind != PTY_FRAME_IGNORE) {
		/* Read-only: every reply counts against the window (http/ws.c). */
		send_error(c, "READ_ONLY", "viewer mode is read-only: no stdin, resize or signal");
		pty_frame_free(&f);
		return;
	}
	switch (kind) {
	case PTY_FRAME_IGNORE:
		break;
	case PTY_FRAME_STDIN:
		if (task_input_write(t, f.data, f.len, &err) < 0) {
			send_error(c, "STDIN_WRITE_FAILED", err.msg);
			ws_close(ws, 1011, "stdin closed");
			c->done = true;
		} else if (task_input_busy(t)) {
			/* The shell is not reading: stop reading the client too. */
			ws_pause_input(ws, true);
			task_input_wait(t, &c->w);
		}
		break;
	case PTY_FRAME_PING:
		send_json(c, json_pack("{s:s}", "type", "pong"));
		break;
	case PTY_FRAME_RESIZE:
		if (t->input && t->input->tty && task_resize(t, f.cols, f.rows, &err) < 0)
			log_warn("pty resize failed", "{s:s,s:s}", "session", s->id, "error",
				 err.msg);
		break;
	case PTY_FRAME_SIGNAL:
		if (!f.sig)
			log_warn("pty signal: not one the runner delivers", "{s:s}", "session",
				 s->id);
		else if (task_signal(t, f.sig, true, &err) < 0)
			log_warn("pty signal failed", "{s:s,s:s}", "session", s->id, "error",
				 err.msg);
		break;
	case PTY_FRAME_INVALID:
		send_error(c, "INVALID_FRAME", f.message);
		break;
	}
	pty_frame_free(&f);
}

static void on_writable(struct ws_conn *ws)
{
	pump(ws_arg(ws));
}

static void client_free(struct loop *loop, void *arg)
{
	(void)loop;
	struct pty_client *c = arg;
	struct pty_table *tab = c->r->ptys;
	struct pty_client *none = NULL; /* the table is gone: the neighbours are still unlinked */
	struct pty_client **all = tab ? &tab->all : &none;
	LIST_UNLINK_AT(*all, c, anext, aprev);
	buf_free(&c->replay);
	free(c);
}

static void on_close(struct ws_conn *ws)
{
	struct pty_client *c = ws_arg(ws);
	client_detach(c);
	c->done = true;
	/* The connection can end inside pump() (a send fails): free after
	 * the loop batch, as the connection itself is. */
	if (loop_defer(&c->r->loop, client_free, c) < 0)
		log_error("out of memory freeing a pty client", NULL);
}

static const struct ws_ops pty_ws_ops = {on_open, on_message, on_writable, on_close};

/* ---- the sessions ---- */

/* The cwd as execd treats it: made (mkdir -p) when missing, here with the
 * task user's rights, beneath the writable roots. */
static int ensure_cwd(struct runner *r, const char *in, char *out, size_t outsz, struct error *err)
{
	int rc = files_clean_path(in, strlen(in), out, outsz);
	if (rc < 0)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "cwd '%.200s' must be an absolute path", in);
	struct files_ident id;
	files_task_ident(r, &id);
	if ((rc = files_enter(&id)) < 0)
		return error_set(err, -rc, "RUNTIME_ERROR", "cannot act as the task user");
	bool created;
	struct files_made made;
	rc = files_mkdirs(&id, out, 0755, &created, &made);
	files_made_free(&made);
	files_leave();
	if (rc < 0) {
		/* The code POST /directories gives the same mkdir -p
		 * (design/architecture.md#options-one-set-of-rules). */
		int e = -rc;
		const char *code = e == EACCES || e == EPERM || e == EROFS || e == FILES_EOUTSIDE
					   ? "PERMISSION_DENIED"
				   : e == ENOTDIR || e == EEXIST ? "INVALID_FILE"
				   : e == ENOENT                 ? "FILE_NOT_FOUND"
								 : "RUNTIME_ERROR";
		if (e == FILES_EOUTSIDE)
			return error_set(
				err, 0, code,
				"error creating pty session work directory %.200s: outside "
				"the directories tasks may write (%.300s)",
				out, id.write_roots ? id.write_roots : "");
		return error_set(err, e >= 4096 ? 0 : e, code,
				 "error creating pty session work directory %.200s (acting as the "
				 "task user, uid %u)",
				 out, (unsigned)id.uid);
	}
	close(rc);
	return 0;
}

int pty_session_create(struct runner *r, const char *cwd, const char *command,
		       struct pty_session **out, struct error *err)
{
	struct pty_table *tab = ptys(r);
	if (!tab)
		return error_set(err, ENOMEM, "RUNTIME_ERROR", "pty table");
	if (tab->count >= PTY_MAX_SESSIONS)
		return error_set(err, 0, "TOO_MANY_SESSIONS", "%u pty sessions exist, the maximum",
				 tab->count);
	char path[4096];
	if (cwd && *cwd && ensure_cwd(r, cwd, path, sizeof(path), err) < 0)
		return -1;
	struct pty_session *s = calloc(1, sizeof(*s));
	if (!s || random_id(s->id) < 0 || (cwd && *cwd && !(s->cwd = strdup(path))) ||
	    (command && *command && !(s->command = strdup(command)))) {
		if (s) {
			free(s->cwd);
			free(s->command);
		}
		free(s);
		return error_set(err, ENOMEM, "RUNTIME_ERROR", "error creating pty session");
	}
	LIST_PUSH(tab->head, s);
	tab->count++;
	log_info("pty session created", "{s:s}", "session", s->id);
	*out = s;
	return 0;
}

const char *pty_session_id(const struct pty_session *s)
{
	return s->id;
}

bool pty_session_held(const struct pty_session *s)
{
	return s->holder != NULL;
}

void pty_session_status(struct pty_session *s, struct pty_session_status *st)
{
	st->running = session_running(s);
	st->output_offset = session_offset(s);
	st->launch_attempted = s->launch_attempted;
	st->launch_failed = s->launch_failed;
}

static void session_free(struct runner *r, struct pty_session *s)
{
	struct pty_table *tab = r->ptys;
	LIST_UNLINK(tab->head, s);
	tab->count--;
	/* A connected client sees the shell's end (exit frame) and the close;
	 * one still connecting finds the session gone. */
	for (struct pty_client *c = s->clients, *next; c; c = next) {
		next = c->cnext;
		c->s = NULL;
		c->cnext = c->cprev = NULL;
	}
	s->clients = NULL;
	s->holder = NULL;
	if (s->task) {
		if (!s->task->finished)
			task_kill_now(s->task, TS_CANCELLED);
		task_reader_detach(&s->pin);
	}
	task_reader_detach(&s->last_pin);
	free(s->cwd);
	free(s->command);
	free(s);
}

void pty_session_delete(struct runner *r, struct pty_session *s)
{
	log_info("pty session deleted", "{s:s}", "session", s->id);
	session_free(r, s);
}

enum MHD_Result pty_session_attach(struct http_req *req, struct pty_session *s,
				   const struct pty_attach *a)
{
	struct pty_client *c = calloc(1, sizeof(*c));
	if (!c)
		return MHD_NO;
	c->r = req->r;
	c->s = s;
	c->viewer = a->viewer;
	c->w.ready = input_ready;
	c->want_pipe = a->want_pipe;
	c->since = a->since;
	LIST_PUSH_AT(s->clients, c, cnext, cprev);
	struct pty_table *tab = req->r->ptys;
	LIST_PUSH_AT(tab->all, c, anext, aprev);
	/* Held from now on: a second request waits for this one's fate. */
	if (!s->holder && !a->viewer)
		s->holder = c;
	return ws_upgrade(req, &pty_ws_ops, c, 0);
}
unsigned pty_end_all(struct runner *r)
{
	struct pty_table *tab = r->ptys;
	if (!tab)
		return 0;
	/* Every client first, connected or connecting, of a live session or
	 * of one deleted earlier: its reader lets go of the shell's record
	 * now, whether or not it reads what is sent. */
	for (struct pty_client *c = tab->all; c; c = c->anext) {
		/* Also one that got its exit frame but has not closed yet. */
		bool was_done = c->done;
		client_detach(c);
		c->done = true;
		if (!was_done && c->ws && !ws_closing(c->ws)) {
			send_error(c, "RESET",
				   "the box was reset (POST /v1/reset): the pty session "
				   "is gone");
			ws_close(c->ws, 1001, "box reset");
		}
	}
	unsigned n = 0;
	while (tab->head) {
		session_free(r, tab->head);
		n++;
	}
	return n;
}

void pty_free_all(struct runner *r)
{
	if (!r->ptys)
		return;
	while (r->ptys->head)
		session_free(r, r->ptys->head);
	free(r->ptys);
	r->ptys = NULL;
}
