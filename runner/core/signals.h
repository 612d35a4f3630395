/* Signals arrive through a signalfd in the event loop; nothing runs in a
 * signal handler. What each signal means is decided in one table, by the
 * caller (main.c, as tini decides it in one place): this module only sets
 * dispositions, reads the signalfd and dispatches. */
#pragma once
#include <signal.h>
#include <stddef.h>

#include "core/loop.h"

typedef void (*signal_fn)(void *arg, int sig);

struct signal_action {
	int sig;
	signal_fn fn; /* NULL: the signal is ignored (SIG_IGN) */
};

struct signals {
	int fd; /* the signalfd, -1 when none */
	struct loop_watch watch;
	const struct signal_action *actions;
	size_t n_actions;
	void *arg; /* handed to every fn */
};

/* Block the signals of the table that have a function and read them from a
 * signalfd watched by loop; ignore the others. The table must outlive s.
 * Returns 0 or -errno. */
int signals_init(struct signals *s, struct loop *loop, const struct signal_action *actions,
		 size_t n_actions, void *arg);
/* In a freshly forked child: restore default dispositions and an empty
 * mask. Async-signal-safe. */
void signals_reset_child(void);
