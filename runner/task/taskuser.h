/* The unprivileged task user as the runner acts on its behalf (files API,
 * PTY cwd, directory watches, tools' file jobs): one builder, so each
 * caller gets the same uid, gid and write roots. */
#pragma once
#include "files/ident.h"

struct runner;

/* The task user's identity: cfg's task uid and gid, writes only beneath
 * the Landlock roots tasks get (when Landlock runs; else anywhere the user
 * may write), as for the tasks themselves. */
void task_user_ident(const struct runner *r, struct files_ident *id);
