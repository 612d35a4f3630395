/* A task's output: its pipes read into its spool (the hot path: coalescing, the drain pipe,
 * backpressure, map slots) and the readers that stream it out (task/task.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/list.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/utf8.h"
#include "task/internal.h"
#include "task/task.h"

/* Room for a read's worth of pipe buffers however they are aligned (a
 * whole page each at most, some split by an earlier read). A smaller one
 * would cut bulk reads short, and each short one rests the pipe. */
#define TASK_DRAIN_PIPE (256 * 1024)

void task_drain_close(int fds[2])
{
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	fds[0] = fds[1] = -1;
}

/* 0, or -errno with fds {-1, -1}: no drain pipe, bulk output is read. */
int task_drain_open(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
		fds[0] = fds[1] = -1;
		return -errno;
	}
	/* Refused where the user's pipe pages are used up (non-root mode:
	 * the tasks' uid is the runner's). */
	if (fcntl(fds[0], F_SETPIPE_SZ, TASK_DRAIN_PIPE) < 0) {
		int e = errno;
		task_drain_close(fds);
		return -e;
	}
	return 0;
}

void task_wake_readers(struct task *t)
{
	for (struct task_reader *rd = t->readers; rd;) {
		struct task_reader *next = rd->next; /* wake may detach */
		if (rd->wake)
			rd->wake(rd);
		rd = next;
	}
}

/* The pipes are watched unless backpressure holds them or they rest. */
static void apply_watches(struct task *t)
{
	uint32_t ev = t->paused || t->resting ? 0 : EPOLLIN;
	if (t->out_fd >= 0)
		loop_watch_set(&t->r->loop, &t->out_w, ev);
	if (t->err_fd >= 0)
		loop_watch_set(&t->r->loop, &t->err_w, ev);
}

static void set_paused(struct task *t, bool paused)
{
	if (t->paused == paused)
		return;
	t->paused = paused;
	if (paused)
		t->paused_mono = monotonic_ms();
	apply_watches(t);
}

/* Output coalescing (docs/design/performance.md#decisions). A bulk writer - a read of at
 * least TASK_BULK_MIN bytes drained its pipe less than TASK_BULK_US after
 * the previous read - has its pipes left alone for TASK_REST_US: the next
 * read then takes a whole record instead of the few KiB one write left,
 * and the task's writes in between wake nobody. Everything else (a prompt,
 * a line now and then, a terminal's echo of each keystroke however fast
 * they come) is read the moment it is written, as before. */
#define TASK_REST_US 150
#define TASK_BULK_US 1000
#define TASK_BULK_MIN 4096
/* A mapped writer that makes this many short reads in a row has stopped
 * its burst; one short read is only the tail of a burst (what its last
 * write left), which a burst ends with nearly always. */
#define TASK_SHORT_READS 8
/* A read takes at most this much: a record of text that escapes by a few
 * percent then still fits one 64 KiB send with its framing (a larger one
 * would leave a scrap of a packet after every record). */
#define TASK_READ_MAX (SPOOL_MAX_REC - 2048)

static void rest_pipes(struct task *t)
{
	struct task_table *tt = t->r->tasks;
	if (t->resting || t->paused || tt->rest_timer.w.fd < 0)
		return;
	if (!tt->resting && loop_timer_start_us(&t->r->loop, &tt->rest_timer, TASK_REST_US) < 0)
		return; /* read at once, as without coalescing */
	t->resting = true;
	t->rest_next = tt->resting;
	tt->resting = t;
	apply_watches(t);
}

void task_on_rest_over(struct loop *loop, struct loop_timer *timer)
{
	(void)loop;
	struct task_table *tt = timer->arg;
	struct task *t = tt->resting;
	tt->resting = NULL;
	while (t) {
		struct task *next = t->rest_next;
		t->rest_next = NULL;
		t->resting = false;
		apply_watches(t);
		/* Read now rather than after another wait, and wake the readers
		 * either way: a stream holding a short tail for this read sends it
		 * (http/stream.c). The read may start a new rest. */
		if (!t->paused && t->out_fd >= 0)
			task_on_output(loop, &t->out_w, EPOLLIN);
		if (!t->paused && !t->resting && t->err_fd >= 0)
			task_on_output(loop, &t->err_w, EPOLLIN);
		task_wake_readers(t);
		t = next;
	}
}

void task_rest_forget(struct task *t)
{
	if (!t->resting || !t->r->tasks)
		return;
	for (struct task **p = &t->r->tasks->resting; *p; p = &(*p)->rest_next)
		if (*p == t) {
			*p = t->rest_next;
			break;
		}
	t->rest_next = NULL;
	t->resting = false;
}

/* Backpressure: the slowest connected client decides whether we read. */
static void update_backpressure(struct task *t)
{
	uint64_t window = t->r->cfg.stream_window;
	uint64_t max_lag = 0;
	for (struct task_reader *rd = t->readers; rd; rd = rd->next) {
		if (!rd->live)
			continue;
		uint64_t lag = t->spool.next_off - rd->off_read;
		if (lag > max_lag)
			max_lag = lag;
	}
	if (!t->paused && max_lag > window)
		set_paused(t, true);
	else if (t->paused && max_lag <= window / 2)
		set_paused(t, false);
}

/* A map slot taken (the log wrapped: design/tasks.md#output-and-the-spool) or given back, once per
 * change: an operator sees which task holds a mapping and why it let go, and seq (the records so
 * far) places the change in the task's output. The task decides how often that happens (bursts and
 * pauses of its own), so only its first TASK_MAP_LOGS changes are logged, then one line says so. */
#define TASK_MAP_LOGS 32
void task_log_mapping(struct task *t, const char *why_unmapped)
{
	if (t->spool.mapped == t->log_mapped)
		return;
	t->log_mapped = t->spool.mapped;
	if (t->map_logged >= TASK_MAP_LOGS) {
		if (t->map_logged == TASK_MAP_LOGS && ++t->map_logged)
			log_info("task log map changes no longer logged", "{s:s,s:i}", "task",
				 t->id, "logged", TASK_MAP_LOGS);
		return;
	}
	t->map_logged++;
	log_info(t->log_mapped ? "task log mapped" : "task log unmapped", "{s:s,s:s,s:I}", "task",
		 t->id, "why", t->log_mapped ? "wrapped" : why_unmapped, "seq",
		 (json_int_t)t->spool.next_seq);
}

void task_append_event(struct task *t, const char *name, json_t *data)
{
	cleanup_free char *json = json_dumps(data, JSON_COMPACT);
	if (!json)
		return;
	cleanup_buf struct buf b = {0};
	buf_appendf(&b, "%s\n%s", name, json);
	int rc = spool_append(&t->spool, SPOOL_EVENT, b.data, (uint32_t)b.len);
	if (rc < 0)
		log_errno("task log write failed", -rc, t->id);
	task_log_mapping(t, "event");
}

void task_close_pipe(struct task *t, int which)
{
	int *fd = which == 0 ? &t->out_fd : &t->err_fd;
	struct loop_watch *w = which == 0 ? &t->out_w : &t->err_w;
	if (*fd < 0)
		return;
	/* Whatever is left of a cut UTF-8 sequence goes out as it is. */
	if (t->carry_len[which]) {
		spool_append(&t->spool, which == 0 ? SPOOL_STDOUT : SPOOL_STDERR, t->carry[which],
			     (uint32_t)t->carry_len[which]);
		t->carry_len[which] = 0;
	}
	loop_watch_del(&t->r->loop, w);
	close(*fd);
	*fd = -1;
	if (t->out_fd < 0 && t->err_fd < 0) {
		t->pipes_closed_mono = monotonic_ms();
		spool_unmap(&t->spool); /* the writer is done: its map slot is free */
		task_log_mapping(t, "pipes closed");
	}
}

/* Up to len bytes of a task's pipe into buf, as read(2) would. A bulk
 * writer's are first spliced into the drain pipe, which moves page
 * references under the task pipe's lock instead of copying 62 KiB under
 * it: the task, writing into the same pipe at the same time, no longer
 * waits on that lock (design/relay.md#the-port-proxys-speed-its-design-choices, seventh round). The
 * drain pipe is emptied before this returns; where it cannot be, it is replaced, so no byte of one
 * task can ever reach another's output. */
static ssize_t read_output(struct task *t, int which, int fd, unsigned char *buf, size_t len)
{
	int *drain = t->r->tasks->drain;
	if (!t->drain_next[which] || t->drain_off || drain[0] < 0)
		return read(fd, buf, len);
	ssize_t n = splice(fd, NULL, drain[1], NULL, len, SPLICE_F_NONBLOCK);
	if (n < 0 && errno == EINVAL) {
		/* Not a pipe: this task reads as it always did. */
		t->drain_off = true;
		return read(fd, buf, len);
	}
	if (n <= 0)
		return n;
	size_t got = 0;
	while (got < (size_t)n) {
		ssize_t m = read(drain[0], buf + got, (size_t)n - got);
		if (m > 0) {
			got += (size_t)m;
			continue;
		}
		int e = m < 0 ? errno : EPIPE;
		if (e == EINTR)
			continue;
		/* What is left in it belongs to this task alone: the pipe goes,
		 * with those bytes, and a new one takes its place. The task's own
		 * pipe stays: what it writes next is read as before. */
		log_error("reading the drain pipe failed: output lost", "{s:s, s:s, s:I}", "task",
			  t->id, "error", strerror(e), "bytes_lost", (json_int_t)((size_t)n - got));
		task_drain_close(drain);
		int rc = task_drain_open(drain);
		if (rc < 0)
			log_errno(
				"no drain pipe: bulk output is read straight from the task's pipe",
				-rc, t->id);
		if (got > 0)
			return (ssize_t)got;
		errno = EAGAIN;
		return -1;
	}
	return n;
}

/* Left-behind processes' output after the exit event: read so they never block or meet
 * EPIPE (a server that logs each request would die of it), counted, dropped. */
static void discard_output(struct task *t, int which, int fd)
{
	unsigned char scratch[16384];
	for (int i = 0; i < 16; i++) {
		ssize_t n = read(fd, scratch, sizeof(scratch));
		if (n > 0) {
			t->linger_dropped += (uint64_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		task_close_pipe(t, which); /* EOF, or an error: nothing more comes */
		return;
	}
}

void task_output_discard(struct task *t)
{
	task_rest_forget(t);
	t->paused = false;
	t->carry_len[0] = t->carry_len[1] = 0;
	apply_watches(t);
}

static void read_once(struct task *t, int which, bool *more);

void task_output_drain(struct task *t)
{
	for (int which = 0; which < 2; which++) {
		bool more = true;
		/* Bounded: a left-behind writer could keep the pipe full forever. */
		for (int i = 0; i < 64 && more && (which == 0 ? t->out_fd : t->err_fd) >= 0; i++)
			read_once(t, which, &more);
	}
	task_rest_forget(t);
	apply_watches(t);
}

void task_on_output(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	struct task *t = w->arg;
	int which = w == &t->out_w ? 0 : 1;
	bool more;
	if (t->finished && t->lingering)
		discard_output(t, which, which == 0 ? t->out_fd : t->err_fd);
	else
		read_once(t, which, &more);
}

/* One read of a pipe into the spool; *more: it gave bytes (another may). */
static void read_once(struct task *t, int which, bool *more)
{
	*more = false;
	int fd = which == 0 ? t->out_fd : t->err_fd;
	/* Up to 64 KiB (a record's most) per read: streams encode a record
	 * in pieces, so their buffers stay small whatever its size. The
	 * buffer is shared: the record it held is no longer hot. */
	struct task_table *tt = t->r->tasks;
	/* Straight into the task's log where it can (one copy fewer: a
	 * bulk writer's bytes are otherwise copied twice here); else into
	 * the shared buffer, whose record then stops being hot. */
	unsigned char *buf = spool_window(&t->spool, TASK_READ_MAX);
	bool in_place = buf != NULL;
	if (!in_place) {
		if (tt->rbuf_owner) {
			spool_drop_hot(&tt->rbuf_owner->spool);
			tt->rbuf_owner = NULL;
		}
		buf = tt->rbuf;
	}
	size_t carry = t->carry_len[which];
	memcpy(buf, t->carry[which], carry);
	ssize_t n = read_output(t, which, fd, buf + carry, TASK_READ_MAX - carry);
	if (n < 0 && errno == EIO)
		n = 0; /* a terminal whose every task side is closed */
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return;
		log_errno("read from task pipe failed", errno, t->id);
		task_close_pipe(t, which);
		t->r->tasks->pipes_done(t);
		return;
	}
	uint64_t now_us = monotonic_us();
	bool bulk = n >= TASK_BULK_MIN && now_us - t->last_read_us < TASK_BULK_US;
	t->last_read_us = now_us;
	if (n == 0) {
		task_close_pipe(t, which);
		task_wake_readers(t);
		t->r->tasks->pipes_done(t);
		return;
	}
	*more = true;
	size_t total = carry + (size_t)n;
	/* Keep a multi-byte character whole across reads, so chunks stay
	 * valid UTF-8 where the task wrote valid UTF-8. */
	size_t tail = utf8_incomplete_tail(buf, total);
	if (tail == total)
		tail = 0;
	memcpy(t->carry[which], buf + total - tail, tail);
	t->carry_len[which] = tail;
	uint16_t type = which == 0 ? SPOOL_STDOUT : SPOOL_STDERR;
	int rc = in_place ? spool_commit(&t->spool, type, (uint32_t)(total - tail))
			  : spool_append_hot(&t->spool, type, buf, (uint32_t)(total - tail));
	if (rc < 0)
		log_errno("task log write failed", -rc, t->id);
	else if (!in_place)
		tt->rbuf_owner = t;
	/* A mapped writer that prints a little now (a server after its burst
	 * of logs) gives its map slot back; a next burst maps again when it
	 * writes over a segment. */
	t->short_reads = (size_t)n < TASK_BULK_MIN ? t->short_reads + 1 : 0;
	t->drain_next[which] = !t->drain_off && (size_t)n >= TASK_BULK_MIN;
	if (t->short_reads >= TASK_SHORT_READS && t->spool.mapped)
		spool_unmap(&t->spool);
	task_log_mapping(t, "short reads");
	update_backpressure(t);
	task_wake_readers(t);
	if (bulk && (size_t)n < TASK_READ_MAX - carry)
		rest_pipes(t);
}

void task_reader_attach(struct task *t, struct task_reader *rd, bool live)
{
	rd->task = t;
	rd->live = live;
	LIST_PUSH(t->readers, rd);
	t->n_readers++;
	if (!rd->cur.gen && !rd->cur.pos && !rd->cur.seq)
		spool_cursor_start(&t->spool, &rd->cur);
	rd->off_read = spool_first_off(&t->spool);
}

void task_reader_detach(struct task_reader *rd)
{
	struct task *t = rd->task;
	if (!t)
		return;
	LIST_UNLINK(t->readers, rd);
	rd->task = NULL;
	t->n_readers--;
	update_backpressure(t);
}

int task_reader_next_ref(struct task_reader *rd, struct spool_rec *rec, void *buf,
			 const char **data)
{
	struct task *t = rd->task;
	bool skipped;
	const void *p;
	int rc = spool_next_ref(&t->spool, &rd->cur, rec, buf, &p, &skipped);
	if (rc == 1) {
		*data = p;
		if (rec->type != SPOOL_EVENT)
			rd->off_read = rec->off + rec->len;
		if (t->paused)
			update_backpressure(t);
	}
	return rc;
}

/* The copying form, for readers that keep the bytes past the next append. */
int task_reader_next(struct task_reader *rd, struct spool_rec *rec, void *buf)
{
	const char *data;
	int rc = task_reader_next_ref(rd, rec, buf, &data);
	if (rc == 1 && data != buf)
		memcpy(buf, data, rec->len);
	return rc;
}

int task_reader_next_rec(struct task_reader *rd, struct task_rec_ref *ref, void *buf,
			 const char **data)
{
	int rc = task_reader_next_ref(rd, &ref->rec, buf, data);
	if (rc == 1) {
		/* A record never spans segments: it ends where the cursor is. */
		ref->gen = rd->cur.gen;
		ref->pos = rd->cur.pos - sizeof(struct spool_rec) - ref->rec.len;
		ref->done = 0;
		ref->active = true;
	}
	return rc;
}

int task_reader_rest(struct task_reader *rd, const struct task_rec_ref *ref, void *buf,
		     const char **data)
{
	const void *p;
	int rc = spool_payload(&rd->task->spool, ref->gen, ref->pos, ref->done,
			       ref->rec.len - ref->done, buf, &p);
	if (rc == 0)
		*data = p;
	return rc;
}

bool task_reader_at_end(struct task_reader *rd)
{
	struct task *t = rd->task;
	return t->finished && !t->held_ev && rd->cur.seq >= t->spool.next_seq;
}
