/* The one event loop: epoll over file descriptors and timerfd timers. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

struct loop;
struct loop_watch;
typedef void (*loop_fd_cb)(struct loop *loop, struct loop_watch *w, uint32_t events);

struct loop_watch {
	int fd;
	uint32_t events; /* EPOLLIN / EPOLLOUT; 0 = registered but paused */
	bool added;
	loop_fd_cb cb;
	void *arg;
};

struct loop_timer;
typedef void (*loop_timer_cb)(struct loop *loop, struct loop_timer *t);

struct loop_timer {
	struct loop_watch w; /* on a timerfd */
	loop_timer_cb cb;
	void *arg;
	bool armed;
	bool repeating;
};

typedef void (*loop_hook_cb)(struct loop *loop, void *arg);

struct loop_deferred {
	loop_hook_cb fn;
	void *arg;
	struct loop_deferred *next;
};

/* Work that runs after every dispatch batch, before the loop waits again
 * (so also before the first wait), in the order the hooks were added: an
 * HTTP daemon's pump, the runner's exit check. Whoever owns the state
 * registers the hook; nothing calls back into main. */
struct loop_hook {
	loop_hook_cb fn;
	void *arg;
	struct loop_hook *next;
};

struct loop {
	int epfd;
	struct loop_deferred *deferred; /* run once, after the current dispatch batch */
	struct loop_hook *hooks;        /* run after every dispatch batch */
	bool stop;
	bool poll_now; /* a hook has more work at once: the next wait does not sleep */
};

int loop_init(struct loop *loop);
void loop_close(struct loop *loop);
/* Register fd; events may be 0 (paused). Returns 0 or -errno. */
int loop_watch_add(struct loop *loop, struct loop_watch *w, int fd, uint32_t events, loop_fd_cb cb,
		   void *arg);
int loop_watch_set(struct loop *loop, struct loop_watch *w, uint32_t events);
void loop_watch_del(struct loop *loop, struct loop_watch *w);

int loop_timer_init(struct loop *loop, struct loop_timer *t, loop_timer_cb cb, void *arg);
/* One shot after `ms` (0 = as soon as possible); `interval_ms` > 0 repeats. */
int loop_timer_start(struct loop *loop, struct loop_timer *t, uint64_t ms, uint64_t interval_ms);
/* One shot after `us` microseconds. */
int loop_timer_start_us(struct loop *loop, struct loop_timer *t, uint64_t us);
void loop_timer_stop(struct loop *loop, struct loop_timer *t);
void loop_timer_close(struct loop *loop, struct loop_timer *t);

/* Run fn(arg) after the current dispatch batch: objects that own watches
 * are freed this way, never while the batch may still reference them. */
int loop_defer(struct loop *loop, loop_hook_cb fn, void *arg);

/* Add h (owned by the caller, unlinked with loop_hook_del) at the end of
 * the hook list. */
void loop_hook_add(struct loop *loop, struct loop_hook *h, loop_hook_cb fn, void *arg);
void loop_hook_del(struct loop *loop, struct loop_hook *h);

/* Runs until loop_stop(); returns 0 or -errno. */
int loop_run(struct loop *loop);
/* One round of loop_run: the hooks, one epoll_wait of at most
 * timeout_ms (-1 = no limit), the callbacks, the deferred work. Returns the
 * number of events (0 on timeout or EINTR) or -errno. For tests and fuzzing
 * that drive the loop step by step. */
int loop_run_once(struct loop *loop, int timeout_ms);
/* From a hook: there is more to do right away (e.g. a connection with more
 * to send); the next wait only collects what is ready, without sleeping.
 * Cheaper than a 0 ms timer (no syscall, no interrupt). */
static inline void loop_poll_now(struct loop *loop)
{
	loop->poll_now = true;
}
void loop_stop(struct loop *loop);
