/* Refusals explained: see seccomp_notify.h and docs/design/confinement.md#every-refusal-recorded.
 */
#include "confine/seccomp_notify.h"

#include <seccomp.h> /* libseccomp: syscall names (runner side only) */

#include <errno.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

void seccomp_denied_init(struct seccomp_denied *d, int listener, int report_fd)
{
	/* Not the counts: 8 KiB of zeroes the kernel already gave a fresh shim's bss. */
	d->listener = listener;
	d->sigfd = -1;
	d->report_fd = report_fd;
	d->sync_set = 0;
	d->total = d->other = 0;
}

/* One notification: answered EPERM (never "continue": nothing here can let a call
 * through), counted by number. */
static void answer_one(struct seccomp_denied *d)
{
	if (!d->sync_set) {
		/* The task waits on us for every refused call: wake it on our CPU (6.6+). */
		d->sync_set = 1;
		(void)ioctl(d->listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS,
			    (unsigned long)SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);
	}
	memset(d->req, 0, sizeof(d->req)); /* the kernel wants it zeroed */
	struct seccomp_notif *req = (struct seccomp_notif *)d->req;
	if (ioctl(d->listener, SECCOMP_IOCTL_NOTIF_RECV, req) < 0)
		return; /* ENOENT: the caller was killed meanwhile; EINTR */
	int nr = req->data.nr;
	if (nr >= 0 && nr < SECCOMP_DENIED_NR)
		d->counts[nr]++;
	else
		d->other++;
	d->total++;
	memset(d->resp, 0, sizeof(d->resp));
	struct seccomp_notif_resp *resp = (struct seccomp_notif_resp *)d->resp;
	resp->id = req->id;
	resp->error = -EPERM;
	(void)ioctl(d->listener, SECCOMP_IOCTL_NOTIF_SEND, resp); /* ENOENT: it died */
}

static void fill_si(siginfo_t *si, const struct signalfd_siginfo *ss)
{
	memset(si, 0, sizeof(*si));
	si->si_signo = (int)ss->ssi_signo;
	si->si_code = ss->ssi_code;
	si->si_pid = (pid_t)ss->ssi_pid;
	si->si_uid = ss->ssi_uid;
	si->si_value.sival_int = ss->ssi_int;
}

/* Without a signalfd (fds exhausted): look for a signal, then for a refusal, in turn. */
static int wait_by_turns(struct seccomp_denied *d, const sigset_t *set, siginfo_t *si)
{
	for (;;) {
		struct timespec zero = {0, 0};
		int sig = sigtimedwait(set, si, &zero);
		if (sig > 0)
			return sig;
		struct pollfd p = {.fd = d->listener, .events = POLLIN};
		int rc = poll(&p, 1, 10);
		if (rc > 0 && (p.revents & POLLIN))
			answer_one(d);
		else if (rc > 0) {
			close(d->listener); /* every process of the filter is gone */
			d->listener = -1;
			return sigwaitinfo(set, si);
		}
	}
}

int seccomp_denied_wait(struct seccomp_denied *d, const sigset_t *set, siginfo_t *si)
{
	if (d->listener < 0)
		return sigwaitinfo(set, si);
	if (d->sigfd < 0)
		d->sigfd = signalfd(-1, set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (d->sigfd < 0)
		return wait_by_turns(d, set, si);
	for (;;) {
		struct pollfd p[2] = {{.fd = d->sigfd, .events = POLLIN},
				      {.fd = d->listener, .events = POLLIN}};
		int rc = poll(p, d->listener >= 0 ? 2 : 1, -1);
		if (rc < 0)
			continue; /* EINTR: nothing is caught, but be safe */
		if (p[0].revents & POLLIN) {
			struct signalfd_siginfo ss;
			if (read(d->sigfd, &ss, sizeof(ss)) == (ssize_t)sizeof(ss)) {
				fill_si(si, &ss);
				return (int)ss.ssi_signo;
			}
		}
		if (d->listener < 0)
			continue;
		if (p[1].revents & POLLIN) {
			answer_one(d);
		} else if (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)) {
			/* No process holds the filter any more: nothing left to answer. */
			close(d->listener);
			d->listener = -1;
		}
	}
}

void seccomp_denied_send(const struct seccomp_denied *d)
{
	if (d->total == 0 || d->report_fd < 0)
		return;
	static struct seccomp_denied_msg m;
	m.magic = SECCOMP_DENIED_MAGIC;
	m.pid = (int32_t)getpid();
	m.n = 0;
	uint64_t rest = d->other;
	/* The most refused first, at most REPORT_MAX of them; the rest summed as "other". */
	static unsigned char taken[SECCOMP_DENIED_NR];
	memset(taken, 0, sizeof(taken)); /* a second report counts every call again */
	for (;;) {
		int best = -1;
		for (int nr = 0; nr < SECCOMP_DENIED_NR; nr++)
			if (d->counts[nr] && !taken[nr] &&
			    (best < 0 || d->counts[nr] > d->counts[best]))
				best = nr;
		if (best < 0)
			break;
		taken[best] = 1;
		if (m.n < SECCOMP_DENIED_REPORT_MAX)
			m.e[m.n++] =
				(struct seccomp_denied_entry){.nr = best, .count = d->counts[best]};
		else
			rest += d->counts[best];
	}
	if (rest)
		m.e[m.n++] = (struct seccomp_denied_entry){.nr = -1, .count = rest};
	size_t len = offsetof(struct seccomp_denied_msg, e) + m.n * sizeof(m.e[0]);
	/* Never blocks the shim's end: the runner drains the socket as it reaps. A full
	 * socket (the runner stalled for thousands of reports) loses this one. */
	for (int tries = 0; tries < 50; tries++) {
		if (send(d->report_fd, &m, len, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)len)
			return;
		if (errno != EAGAIN && errno != EINTR)
			return;
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
	}
}

json_t *seccomp_denied_decode(const void *buf, size_t len, pid_t *pid)
{
	const struct seccomp_denied_msg *m = buf;
	size_t head = offsetof(struct seccomp_denied_msg, e);
	if (len < head || m->magic != SECCOMP_DENIED_MAGIC ||
	    m->n > SECCOMP_DENIED_REPORT_MAX + 1 || len != head + m->n * sizeof(m->e[0]))
		return NULL;
	json_t *o = json_object();
	if (!o)
		return NULL;
	uint32_t arch = seccomp_arch_native();
	for (uint32_t i = 0; i < m->n; i++) {
		char num[32];
		char *name = m->e[i].nr >= 0 ? seccomp_syscall_resolve_num_arch(arch, m->e[i].nr)
					     : NULL;
		const char *key = name;
		if (!key) {
			if (m->e[i].nr >= 0)
				snprintf(num, sizeof(num), "syscall_%d", (int)m->e[i].nr);
			else
				snprintf(num, sizeof(num), "other");
			key = num;
		}
		json_t *prev = json_object_get(o, key);
		json_int_t c = (json_int_t)(m->e[i].count > INT64_MAX ? INT64_MAX : m->e[i].count);
		if (prev)
			c += json_integer_value(prev);
		json_object_set_new(o, key, json_integer(c));
		free(name);
	}
	*pid = (pid_t)m->pid;
	return o;
}
