/* fuzz_seccomp: the seccomp policy loader (runner/seccomp.c): OCI seccomp
 * JSON parsed with jansson and compiled with libseccomp. The input is
 * written to a memfd and loaded through /proc/self/fd/N, the way the runner
 * reads a policy file. The filter is never installed.
 *
 * Checked: a load either fails with a message naming the policy, or gives
 * a non-empty BPF program of whole instructions; nothing leaks either way. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "confine/seccomp_policy.h"
#include "core/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("policy.json", MFD_CLOEXEC);
	if (fd < 0)
		abort();
	size_t off = 0;
	while (off < size) {
		ssize_t n = write(fd, data + off, size - off);
		if (n <= 0)
			abort();
		off += (size_t)n;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	struct seccomp_policy pol;
	struct error e;
	const char *err = e.msg;
	int rc = seccomp_policy_load(path, &pol, &e);
	if (rc == 0) {
		if (!pol.prog.filter || pol.prog.len == 0) {
			fprintf(stderr, "fuzz_seccomp: success without a program\n");
			abort();
		}
		/* Touch every instruction: ASan checks the allocation. */
		unsigned sum = 0;
		for (unsigned i = 0; i < pol.prog.len; i++)
			sum += pol.prog.filter[i].code;
		if (sum == 0xffffffffu)
			fprintf(stderr, "(unlikely sum)\n");
		seccomp_policy_free(&pol);
	} else if (rc == -1) {
		if (!strstr(err, "seccomp policy ")) {
			fprintf(stderr, "fuzz_seccomp: error without the policy's name: %s\n", err);
			abort();
		}
		if (pol.prog.filter) {
			fprintf(stderr, "fuzz_seccomp: failed load left a program\n");
			abort();
		}
	} else {
		fprintf(stderr, "fuzz_seccomp: unexpected return %d\n", rc);
		abort();
	}
	close(fd);
	return 0;
}
