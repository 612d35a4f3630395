/* Refusals explained (docs/design/confinement.md#every-refusal-recorded): the calls the seccomp
 * policy refuses a task reach its shim as user notifications (seccomp_policy_notify_build); the
 * shim answers each with EPERM, as the plain program would have, counts it by syscall number, and
 * at its end sends the runner one bounded report, which the runner turns into the task's `denied`
 * summary. A task refused nothing costs nothing here: no notification, no report.
 *
 * The shim's side uses only system calls (it is also built into the static shim); the
 * runner's side (seccomp_denied_decode) names the syscalls with libseccomp. */
#pragma once
#include <jansson.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SECCOMP_DENIED_NR 1024           /* numbers counted one by one; any other as "other" */
#define SECCOMP_DENIED_REPORT_MAX 64     /* syscalls named in a report: the most refused */
#define SECCOMP_DENIED_MAGIC 0x594e4544u /* "DENY" */

struct seccomp_denied_entry {
	int32_t nr; /* -1: the rest ("other") */
	uint32_t pad;
	uint64_t count;
};

/* One datagram per task that was refused anything, shim to runner. */
struct seccomp_denied_msg {
	uint32_t magic;
	int32_t pid; /* the shim's: the runner knows its task by it */
	uint32_t n;
	uint32_t pad;
	struct seccomp_denied_entry e[SECCOMP_DENIED_REPORT_MAX + 1];
};

struct seccomp_denied {
	int listener; /* -1: none, the shim waits for its signals as before */
	int sigfd;    /* made at the first wait with a listener */
	int report_fd;
	int sync_set; /* the listener's wake-up flag was tried (first notification) */
	uint64_t total, other;
	uint64_t counts[SECCOMP_DENIED_NR];
	/* RECV/SEND buffers, larger than this header's structs: the kernel's may have grown. */
	_Alignas(8) unsigned char req[256], resp[64];
};

/* Shim side. listener -1: nothing to supervise. report_fd: the runner's socket (-1: none). */
void seccomp_denied_init(struct seccomp_denied *d, int listener, int report_fd);
/* sigwaitinfo(set, si) (set blocked), answering and counting the task's refused calls while
 * it waits: a signal pending is returned before the next refusal is answered, so a task
 * that floods refusals never delays the runner's signals. */
int seccomp_denied_wait(struct seccomp_denied *d, const sigset_t *set, siginfo_t *si);
/* At the shim's end: the report (nothing when nothing was refused). */
void seccomp_denied_send(const struct seccomp_denied *d);

/* Runner side: a report received (len bytes) as {"name": count, ...} with *pid the
 * shim's; NULL when it is not a well-formed report. New reference. */
json_t *seccomp_denied_decode(const void *buf, size_t len, pid_t *pid);
