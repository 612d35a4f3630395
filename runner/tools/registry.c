/* The tool table: each tool's descriptor and its start (see tools.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/runner.h"
#include "tools/internal.h"

/* The descriptors handed to clients: name, description, inputSchema, outputSchema where the
 * result has structuredContent. One constant text, parsed when asked for. */
static const char TOOLS_JSON[] =
	"[{\"name\":\"run_command\",\"description\":\"Run a shell command (bash -c) in the sandbox, as t"
	"he task user and confined like every task (seccomp, no capabilities, Landlock, limits). "
	"Returns the exit code and the output; output over the bound is cut to its head and tail "
	"with a marker. With a progressToken the output is sent as progress notifications while i"
	"t runs; cancelling the request kills the command's process tree.\",\"inputSchema\":{\"type\":"
	"\"object\",\"properties\":{\"command\":{\"type\":\"string\",\"minLength\":1,\"description\":\"the comma"
	"nd line (bash -c)\"},\"cwd\":{\"type\":\"string\",\"description\":\"absolute working directory (de"
	"fault: the task default, /workspace when present)\"},\"timeout_ms\":{\"type\":\"integer\",\"mini"
	"mum\":0,\"description\":\"time limit in ms (0 or absent: none); the tree is killed at the li"
	"mit\"},\"env\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"},\"description\":\"env"
	"ironment variables added for the command\"},\"changes\":{\"type\":\"boolean\",\"description\":\"take"
	" a checkpoint first and report the files the command added, modified and deleted (change"
	"s; other tasks' changes in the same tree show too)\"},\"kill_tree_on_exit\":{\"type\":\"boolean\""
	",\"description\":\"kill what the command leaves running (e.g. a server started with &) when "
	"it exits; by default such processes keep running, listed in GET /v1/tasks, until stopped or "
	"the box is reset\"}},\"required\":[\"command\"],\"additionalProperties"
	"\":false},\"outputSchema\":{\"type\":\"object\",\"properties\":{\"exit_code\":{\"type\":\"integer\"},\"s"
	"tdout\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},\"status\":{\"type\":\"string\",\"descripti"
	"on\":\"succeeded, failed, timeout, cancelled or killed\"},\"duration_ms\":{\"type\":\"integer\"},"
	"\"truncated\":{\"type\":\"boolean\"},\"changes\":{\"type\":\"object\",\"description\":\"with chang"
	"es: {checkpoint, added, modified, deleted, counts, truncated}\"},\"denied\":{\"type\":\"object\",\"add"
	"itionalProperties\":{\"type\":\"integer\"},\"description\":\"the syscalls the seccomp policy refu"
	"sed the command (EPERM) and how often; absent when none\"}},\"required\":[\"exit_code\",\"stdout\",\"stderr\",\"status\",\"dura"
	"tion_ms\"]}},{\"name\":\"read_file\",\"description\":\"Read a text file as the task user: lines "
	"offset to offset+limit-1 (1-based; default the first 2000 lines). A binary file, a direc"
	"tory, or a file the task user may not read is an error.\",\"inputSchema\":{\"type\":\"object\","
	"\"properties\":{\"path\":{\"type\":\"string\",\"description\":\"absolute path\"},\"offset\":{\"type\":\"i"
	"nteger\",\"minimum\":1,\"description\":\"first line (1-based, default 1)\"},\"limit\":{\"type\":\"in"
	"teger\",\"minimum\":1,\"description\":\"lines to read (default 2000)\"}},\"required\":[\"path\"],\"a"
	"dditionalProperties\":false}},{\"name\":\"write_file\",\"description\":\"Write a file as the tas"
	"k user, replacing it atomically if it exists and creating missing parent directories. On"
	"ly beneath the directories tasks may write.\",\"inputSchema\":{\"type\":\"object\",\"properties\""
	":{\"path\":{\"type\":\"string\",\"description\":\"absolute path\"},\"content\":{\"type\":\"string\",\"des"
	"cription\":\"the whole new content\"}},\"required\":[\"path\",\"content\"],\"additionalProperties\""
	":false}},{\"name\":\"edit_file\",\"description\":\"Replace old_string by new_string in a file, "
	"as the task user. old_string must occur exactly once unless replace_all is true; an abse"
	"nt or ambiguous old_string is an error and the file is left unchanged.\",\"inputSchema\":{\""
	"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\",\"description\":\"absolute path\"},\"old"
	"_string\":{\"type\":\"string\",\"minLength\":1,\"description\":\"the exact text to replace\"},\"new_"
	"string\":{\"type\":\"string\",\"description\":\"the replacement\"},\"replace_all\":{\"type\":\"boolean"
	"\",\"description\":\"replace every occurrence (default false)\"}},\"required\":[\"path\",\"old_str"
	"ing\",\"new_string\"],\"additionalProperties\":false}},{\"name\":\"list_directory\",\"description\""
	":\"List a directory as the task user, depth levels deep (default 1), parents before child"
	"ren, in lexical order; symbolic links are not followed. One entry per line: type, size, "
	"path.\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\",\"description"
	"\":\"absolute path of a directory\"},\"depth\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":64,\"de"
	"scription\":\"levels (default 1)\"}},\"required\":[\"path\"],\"additionalProperties\":false}},{\"n"
	"ame\":\"search_files\",\"description\":\"Find files below a directory whose name matches a glo"
	"b (* ? [a-z] {a,b}, ** for any directories; a pattern with a / matches the path below th"
	"e directory). One path per line.\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"path\":{\""
	"type\":\"string\",\"description\":\"absolute path of a directory\"},\"pattern\":{\"type\":\"string\","
	"\"minLength\":1,\"description\":\"glob, e.g. *.c or src/**/*.h\"}},\"required\":[\"path\",\"pattern"
	"\"],\"additionalProperties\":false}},{\"name\":\"grep\",\"description\":\"Search file contents bel"
	"ow a directory (or in one file) for a POSIX extended regular expression, as the task use"
	"r. Each hit: path, line number, line. Binary files and files over 8 MiB are skipped; the"
	" search stops at max_results (default 200) or its time bound and says so.\",\"inputSchema\""
	":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\",\"description\":\"absolute path of "
	"a directory or file\"},\"pattern\":{\"type\":\"string\",\"minLength\":1,\"description\":\"POSIX exte"
	"nded regular expression\"},\"glob\":{\"type\":\"string\",\"description\":\"only files whose name m"
	"atches this glob\"},\"max_results\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10000,\"descript"
	"ion\":\"hits at most (default 200)\"}},\"required\":[\"path\",\"pattern\"],\"additionalProperties\""
	":false},\"outputSchema\":{\"type\":\"object\",\"properties\":{\"matches\":{\"type\":\"array\",\"items\":"
	"{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"line\":{\"type\":\"integer\"},\"text\""
	":{\"type\":\"string\"}},\"required\":[\"path\",\"line\",\"text\"]}},\"truncated\":{\"type\":\"boolean\"},\""
	"files_searched\":{\"type\":\"integer\"}},\"required\":[\"matches\",\"truncated\",\"files_searched\"]}"
	"},"
	"{\"name\":\"checkpoint_create\",\"description\":\"Take a checkpoint of the workspace (defa"
	"ult: every directory tasks may write; or the given paths inside them) to undo changes late"
	"r with checkpoint_restore. Unchanged files cost nothing; contents are stored once. Returns"
	" the checkpoint's id and figures.\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\""
	"paths\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"description\":\"absolute pat"
	"hs inside the writable directories (default: all of them)\"},\"label\":{\"type\":\"string\""
	",\"description\":\"a note for yourself\"}},\"additionalProperties\":false}},{\"name\":\"ch"
	"eckpoint_diff\",\"description\":\"What changed since a checkpoint (or between two): files "
	"added, modified, deleted, and mode/owner/xattr changes, with unified diffs of text files w"
	"hen patch is true.\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\""
	":\"string\",\"description\":\"the checkpoint (from checkpoint_create)\"},\"to\":{\"type\":"
	"\"string\",\"description\":\"a later checkpoint to compare with instead of the files as th"
	"ey are\"},\"patch\":{\"type\":\"boolean\",\"description\":\"add unified diffs of text file"
	"s (default false)\"}},\"required\":[\"id\"],\"additionalProperties\":false}},{\"name\":\"c"
	"heckpoint_restore\",\"description\":\"Put the checkpoint's paths back exactly as they were"
	" (content, modes, owners, times, symlinks; files added since are removed). Refused while c"
	"ommands run unless stop_tasks is true. Lists what it changed.\",\"inputSchema\":{\"type\":"
	"\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"description\":\"the checkpoint\"}"
	",\"stop_tasks\":{\"type\":\"boolean\",\"description\":\"stop running commands first (defau"
	"lt false)\"}},\"required\":[\"id\"],\"additionalProperties\":false}}"
	"]";

static const struct {
	const char *name;
	tool_start_fn start;
} TOOLS[] = {
	{"run_command", tool_run_command},
	{"read_file", tool_read_file},
	{"write_file", tool_write_file},
	{"edit_file", tool_edit_file},
	{"list_directory", tool_list_directory},
	{"search_files", tool_search_files},
	{"grep", tool_grep},
	{"checkpoint_create", tool_checkpoint_create},
	{"checkpoint_diff", tool_checkpoint_diff},
	{"checkpoint_restore", tool_checkpoint_restore},
};
#define N_TOOLS (sizeof(TOOLS) / sizeof(TOOLS[0]))

json_t *tools_list(void)
{
	return json_loads(TOOLS_JSON, 0, NULL);
}

json_t *tools_describe(const char *name)
{
	json_t *all = tools_list(), *found = NULL;
	size_t i;
	json_t *t;
	json_array_foreach(all, i, t) {
		const char *n = json_string_value(json_object_get(t, "name"));
		if (n && !strcmp(n, name)) {
			found = json_incref(t);
			break;
		}
	}
	json_decref(all);
	return found;
}

bool tools_known(const char *name)
{
	for (size_t i = 0; i < N_TOOLS; i++)
		if (!strcmp(TOOLS[i].name, name))
			return true;
	return false;
}

int tool_call_start(struct runner *r, const char *name, json_t *args, const struct tool_ctx *ctx,
		    const struct tool_call_ops *ops, void *arg, struct tool_call **out,
		    struct tool_result *res)
{
	memset(res, 0, sizeof(*res));
	*out = NULL;
	tool_start_fn start = NULL;
	for (size_t i = 0; i < N_TOOLS && name; i++)
		if (!strcmp(TOOLS[i].name, name))
			start = TOOLS[i].start;
	if (!start)
		return tool_result_fail(res, "unknown tool '%.100s'", name ? name : "");
	if (args && !json_is_object(args))
		return tool_result_fail(res, "the arguments of %s must be a JSON object", name);
	struct tool_call *c = tool_call_new(r, ctx, ops, arg);
	if (!c)
		return tool_result_fail(res, "out of memory");
	json_t *empty = args ? NULL : json_object();
	int rc = start(c, args ? args : empty);
	json_decref(empty);
	if (rc > 0) {
		*out = c;
		return 1;
	}
	*res = c->res;
	memset(&c->res, 0, sizeof(c->res));
	tool_call_free(c);
	return 0;
}
