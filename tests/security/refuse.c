/* The refused-syscall load of tests/security/test_refusals.py, run as a task:
 *   refuse flood N      keyctl N times (refused by the default policy), then prints a line
 *   refuse spread A B   syscall(n) for every n in [A, B] (numbers no kernel has: refused)
 *   refuse fork K       K children each call keyctl once
 * Prints {"calls": N, "eperm": M} (M: how many failed with EPERM). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static long refused(long nr)
{
	return syscall(nr, 0, 0, 0, 0, 0);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	long calls = 0, eperm = 0;
	if (!strcmp(argv[1], "flood")) {
		long n = atol(argv[2]);
		for (long i = 0; i < n; i++, calls++)
			if (refused(SYS_keyctl) < 0 && errno == EPERM)
				eperm++;
	} else if (!strcmp(argv[1], "spread") && argc > 3) {
		for (long nr = atol(argv[2]); nr <= atol(argv[3]); nr++, calls++)
			if (refused(nr) < 0 && errno == EPERM)
				eperm++;
	} else if (!strcmp(argv[1], "fork")) {
		int k = atoi(argv[2]);
		for (int i = 0; i < k; i++) {
			pid_t p = fork();
			if (p == 0)
				_exit(refused(SYS_keyctl) < 0 && errno == EPERM ? 0 : 1);
			int st;
			if (p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && !WEXITSTATUS(st))
				eperm++;
			calls++;
		}
	} else {
		return 2;
	}
	printf("{\"calls\": %ld, \"eperm\": %ld}\n", calls, eperm);
	return 0;
}
