#include "core/signals.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "core/log.h"

static void on_signal(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	struct signals *s = w->arg;
	struct signalfd_siginfo si;
	for (;;) {
		ssize_t n = read(s->fd, &si, sizeof(si));
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
		for (size_t i = 0; i < s->n_actions; i++) {
			if (s->actions[i].sig == sig && s->actions[i].fn) {
				s->actions[i].fn(s->arg, sig);
				break;
			}
		}
	}
}

int signals_init(struct signals *s, struct loop *loop, const struct signal_action *actions,
		 size_t n_actions, void *arg)
{
	s->fd = -1;
	s->actions = actions;
	s->n_actions = n_actions;
	s->arg = arg;
	sigset_t set;
	sigemptyset(&set);
	struct sigaction ign = {.sa_handler = SIG_IGN};
	for (size_t i = 0; i < n_actions; i++) {
		if (actions[i].fn)
			sigaddset(&set, actions[i].sig);
		else if (sigaction(actions[i].sig, &ign, NULL) < 0)
			return -errno;
	}
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return -errno;
	s->fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->fd < 0)
		return -errno;
	return loop_watch_add(loop, &s->watch, s->fd, EPOLLIN, on_signal, s);
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
