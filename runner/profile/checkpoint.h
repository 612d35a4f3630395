/* Workspace checkpoints (POST /v1/checkpoints and the routes below it;
 * docs/design.md §12.1): the list kept by the runner, one operation at a
 * time done by a worker process (files/ckpt.c), answers to requests that
 * wait suspended. Dropped by POST /v1/reset. */
#pragma once
#include <jansson.h>
#include <stdbool.h>

struct runner;
struct http_req;
struct error;

int ckpt_init(struct runner *r, struct error *e);
void ckpt_abort(struct runner *r); /* at exit: a waiting request is answered */
void ckpt_free_all(struct runner *r);
/* Every checkpoint forgotten, the store moved aside (reset). */
void ckpt_drop_all(struct runner *r);
/* A restore is running: no task starts. */
bool ckpt_restoring(struct runner *r);

/* Each starts the operation and suspends req (0), or fails (-1, e set). */
int ckpt_create(struct runner *r, struct http_req *req, struct error *e);
int ckpt_delete(struct runner *r, struct http_req *req, const char *id, struct error *e);
int ckpt_diff(struct runner *r, struct http_req *req, const char *id, struct error *e);
int ckpt_restore(struct runner *r, struct http_req *req, const char *id, struct error *e);
/* The answer once req is resumed (NULL: none). */
json_t *ckpt_answer(struct http_req *req, unsigned *status);
/* Answered at once: NULL with e set on failure. */
json_t *ckpt_list(struct runner *r, struct error *e);
json_t *ckpt_get(struct runner *r, const char *id, struct error *e);
