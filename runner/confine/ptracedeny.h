/* Debugging without Landlock
 * (docs/design/confinement.md#debugging-inside-the-tasks-own-tree-ptrace): the default policy
 * allows ptrace, process_vm_readv and process_vm_writev because Landlock
 * confines them to the caller's own domain, i.e. the task's own process
 * tree. A task that gets no Landlock domain (a kernel without Landlock or
 * with ABI < 2) would be bounded by the uid check alone, and every task
 * shares the task uid: such a task gets this tiny filter stacked under the
 * policy's, which answers those three calls EPERM whatever the policy says
 * (seccomp takes the strictest answer of all filters). Fail closed. */
#pragma once

/* Child side, async-signal-safe (a constant program); no_new_privs must be
 * set. 0 or -errno. */
int ptracedeny_apply(void);
