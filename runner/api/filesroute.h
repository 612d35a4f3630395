/* What the files API's route files share (api/files.c is the prologue; the operations are
 * in api/filesops.c, fileswalk.c, filesreplace.c, filesdownload.c, filesupload.c): the
 * request as an operation sees it, its input, its answer, its error, and the job that runs
 * long work as the task user in slices (files/userjob.h). */
#pragma once
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "api/api.h"
#include "core/error.h"
#include "core/buf.h"
#include "files/ident.h"
#include "files/userjob.h"

#define MAX_QUERY_PATHS 256 /* path=... repeated in one request */

struct runner_config;

/* What a route takes from the request. */
enum files_input {
	IN_QUERY,  /* nothing: the operation reads its own query */
	IN_PATH,   /* exactly one path= */
	IN_PATHS,  /* one or more path= */
	IN_OBJECT, /* a JSON object body */
	IN_ARRAY,  /* a JSON array body */
};

struct fcall {
	struct http_req *req;
	struct files_ident id;
	struct error err;
	enum MHD_Result res; /* the answer, once the operation gave one */
	/* IN_PATH, IN_PATHS: each path= as asked (raw, len) and cleaned. */
	size_t n;
	const char *raw[MAX_QUERY_PATHS];
	size_t len[MAX_QUERY_PATHS];
	char (*paths)[PATH_MAX];
	/* IN_OBJECT, IN_ARRAY */
	json_t *body;
};

/* An operation: 0 once it answered (c->res), or -1 with c->err. */
typedef int (*files_op)(struct fcall *c);

/* The one prologue of the files routes: takes the route's input, acts as the task user, runs
 * op and answers its error, if any; called again once op's job is done. */
enum MHD_Result files_route(struct http_req *req, enum files_input in, files_op op);
/* The same for another wire (envd's Connect): its errors, the prologue's and a job's (a
 * reset, a shutdown), are answered by fail instead of the files API's JSON. */
typedef enum MHD_Result (*files_fail_fn)(struct http_req *req, const struct error *e);
enum MHD_Result files_route_as(struct http_req *req, enum files_input in, files_op op,
			       files_fail_fn fail);

/* ---- work in slices ---- */

/* A request whose work runs in slices on the loop (files/userjob.h): its
 * first slice runs at once (small work answers straight away); if there is
 * more, the request waits suspended until the job is done, then is
 * answered. The job lives in req->ctx, so a client that goes away frees
 * it. */
struct fjob;
typedef int (*fjob_answer_fn)(struct fcall *c, struct fjob *j);

struct fjob {
	struct files_userjob uj; /* first: the job as the task user */
	struct http_req *req;
	files_userjob_step_fn step; /* the operation's slice (uj's checks for a reset first) */
	fjob_answer_fn answer;
	bool done;
};

/* A new job (size bytes, struct fjob first) for this request; step and release take the
 * struct files_userjob at its head. NULL: out of memory. */
void *fjob_new(struct fcall *c, size_t size, files_userjob_step_fn step, fjob_answer_fn answer,
	       files_userjob_fn release);
/* Run a job made by fjob_new (called as the task user): as files_op. */
int fjob_run(struct fcall *c, struct fjob *j);

/* ---- errors and answers ---- */

/* A -errno of the files layer as the request's error (files/fserror.h), a runtime
 * error logged; -1. `upload` keeps the upload's own wording. */
int fapi_fs_error(struct error *e, int rc, const char *op, const char *path,
		  const struct files_ident *id, bool upload);
int fapi_oom(struct error *e);
int fapi_answer_empty(struct fcall *c);
/* 200 with b's JSON (b stays the caller's). */
int fapi_answer_json(struct fcall *c, const struct buf *b);

/* ---- query and body input ---- */

/* One query value with its real length (a %00 shows up as a NUL inside). */
const char *fapi_query_n(struct http_req *req, const char *name, size_t *len);
/* A non-negative decimal number ("depth", "offset", "limit"). */
int fapi_parse_count(const char *s, size_t len, uint64_t max, uint64_t *out);

/* A permission entry: {owner?, group?, mode?} (execd's Permission). */
struct perm {
	bool has_mode;
	mode_t mode;
	uid_t uid; /* -1 = unchanged */
	gid_t gid;
	bool as_root; /* beyond the task user's own rights */
};

/* Parse and authorize {owner?, group?, mode?}: 0, or -1 with *forbidden
 * (403, else 400) and a message. */
int fapi_perm_parse(const struct runner_config *cfg, json_t *o, struct perm *p, bool *forbidden,
		    char *msg, size_t msglen);
/* A path given as a string: checked and cleaned. */
int fapi_str_path(struct error *e, const char *s, size_t len, const char *field,
		  char out[PATH_MAX]);
/* The directory of a clean path ("/" for "/x"). */
void fapi_dirname_of(const char *clean, char out[PATH_MAX]);
