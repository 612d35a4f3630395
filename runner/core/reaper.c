#include "core/reaper.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include "core/log.h"

void reaper_init(struct reaper *rp)
{
	memset(rp, 0, sizeof(*rp));
}

static unsigned bucket(pid_t pid)
{
	return (unsigned)pid % 64;
}

int reaper_watch(struct reaper *rp, pid_t pid, reaper_cb cb, void *arg)
{
	struct reaper_entry *e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->pid = pid;
	e->cb = cb;
	e->arg = arg;
	e->next = rp->buckets[bucket(pid)];
	rp->buckets[bucket(pid)] = e;
	return 0;
}

static struct reaper_entry *take(struct reaper *rp, pid_t pid)
{
	for (struct reaper_entry **p = &rp->buckets[bucket(pid)]; *p; p = &(*p)->next) {
		if ((*p)->pid == pid) {
			struct reaper_entry *e = *p;
			*p = e->next;
			return e;
		}
	}
	return NULL;
}

void reaper_forget(struct reaper *rp, pid_t pid)
{
	free(take(rp, pid));
}

void reaper_reap(struct reaper *rp)
{
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG | __WALL);
		if (pid == 0)
			return;
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			if (errno != ECHILD)
				log_errno("waitpid failed", errno, NULL);
			return;
		}
		if (WIFSTOPPED(status)) {
			/* Only a ptrace stop reaches us (no WUNTRACED): an orphan
			 * made the runner its tracer with PTRACE_TRACEME
			 * (design/confinement.md#debugging-inside-the-tasks-own-tree-ptrace). It is
			 * no exit: let it go, with its signal. */
			int sig = WSTOPSIG(status);
			ptrace(PTRACE_DETACH, pid, NULL, (void *)(long)(sig == SIGTRAP ? 0 : sig));
			continue;
		}
		struct reaper_entry *e = take(rp, pid);
		if (!e) {
			rp->orphans_reaped++;
			continue;
		}
		e->cb(e->arg, pid, status);
		free(e);
	}
}
