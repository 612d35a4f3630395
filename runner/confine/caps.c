/* Capabilities and securebits (docs/design/confinement.md#in-the-task-in-this-order steps 4-5). See
 * caps.h. */
#include "confine/caps.h"

#include <cap-ng.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

/* KEEP_CAPS is clear but not locked: it only keeps capabilities across a
 * uid change away from 0, and a task has none, can gain none (empty bounding
 * set, no_new_privs) and is not uid 0; locked, PR_SET_KEEPCAPS fails and
 * programs that drop their privileges with it (Debian's ping) exit. */
unsigned caps_task_securebits(void)
{
	return SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
	       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
	       SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
}

/* /proc/sys/kernel/cap_last_cap, or probe the bounding set when /proc is
 * not there (PR_CAPBSET_READ fails with EINVAL past the last one). */
static int read_last_cap(void)
{
	int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char buf[16];
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			char *end;
			long v = strtol(buf, &end, 10);
			if (end != buf && v >= 0 && v < 64)
				return (int)v;
		}
	}
	int c = 0;
	while (c < 63 && prctl(PR_CAPBSET_READ, (unsigned long)(c + 1), 0, 0, 0) >= 0)
		c++;
	return c;
}

int caps_init(struct caps_state *st, bool reset, struct error *err)
{
	memset(st, 0, sizeof(*st));
	st->last_cap = read_last_cap();
	for (int c = 0; c <= st->last_cap; c++)
		if (prctl(PR_CAPBSET_READ, (unsigned long)c, 0, 0, 0) == 1)
			st->bounding |= 1ULL << c;
	int sb = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
	if (sb < 0)
		return error_set(err, errno, NULL, "prctl(PR_GET_SECUREBITS)");
	st->securebits = (unsigned)sb;

	if (capng_get_caps_process() < 0)
		return error_set(err, 0, NULL, "cannot read the runner's capabilities (libcap-ng)");
	for (int c = 0; c <= st->last_cap; c++)
		if (capng_have_capability(CAPNG_EFFECTIVE, (unsigned)c))
			st->effective |= 1ULL << c;
	st->sys_resource = capng_have_capability(CAPNG_EFFECTIVE, CAP_SYS_RESOURCE);
	st->privileged = (st->effective & CAPS_REQUIRED) == CAPS_REQUIRED;
	st->root = geteuid() == 0;
	st->required = CAPS_REQUIRED | (reset ? CAPS_RESET : 0);
	if (st->root && (st->effective & st->required) != st->required) {
		char miss[160], add[128], all[128];
		uint64_t m = st->required & ~st->effective;
		return error_set(
			err, 0, NULL,
			"the runner runs as root without %s: it could not %s. Grant them (--cap-add "
			"%s; the minimal set is --cap-drop ALL --cap-add %s)%s or run the runner as "
			"a non-root user (--user 1000:1000: non-root mode, tasks run as that user)",
			caps_names(m, false, miss, sizeof(miss)),
			m & CAPS_REQUIRED
				? "confine tasks (identity, bounding set, stdio pipes) or "
				  "stop their process trees"
				: "restore the writable roots on POST /v1/reset (files of "
				  "any owner and mode, setgid bits)",
			caps_names(m, true, add, sizeof(add)),
			caps_names(st->required, true, all, sizeof(all)),
			reset ? ", turn reset off (--allow-reset, FORCEAI_ALLOW_RESET=0) when boxes "
				"are never reused across tenants,"
			      : "");
	}
	/* The task securebits must be settable: a bit locked the other way
	 * by whoever started us would make every task fail. */
	unsigned want = caps_task_securebits();
	unsigned locked = (st->securebits & 0xaau) >> 1; /* lock bits -> the bits they lock */
	if (st->privileged && ((st->securebits ^ want) & locked & 0x55u))
		return error_set(err, 0, NULL,
				 "the runner's securebits 0x%x are locked against the task "
				 "securebits 0x%x",
				 st->securebits, want);
	return 0;
}

static void put_name(int c, bool bare, char *buf, size_t len, size_t *o)
{
	const char *n = capng_capability_to_name((unsigned)c);
	char up[32];
	size_t k = 0;
	for (; n && n[k] && k < sizeof(up) - 1; k++)
		up[k] = (char)(n[k] >= 'a' && n[k] <= 'z' ? n[k] - 'a' + 'A' : n[k]);
	up[k] = '\0';
	if (*o >= len)
		return;
	int w = snprintf(buf + *o, len - *o, "%s%s%s", *o ? (bare ? "," : ", ") : "",
			 bare ? "" : "CAP_", k ? up : "?");
	if (w > 0)
		*o += (size_t)w;
}

char *caps_names(uint64_t mask, bool bare, char *buf, size_t len)
{
	/* The required ones first, in the order they are documented. */
	static const int order[] = {CAP_SETUID, CAP_SETGID, CAP_SETPCAP, CAP_CHOWN, CAP_KILL};
	size_t o = 0;
	if (!len)
		return buf;
	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
		if (mask & (1ULL << order[i])) {
			put_name(order[i], bare, buf, len, &o);
			mask &= ~(1ULL << order[i]);
		}
	for (int c = 0; c < 64; c++)
		if (mask & (1ULL << c))
			put_name(c, bare, buf, len, &o);
	return buf;
}

int caps_drop_bounding(const struct caps_state *st)
{
	/* Dropping one that is already gone succeeds, so drop them all. */
	for (int c = 0; c <= st->last_cap; c++)
		if (prctl(PR_CAPBSET_DROP, (unsigned long)c, 0, 0, 0) < 0)
			return -errno;
	return 0;
}

int caps_lock_securebits(const struct caps_state *st)
{
	/* Bits this runner does not manage (newer kernels define more) are
	 * kept as the runner had them. */
	unsigned bits = caps_task_securebits() | (st->securebits & ~0xffu);
	if (prctl(PR_SET_SECUREBITS, (unsigned long)bits, 0, 0, 0) < 0)
		return -errno;
	return 0;
}

int caps_clear_all(void)
{
	/* EINVAL: a kernel before 4.3 has no ambient set to clear. */
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -errno;
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capset, &hdr, data) < 0)
		return -errno;
	/* Read back: with NO_SETUID_FIXUP the kernel clears nothing for us,
	 * so make sure the sets really are empty. */
	hdr.version = _LINUX_CAPABILITY_VERSION_3;
	hdr.pid = 0;
	if (syscall(SYS_capget, &hdr, data) < 0)
		return -errno;
	for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
		if (data[i].effective || data[i].permitted || data[i].inheritable)
			return -EPERM;
	return 0;
}
