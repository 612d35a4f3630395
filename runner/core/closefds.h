/* "Close every fd but these", for children between fork and exec (task
 * spawn, the confinement step, the reset and checkpoint workers).
 * Async-signal-safe: system calls only. */
#pragma once

/* Closes fds lo..hi: close_range, or one by one up to the fd limit on a
 * kernel without it (before 5.9). 0 or -errno. */
int closefds_range(unsigned lo, unsigned hi);

/* Closes fds lo..hi one by one, failures ignored (EBADF for most): the
 * fallback, and the last resort when closefds_range failed. */
void closefds_by_hand(unsigned lo, unsigned hi);

/* Closes every fd >= lowfd except those in keep[] (sorted in place; -1
 * entries, ones below lowfd and repeats are allowed). 0 or -errno. */
int closefds_except(int lowfd, int *keep, int nkeep);
