/* execd bash sessions: each run is a fresh confined shell; exported
 * variables and the working directory carry over through a saved state
 * (`export -p`) handed to the next run on fd 3 and collected from fd 4. */
#pragma once
#include <stdbool.h>

struct runner;
struct task;
struct error;

struct session {
	char id[33];
	char *cwd;    /* NULL = the default task cwd */
	int state_fd; /* memfd holding the last saved state, or -1 */
	struct task *running;
	int run_state_fd; /* the running command's state output (its fd 4), or -1 */
	struct session *next;
};

struct session_table {
	struct session *head;
	unsigned count;
};

int sessions_init(struct runner *r);
void sessions_free_all(struct runner *r);
void sessions_close_all(struct runner *r);
struct session *session_find(struct runner *r, const char *id);
/* NULL with err set: TOO_MANY_SESSIONS, RUNTIME_ERROR. */
struct session *session_create(struct runner *r, const char *cwd, struct error *err);
void session_delete(struct runner *r, struct session *s);
/* A memfd for a session's saved state: mode 0600, owned by the runner; the
 * task uses it only through the descriptor it inherits. -1 on failure
 * (logged). */
int session_memfd(const char *name);
/* Builds the wrapper script for one run (malloc'd). */
char *session_wrap_command(const char *command, bool explicit_cwd);
/* t, just started with state_out_fd as its fd 4, is the session's run:
 * takes state_out_fd; when t finishes (its on_finish hook), what the run
 * saved there becomes the session's state. */
void session_run_attach(struct session *s, struct task *t, int state_out_fd);
