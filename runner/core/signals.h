/* Signals arrive through a signalfd in the event loop; nothing runs in a
 * signal handler. */
#pragma once
#include <signal.h>

struct runner;

/* Block the handled signals, open the signalfd, ignore SIGPIPE/SIGTTIN/
 * SIGTTOU. Returns 0 or -errno. */
int signals_init(struct runner *r);
/* In a freshly forked child: restore default dispositions and an empty
 * mask. Async-signal-safe. */
void signals_reset_child(void);
