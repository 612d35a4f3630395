/* The seccomp policy (docs/design/confinement.md#the-seccomp-policy): an OCI runtime-spec seccomp
 * JSON file (the format of Docker's default profile) parsed with jansson, compiled with libseccomp
 * once at start into a BPF program that every task child installs just before execve.
 *
 * Decisions (see docs/design/confinement.md#the-seccomp-policy):
 * - Only the native architecture is compiled in. "architectures"/"archMap"
 *   must list it (a policy written for another machine is an error); other
 *   entries, sub-architectures included, are ignored, so x32 and 32-bit
 *   compat entry points always hit the bad-architecture action (kill).
 * - A name that exists on other architectures but not on this one is
 *   skipped silently (policies carry x86_64 and aarch64 names side by side).
 * - A name libseccomp knows on no architecture (a typo, or a syscall newer
 *   than this libseccomp) is skipped with a warning when the default action
 *   denies (the call then stays denied: fail closed), and is an error when
 *   the default action allows and the rule would have denied it.
 * - Unknown keys are errors: a misspelt "args" would otherwise turn a
 *   conditional allow into an unconditional one.
 * - Docker's "includes"/"excludes": rules that need capabilities are skipped
 *   (tasks hold none); arches and minKernel are honoured.
 * - All conditions of one rule are ANDed; the same argument index twice in a
 *   rule is an error (write separate rules to OR them).
 *
 * This file is self-contained (no runner logging): every problem goes into
 * the caller's struct error or the policy's warning string. */
#include "confine/seccomp_policy.h"

#include "core/error.h"
#include "core/fileio.h"

#include <seccomp.h> /* libseccomp */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifndef SECCOMP_FILTER_FLAG_LOG
#define SECCOMP_FILTER_FLAG_LOG (1UL << 1)
#endif
#ifndef SECCOMP_FILTER_FLAG_NEW_LISTENER
#define SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
#endif
#ifndef SECCOMP_RET_USER_NOTIF
#define SECCOMP_RET_USER_NOTIF 0x7fc00000U
#endif
#ifndef SECCOMP_FILTER_FLAG_SPEC_ALLOW
#define SECCOMP_FILTER_FLAG_SPEC_ALLOW (1UL << 2)
#endif

#define MAX_NR 4096 /* syscall numbers tracked for the allowed count */

struct loader {
	const char *path;
	struct error *err;
	scmp_filter_ctx ctx;
	uint32_t arch; /* native arch token */
	struct utsname uts;
	uint32_t def_action;
	unsigned char allowed[MAX_NR / 8];
	unsigned n_allowed;
	unsigned n_unknown;
	char unknown[160]; /* comma-separated unknown names, truncated */
	bool kernel_dep;   /* a minKernel condition was evaluated */
};

static int fail(struct loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct loader *ld, const char *fmt, ...)
{
	char msg[ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return error_set(ld->err, 0, NULL, "seccomp policy %s: %s", ld->path, msg);
}

static bool action_permits(uint32_t act)
{
	return act == SCMP_ACT_ALLOW || act == SCMP_ACT_LOG;
}

/* Reject keys we do not know: silently ignoring one could widen the policy. */
static int check_keys(struct loader *ld, json_t *obj, const char *where, const char *const *known)
{
	const char *key;
	json_t *val;
	json_object_foreach(obj, key, val) {
		(void)val;
		bool ok = false;
		for (const char *const *k = known; *k; k++)
			if (strcmp(key, *k) == 0)
				ok = true;
		if (!ok)
			return fail(ld, "%s: unknown key \"%s\"", where, key);
	}
	return 0;
}

/* A small non-negative integer field, or the default when absent. */
static int get_uint(struct loader *ld, json_t *obj, const char *key, const char *where,
		    uint64_t max, uint64_t def, uint64_t *out)
{
	json_t *v = json_object_get(obj, key);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) > max)
		return fail(ld, "%s: \"%s\" must be an integer between 0 and %llu", where, key,
			    (unsigned long long)max);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* errnoRet / defaultErrnoRet, or the errno name podman's format writes
 * beside it ("errno" / "defaultErrno"); the number wins when both are set. */
static int get_errno(struct loader *ld, json_t *obj, const char *numkey, const char *namekey,
		     const char *where, uint64_t *out)
{
	static const struct {
		const char *name;
		int value;
	} names[] = {
		{"EPERM", EPERM},
		{"ENOENT", ENOENT},
		{"EACCES", EACCES},
		{"EINVAL", EINVAL},
		{"ENOSYS", ENOSYS},
		{"EOPNOTSUPP", EOPNOTSUPP},
		{"ENOTSUP", ENOTSUP},
		{"EAFNOSUPPORT", EAFNOSUPPORT},
		{"EPROTONOSUPPORT", EPROTONOSUPPORT},
		{"ENODEV", ENODEV},
		{"EFAULT", EFAULT},
	};
	json_t *num = json_object_get(obj, numkey);
	json_t *name = json_object_get(obj, namekey);
	if ((num && !json_is_null(num)) || !name || json_is_null(name))
		return get_uint(ld, obj, numkey, where, 4095, EPERM, out);
	if (json_is_string(name))
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strcmp(json_string_value(name), names[i].name) == 0) {
				*out = (uint64_t)names[i].value;
				return 0;
			}
	return fail(ld, "%s: unknown \"%s\" (use \"%s\" with a number)", where, namekey, numkey);
}

static int parse_action(struct loader *ld, json_t *jact, uint64_t errno_ret, const char *where,
			uint32_t *out)
{
	if (!json_is_string(jact))
		return fail(ld, "%s: action must be a string such as \"SCMP_ACT_ALLOW\"", where);
	const char *s = json_string_value(jact);
	if (strcmp(s, "SCMP_ACT_ALLOW") == 0)
		*out = SCMP_ACT_ALLOW;
	else if (strcmp(s, "SCMP_ACT_ERRNO") == 0)
		*out = SCMP_ACT_ERRNO((uint32_t)errno_ret);
	else if (strcmp(s, "SCMP_ACT_KILL") == 0 || strcmp(s, "SCMP_ACT_KILL_THREAD") == 0)
		*out = SCMP_ACT_KILL_THREAD;
	else if (strcmp(s, "SCMP_ACT_KILL_PROCESS") == 0)
		*out = SCMP_ACT_KILL_PROCESS;
	else if (strcmp(s, "SCMP_ACT_TRAP") == 0)
		*out = SCMP_ACT_TRAP;
	else if (strcmp(s, "SCMP_ACT_TRACE") == 0)
		*out = SCMP_ACT_TRACE((uint32_t)errno_ret);
	else if (strcmp(s, "SCMP_ACT_LOG") == 0)
		*out = SCMP_ACT_LOG;
	else if (strcmp(s, "SCMP_ACT_NOTIFY") == 0)
		return fail(ld, "%s: SCMP_ACT_NOTIFY is not supported (no seccomp agent)", where);
	else
		return fail(ld, "%s: unknown action \"%s\"", where, s);
	return 0;
}

/* "SCMP_ARCH_X86_64" -> libseccomp token, 0 when unknown. */
static uint32_t arch_token(const char *oci)
{
	static const char prefix[] = "SCMP_ARCH_";
	char name[32];
	if (strncmp(oci, prefix, sizeof(prefix) - 1) != 0)
		return 0;
	oci += sizeof(prefix) - 1;
	size_t n = strlen(oci);
	if (n == 0 || n >= sizeof(name))
		return 0;
	for (size_t i = 0; i <= n; i++)
		name[i] = (char)tolower((unsigned char)oci[i]);
	return seccomp_arch_resolve_name(name);
}

/* "architectures": [..] (OCI) or "archMap": [{"architecture": ..}] (Docker). */
static int parse_arches(struct loader *ld, json_t *root)
{
	json_t *arches = json_object_get(root, "architectures");
	json_t *map = json_object_get(root, "archMap");
	if ((!arches || json_is_null(arches)) && (!map || json_is_null(map)))
		return 0; /* none listed: the native one, as runc does */
	bool native = false;
	size_t i;
	json_t *v;
	if (arches && !json_is_null(arches)) {
		if (!json_is_array(arches))
			return fail(ld, "\"architectures\" must be an array of strings");
		json_array_foreach(arches, i, v) {
			uint32_t tok = json_is_string(v) ? arch_token(json_string_value(v)) : 0;
			if (!tok)
				return fail(ld, "architectures[%zu]: unknown architecture %s", i,
					    json_is_string(v) ? json_string_value(v)
							      : "(not a string)");
			native |= tok == ld->arch;
		}
	}
	if (map && !json_is_null(map)) {
		if (!json_is_array(map))
			return fail(ld, "\"archMap\" must be an array of objects");
		json_array_foreach(map, i, v) {
			static const char *const keys[] = {"architecture", "subArchitectures",
							   NULL};
			char where[48];
			snprintf(where, sizeof(where), "archMap[%zu]", i);
			if (!json_is_object(v))
				return fail(ld, "%s: must be an object", where);
			if (check_keys(ld, v, where, keys) < 0)
				return -1;
			json_t *a = json_object_get(v, "architecture");
			uint32_t tok = json_is_string(a) ? arch_token(json_string_value(a)) : 0;
			if (!tok)
				return fail(ld, "%s: unknown or missing \"architecture\"", where);
			native |= tok == ld->arch;
			/* subArchitectures are deliberately not compiled in. */
		}
	}
	if (!native)
		return fail(ld, "the policy does not list this machine's architecture (%s)",
			    ld->uts.machine);
	return 0;
}

/* Names this machine's architecture answers to in Docker's includes/excludes. */
static bool arch_is_native(struct loader *ld, const char *name)
{
	if (strcasecmp(name, ld->uts.machine) == 0)
		return true;
	if (strncmp(name, "SCMP_ARCH_", 10) == 0 && arch_token(name) == ld->arch)
		return true;
	/* Go's names, as Docker writes them. */
	if (ld->arch == SCMP_ARCH_X86_64 && strcmp(name, "amd64") == 0)
		return true;
	if (ld->arch == SCMP_ARCH_AARCH64 && strcmp(name, "arm64") == 0)
		return true;
	return false;
}

static bool kernel_at_least(struct loader *ld, const char *want)
{
	ld->kernel_dep = true; /* the result depends on the running kernel */
	unsigned wmaj = 0, wmin = 0, kmaj = 0, kmin = 0;
	if (sscanf(want, "%u.%u", &wmaj, &wmin) < 1)
		return false;
	if (sscanf(ld->uts.release, "%u.%u", &kmaj, &kmin) < 1)
		return false;
	return kmaj > wmaj || (kmaj == wmaj && kmin >= wmin);
}

/* Docker's conditional rules. Sets *applies. */
static int rule_applies(struct loader *ld, json_t *rule, const char *where, bool *applies)
{
	static const char *const keys[] = {"arches", "caps", "minKernel", NULL};
	*applies = true;
	for (int inc = 1; inc >= 0; inc--) {
		const char *key = inc ? "includes" : "excludes";
		json_t *f = json_object_get(rule, key);
		if (!f || json_is_null(f))
			continue;
		char w[64];
		snprintf(w, sizeof(w), "%s.%s", where, key);
		if (!json_is_object(f))
			return fail(ld, "%s: must be an object", w);
		if (check_keys(ld, f, w, keys) < 0)
			return -1;
		json_t *arches = json_object_get(f, "arches");
		if (arches && !json_is_null(arches)) {
			if (!json_is_array(arches))
				return fail(ld, "%s.arches: must be an array of strings", w);
			bool hit = false;
			size_t i;
			json_t *v;
			json_array_foreach(arches, i, v) {
				if (!json_is_string(v))
					return fail(ld, "%s.arches[%zu]: must be a string", w, i);
				hit |= arch_is_native(ld, json_string_value(v));
			}
			if (json_array_size(arches) > 0 && hit != (inc == 1))
				*applies = false;
		}
		json_t *caps = json_object_get(f, "caps");
		if (caps && !json_is_null(caps)) {
			if (!json_is_array(caps))
				return fail(ld, "%s.caps: must be an array of strings", w);
			/* Tasks hold no capability: a rule that needs one never
			 * applies, a rule excluded for some always does. */
			if (inc && json_array_size(caps) > 0)
				*applies = false;
		}
		json_t *mk = json_object_get(f, "minKernel");
		if (mk && !json_is_null(mk)) {
			if (!json_is_string(mk))
				return fail(ld, "%s.minKernel: must be a string such as \"4.8\"",
					    w);
			if (json_string_length(mk) > 0 &&
			    kernel_at_least(ld, json_string_value(mk)) != (inc == 1))
				*applies = false;
		}
	}
	return 0;
}

static int parse_args(struct loader *ld, json_t *jargs, const char *where, struct scmp_arg_cmp *out,
		      unsigned *n)
{
	static const struct {
		const char *name;
		enum scmp_compare op;
	} ops[] = {
		{"SCMP_CMP_NE", SCMP_CMP_NE},
		{"SCMP_CMP_LT", SCMP_CMP_LT},
		{"SCMP_CMP_LE", SCMP_CMP_LE},
		{"SCMP_CMP_EQ", SCMP_CMP_EQ},
		{"SCMP_CMP_GE", SCMP_CMP_GE},
		{"SCMP_CMP_GT", SCMP_CMP_GT},
		{"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ},
	};
	static const char *const keys[] = {"index", "value", "valueTwo", "op", NULL};
	*n = 0;
	if (!jargs || json_is_null(jargs))
		return 0;
	if (!json_is_array(jargs))
		return fail(ld, "%s.args: must be an array", where);
	if (json_array_size(jargs) > 6)
		return fail(ld, "%s.args: more than 6 conditions", where);
	unsigned seen = 0;
	size_t i;
	json_t *a;
	json_array_foreach(jargs, i, a) {
		char w[64];
		snprintf(w, sizeof(w), "%s.args[%zu]", where, i);
		if (!json_is_object(a))
			return fail(ld, "%s: must be an object", w);
		if (check_keys(ld, a, w, keys) < 0)
			return -1;
		json_t *ji = json_object_get(a, "index");
		if (!json_is_integer(ji) || json_integer_value(ji) < 0 ||
		    json_integer_value(ji) > 5)
			return fail(ld, "%s: bad arg index (must be an integer 0..5)", w);
		unsigned idx = (unsigned)json_integer_value(ji);
		if (seen & (1u << idx))
			return fail(ld,
				    "%s: arg index %u used twice in one rule (conditions are "
				    "ANDed; write separate rules to OR them)",
				    w, idx);
		seen |= 1u << idx;
		json_t *jop = json_object_get(a, "op");
		if (!json_is_string(jop))
			return fail(ld, "%s: missing \"op\"", w);
		size_t k;
		for (k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
			if (strcmp(json_string_value(jop), ops[k].name) == 0)
				break;
		if (k == sizeof(ops) / sizeof(ops[0]))
			return fail(ld, "%s: unknown op \"%s\"", w, json_string_value(jop));
		uint64_t v1, v2;
		if (get_uint(ld, a, "value", w, INT64_MAX, 0, &v1) < 0 ||
		    get_uint(ld, a, "valueTwo", w, INT64_MAX, 0, &v2) < 0)
			return -1;
		/* OCI: for MASKED_EQ "value" is the mask, "valueTwo" the datum,
		 * which is libseccomp's order too. */
		out[*n] = (struct scmp_arg_cmp){.arg = idx,
						.op = ops[k].op,
						.datum_a = v1,
						.datum_b = v2};
		(*n)++;
	}
	return 0;
}

static void note_unknown(struct loader *ld, const char *name)
{
	ld->n_unknown++;
	size_t len = strlen(ld->unknown);
	if (len + strlen(name) + 3 < sizeof(ld->unknown))
		snprintf(ld->unknown + len, sizeof(ld->unknown) - len, "%s%s", len ? ", " : "",
			 name);
}

static int add_rule(struct loader *ld, json_t *rule, size_t ri)
{
	static const char *const keys[] = {"names", "name",    "action",   "errnoRet", "errno",
					   "args",  "comment", "includes", "excludes", NULL};
	char where[32];
	snprintf(where, sizeof(where), "syscalls[%zu]", ri);
	if (!json_is_object(rule))
		return fail(ld, "%s: must be an object", where);
	if (check_keys(ld, rule, where, keys) < 0)
		return -1;
	uint64_t eret;
	if (get_errno(ld, rule, "errnoRet", "errno", where, &eret) < 0)
		return -1;
	uint32_t action;
	json_t *jact = json_object_get(rule, "action");
	if (!jact)
		return fail(ld, "%s: missing \"action\"", where);
	if (parse_action(ld, jact, eret, where, &action) < 0)
		return -1;
	struct scmp_arg_cmp args[6];
	unsigned nargs;
	if (parse_args(ld, json_object_get(rule, "args"), where, args, &nargs) < 0)
		return -1;
	bool applies;
	if (rule_applies(ld, rule, where, &applies) < 0)
		return -1;

	json_t *names = json_object_get(rule, "names");
	json_t *one = json_object_get(rule, "name");
	if (names && !json_is_array(names))
		return fail(ld, "%s: \"names\" must be an array of strings", where);
	if (one && !json_is_string(one))
		return fail(ld, "%s: \"name\" must be a string", where);
	size_t count = (names ? json_array_size(names) : 0) + (one ? 1 : 0);
	if (count == 0)
		return fail(ld, "%s: no syscall names", where);
	if (!applies)
		return 0;
	/* libseccomp refuses a rule whose action is the default one; it
	 * changes nothing, so skip it as runc does. */
	if (action == ld->def_action)
		return 0;

	for (size_t i = 0; i < count; i++) {
		json_t *jn = one && i == count - 1 ? one : json_array_get(names, i);
		if (!json_is_string(jn) || json_string_length(jn) == 0)
			return fail(ld, "%s.names[%zu]: must be a non-empty string", where, i);
		const char *name = json_string_value(jn);
		int nr = seccomp_syscall_resolve_name_arch(ld->arch, name);
		if (nr == __NR_SCMP_ERROR) {
			if (action_permits(ld->def_action) && !action_permits(action))
				return fail(ld,
					    "%s: syscall \"%s\" is unknown to libseccomp, and "
					    "skipping this rule would leave it allowed by the "
					    "default action",
					    where, name);
			note_unknown(ld, name);
			continue;
		}
		if (nr < 0)
			continue; /* exists on other architectures only */
		int rc = seccomp_rule_add_exact_array(ld->ctx, action, nr, nargs, args);
		if (rc < 0)
			return fail(ld, "%s: syscall \"%s\": libseccomp rejected the rule: %s",
				    where, name, strerror(-rc));
		if (action == SCMP_ACT_ALLOW) {
			if (nr >= MAX_NR) {
				ld->n_allowed++;
			} else if (!(ld->allowed[nr / 8] & (1u << (nr % 8)))) {
				ld->allowed[nr / 8] |= (unsigned char)(1u << (nr % 8));
				ld->n_allowed++;
			}
		}
	}
	return 0;
}

static int parse_flags(struct loader *ld, json_t *root, unsigned *flags)
{
	json_t *jf = json_object_get(root, "flags");
	*flags = 0;
	if (!jf || json_is_null(jf))
		return 0;
	if (!json_is_array(jf))
		return fail(ld, "\"flags\" must be an array of strings");
	size_t i;
	json_t *v;
	json_array_foreach(jf, i, v) {
		const char *s = json_is_string(v) ? json_string_value(v) : "";
		if (strcmp(s, "SECCOMP_FILTER_FLAG_LOG") == 0)
			*flags |= SECCOMP_FILTER_FLAG_LOG;
		else if (strcmp(s, "SECCOMP_FILTER_FLAG_SPEC_ALLOW") == 0)
			*flags |= SECCOMP_FILTER_FLAG_SPEC_ALLOW;
		else if (strcmp(s, "SECCOMP_FILTER_FLAG_TSYNC") == 0)
			; /* the task child is single-threaded: nothing to sync */
		else
			return fail(ld, "flags[%zu]: unknown or unsupported flag %s", i,
				    json_is_string(v) ? s : "(not a string)");
	}
	return 0;
}

/* libseccomp 2.5 exports only to a file descriptor: go through a memfd. */
static int export_bpf(struct loader *ld, struct sock_fprog *prog)
{
	int fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
	if (fd < 0)
		return fail(ld, "memfd_create: %s", strerror(errno));
	int rc = seccomp_export_bpf(ld->ctx, fd);
	if (rc < 0) {
		close(fd);
		return fail(ld, "libseccomp could not generate the filter: %s", strerror(-rc));
	}
	off_t size = lseek(fd, 0, SEEK_END);
	if (size < 0) {
		int e = errno;
		close(fd);
		return fail(ld, "lseek(memfd): %s", strerror(e));
	}
	size_t ninsn = (size_t)size / sizeof(struct sock_filter);
	if (size == 0 || (size_t)size % sizeof(struct sock_filter) != 0) {
		close(fd);
		return fail(ld, "libseccomp produced a malformed filter (%lld bytes)",
			    (long long)size);
	}
	if (ninsn > BPF_MAXINSNS) {
		close(fd);
		return fail(ld, "compiled filter has %zu instructions, the kernel accepts %d",
			    ninsn, BPF_MAXINSNS);
	}
	struct sock_filter *insns = malloc((size_t)size);
	if (!insns) {
		close(fd);
		return fail(ld, "out of memory");
	}
	size_t got = 0;
	while (got < (size_t)size) {
		ssize_t n = pread(fd, (char *)insns + got, (size_t)size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			free(insns);
			close(fd);
			return fail(ld, "reading back the filter: %s", strerror(e));
		}
		got += (size_t)n;
	}
	close(fd);
	prog->filter = insns;
	prog->len = (unsigned short)ninsn;
	return 0;
}

static int compile(struct loader *ld, json_t *root, struct seccomp_policy *out)
{
	static const char *const keys[] = {"defaultAction",
					   "defaultErrnoRet",
					   "defaultErrno",
					   "architectures",
					   "archMap",
					   "syscalls",
					   "flags",
					   "listenerPath",
					   "listenerMetadata",
					   "comment",
					   NULL};
	if (!json_is_object(root))
		return fail(ld, "the top level must be a JSON object");
	if (check_keys(ld, root, "top level", keys) < 0)
		return -1;
	json_t *lp = json_object_get(root, "listenerPath");
	if (json_is_string(lp) && json_string_length(lp) > 0)
		return fail(ld, "\"listenerPath\" is not supported (no seccomp agent)");
	uint64_t def_errno;
	if (get_errno(ld, root, "defaultErrnoRet", "defaultErrno", "top level", &def_errno) < 0)
		return -1;
	json_t *jdef = json_object_get(root, "defaultAction");
	if (!jdef)
		return fail(ld, "missing \"defaultAction\"");
	if (parse_action(ld, jdef, def_errno, "defaultAction", &ld->def_action) < 0)
		return -1;
	if (parse_arches(ld, root) < 0 || parse_flags(ld, root, &out->flags) < 0)
		return -1;
	json_t *calls = json_object_get(root, "syscalls");
	if (!calls || json_is_null(calls) || (json_is_array(calls) && json_array_size(calls) == 0))
		return fail(ld, "\"syscalls\" is missing or empty: a policy must list syscalls");
	if (!json_is_array(calls))
		return fail(ld, "\"syscalls\" must be an array");

	ld->ctx = seccomp_init(ld->def_action);
	if (!ld->ctx)
		return fail(ld, "libseccomp refused the default action");
	/* x32 and 32-bit compat syscalls reach the filter as foreign
	 * architectures: kill rather than answer them. */
	int rc = seccomp_attr_set(ld->ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (rc < 0)
		rc = seccomp_attr_set(ld->ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_THREAD);
	if (rc < 0)
		return fail(ld, "libseccomp: cannot set the bad-architecture action: %s",
			    strerror(-rc));
	/* A binary tree keeps the lookup short with a long allowlist; older
	 * libseccomp without it still produces a correct (linear) filter. */
	(void)seccomp_attr_set(ld->ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);

	size_t i;
	json_t *rule;
	json_array_foreach(calls, i, rule) {
		if (add_rule(ld, rule, i) < 0)
			return -1;
	}
	if (export_bpf(ld, &out->prog) < 0)
		return -1;
	out->n_allowed = ld->n_allowed;
	out->n_unknown = ld->n_unknown;
	if (ld->n_unknown) {
		const struct scmp_version *ver = seccomp_version();
		snprintf(out->warning, sizeof(out->warning),
			 "%u syscall name(s) unknown to libseccomp %u.%u.%u left denied: %s",
			 ld->n_unknown, ver ? ver->major : 0, ver ? ver->minor : 0,
			 ver ? ver->micro : 0, ld->unknown);
	}
	return 0;
}

int seccomp_policy_compile(const char *path, const char *data, size_t len,
			   struct seccomp_policy *out, bool *kernel_dep, struct error *err)
{
	memset(out, 0, sizeof(*out));
	error_clear(err);
	if (kernel_dep)
		*kernel_dep = false;
	struct loader *ld = calloc(1, sizeof(*ld));
	if (!ld)
		return error_set(err, ENOMEM, NULL, "seccomp policy %s", path ? path : "(none)");
	ld->path = path ? path : "(none)";
	ld->err = err;
	ld->arch = seccomp_arch_native();
	int rc = -1;
	if (uname(&ld->uts) < 0) {
		fail(ld, "uname: %s", strerror(errno));
		goto out;
	}
	json_error_t jerr;
	json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		/* A policy file that does not parse is bad configuration (exit 2,
		 * docs/configuration.md), like one that cannot be read. */
		error_set(err, 0, "INVALID_CONFIG",
			  "seccomp policy %s: invalid JSON at line %d, column %d: %s; fix the "
			  "file or point --seccomp-policy (FORCEAI_SECCOMP_POLICY) at a valid "
			  "one, e.g. the repository's seccomp/default.json",
			  ld->path, jerr.line, jerr.column, jerr.text);
		goto out;
	}
	const char *base = path ? strrchr(path, '/') : NULL;
	snprintf(out->name, sizeof(out->name), "%s", base ? base + 1 : ld->path);
	rc = compile(ld, root, out);
	json_decref(root);
	if (kernel_dep)
		*kernel_dep = ld->kernel_dep;
out:
	if (ld->ctx)
		seccomp_release(ld->ctx);
	free(ld);
	if (rc < 0)
		seccomp_policy_free(out);
	return rc;
}

/* The policy file's bytes (NUL-terminated) into *data; -1 with err set. */
int seccomp_policy_read(const char *path, char **data, size_t *len, struct error *err)
{
	*data = NULL;
	*len = 0;
	if (!path || !*path)
		return error_set(err, 0, NULL, "seccomp policy (none): no policy file configured");
	/* Read at start, before the loop and the signals exist: a FIFO or a
	 * device there must not hold PID 1 in open() or read() (read_regular:
	 * O_NONBLOCK, a regular file by fstat, bounded). Links are followed:
	 * the path is the operator's. */
	struct stat st;
	char *buf;
	size_t n;
	int rc = read_regular(AT_FDCWD, path, 0, 64u << 20, &buf, &n, &st);
	if (rc < 0)
		return error_set(err, 0, NULL, "seccomp policy %s: %s: %s", path,
				 rc == -EFTYPE_NOT_REGULAR || rc == -EFBIG || rc == -EIO
					 ? "cannot read"
					 : "cannot open",
				 rc == -EFBIG ? "larger than 64 MiB"
					      : open_regular_strerror(rc, &st));
	*data = buf;
	*len = n;
	return 0;
}

int seccomp_policy_load(const char *path, struct seccomp_policy *out, struct error *err)
{
	memset(out, 0, sizeof(*out));
	error_clear(err);
	char *data;
	size_t len;
	if (seccomp_policy_read(path, &data, &len, err) < 0)
		return -1;
	int rc = seccomp_policy_compile(path, data, len, out, NULL, err);
	free(data);
	return rc;
}

int seccomp_policy_apply(const struct seccomp_policy *p)
{
	if (!p->prog.filter || p->prog.len == 0)
		return -EINVAL;
	/* Only raw system calls here: this runs between fork and execve. */
	struct sock_fprog prog = p->prog;
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, p->flags, &prog) == 0)
		return 0;
	if (errno == ENOSYS && p->flags == 0 &&
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0)
		return 0;
	return -errno;
}

/* The refused set is what the program answers EPERM (the default action of a default-deny
 * policy, and any rule that says the same): those returns become user notifications, which
 * the shim answers with EPERM again, so a task sees exactly what the plain program gives it.
 * Other errnos (clone3's ENOSYS, which every C library falls back from on each thread it
 * starts) stay answered by the kernel, uncounted. */
int seccomp_policy_notify_build(struct seccomp_policy *p)
{
	const uint32_t eperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
	p->notify_prog.filter = NULL;
	p->n_notify = 0;
	if (!p->prog.filter || p->prog.len == 0)
		return 0;
	struct sock_filter *f = malloc((size_t)p->prog.len * sizeof(*f));
	if (!f)
		return -ENOMEM;
	memcpy(f, p->prog.filter, (size_t)p->prog.len * sizeof(*f));
	unsigned n = 0;
	for (unsigned i = 0; i < p->prog.len; i++)
		if (f[i].code == (BPF_RET | BPF_K) && f[i].k == eperm) {
			f[i].k = SECCOMP_RET_USER_NOTIF;
			n++;
		}
	if (n == 0) {
		free(f);
		return 0;
	}
	p->notify_prog.filter = f;
	p->notify_prog.len = p->prog.len;
	p->n_notify = n;
	return 0;
}

int seccomp_policy_apply_notify(const struct seccomp_policy *p, int *listener)
{
	if (listener)
		*listener = -1;
	if (!listener || !p->notify_prog.filter)
		return seccomp_policy_apply(p);
	struct sock_fprog prog = p->notify_prog;
	long fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
			  p->flags | SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
	if (fd >= 0) {
		*listener = (int)fd;
		return 0;
	}
	/* EBUSY: a filter above ours has a listener already (the runner itself supervised);
	 * EINVAL: a kernel before 5.0. Refusals are then the kernel's, uncounted. */
	return seccomp_policy_apply(p);
}

void seccomp_policy_free(struct seccomp_policy *p)
{
	free(p->prog.filter);
	p->prog.filter = NULL;
	p->prog.len = 0;
	free(p->notify_prog.filter);
	p->notify_prog.filter = NULL;
	p->notify_prog.len = 0;
}
