/* Unit test of the refusal record (runner/confine/seccomp_notify.c, seccomp.c's notifying
 * program; docs/design/confinement.md#every-refusal-recorded): the program differs from the
 * policy's only in its EPERM returns; a report is bounded when the shim sends it and checked when
 * the runner reads it. The policy is seccomp/default.json (run from the repository root), or
 * UNIT_SECCOMP_POLICY. */
#include "confine/seccomp_notify.h"
#include "confine/seccomp_policy.h"
#include "core/error.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "unit.h"

#ifndef SECCOMP_RET_USER_NOTIF
#define SECCOMP_RET_USER_NOTIF 0x7fc00000U
#endif

static const char *default_policy(void)
{
	const char *path = getenv("UNIT_SECCOMP_POLICY");
	return path && *path ? path : "seccomp/default.json";
}

static int is_ret(const struct sock_filter *f, uint32_t k)
{
	return f->code == (BPF_RET | BPF_K) && f->k == k;
}

TEST(notify_program_differs_only_in_eperm_returns)
{
	struct error e;
	struct seccomp_policy p;
	int rc = seccomp_policy_load(default_policy(), &p, &e);
	if (!CHECKF(rc == 0, "default policy loads (%s)", rc ? e.msg : ""))
		return;
	CHECK(seccomp_policy_notify_build(&p) == 0);
	if (!CHECKF(p.notify_prog.filter && p.notify_prog.len == p.prog.len && p.n_notify > 0,
		    "a notifying program of the same length (%u returns turned)", p.n_notify))
		goto out;
	const uint32_t eperm = SECCOMP_RET_ERRNO | EPERM, enosys = SECCOMP_RET_ERRNO | ENOSYS;
	unsigned turned = 0, other_errno = 0, differ = 0;
	for (unsigned i = 0; i < p.prog.len; i++) {
		const struct sock_filter *a = &p.prog.filter[i], *b = &p.notify_prog.filter[i];
		if (is_ret(a, eperm)) {
			turned += is_ret(b, SECCOMP_RET_USER_NOTIF);
			continue;
		}
		if (memcmp(a, b, sizeof(*a)))
			differ++;
		if (is_ret(a, enosys) && is_ret(b, enosys))
			other_errno++;
	}
	CHECKF(turned == p.n_notify, "every EPERM return notifies (%u of %u)", turned, p.n_notify);
	CHECKF(differ == 0, "nothing else changed (%u instructions differ)", differ);
	/* clone3's ENOSYS (every C library falls back from it) stays the kernel's, uncounted. */
	CHECKF(other_errno > 0, "the ENOSYS return is kept");
out:
	seccomp_policy_free(&p);
}

TEST(notify_program_none_without_eperm)
{
	struct seccomp_policy p = {0};
	struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
	p.prog.filter = malloc(sizeof(allow));
	memcpy(p.prog.filter, allow, sizeof(allow));
	p.prog.len = 1;
	CHECK(seccomp_policy_notify_build(&p) == 0);
	CHECKF(p.notify_prog.filter == NULL && p.n_notify == 0, "no EPERM return: no program");
	seccomp_policy_free(&p);
}

static json_t *decode(const struct seccomp_denied_msg *m, size_t len, pid_t *pid)
{
	return seccomp_denied_decode(m, len, pid);
}

TEST(report_decoded_with_names)
{
	struct seccomp_denied_msg m = {.magic = SECCOMP_DENIED_MAGIC, .pid = 4242, .n = 3};
	m.e[0] = (struct seccomp_denied_entry){.nr = SYS_keyctl, .count = 3};
	m.e[1] = (struct seccomp_denied_entry){.nr = -1, .count = 5};
	m.e[2] = (struct seccomp_denied_entry){.nr = 999999, .count = 1};
	size_t len = offsetof(struct seccomp_denied_msg, e) + 3 * sizeof(m.e[0]);
	pid_t pid = 0;
	json_t *o = decode(&m, len, &pid);
	if (!CHECKF(o, "a well-formed report decodes"))
		return;
	CHECKF(pid == 4242, "the shim's pid (%d)", (int)pid);
	CHECKF(json_integer_value(json_object_get(o, "keyctl")) == 3, "keyctl named");
	CHECKF(json_integer_value(json_object_get(o, "other")) == 5, "the rest as other");
	CHECKF(json_integer_value(json_object_get(o, "syscall_999999")) == 1,
	       "a number without a name as syscall_N");
	CHECKF(json_object_size(o) == 3, "nothing else (%zu keys)", json_object_size(o));
	json_decref(o);
}

TEST(malformed_report_refused)
{
	struct seccomp_denied_msg m = {.magic = SECCOMP_DENIED_MAGIC, .pid = 1, .n = 1};
	m.e[0] = (struct seccomp_denied_entry){.nr = SYS_keyctl, .count = 1};
	size_t head = offsetof(struct seccomp_denied_msg, e), one = head + sizeof(m.e[0]);
	pid_t pid;
	CHECKF(!decode(&m, head - 1, &pid), "shorter than the header");
	CHECKF(!decode(&m, one + 1, &pid), "a length that is not the entries'");
	CHECKF(!decode(&m, head, &pid), "fewer entries than it says");
	m.magic ^= 1;
	CHECKF(!decode(&m, one, &pid), "another magic");
	m.magic ^= 1;
	m.n = SECCOMP_DENIED_REPORT_MAX + 2;
	CHECKF(!decode(&m, head + m.n * sizeof(m.e[0]), &pid), "more entries than a report holds");
	m.n = 0xffffffffu; /* the length check must not overflow into a pass */
	CHECKF(!decode(&m, head, &pid), "n = 2^32-1");
}

/* The shim's side: 100 distinct syscalls refused, the report names the 64 most refused and
 * sums the rest as other; nothing when nothing was refused. */
TEST(report_sent_bounded)
{
	int sv[2];
	if (!CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0))
		return;
	static struct seccomp_denied d;
	seccomp_denied_init(&d, -1, sv[1]);
	seccomp_denied_send(&d);
	static struct seccomp_denied_msg m;
	CHECKF(recv(sv[0], &m, sizeof(m), MSG_DONTWAIT) < 0 && errno == EAGAIN,
	       "nothing refused: no report");
	uint64_t sum = 0;
	for (int nr = 0; nr < 100; nr++) {
		d.counts[nr] = (uint64_t)(nr + 1);
		sum += d.counts[nr];
	}
	d.other = 7;
	d.total = sum + 7;
	seccomp_denied_send(&d);
	ssize_t n = recv(sv[0], &m, sizeof(m), MSG_DONTWAIT);
	pid_t pid = 0;
	json_t *o = n > 0 ? decode(&m, (size_t)n, &pid) : NULL;
	if (CHECKF(o, "the report decodes (%zd bytes)", n)) {
		CHECKF(m.n == SECCOMP_DENIED_REPORT_MAX + 1, "64 named and other (%u)", m.n);
		CHECKF(m.e[0].nr == 99 && m.e[0].count == 100, "the most refused first");
		json_int_t total = 0, least = -1;
		const char *k;
		json_t *v;
		json_object_foreach(o, k, v) {
			total += json_integer_value(v);
			if (strcmp(k, "other") && (least < 0 || json_integer_value(v) < least))
				least = json_integer_value(v);
		}
		CHECKF(total == (json_int_t)(sum + 7), "every refusal counted (%lld)",
		       (long long)total);
		CHECKF(least == 37, "the 64 most refused named (least %lld)", (long long)least);
		CHECKF(pid == getpid(), "the sender's pid");
		json_decref(o);
	}
	close(sv[0]);
	close(sv[1]);
}
