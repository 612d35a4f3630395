/* One libmicrohttpd daemon on the runner's loop: see server.h. */
#include "http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"

int http_listen(const char *host, unsigned port, unsigned *bound_port, struct error *err)
{
	struct sockaddr_storage ss = {0};
	socklen_t slen;
	int family;
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		family = AF_INET;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		slen = sizeof(*s4);
	} else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		family = AF_INET6;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		slen = sizeof(*s6);
	} else {
		return error_set(err, EINVAL, NULL, "cannot listen on %s", host);
	}
	cleanup_close int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return error_set(err, errno, NULL, "socket");
	int one = 1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		log_errno("setsockopt(SO_REUSEADDR) failed", errno, host);
	if (bind(fd, (struct sockaddr *)&ss, slen) < 0 || listen(fd, 256) < 0) {
		bool v6 = family == AF_INET6;
		if (errno == EADDRINUSE)
			/* A newcomer's first start after `make run` meets this:
			 * name what holds the port and the two ways out. */
			return error_set(
				err, 0, NULL,
				"cannot listen on %s%s%s:%u: Address already in use: stop "
				"what listens there (another runner, or the container `make "
				"run` started: podman stop forceai-runner) or choose another "
				"port",
				v6 ? "[" : "", host, v6 ? "]" : "", port);
		return error_set(err, errno, NULL, "cannot listen on %s%s%s:%u", v6 ? "[" : "",
				 host, v6 ? "]" : "", port);
	}
	if (getsockname(fd, (struct sockaddr *)&ss, &slen) < 0)
		return error_set(err, errno, NULL, "getsockname");
	*bound_port = ntohs(family == AF_INET ? s4->sin_port : s6->sin6_port);
	return take_fd(fd);
}

/* libmicrohttpd's error logger: one JSON log line; cls names the daemon. */
static void http_mhd_log(void *cls, const char *fmt, va_list ap)
{
	const char *who = cls ? cls : "http";
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = 0;
	log_warn(who, "{s:s}", "detail", msg);
}

void http_daemon_run(struct http_daemon *hd)
{
	hd->need_run = false;
	if (hd->d)
		MHD_run(hd->d);
}

static void on_epoll(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	http_daemon_run(w->arg);
}

static void on_timer(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	http_daemon_run(t->arg);
}

/* After every dispatch batch: run MHD if a connection was resumed, then arm
 * the timer for MHD's next own deadline (idle timeouts). */
static void pump(struct loop *loop, void *arg)
{
	struct http_daemon *hd = arg;
	if (!hd->d)
		return;
	MHD_UNSIGNED_LONG_LONG ms = 1;
	/* A connection with more to send (or resumed again from inside
	 * MHD_run) wants another round at once: a few here, then a poll that
	 * does not sleep, so task pipes get their turn between rounds. A 0 ms
	 * timer would cost a syscall and an interrupt every round. */
	for (int round = 0; round < 4; round++) {
		if (!hd->need_run && (MHD_get_timeout(hd->d, &ms) != MHD_YES || ms != 0))
			break;
		http_daemon_run(hd);
		ms = 1;
	}
	if (hd->need_run || (MHD_get_timeout(hd->d, &ms) == MHD_YES && ms == 0)) {
		loop_poll_now(loop);
		return;
	}
	if (MHD_get_timeout(hd->d, &ms) != MHD_YES) {
		if (hd->timer.armed)
			loop_timer_stop(loop, &hd->timer);
		return;
	}
	/* Re-arm only when the deadline really moves: one syscall per loop
	 * turn adds up when output streams fast. */
	uint64_t deadline = monotonic_ms() + ms;
	if (!hd->timer.armed || deadline + 50 < hd->deadline || deadline > hd->deadline + 50) {
		loop_timer_start(loop, &hd->timer, ms, 0);
		hd->deadline = deadline;
	}
}

/* libmicrohttpd's own default prints a bare line and aborts; the runner's
 * log says which of its checks failed, as one JSON line, before the same
 * abort (an inconsistency inside the library cannot be recovered from). */
static void http_mhd_panic(void *cls, const char *file, unsigned int line, const char *reason)
{
	(void)cls;
	log_error("libmicrohttpd panic", "{s:s, s:i, s:s}", "file", file ? file : "?", "line",
		  (int)line, "reason", reason ? reason : "?");
	abort();
}

int http_daemon_start(struct http_daemon *hd, struct loop *loop,
		      const struct http_daemon_conf *conf, struct error *err)
{
	memset(hd, 0, sizeof(*hd));
	MHD_set_panic_func(http_mhd_panic, NULL);
	hd->name = conf->name;
	hd->loop = loop;
	hd->timer.w.fd = -1;
	hd->d = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
					 (conf->allow_upgrade ? MHD_ALLOW_UPGRADE : 0),
				 0, NULL, NULL, conf->on_request, conf->arg,
				 MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, (void *)conf->name,
				 MHD_OPTION_LISTEN_SOCKET, conf->listen_fd,
				 MHD_OPTION_NOTIFY_COMPLETED, conf->on_completed, conf->arg,
				 MHD_OPTION_NOTIFY_CONNECTION, conf->on_connection,
				 conf->connection_arg, MHD_OPTION_URI_LOG_CALLBACK, conf->on_uri,
				 conf->arg, MHD_OPTION_CONNECTION_TIMEOUT,
				 conf->timeout_s ? conf->timeout_s : 1,
				 MHD_OPTION_CONNECTION_MEMORY_LIMIT, conf->conn_memory_limit,
				 MHD_OPTION_CONNECTION_LIMIT, conf->conn_limit,
				 MHD_OPTION_STRICT_FOR_CLIENT, 1,
				 /* SIGPIPE is ignored (main.c's signal table): lets MHD use
				  * sendfile for downloads. */
				 MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1, MHD_OPTION_END);
	if (!hd->d) {
		close(conf->listen_fd);
		return error_set(err, 0, NULL, "cannot start the %s server (libmicrohttpd)",
				 conf->name);
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(hd->d, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info)
		return error_set(err, 0, NULL, "libmicrohttpd has no epoll support");
	int rc = loop_watch_add(loop, &hd->epoll_watch, info->epoll_fd, EPOLLIN, on_epoll, hd);
	if (rc == 0)
		rc = loop_timer_init(loop, &hd->timer, on_timer, hd);
	if (rc < 0)
		return error_set(err, -rc, NULL, "cannot watch the %s server", conf->name);
	loop_hook_add(loop, &hd->pump, pump, hd);
	return 0;
}

void http_daemon_wake(struct http_daemon *hd)
{
	hd->need_run = true;
}

void http_daemon_quiesce(struct http_daemon *hd)
{
	if (!hd->d)
		return;
	MHD_socket fd = MHD_quiesce_daemon(hd->d);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	else
		log_warn("could not stop accepting connections", "{s:s}", "server", hd->name);
}

void http_daemon_stop(struct http_daemon *hd)
{
	if (!hd->loop)
		return;
	if (hd->d) {
		loop_watch_del(hd->loop, &hd->epoll_watch);
		/* MHD closes the listening socket (unless quiesce handed it
		 * over, then it is closed already). */
		MHD_stop_daemon(hd->d);
		hd->d = NULL;
	}
	loop_timer_close(hd->loop, &hd->timer);
	loop_hook_del(hd->loop, &hd->pump);
	hd->loop = NULL;
}
