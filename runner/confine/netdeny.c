/* Network policy "none": see netdeny.h. */
#include "confine/netdeny.h"

#include <seccomp.h> /* libseccomp: the native audit architecture */

#include <endian.h>
#include <errno.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#if __BYTE_ORDER == __LITTLE_ENDIAN
#define ARG0_LO offsetof(struct seccomp_data, args[0])
#else
#define ARG0_LO (offsetof(struct seccomp_data, args[0]) + 4)
#endif

int netdeny_build(struct netdeny *nd)
{
	uint32_t arch = seccomp_arch_native();
	if (!arch)
		return -1;
	const struct sock_filter insns[NETDENY_LEN] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		/* Another architecture: the main policy kills it anyway. */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG0_LO),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EACCES & SECCOMP_RET_DATA)),
	};
	memcpy(nd->insns, insns, sizeof(insns));
	return 0;
}

int netdeny_apply(const struct netdeny *nd)
{
	/* From insns itself: the struct may have been copied since build. */
	struct sock_fprog prog = {.len = NETDENY_LEN, .filter = (struct sock_filter *)nd->insns};
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0)
		return 0;
	return -errno;
}
