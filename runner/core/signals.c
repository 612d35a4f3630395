#include "core/signals.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "core/log.h"
#include "core/runner.h"

static const int handled[] = {SIGCHLD, SIGTERM, SIGINT,  SIGHUP,
			      SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
#define N_HANDLED (sizeof(handled) / sizeof(handled[0]))

static void forward(struct runner *r, int sig)
{
	if (!r->main_running)
		return;
	/* The main child leads its own process group: the whole group gets
	 * the signal, as a terminal would deliver it. */
	if (kill(-r->main_pid, sig) < 0 && errno != ESRCH)
		log_errno("forwarding a signal failed", errno, strsignal(sig));
}

static void on_signal(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	struct runner *r = w->arg;
	struct signalfd_siginfo si;
	for (;;) {
		ssize_t n = read(r->signal_fd, &si, sizeof(si));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				log_errno("read(signalfd) failed", errno, NULL);
			return;
		}
		if (n != sizeof(si))
			return;
		int sig = (int)si.ssi_signo;
		switch (sig) {
		case SIGCHLD:
			reaper_reap(&r->reaper);
			runner_maybe_exit(r);
			break;
		case SIGTERM:
		case SIGINT:
			forward(r, sig);
			runner_shutdown(r, sig == SIGTERM ? "SIGTERM" : "SIGINT");
			break;
		default:
			if (r->main_running)
				forward(r, sig);
			else
				log_info("signal ignored (no main child)", "{s:s}", "signal",
					 strsignal(sig));
			break;
		}
	}
}

int signals_init(struct runner *r)
{
	sigset_t set;
	sigemptyset(&set);
	for (size_t i = 0; i < N_HANDLED; i++)
		sigaddset(&set, handled[i]);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return -errno;
	/* A vanished client must never kill the runner; job-control stops
	 * must never freeze PID 1. */
	struct sigaction ign = {.sa_handler = SIG_IGN};
	if (sigaction(SIGPIPE, &ign, NULL) < 0 || sigaction(SIGTTIN, &ign, NULL) < 0 ||
	    sigaction(SIGTTOU, &ign, NULL) < 0)
		return -errno;
	r->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (r->signal_fd < 0)
		return -errno;
	return loop_watch_add(&r->loop, &r->signal_watch, r->signal_fd, EPOLLIN, on_signal, r);
}

void signals_reset_child(void)
{
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	for (int sig = 1; sig < NSIG; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		sigaction(sig, &dfl, NULL); /* EINVAL for reserved RT signals: ignored */
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}
