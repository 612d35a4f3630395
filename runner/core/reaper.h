/* The one reaper: only the SIGCHLD handler calls waitpid(-1), and every
 * status is routed to the owner of that pid; orphans are reaped silently. */
#pragma once
#include <sys/types.h>

typedef void (*reaper_cb)(void *arg, pid_t pid, int status);

struct reaper_entry {
	pid_t pid;
	reaper_cb cb;
	void *arg;
	struct reaper_entry *next;
};

struct reaper {
	struct reaper_entry *buckets[64];
	unsigned long orphans_reaped;
};

void reaper_init(struct reaper *rp);
int reaper_watch(struct reaper *rp, pid_t pid, reaper_cb cb, void *arg);
void reaper_forget(struct reaper *rp, pid_t pid);
/* Reap every child that has exited (WNOHANG loop). */
void reaper_reap(struct reaper *rp);
