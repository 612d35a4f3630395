/* The confinement policy for exec'd shims: see shim_policy.h. Also built into
 * the shim binary (no runner library calls here). */
#include "task/shim_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int shim_policy_write(const struct confine_policy *pol, int report_fd)
{
	uint32_t len = pol->enabled ? pol->seccomp.prog.len : 0;
	uint32_t nlen =
		pol->enabled && pol->seccomp.notify_prog.filter ? pol->seccomp.notify_prog.len : 0;
	size_t size = sizeof(struct shim_policy_image) +
		      (size_t)(len + nlen) * sizeof(struct sock_filter);
	struct shim_policy_image *w = calloc(1, size);
	if (!w)
		return -ENOMEM;
	memcpy(w->magic, SHIM_MAGIC, sizeof(w->magic));
	w->size = (uint32_t)size;
	w->enabled = pol->enabled;
	w->allow_root_tasks = pol->allow_root_tasks;
	w->privileged = pol->caps.privileged;
	w->last_cap = pol->caps.last_cap;
	w->securebits = pol->caps.securebits;
	w->n_rlimits = (uint32_t)pol->n_rlimits;
	for (size_t i = 0; i < pol->n_rlimits && i < 8; i++)
		w->rlimits[i] = (struct shim_policy_rlimit){.resource = pol->rlimits[i].resource,
							    .cur = pol->rlimits[i].value.rlim_cur,
							    .max = pol->rlimits[i].value.rlim_max};
	w->seccomp_flags = pol->seccomp.flags;
	w->seccomp_len = len;
	memcpy(w->netdeny, pol->netdeny.insns, sizeof(w->netdeny));
	if (len)
		memcpy(w->seccomp, pol->seccomp.prog.filter,
		       (size_t)len * sizeof(struct sock_filter));
	w->notify_len = nlen;
	w->report_fd = report_fd;
	if (nlen)
		memcpy(w->seccomp + len, pol->seccomp.notify_prog.filter,
		       (size_t)nlen * sizeof(struct sock_filter));
	int fd = memfd_create("forceai-shim-policy", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int rc = fd < 0 ? -errno : 0;
	if (rc == 0 && write(fd, w, size) != (ssize_t)size)
		rc = -EIO;
	if (rc == 0 &&
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
		rc = -errno;
	free(w);
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	return fd;
}

int shim_policy_read(int fd, struct confine_policy *pol, int ll_fd, int ll_root_fd, int *report_fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if ((size_t)st.st_size < sizeof(struct shim_policy_image))
		return -EINVAL;
	const struct shim_policy_image *w =
		mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (w == MAP_FAILED)
		return -errno;
	if (memcmp(w->magic, SHIM_MAGIC, sizeof(w->magic)) || w->size != st.st_size ||
	    w->n_rlimits > 8 || w->notify_len > w->seccomp_len ||
	    sizeof(*w) + (size_t)(w->seccomp_len + w->notify_len) * sizeof(struct sock_filter) !=
		    w->size)
		return -EINVAL;
	memset(pol, 0, sizeof(*pol));
	pol->enabled = w->enabled;
	pol->allow_root_tasks = w->allow_root_tasks;
	pol->caps.privileged = w->privileged;
	pol->caps.last_cap = w->last_cap;
	pol->caps.securebits = w->securebits;
	pol->n_rlimits = w->n_rlimits;
	for (uint32_t i = 0; i < w->n_rlimits; i++)
		pol->rlimits[i] = (struct confine_rlimit){.resource = w->rlimits[i].resource,
							  .value = {.rlim_cur = w->rlimits[i].cur,
								    .rlim_max = w->rlimits[i].max}};
	pol->seccomp.flags = w->seccomp_flags;
	pol->seccomp.prog.len = (unsigned short)w->seccomp_len;
	pol->seccomp.prog.filter = (struct sock_filter *)w->seccomp;
	memcpy(pol->netdeny.insns, w->netdeny, sizeof(pol->netdeny.insns));
	pol->seccomp.notify_prog.len = (unsigned short)w->notify_len;
	pol->seccomp.notify_prog.filter =
		w->notify_len ? (struct sock_filter *)w->seccomp + w->seccomp_len : NULL;
	*report_fd = w->report_fd;
	pol->landlock_ruleset_fd = pol->landlock.ruleset_fd = ll_fd;
	pol->landlock.root_ruleset_fd = ll_root_fd;
	return 0;
}
