/* One libmicrohttpd daemon on the runner's loop (external-epoll mode): the
 * single way both daemons (the API, the loopback model proxy) are set up,
 * driven and stopped, so their options cannot drift apart. */
#pragma once
#include <microhttpd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/loop.h"

struct error;

struct http_daemon_conf {
	const char *name; /* in log lines: "http", "model proxy" */
	int listen_fd;    /* from http_listen; the daemon owns it from then on */
	MHD_AccessHandlerCallback on_request;
	MHD_RequestCompletedCallback on_completed;
	void *arg; /* handed to both callbacks */
	/* MHD_OPTION_NOTIFY_CONNECTION (the connection gate), or NULL. */
	MHD_NotifyConnectionCallback on_connection;
	void *connection_arg;
	/* MHD_OPTION_URI_LOG_CALLBACK: sees the raw request target first and
	 * makes the request's state (handed to `arg`'s callbacks as con_cls),
	 * or NULL. */
	void *(*on_uri)(void *arg, const char *uri, struct MHD_Connection *c);
	bool allow_upgrade;       /* connections may be upgraded (WebSocket, http/ws.c) */
	unsigned timeout_s;       /* idle connection timeout */
	size_t conn_memory_limit; /* per-connection buffer */
	unsigned conn_limit;      /* concurrent connections */
};

struct http_daemon {
	const char *name;
	struct MHD_Daemon *d; /* NULL when not running */
	struct loop *loop;
	struct loop_watch epoll_watch; /* MHD's own epoll fd */
	struct loop_timer timer;       /* MHD's own timeouts */
	struct loop_hook pump;         /* after every dispatch batch */
	bool need_run;                 /* a connection was resumed */
	uint64_t deadline;             /* of the armed timer, monotonic ms */
};

/* A listening TCP socket on a numeric IPv4 or IPv6 address (port 0 =
 * ephemeral; the port bound goes to *port). The fd, or -1 with err set. */
int http_listen(const char *host, unsigned port, unsigned *bound_port, struct error *err);

/* Start the daemon on conf->listen_fd (closed here if the start fails) and
 * attach it to loop. 0, or -1 with err set; http_daemon_stop in both
 * cases. */
int http_daemon_start(struct http_daemon *hd, struct loop *loop,
		      const struct http_daemon_conf *conf, struct error *err);
/* A connection was resumed: run the daemon before the loop waits again. */
void http_daemon_wake(struct http_daemon *hd);
/* Run the daemon now (for draining at stop). */
void http_daemon_run(struct http_daemon *hd);
/* Stop accepting connections; those open carry on. */
void http_daemon_quiesce(struct http_daemon *hd);
/* Detach and stop (no connection may be suspended: MHD would abort). */
void http_daemon_stop(struct http_daemon *hd);
