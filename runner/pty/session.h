/* execd's PTY sessions (pty/session.c): the session table, each session's
 * shell (a confined task) and the WebSocket clients that drive or watch it.
 * The routes (api/pty.c) parse requests and call these. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "core/error.h"
#include "http/http.h"

struct runner;
struct pty_session;

struct pty_session_status {
	bool running, launch_attempted, launch_failed;
	uint64_t output_offset; /* session offset: output of every shell so far */
};

/* NULL when id is not a session's (or not a hex id). */
struct pty_session *pty_session_find(struct runner *r, const char *id);
/* A new session (no shell until its first client): cwd made (mkdir -p) as
 * the task user when given; error codes TOO_MANY_SESSIONS, the mkdir's
 * (PERMISSION_DENIED, INVALID_FILE, ...), RUNTIME_ERROR. */
int pty_session_create(struct runner *r, const char *cwd, const char *command,
		       struct pty_session **out, struct error *err);
const char *pty_session_id(const struct pty_session *s);
/* A client holds (or is connecting to hold) the session. */
bool pty_session_held(const struct pty_session *s);
void pty_session_status(struct pty_session *s, struct pty_session_status *st);
/* Ends the shell (cancelled) and forgets the session; its clients see the end. */
void pty_session_delete(struct runner *r, struct pty_session *s);

/* What a WebSocket client asked for (GET /pty/{id}/ws's query). */
struct pty_attach {
	uint64_t since; /* session offset to replay from */
	bool viewer;    /* ?mode=viewer: read-only, never holds */
	bool want_pipe; /* ?pty=0: the shell gets pipes, not a terminal */
};
/* Upgrades req to the session's WebSocket (a non-viewer holds it from now,
 * evicting the holder on open: the route checked ?takeover). */
enum MHD_Result pty_session_attach(struct http_req *req, struct pty_session *s,
				   const struct pty_attach *a);

void pty_free_all(struct runner *r);
/* POST /v1/reset (a profile hook): every session ends, connected or not;
 * clients get an error frame (code RESET) and the close; every id is
 * forgotten, every record let go. Returns the sessions ended. */
unsigned pty_end_all(struct runner *r);

/* A client frame of the PTY WebSocket, parsed without I/O (also driven by
 * tests/fuzz/fuzz_ws.c). data/len point into the frame or into json. */
enum pty_frame_kind {
	PTY_FRAME_IGNORE,  /* not a frame execd acts on */
	PTY_FRAME_STDIN,   /* binary 0x00 + bytes, or {"type":"stdin","data"} */
	PTY_FRAME_RESIZE,  /* {"type":"resize","cols","rows"}, both > 0 */
	PTY_FRAME_SIGNAL,  /* {"type":"signal","signal"}: sig 0 = not one we deliver */
	PTY_FRAME_PING,    /* {"type":"ping"} */
	PTY_FRAME_INVALID, /* a JSON object of another type: an error frame */
};
struct pty_frame {
	enum pty_frame_kind kind;
	const uint8_t *data;
	size_t len;
	unsigned cols, rows;
	int sig;
	char message[96];
	json_t *json;
};
int pty_parse_frame(int opcode, const uint8_t *data, size_t len, struct pty_frame *f);
void pty_frame_free(struct pty_frame *f);
