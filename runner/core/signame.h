/* Signal names, the same under every libc. */
#pragma once

/* "SIGTERM" etc.; "SIG?" for unknown numbers. */
const char *signal_name(int sig);
