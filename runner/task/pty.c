#include "task/pty.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/procfs.h"
#include "core/runner.h"
#include "core/list.h"
#include "task/spawn.h"
#include "task/task.h"

#ifndef PIDFD_SIGNAL_PROCESS_GROUP
#define PIDFD_SIGNAL_PROCESS_GROUP (1u << 2)
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

/* ---- setting up ---- */

static int open_pty(unsigned short cols, unsigned short rows, int *master, int *slave,
		    struct error *err)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return error_set(err, errno, "RUNTIME_ERROR", "cannot open a terminal (/dev/ptmx)");
	if (grantpt(m) < 0 || unlockpt(m) < 0) {
		int e = errno;
		close(m);
		return error_set(err, e, "RUNTIME_ERROR", "cannot unlock the terminal");
	}
	/* The peer straight from the master: no path lookup in /dev/pts,
	 * which another devpts instance could shadow. */
	int s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s < 0) {
		char name[64];
		if (ptsname_r(m, name, sizeof(name)) != 0 ||
		    (s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
			int e = errno;
			close(m);
			return error_set(err, e, "RUNTIME_ERROR",
					 "cannot open the terminal's peer");
		}
	}
	/* The terminal stays the runner's, 0600: the shell gets the open
	 * descriptor (and /dev/tty, which checks no owner), so no other task
	 * of the same uid, nor another session's shell, can open /dev/pts/N
	 * by name to read what the client types or write to its screen
	 * (issue 19). In non-root mode the runner's uid is the tasks': there
	 * the mode keeps out only other uids (docs/design/build.md). */
	if (fchmod(s, 0600) < 0) {
		int e = errno;
		close(s);
		close(m);
		return error_set(err, e, "RUNTIME_ERROR",
				 "cannot hand the terminal to the task user");
	}
	struct winsize ws = {.ws_row = rows, .ws_col = cols};
	if (ioctl(m, TIOCSWINSZ, &ws) < 0 || fcntl(m, F_SETFL, O_NONBLOCK) < 0) {
		int e = errno;
		close(s);
		close(m);
		return error_set(err, e, "RUNTIME_ERROR", "cannot set up the terminal");
	}
	*master = m;
	*slave = s;
	return 0;
}

int task_io_prepare(const struct task_spec *spec, struct task_io_prep *p, struct error *err)
{
	*p = (struct task_io_prep)TASK_IO_PREP_INIT;
	if (spec->tty) {
		p->tty = true;
		p->cols = spec->cols ? spec->cols : 80;
		p->rows = spec->rows ? spec->rows : 24;
		int m = -1, s = -1;
		if (open_pty(p->cols, p->rows, &m, &s, err) < 0)
			return -1;
		p->child_in = p->child_out = s;
		p->parent_out = m;
		p->parent_in = dup(m);
		if (p->parent_in < 0) {
			int e = errno;
			task_io_abort(p);
			return error_set(err, e, "RUNTIME_ERROR", "dup");
		}
		/* dup() drops FD_CLOEXEC. */
		fcntl(p->parent_in, F_SETFD, FD_CLOEXEC);
		return 0;
	}
	if (spec->keep_stdin) {
		int fds[2];
		if (pipe2(fds, O_CLOEXEC) < 0)
			return error_set(err, errno, "RUNTIME_ERROR",
					 "cannot create the stdin pipe");
		if (fcntl(fds[1], F_SETFL, O_NONBLOCK) < 0) {
			int e = errno;
			close(fds[0]);
			close(fds[1]);
			return error_set(err, e, "RUNTIME_ERROR", "fcntl(O_NONBLOCK)");
		}
		p->child_in = fds[0];
		p->parent_in = fds[1];
	}
	return 0;
}

void task_io_abort(struct task_io_prep *p)
{
	int *fds[] = {&p->child_in, &p->parent_in, &p->parent_out};
	if (p->child_out >= 0 && p->child_out != p->child_in)
		close(p->child_out);
	p->child_out = -1;
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

static void on_writable(struct loop *loop, struct loop_watch *w, uint32_t events);

int task_io_attach(struct task *t, struct task_io_prep *p)
{
	if (p->child_out >= 0 && p->child_out != p->child_in)
		close(p->child_out);
	if (p->child_in >= 0)
		close(p->child_in);
	p->child_in = p->child_out = -1;
	if (p->parent_in < 0)
		return 0;
	struct task_input *in = calloc(1, sizeof(*in));
	if (!in) {
		close(p->parent_in);
		p->parent_in = -1;
		return -ENOMEM;
	}
	in->t = t;
	in->fd = p->parent_in;
	in->tty = p->tty;
	in->master = p->tty ? p->parent_in : -1;
	in->cols = p->cols;
	in->rows = p->rows;
	p->parent_in = -1;
	int rc = loop_watch_add(&t->r->loop, &in->w, in->fd, 0, on_writable, in);
	if (rc < 0) {
		close(in->fd);
		free(in);
		return rc;
	}
	t->input = in;
	return 0;
}

/* ---- input ---- */

static void wake_waiters(struct task_input *in)
{
	while (in->waiters) {
		struct task_input_waiter *w = in->waiters;
		LIST_UNLINK(in->waiters, w);
		w->linked = false;
		w->ready(w);
	}
}

static void input_close(struct task_input *in)
{
	if (in->fd >= 0) {
		loop_watch_del(&in->t->r->loop, &in->w);
		close(in->fd);
	}
	in->eof_requested = true;
	in->fd = -1;
	in->master = -1;
	buf_free(&in->pending);
	wake_waiters(in);
}

void task_io_finish(struct task *t)
{
	if (t->input)
		input_close(t->input);
}

void task_io_free(struct task *t)
{
	task_io_finish(t);
	free(t->input);
	t->input = NULL;
}

bool task_input_open(struct task *t)
{
	return t->input && t->input->fd >= 0 && !t->input->eof_requested && !t->finished;
}

/* Write what is pending; close once asked and done. 0, or -1 when the
 * task's side is gone. */
static int flush(struct task_input *in)
{
	while (buf_avail(&in->pending)) {
		const char *p = in->pending.data + in->pending.off;
		ssize_t n = write(in->fd, p, buf_avail(&in->pending));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			/* EPIPE (pipe: nobody reads) or EIO (terminal hung up). */
			input_close(in);
			return -1;
		}
		in->pending.off += (size_t)n;
	}
	if (!buf_avail(&in->pending))
		buf_reset(&in->pending);
	if (in->eof_requested && !buf_avail(&in->pending) && !in->tty) {
		input_close(in);
		return 0;
	}
	uint32_t ev = buf_avail(&in->pending) ? EPOLLOUT : 0;
	loop_watch_set(&in->t->r->loop, &in->w, ev);
	if (buf_avail(&in->pending) <= TASK_INPUT_HIGH / 2)
		wake_waiters(in);
	return 0;
}

static void on_writable(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	flush(w->arg);
}

static int closed_error(struct task *t, struct error *err)
{
	if (!t->input)
		return error_set(err, 0, "STDIN_NOT_OPEN",
				 "task %s was not started with stdin (\"stdin\": true or \"tty\")",
				 t->id);
	return error_set(err, 0, "STDIN_CLOSED", "the input of task %s is closed", t->id);
}

int task_input_write(struct task *t, const void *data, size_t len, struct error *err)
{
	struct task_input *in = t->input;
	if (!task_input_open(t))
		return closed_error(t, err);
	if (len == 0)
		return 0;
	if (buf_append(&in->pending, data, len) < 0)
		return error_set(err, ENOMEM, "RUNTIME_ERROR", "queueing input");
	in->mid_line = ((const char *)data)[len - 1] != '\n';
	if (flush(in) < 0)
		return closed_error(t, err);
	return 0;
}

bool task_input_busy(struct task *t)
{
	return t->input && buf_avail(&t->input->pending) > TASK_INPUT_HIGH;
}

size_t task_input_queued(struct task *t)
{
	return t->input ? buf_avail(&t->input->pending) : 0;
}

void task_input_wait(struct task *t, struct task_input_waiter *w)
{
	struct task_input *in = t->input;
	if (w->linked)
		return;
	if (!in || in->fd < 0 || buf_avail(&in->pending) <= TASK_INPUT_HIGH / 2) {
		w->ready(w);
		return;
	}
	LIST_PUSH(in->waiters, w);
	w->linked = true;
}

void task_input_unwait(struct task *t, struct task_input_waiter *w)
{
	if (!w->linked || !t->input)
		return;
	struct task_input *in = t->input;
	LIST_UNLINK(in->waiters, w);
	w->linked = false;
}

int task_input_eof(struct task *t, struct error *err)
{
	struct task_input *in = t->input;
	if (!task_input_open(t))
		return closed_error(t, err);
	if (in->tty) {
		/* A terminal cannot be closed from our side without hanging
		 * up the task: type the EOF character, twice when a partial
		 * line waits (the first one only sends that line). */
		struct termios tio;
		char veof = 4;
		if (tcgetattr(in->master, &tio) == 0 && tio.c_cc[VEOF])
			veof = (char)tio.c_cc[VEOF];
		char two[2] = {veof, veof};
		size_t n = in->mid_line ? 2 : 1;
		if (task_input_write(t, two, n, err) < 0)
			return -1;
		in->mid_line = false;
		return 0;
	}
	in->eof_requested = true;
	flush(in);
	return 0;
}

/* ---- terminal size, signals ---- */

int task_resize(struct task *t, unsigned cols, unsigned rows, struct error *err)
{
	struct task_input *in = t->input;
	if (cols < 1 || rows < 1 || cols > 65535 || rows > 65535)
		return error_set(err, 0, "INVALID_REQUEST_BODY",
				 "cols and rows must be integers from 1 to 65535");
	if (!in || !in->tty)
		return error_set(err, 0, "NOT_A_TERMINAL", "task %s does not run under a terminal",
				 t->id);
	if (in->master < 0 || t->finished)
		return error_set(err, 0, "STDIN_CLOSED", "the terminal of task %s is closed",
				 t->id);
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	if (ioctl(in->master, TIOCSWINSZ, &ws) < 0)
		return error_set(err, errno, "RUNTIME_ERROR", "TIOCSWINSZ");
	in->cols = (unsigned short)cols;
	in->rows = (unsigned short)rows;
	return 0;
}

static const struct {
	const char *name;
	int sig;
} allowed[] = {
	{"INT", SIGINT},   {"TERM", SIGTERM},   {"HUP", SIGHUP},   {"QUIT", SIGQUIT},
	{"USR1", SIGUSR1}, {"USR2", SIGUSR2},   {"KILL", SIGKILL}, {"STOP", SIGSTOP},
	{"CONT", SIGCONT}, {"WINCH", SIGWINCH},
};

int task_signal_parse(const char *name)
{
	if (!name)
		return 0;
	if (!strncmp(name, "SIG", 3))
		name += 3;
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
		if (!strcmp(name, allowed[i].name))
			return allowed[i].sig;
	return 0;
}

/* /proc/PID/stat's process group and session. 0 or -1. */
static int pgrp_and_session(pid_t pid, pid_t *pgrp, pid_t *sid)
{
	struct procfs_stat st;
	if (procfs_read_stat(pid, &st) < 0)
		return -1;
	*pgrp = st.pgrp;
	*sid = st.session;
	return 0;
}

struct member_find {
	pid_t pg, sid, found;
};

static int is_member(pid_t pid, int procfd, void *arg)
{
	(void)procfd;
	struct member_find *m = arg;
	pid_t g, se;
	if (pid > 1 && pgrp_and_session(pid, &g, &se) == 0 && g == m->pg && se == m->sid) {
		m->found = pid;
		return 1;
	}
	return 0;
}

/* A process of group pg in session sid, from /proc; -1 when none. */
static pid_t find_member(pid_t pg, pid_t sid)
{
	struct member_find m = {pg, sid, -1};
	(void)procfs_scan(is_member, &m); /* unreadable /proc: none found */
	return m.found;
}

/* The terminal's foreground group, signalled only while it is still the
 * group of the terminal's own session: the number TIOCGPGRP gives can
 * outlive the group (its processes gone, the shell not yet back in the
 * foreground) and be reused by another process group, a tenant's or the
 * runner's. Pinned with a pidfd of its leader; with
 * PIDFD_SIGNAL_PROCESS_GROUP (Linux 6.9) the signal goes to that very
 * group. 1 sent, 0 not (no such group: the caller falls back to the shim),
 * -errno. */
static int signal_foreground(int master, int sig)
{
	pid_t pg = -1, sid = -1;
	if (ioctl(master, TIOCGPGRP, &pg) < 0 || pg <= 1 || ioctl(master, TIOCGSID, &sid) < 0 ||
	    sid <= 1)
		return 0;
	/* The leader, or (it has exited, e.g. the first command of a
	 * pipeline) any member of the group in the terminal's session. */
	pid_t member = pg;
	int pfd = (int)syscall(SYS_pidfd_open, member, 0);
	bool no_pidfd = pfd < 0 && errno == ENOSYS; /* before 5.3, or under valgrind */
	if (pfd < 0 && !no_pidfd)
		member = find_member(pg, sid);
	if (pfd < 0 && !no_pidfd && member > 0)
		pfd = (int)syscall(SYS_pidfd_open, member, 0);
	if (pfd < 0 && !no_pidfd)
		return 0;
	if (no_pidfd && (member = find_member(pg, sid)) <= 0)
		return 0;
	pid_t g, se;
	int rc = 0;
	if (pgrp_and_session(member, &g, &se) == 0 && g == pg && se == sid) {
		if (pfd >= 0 &&
		    syscall(SYS_pidfd_send_signal, pfd, sig, NULL, PIDFD_SIGNAL_PROCESS_GROUP) == 0)
			rc = 1;
		else if (pfd < 0 || errno == EINVAL || errno == ENOSYS)
			/* No group signal through a pidfd (before 6.9): right after
			 * the check, the narrowest window there is. */
			rc = kill(-pg, sig) == 0 ? 1 : errno == ESRCH ? 0 : -errno;
		else
			rc = errno == ESRCH ? 0 : -errno;
	}
	if (pfd >= 0)
		close(pfd);
	return rc;
}

int task_signal(struct task *t, int sig, bool foreground, struct error *err)
{
	if (t->finished || !t->proc_running)
		return error_set(err, 0, "TASK_NOT_RUNNING", "task %s is not running", t->id);
	if (foreground && t->input && t->input->tty && t->input->master >= 0) {
		/* The group the terminal would signal for a typed key. */
		int rc = signal_foreground(t->input->master, sig);
		if (rc > 0)
			return 0;
		if (rc < 0)
			return error_set(err, -rc, "RUNTIME_ERROR",
					 "signalling the foreground group");
	}
	/* The shim knows the task's process group (its child, a session
	 * leader) and forwards the signal to it. */
	union sigval v = {.sival_int = sig};
	if (sigqueue(t->shim_pid, SHIM_SIG_FORWARD, v) < 0)
		return error_set(err, errno, "RUNTIME_ERROR", "sigqueue");
	return 0;
}
