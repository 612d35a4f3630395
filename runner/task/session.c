#include "task/session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "task/task.h"
#include "core/randomid.h"

#define SESSION_MAX 256
#define STATE_MAX (1024 * 1024)

int sessions_init(struct runner *r)
{
	r->sessions = calloc(1, sizeof(*r->sessions));
	return r->sessions ? 0 : -1;
}

struct session *session_find(struct runner *r, const char *id)
{
	for (struct session *s = r->sessions->head; s; s = s->next)
		if (!strcmp(s->id, id))
			return s;
	return NULL;
}

struct session *session_create(struct runner *r, const char *cwd, struct error *err)
{
	if (r->sessions->count >= SESSION_MAX) {
		error_set(err, 0, "TOO_MANY_SESSIONS", "cannot create more sessions");
		return NULL;
	}
	cleanup_free struct session *s = calloc(1, sizeof(*s));
	if (!s) {
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot create a session");
		return NULL;
	}
	s->state_fd = -1;
	s->run_state_fd = -1;
	int rc = random_id(s->id);
	if (rc < 0) {
		error_set(err, -rc, "RUNTIME_ERROR", "cannot create a session");
		return NULL;
	}
	if (cwd && !(s->cwd = strdup(cwd))) {
		error_set(err, ENOMEM, "RUNTIME_ERROR", "cannot create a session");
		return NULL;
	}
	s->next = r->sessions->head;
	r->sessions->head = s;
	r->sessions->count++;
	log_info("session created", "{s:s}", "session", s->id);
	return take_ptr(s);
}

/* The running command goes on being reported, but no longer saves state. */
static void session_detach_run(struct session *s)
{
	if (s->running) {
		s->running->on_finish = NULL;
		s->running->finish_arg = NULL;
	}
	if (s->run_state_fd >= 0)
		close(s->run_state_fd);
	s->run_state_fd = -1;
}

static void session_free(struct session *s)
{
	session_detach_run(s);
	if (s->state_fd >= 0)
		close(s->state_fd);
	free(s->cwd);
	free(s);
}

void session_delete(struct runner *r, struct session *s)
{
	for (struct session **p = &r->sessions->head; *p; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			break;
		}
	}
	r->sessions->count--;
	struct task *running = s->running;
	session_detach_run(s);
	if (running)
		task_kill(running, TS_CANCELLED);
	/* What its runs left behind was started in it, as a shell's background jobs are: it
	 * goes with the session (docs/design/tasks.md#left-behind-processes-kept-supervised). */
	for (struct task *t = r->tasks->head; t; t = t->next) {
		if (t->owner != s)
			continue;
		t->owner = NULL;
		if (task_left_running(t))
			task_kill(t, TS_CANCELLED);
	}
	log_info("session deleted", "{s:s}", "session", s->id);
	session_free(s);
}

void sessions_close_all(struct runner *r)
{
	if (!r->sessions)
		return;
	for (struct session *s = r->sessions->head; s; s = s->next)
		if (s->running)
			task_kill(s->running, TS_KILLED);
}

void sessions_free_all(struct runner *r)
{
	if (!r->sessions)
		return;
	while (r->sessions->head) {
		struct session *s = r->sessions->head;
		r->sessions->head = s->next;
		session_free(s);
	}
	free(r->sessions);
	r->sessions = NULL;
}

int session_memfd(const char *name)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0) {
		log_errno("memfd_create failed", errno, name);
		return -1;
	}
	/* memfd_create makes it 0777: anyone who can name it (another task
	 * through /proc/PID/fd) could read the saved environment. */
	if (fchmod(fd, 0600) < 0) {
		log_errno("fchmod(session memfd) failed", errno, name);
		close(fd);
		return -1;
	}
	return fd;
}

char *session_wrap_command(const char *command, bool explicit_cwd)
{
	/* fd 3: the state saved by the previous run (may be empty), read
	 * through the descriptor: the memfd is 0600 and the runner's, so a
	 * reopen through /proc/self/fd/3 is refused (as it is for every other
	 * process). fd 4: where this run saves its state on exit, whatever
	 * the exit. */
	char *out;
	if (asprintf(&out,
		     "__forceai_s=\n"
		     "while IFS= read -r __forceai_l <&3 || [ -n \"$__forceai_l\" ]; do\n"
		     "__forceai_s=\"$__forceai_s$__forceai_l\n\"\n"
		     "done\n"
		     "eval \"$__forceai_s\" 2>/dev/null\n"
		     "unset __forceai_s __forceai_l\n"
		     "%s"
		     "trap '__forceai_rc=$?; export -p >&4 2>/dev/null; exit $__forceai_rc' EXIT\n"
		     "exec 2>&1\n"
		     "%s\n",
		     explicit_cwd ? ""
				  : "if [ -n \"$PWD\" ]; then cd -- \"$PWD\" 2>/dev/null; fi\n",
		     command) < 0)
		return NULL;
	return out;
}

/* The task's on_finish hook: what the run saved becomes the state. */
static void on_run_finish(struct task *t, json_t *exit_ev)
{
	(void)exit_ev;
	struct session *s = t->finish_arg;
	t->finish_arg = NULL;
	s->running = NULL;
	int fd = take_fd(s->run_state_fd);
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_size == 0 || st.st_size > STATE_MAX) {
		/* The run exec'd away or wrote junk: keep the previous state. */
		close(fd);
		return;
	}
	if (s->state_fd >= 0)
		close(s->state_fd);
	s->state_fd = fd;
}

void session_run_attach(struct session *s, struct task *t, int state_out_fd)
{
	s->running = t;
	t->owner = s;
	s->run_state_fd = state_out_fd;
	t->on_finish = on_run_finish;
	t->finish_arg = s;
}
