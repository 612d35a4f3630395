#include "core/closefds.h"

#include <errno.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

void closefds_by_hand(unsigned lo, unsigned hi)
{
	struct rlimit rl;
	unsigned long max = 65536;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < (1UL << 20))
		max = rl.rlim_cur;
	for (unsigned long fd = lo; fd <= hi && fd < max; fd++)
		close((int)fd);
}

int closefds_range(unsigned lo, unsigned hi)
{
	if (lo > hi)
		return 0;
#ifdef SYS_close_range
	if (syscall(SYS_close_range, lo, hi, 0) == 0)
		return 0;
	if (errno != ENOSYS)
		return -errno;
#endif
	closefds_by_hand(lo, hi); /* kernel before 5.9 */
	return 0;
}

int closefds_except(int lowfd, int *keep, int nkeep)
{
	for (int i = 1; i < nkeep; i++) /* insertion sort: at most a handful */
		for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	unsigned next = lowfd > 0 ? (unsigned)lowfd : 0;
	for (int i = 0; i < nkeep; i++) {
		if (keep[i] < 0 || (unsigned)keep[i] < next)
			continue; /* none, below the range, or the same fd twice */
		if ((unsigned)keep[i] > next) {
			int rc = closefds_range(next, (unsigned)keep[i] - 1);
			if (rc < 0)
				return rc;
		}
		next = (unsigned)keep[i] + 1;
	}
	return closefds_range(next, ~0U);
}
