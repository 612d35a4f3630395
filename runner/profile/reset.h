/* The reset's entry points for its route (reset.c; the profile: profile.h). */
#pragma once
#include <jansson.h>

struct runner;
struct http_req;
struct error;

/* reset.c, for api/reset.c: start a reset for req (suspended until it is
 * done), and its answer once resumed. */
int reset_start(struct runner *r, struct http_req *req, struct error *e);
json_t *reset_answer(struct http_req *req, unsigned *status);
