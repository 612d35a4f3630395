/* Inside the API server (http.c, response.c, stream.c): not for handlers. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "http/http.h"
#include "http/server.h"

/* A refused request's body is read and discarded up to this much, for this long
 * (design/wire.md#endpoint-and-http-layer). */
#define HTTP_DRAIN_MAX (16ull << 20)
#define HTTP_DRAIN_MS 10000
/* Another listening port with a route table of its own (http_listen_extra):
 * same requests, streams, auth and gate as the main one. */
#define HTTP_EXTRA_MAX 4
struct http_extra {
	struct runner *r;
	const char *name;
	const struct http_route *routes;
	size_t n_routes;
	struct http_daemon daemon;
	struct gate *gate;
	unsigned port;
};

struct http_server {
	const struct http_route *routes;
	size_t n_routes;
	const struct http_hooks *hooks; /* http_set_hooks; NULL: none */
	const struct gate_tasks *tasks; /* who is a task (http_start) */
	struct http_daemon daemon;
	struct gate *gate; /* who may connect (tasks may not) */
	unsigned port;
	bool quiesced;
	bool stopping; /* http_stop: streams end instead of suspending */
	struct http_stream *streams;
	unsigned n_streams;
	struct http_req *suspended; /* http_req_suspend */
	struct http_extra extra[HTTP_EXTRA_MAX];
	unsigned n_extra;
};

/* Run every daemon before the next wait (a connection of one was resumed). */
void http_wake_all(struct http_server *h);
/* The framing of a request's head the server refuses (http/framing.c): NULL or the problem;
 * and the 400 that answers it and closes the connection. */
const char *http_framing_problem(struct MHD_Connection *conn, const char *head);
enum MHD_Result http_framing_error(struct http_req *req, const char *problem);
/* The first fault of a WebSocket handshake request (http/wshandshake.c), with the status
 * that answers it (400, or 426 for another version); NULL: none. */
const char *ws_handshake_problem(struct http_req *req, unsigned *status);
