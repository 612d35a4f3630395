/* The route table of the runner's API (execd, native tasks, files,
 * metrics, hardening), kept apart from the HTTP layer so that the layer
 * depends on no handler. */
#pragma once
#include <stddef.h>

#include "http/http.h"

extern const struct http_route api_routes[];
extern const size_t api_n_routes;
