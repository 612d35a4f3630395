/* The compiled seccomp program, cached (see seccomp_policy.h): libseccomp
 * takes milliseconds to compile the default policy, most of a start.
 *
 * File: a fixed header (magic, key, the policy's counts and warning, the
 * program's length, SHA-256 of header and program) then the program. It
 * is read only when every field checks out: the key (policy bytes, the
 * runner build, libseccomp version, architecture) and, for policies with
 * minKernel rules, the kernel release; otherwise the policy is compiled as
 * if there were no cache. Self-contained like seccomp.c: no logging, what
 * happened goes into out->source (and out->warning for a damaged file). */
#include "confine/seccomp_policy.h"

#include <seccomp.h> /* libseccomp */

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "core/error.h"
#include "core/sha256.h"
#include "core/version.h"

#define CACHE_MAGIC "FRSCBPF1"
#define CACHE_NAME "seccomp-cache.bpf"
/* Bump when seccomp.c translates a policy differently (a fallback for
 * builds without a build-id note, which already changes with the code). */
#define CACHE_COMPILER_REV 1

struct cache_hdr {
	char magic[8];
	uint32_t hdr_size;
	uint32_t arch;
	unsigned char key[32];
	uint32_t flags, n_allowed, n_unknown, ninsn;
	uint32_t kernel_dep; /* release must match */
	char release[68];
	char warning[256];
	unsigned char sum[32]; /* SHA-256 of this header (sum zeroed) and the program */
};

struct build_id {
	const unsigned char *p;
	size_t len;
};

/* The runner's own GNU build-id note: a cache written by another build of
 * the runner is stale even when the policy is the same. */
static int find_build_id(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct build_id *b = arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
		size_t left = ph->p_memsz;
		while (left >= sizeof(ElfW(Nhdr))) {
			const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
			size_t nsz = (n->n_namesz + 3) & ~3u, dsz = (n->n_descsz + 3) & ~3u;
			size_t all = sizeof(*n) + nsz + dsz;
			if (all > left)
				break;
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 &&
			    !memcmp(p + sizeof(*n), "GNU", 4)) {
				b->p = p + sizeof(*n) + nsz;
				b->len = n->n_descsz;
				return 1;
			}
			p += all;
			left -= all;
		}
	}
	return 1; /* the executable comes first: only its notes count */
}

static void cache_key(const char *policy, size_t len, unsigned char key[32])
{
	struct sha256 c;
	sha256_init(&c);
	static const char tag[] = "forceai-runner seccomp cache\n" FORCEAI_RUNNER_VERSION "\n";
	sha256_update(&c, tag, sizeof(tag));
	uint32_t v[6] = {seccomp_arch_native(), 0, 0, 0, (uint32_t)sizeof(struct sock_filter),
			 CACHE_COMPILER_REV};
	const struct scmp_version *ver = seccomp_version();
	if (ver) {
		v[1] = ver->major;
		v[2] = ver->minor;
		v[3] = ver->micro;
	}
	sha256_update(&c, v, sizeof(v));
	struct build_id b = {NULL, 0};
	dl_iterate_phdr(find_build_id, &b);
	uint32_t blen = (uint32_t)b.len;
	sha256_update(&c, &blen, sizeof(blen));
	if (b.p)
		sha256_update(&c, b.p, b.len);
	sha256_update(&c, policy, len);
	sha256_final(&c, key);
}

static void cache_sum(const struct cache_hdr *h, const struct sock_filter *insns,
		      unsigned char out[32])
{
	struct cache_hdr tmp = *h;
	memset(tmp.sum, 0, sizeof(tmp.sum));
	struct sha256 c;
	sha256_init(&c);
	sha256_update(&c, &tmp, sizeof(tmp));
	sha256_update(&c, insns, (size_t)h->ninsn * sizeof(*insns));
	sha256_final(&c, out);
}

enum cache_result { CACHE_OK, CACHE_MISSING, CACHE_STALE, CACHE_BAD, CACHE_UNTRUSTED };

static const char *const cache_words[] = {"used", "missing", "stale", "damaged", "not trusted"};

/* A compiled program is trusted input: it is read only from a file that
 * no task can have made or changed. A hash proves integrity against
 * accidents, not against someone who can write the file. The rule, for the
 * file and the directory holding it: owned by root, writable by nobody
 * else. Tasks never run as root unless --allow-root-tasks (and then
 * Landlock keeps them out of the image and the state dir); in non-root
 * mode the tasks have the runner's uid, so a file of the runner's is a
 * file of theirs. 0, or -1 with the reason in why. */
static int trusted_inode(const struct stat *st, const char *what, char *why, size_t whylen)
{
	if (st->st_uid != 0) {
		snprintf(why, whylen,
			 "its %s is owned by uid %u, not root: tasks of that uid could "
			 "have written it",
			 what, (unsigned)st->st_uid);
		return -1;
	}
	if (st->st_mode & 022) {
		snprintf(why, whylen, "its %s is writable by group or others (mode %04o)", what,
			 (unsigned)(st->st_mode & 07777));
		return -1;
	}
	return 0;
}

/* Read and verify; on CACHE_OK out's program and counts are filled. */
static enum cache_result cache_read(int dirfd, const char *name, const unsigned char key[32],
				    struct seccomp_policy *out, char *why, size_t whylen)
{
	snprintf(why, whylen, "%s", "");
	/* O_NONBLOCK: read before the loop and the signals exist, from the
	 * state dir, which in non-root mode is the tasks' uid's until it is
	 * judged (main.c): a FIFO there must not hold PID 1 in open(). The
	 * S_ISREG check below refuses it. */
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return CACHE_MISSING;
	struct stat st;
	struct cache_hdr h;
	enum cache_result res = CACHE_BAD;
	struct sock_filter *insns = NULL;
	struct stat dst;
	if (fstat(dirfd, &dst) < 0 || trusted_inode(&dst, "directory", why, whylen) < 0 ||
	    fstat(fd, &st) < 0 || trusted_inode(&st, "file", why, whylen) < 0) {
		if (!why[0])
			snprintf(why, whylen, "cannot examine it: %s", strerror(errno));
		res = CACHE_UNTRUSTED;
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(h)) {
		snprintf(why, whylen, "too short");
		goto out;
	}
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    memcmp(h.magic, CACHE_MAGIC, sizeof(h.magic)) || h.hdr_size != sizeof(h)) {
		snprintf(why, whylen, "not a cache file of this format");
		goto out;
	}
	if (h.arch != seccomp_arch_native() || memcmp(h.key, key, sizeof(h.key))) {
		res = CACHE_STALE;
		goto out;
	}
	if (h.kernel_dep) {
		struct utsname u;
		h.release[sizeof(h.release) - 1] = 0;
		if (uname(&u) < 0 || strcmp(u.release, h.release)) {
			res = CACHE_STALE;
			goto out;
		}
	}
	size_t bytes = (size_t)h.ninsn * sizeof(*insns);
	if (h.ninsn == 0 || h.ninsn > BPF_MAXINSNS ||
	    (uint64_t)st.st_size != sizeof(h) + (uint64_t)bytes) {
		snprintf(why, whylen, "wrong size");
		goto out;
	}
	insns = malloc(bytes);
	if (!insns || pread(fd, insns, bytes, sizeof(h)) != (ssize_t)bytes) {
		snprintf(why, whylen, "cannot read the program");
		goto out;
	}
	unsigned char sum[32];
	cache_sum(&h, insns, sum);
	if (memcmp(sum, h.sum, sizeof(sum))) {
		snprintf(why, whylen, "checksum mismatch");
		goto out;
	}
	h.warning[sizeof(h.warning) - 1] = 0;
	out->prog.filter = insns;
	out->prog.len = (unsigned short)h.ninsn;
	out->flags = h.flags;
	out->n_allowed = h.n_allowed;
	out->n_unknown = h.n_unknown;
	snprintf(out->warning, sizeof(out->warning), "%s", h.warning);
	insns = NULL;
	res = CACHE_OK;
out:
	free(insns);
	close(fd);
	return res;
}

/* Write atomically (a temporary name, then rename). 0 or -errno. */
static int cache_write(int dirfd, const char *name, const unsigned char key[32],
		       const struct seccomp_policy *p, bool kernel_dep)
{
	struct cache_hdr h;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, CACHE_MAGIC, sizeof(h.magic));
	h.hdr_size = sizeof(h);
	h.arch = seccomp_arch_native();
	memcpy(h.key, key, sizeof(h.key));
	h.flags = p->flags;
	h.n_allowed = p->n_allowed;
	h.n_unknown = p->n_unknown;
	h.ninsn = p->prog.len;
	h.kernel_dep = kernel_dep;
	struct utsname u;
	if (kernel_dep) {
		if (uname(&u) < 0)
			return -errno;
		snprintf(h.release, sizeof(h.release), "%s", u.release);
	}
	snprintf(h.warning, sizeof(h.warning), "%s", p->warning);
	cache_sum(&h, p->prog.filter, h.sum);
	size_t bytes = (size_t)h.ninsn * sizeof(struct sock_filter);
	char tmp[256];
	snprintf(tmp, sizeof(tmp), "%s.tmp%d", name, (int)getpid());
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (write(fd, &h, sizeof(h)) != (ssize_t)sizeof(h) ||
	    write(fd, p->prog.filter, bytes) != (ssize_t)bytes)
		rc = errno ? -errno : -EIO;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
		rc = -errno;
	if (rc < 0)
		unlinkat(dirfd, tmp, 0);
	return rc;
}

/* "<path>.bpf" split in a directory fd and a name. */
static int beside_policy(const char *path, char *name, size_t len)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	if (snprintf(name, len, "%s.bpf", base) >= (int)len)
		return -ENAMETOOLONG;
	if (!slash)
		return open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char dir[4096];
	size_t n = (size_t)(slash - path);
	if (n >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, n);
	dir[n] = 0;
	int fd = open(n ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* The policy file's bytes (to free) and the cache key they make. -1 with err set. */
static int read_keyed(const char *path, char **data, size_t *len, unsigned char key[32],
		      struct error *err)
{
	if (seccomp_policy_read(path, data, len, err) < 0)
		return -1;
	cache_key(*data, *len, key);
	return 0;
}

static void add_warning(struct seccomp_policy *out, const char *what)
{
	size_t n = strlen(out->warning);
	snprintf(out->warning + n, sizeof(out->warning) - n, "%s%s", n ? "; " : "", what);
}

int seccomp_policy_load_cached(const char *path, int cache_dirfd, struct seccomp_policy *out,
			       struct error *err)
{
	memset(out, 0, sizeof(*out));
	error_clear(err);
	char *data;
	size_t len;
	unsigned char key[32];
	if (read_keyed(path, &data, &len, key, err) < 0)
		return -1;
	const char *base = strrchr(path, '/');
	char name[256], why[160], damaged[400] = "";
	enum cache_result img = CACHE_MISSING, st = CACHE_MISSING;
	int imgfd = beside_policy(path, name, sizeof(name));
	char untrusted[480] = "";
	if (imgfd >= 0) {
		img = cache_read(imgfd, name, key, out, why, sizeof(why));
		close(imgfd);
		if (img == CACHE_BAD)
			snprintf(damaged, sizeof(damaged), "cache %s.bpf rejected (%s)", path, why);
		if (img == CACHE_UNTRUSTED)
			snprintf(untrusted, sizeof(untrusted), "%s.bpf not used: %s", path, why);
	}
	/* The state dir is the runner's own: trusted only when the runner is
	 * root (in non-root mode it belongs to the tasks' uid). */
	bool st_trusted = cache_dirfd >= 0 && geteuid() == 0;
	if (img != CACHE_OK && st_trusted) {
		st = cache_read(cache_dirfd, CACHE_NAME, key, out, why, sizeof(why));
		if (st == CACHE_BAD) {
			size_t n = strlen(damaged);
			snprintf(damaged + n, sizeof(damaged) - n,
				 "%sstate-dir cache %s rejected "
				 "(%s)",
				 n ? "; " : "", CACHE_NAME, why);
		}
	} else if (img != CACHE_OK && cache_dirfd >= 0) {
		st = CACHE_UNTRUSTED;
	}
	snprintf(out->name, sizeof(out->name), "%s", base ? base + 1 : path);
	if (img == CACHE_OK || st == CACHE_OK) {
		snprintf(out->source, sizeof(out->source), "cache %s, root-owned, verified",
			 img == CACHE_OK ? "beside the policy (.bpf)" : "in the state dir");
		if (damaged[0])
			add_warning(out, damaged);
		free(data);
		return 0;
	}
	bool kernel_dep;
	int rc = seccomp_policy_compile(path, data, len, out, &kernel_dep, err);
	free(data);
	if (rc < 0)
		return -1;
	int wrc = st_trusted ? cache_write(cache_dirfd, CACHE_NAME, key, out, kernel_dep) : -EBADF;
	snprintf(out->source, sizeof(out->source),
		 "compiled at start, kept in memory (image cache %s, state-dir cache %s; %s)",
		 cache_words[img], cache_words[st],
		 wrc == 0           ? "written to the state dir"
		 : st_trusted       ? strerror(-wrc)
		 : cache_dirfd >= 0 ? "none written: the state dir belongs to the tasks' uid"
				    : "no state dir");
	if (damaged[0])
		add_warning(out, damaged);
	if (untrusted[0])
		add_warning(out, untrusted);
	return 0;
}

int seccomp_cache_write_file(const char *path, const char *cache_path, struct error *err)
{
	char *data;
	size_t len;
	unsigned char key[32];
	if (read_keyed(path, &data, &len, key, err) < 0)
		return -1;
	struct seccomp_policy p;
	bool kernel_dep;
	int rc = seccomp_policy_compile(path, data, len, &p, &kernel_dep, err);
	free(data);
	if (rc < 0)
		return -1;
	char name[256];
	int dirfd = beside_policy(cache_path, name, sizeof(name));
	/* beside_policy appends .bpf: strip it again for an explicit path. */
	size_t n = strlen(name);
	if (n > 4)
		name[n - 4] = 0;
	if (dirfd < 0) {
		seccomp_policy_free(&p);
		return error_set(err, -dirfd, NULL, "seccomp cache %s", cache_path);
	}
	rc = cache_write(dirfd, name, key, &p, kernel_dep);
	close(dirfd);
	seccomp_policy_free(&p);
	if (rc < 0)
		return error_set(err, -rc, NULL, "cannot write the seccomp cache %s", cache_path);
	return 0;
}
