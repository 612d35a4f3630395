#include "core/loop.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/log.h"

int loop_init(struct loop *loop)
{
	memset(loop, 0, sizeof(*loop));
	loop->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (loop->epfd < 0)
		return -errno;
	return 0;
}

void loop_close(struct loop *loop)
{
	if (loop->epfd >= 0)
		close(loop->epfd);
	loop->epfd = -1;
}

int loop_watch_add(struct loop *loop, struct loop_watch *w, int fd, uint32_t events, loop_fd_cb cb,
		   void *arg)
{
	w->fd = fd;
	w->events = events;
	w->cb = cb;
	w->arg = arg;
	struct epoll_event ev = {.events = events, .data.ptr = w};
	if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	w->added = true;
	return 0;
}

int loop_watch_set(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	if (!w->added)
		return -EINVAL;
	if (w->events == events)
		return 0;
	struct epoll_event ev = {.events = events, .data.ptr = w};
	if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0)
		return -errno;
	w->events = events;
	return 0;
}

void loop_watch_del(struct loop *loop, struct loop_watch *w)
{
	if (!w->added)
		return;
	if (epoll_ctl(loop->epfd, EPOLL_CTL_DEL, w->fd, NULL) < 0 && errno != EBADF)
		log_errno("epoll_ctl(DEL) failed", errno, NULL);
	w->added = false;
}

static void timer_fired(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)events;
	struct loop_timer *t = w->arg;
	uint64_t expirations;
	if (read(t->w.fd, &expirations, sizeof(expirations)) < 0)
		return; /* EAGAIN: re-armed or stopped meanwhile */
	if (!t->repeating)
		t->armed = false;
	t->cb(loop, t);
}

int loop_timer_init(struct loop *loop, struct loop_timer *t, loop_timer_cb cb, void *arg)
{
	memset(t, 0, sizeof(*t));
	t->w.fd = -1; /* so a failed init is safe to close */
	t->cb = cb;
	t->arg = arg;
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = loop_watch_add(loop, &t->w, fd, EPOLLIN, timer_fired, t);
	if (r < 0) {
		close(fd);
		t->w.fd = -1;
		return r;
	}
	return 0;
}

static int timer_arm(struct loop_timer *t, uint64_t us, uint64_t interval_us)
{
	struct itimerspec its = {
		.it_value = {.tv_sec = (time_t)(us / 1000000),
			     .tv_nsec = (long)(us % 1000000) * 1000},
		.it_interval = {.tv_sec = (time_t)(interval_us / 1000000),
				.tv_nsec = (long)(interval_us % 1000000) * 1000},
	};
	if (us == 0)
		its.it_value.tv_nsec = 1; /* an all-zero it_value would disarm */
	if (timerfd_settime(t->w.fd, 0, &its, NULL) < 0)
		return -errno;
	t->armed = true;
	t->repeating = interval_us > 0;
	return 0;
}

int loop_timer_start(struct loop *loop, struct loop_timer *t, uint64_t ms, uint64_t interval_ms)
{
	(void)loop;
	return timer_arm(t, ms * 1000, interval_ms * 1000);
}

int loop_timer_start_us(struct loop *loop, struct loop_timer *t, uint64_t us)
{
	(void)loop;
	return timer_arm(t, us, 0);
}

void loop_timer_stop(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	if (t->w.fd < 0 || !t->armed)
		return;
	struct itimerspec its = {0};
	if (timerfd_settime(t->w.fd, 0, &its, NULL) < 0)
		log_errno("timerfd_settime failed", errno, NULL);
	t->armed = false;
}

void loop_timer_close(struct loop *loop, struct loop_timer *t)
{
	if (t->w.fd < 0)
		return;
	loop_watch_del(loop, &t->w);
	close(t->w.fd);
	t->w.fd = -1;
	t->armed = false;
}

int loop_defer(struct loop *loop, loop_hook_cb fn, void *arg)
{
	struct loop_deferred *d = malloc(sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->fn = fn;
	d->arg = arg;
	d->next = loop->deferred;
	loop->deferred = d;
	return 0;
}

void loop_hook_add(struct loop *loop, struct loop_hook *h, loop_hook_cb fn, void *arg)
{
	h->fn = fn;
	h->arg = arg;
	h->next = NULL;
	struct loop_hook **p = &loop->hooks;
	while (*p)
		p = &(*p)->next;
	*p = h;
}

void loop_hook_del(struct loop *loop, struct loop_hook *h)
{
	for (struct loop_hook **p = &loop->hooks; *p; p = &(*p)->next) {
		if (*p == h) {
			*p = h->next;
			h->next = NULL;
			return;
		}
	}
}

static void loop_run_hooks(struct loop *loop)
{
	for (struct loop_hook *h = loop->hooks, *next; h; h = next) {
		next = h->next; /* a hook may remove itself */
		h->fn(loop, h->arg);
	}
}

static void loop_run_deferred(struct loop *loop)
{
	while (loop->deferred) {
		struct loop_deferred *d = loop->deferred;
		loop->deferred = d->next;
		d->fn(loop, d->arg);
		free(d);
	}
}

int loop_run_once(struct loop *loop, int timeout_ms)
{
	struct epoll_event evs[64];
	loop_run_hooks(loop);
	if (loop->stop)
		return 0;
	int n = epoll_wait(loop->epfd, evs, 64, loop->poll_now ? 0 : timeout_ms);
	loop->poll_now = false;
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		struct loop_watch *w = evs[i].data.ptr;
		/* A callback earlier in this batch may have paused or
		 * removed this watch. */
		if (!w->added || w->events == 0)
			continue;
		w->cb(loop, w, evs[i].events);
	}
	loop_run_deferred(loop);
	return n;
}

int loop_run(struct loop *loop)
{
	while (!loop->stop) {
		int rc = loop_run_once(loop, -1);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void loop_stop(struct loop *loop)
{
	loop->stop = true;
}
