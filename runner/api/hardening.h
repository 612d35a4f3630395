/* What confinement is in force: one log line at start and GET /v1/hardening. */
#pragma once
#include <jansson.h>

struct runner;
void hardening_log(struct runner *r);
