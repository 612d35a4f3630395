#include "task/spool.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

/* A spool in a fresh scratch directory. */
struct fixture {
	char dir[32];
	int dfd;
	struct spool s;
	struct spool_cursor c;
	struct spool_rec rec;
};

static char rbuf[SPOOL_MAX_REC];

static bool setup_cap(struct fixture *f, uint64_t cap, struct spool_maps *maps)
{
	strcpy(f->dir, "/tmp/spooltest-XXXXXX");
	if (!CHECK(mkdtemp(f->dir) != NULL))
		return false;
	f->dfd = open(f->dir, O_RDONLY | O_DIRECTORY);
	if (!CHECK(spool_open(&f->s, f->dfd, cap, maps) == 0))
		return false;
	spool_cursor_start(&f->s, &f->c);
	return true;
}

static bool setup(struct fixture *f)
{
	return setup_cap(f, 4096, NULL);
}

static void teardown(struct fixture *f)
{
	spool_close(&f->s);
	close(f->dfd);
	rmdir(f->dir);
}

/* stdout "hello", an event, stderr "err" */
static void append3(struct fixture *f)
{
	CHECK(spool_append(&f->s, SPOOL_STDOUT, "hello", 5) == 0);
	CHECK(spool_append(&f->s, SPOOL_EVENT, "exit\n{}", 7) == 0);
	CHECK(spool_append(&f->s, SPOOL_STDERR, "err", 3) == 0);
}

TEST(empty_spool_has_no_record)
{
	struct fixture f;
	if (!setup(&f))
		return;
	CHECK(spool_next(&f.s, &f.c, &f.rec, rbuf, NULL) == 0);
	teardown(&f);
}

/* Records come back in order with their type and offsets. */
TEST(records_in_order)
{
	struct fixture f;
	if (!setup(&f))
		return;
	struct spool_rec rec;
	append3(&f);
	CHECK(spool_next(&f.s, &f.c, &rec, rbuf, NULL) == 1);
	CHECK(rec.type == SPOOL_STDOUT && rec.len == 5 && rec.off == 0 && rec.seq == 0);
	CHECK(memcmp(rbuf, "hello", 5) == 0);
	CHECK(spool_next(&f.s, &f.c, &rec, rbuf, NULL) == 1);
	CHECK(rec.type == SPOOL_EVENT && rec.seq == 1);
	CHECK(spool_next(&f.s, &f.c, &rec, rbuf, NULL) == 1);
	CHECK(rec.type == SPOOL_STDERR && rec.off == 5); /* events do not count as output */
	CHECK(spool_next(&f.s, &f.c, &rec, rbuf, NULL) == 0);
	teardown(&f);
}

/* Seeking by output offset lands inside the right record. */
TEST(seek_by_offset)
{
	struct fixture f;
	if (!setup(&f))
		return;
	struct spool_rec rec;
	append3(&f);
	uint32_t skip;
	spool_seek_off(&f.s, &f.c, 6, &skip);
	CHECK(spool_next(&f.s, &f.c, &rec, rbuf, NULL) == 1 && rec.type == SPOOL_STDERR &&
	      skip == 1);
	teardown(&f);
}

/* Past the cap the oldest segment goes; a cursor left behind jumps. */
static void fill_past_cap(struct fixture *f)
{
	char chunk[500];
	memset(chunk, 'x', sizeof(chunk));
	for (int i = 0; i < 40; i++)
		CHECK(spool_append(&f->s, SPOOL_STDOUT, chunk, sizeof(chunk)) == 0);
}

TEST(cap_drops_oldest_segment)
{
	struct fixture f;
	if (!setup(&f))
		return;
	struct spool_rec rec;
	append3(&f);
	struct spool_cursor old;
	spool_cursor_start(&f.s, &old);
	fill_past_cap(&f);
	CHECK(spool_first_off(&f.s) > 0);
	bool skipped = false;
	CHECK(spool_next(&f.s, &old, &rec, rbuf, &skipped) == 1);
	CHECK(skipped);
	CHECK(rec.off == spool_first_off(&f.s));
	teardown(&f);
}

/* Seek by sequence number. */
TEST(seek_by_sequence)
{
	struct fixture f;
	if (!setup(&f))
		return;
	struct spool_rec rec;
	append3(&f);
	fill_past_cap(&f);
	struct spool *s = &f.s;
	struct spool_cursor *c = &f.c;
	spool_seek_seq(s, c, s->next_seq - 2);
	CHECK(spool_next(s, c, &rec, rbuf, NULL) == 1 && rec.seq == s->next_seq - 2);
	CHECK(spool_next(s, c, &rec, rbuf, NULL) == 1 && rec.seq == s->next_seq - 1);
	CHECK(spool_next(s, c, &rec, rbuf, NULL) == 0);
	teardown(&f);
}

TEST(oversized_record_refused)
{
	struct fixture f;
	if (!setup(&f))
		return;
	static char big[SPOOL_MAX_REC + 1];
	CHECK(spool_append(&f.s, SPOOL_STDOUT, big, SPOOL_MAX_REC + 1) < 0);
	teardown(&f);
}

/* Recycled segments: many rotations, every record intact, in order, and a
 * reader that keeps up never skips. */
TEST(recycled_segments_keep_a_live_reader_whole)
{
	struct fixture f;
	if (!setup(&f))
		return;
	struct spool_rec rec;
	char chunk[500];
	bool lost = false, order_ok = true, bytes_ok = true, skipped;
	uint64_t want_seq = f.s.next_seq;
	for (int i = 0; i < 200; i++) {
		memset(chunk, 'a' + i % 26, sizeof(chunk));
		CHECK(spool_append(&f.s, SPOOL_STDOUT, chunk, 100 + (uint32_t)i) == 0);
		CHECK(spool_next(&f.s, &f.c, &rec, rbuf, &skipped) == 1);
		lost |= skipped;
		order_ok &= rec.seq == want_seq++ && rec.len == 100u + (unsigned)i;
		for (uint32_t k = 0; k < rec.len; k++)
			bytes_ok &= rbuf[k] == 'a' + i % 26;
	}
	CHECK(!lost && order_ok && bytes_ok);
	teardown(&f);
}

/* Hot record: a caught-up reader gets the caller's memory, no copy; once
 * dropped, the same bytes come from the file. */
TEST(hot_record_served_from_memory)
{
	struct fixture f;
	if (!setup(&f))
		return;
	struct spool_rec rec;
	char hotbuf[64] = "hot payload";
	CHECK(spool_append_hot(&f.s, SPOOL_STDOUT, hotbuf, 11) == 0);
	struct spool_cursor again = f.c;
	const void *data = NULL;
	CHECK(spool_next_ref(&f.s, &f.c, &rec, rbuf, &data, NULL) == 1);
	CHECK(data == hotbuf && rec.len == 11);
	spool_drop_hot(&f.s);
	memset(rbuf, 0, 16);
	CHECK(spool_next_ref(&f.s, &again, &rec, rbuf, &data, NULL) == 1);
	CHECK(data == rbuf && rec.len == 11 && memcmp(rbuf, "hot payload", 11) == 0);
	/* A later append leaves the hot one in memory but not current. */
	CHECK(spool_append_hot(&f.s, SPOOL_STDOUT, hotbuf, 3) == 0);
	CHECK(spool_append(&f.s, SPOOL_STDERR, "zz", 2) == 0);
	CHECK(spool_next_ref(&f.s, &f.c, &rec, rbuf, &data, NULL) == 1 && data == rbuf &&
	      rec.len == 3);
	CHECK(spool_next_ref(&f.s, &f.c, &rec, rbuf, &data, NULL) == 1 && data == rbuf &&
	      rec.len == 2 && memcmp(rbuf, "zz", 2) == 0);
	teardown(&f);
}

/* A large spool starts in memory (no file in the dir) and spills to a file
 * past SPOOL_MEM_MAX; a reader sees one unbroken log. */
TEST(memory_first_then_spills_to_a_file)
{
	struct fixture f;
	if (!setup_cap(&f, 1 << 20, NULL))
		return;
	struct spool *s = &f.s;
	struct spool_rec rec;
	char chunk[200];
	uint32_t skip;
	CHECK(s->seg[0].fd < 0);
	struct spool_cursor m;
	spool_cursor_start(s, &m);
	int got = 0;
	bool seq_ok = true;
	for (int i = 0; i < 100; i++) {
		memset(chunk, '0' + i % 10, sizeof(chunk));
		CHECK(spool_append(s, i % 7 ? SPOOL_STDOUT : SPOOL_EVENT, chunk, 200) == 0);
		if (i == 10)
			CHECK(s->seg[0].fd < 0); /* 11 x 232 bytes: still in memory */
		if (i % 3 == 0)
			while (spool_next(s, &m, &rec, rbuf, NULL) == 1)
				seq_ok &= rec.seq == (uint64_t)got++ &&
					  rbuf[199] == '0' + (char)(rec.seq % 10);
	}
	while (spool_next(s, &m, &rec, rbuf, NULL) == 1)
		seq_ok &= rec.seq == (uint64_t)got++ && rbuf[0] == '0' + (char)(rec.seq % 10);
	CHECK(s->seg[0].fd >= 0 && s->seg[0].mem == NULL); /* spilled */
	CHECK(got == 100 && seq_ok);
	spool_seek_seq(s, &m, 5);
	CHECK(spool_next(s, &m, &rec, rbuf, NULL) == 1 && rec.seq == 5);
	spool_seek_off(s, &m, 250, &skip);
	CHECK(spool_next(s, &m, &rec, rbuf, NULL) == 1 && rec.seq == 2 && skip == 50);
	teardown(&f);
}

/* A writer as task.c's pipe reader is: in place when the spool gives a
 * window, else through a buffer. Record i holds len(i) bytes of (i % 251). */
static uint32_t pattern_len(uint64_t i)
{
	return 1 + (uint32_t)(i * 2654435761u % 4000);
}

static int write_pattern(struct spool *s, uint64_t i, int *in_place)
{
	static char buf[4096];
	uint32_t len = pattern_len(i);
	char *w = spool_window(s, sizeof(buf));
	if (w) {
		memset(w, (int)(i % 251), len);
		(*in_place)++;
		return spool_commit(s, SPOOL_STDOUT, len);
	}
	memset(buf, (int)(i % 251), len);
	return spool_append(s, SPOOL_STDOUT, buf, len);
}

/* Every retained record from the oldest on is whole (each byte its seq %
 * 251; its length pattern_len's when lens), in order, with the offsets adding
 * up (a refused append left nothing behind); returns how many, or -1. */
static int check_records(struct spool *s, bool lens)
{
	struct spool_cursor c;
	struct spool_rec rec;
	const void *data;
	spool_cursor_start(s, &c);
	int n = 0;
	uint64_t off = spool_first_off(s);
	int rc;
	while ((rc = spool_next_ref(s, &c, &rec, rbuf, &data, NULL)) == 1) {
		const unsigned char *p = data;
		if ((lens && rec.len != pattern_len(rec.seq)) || rec.off != off)
			return -1;
		for (uint32_t k = 0; k < rec.len; k++)
			if (p[k] != rec.seq % 251)
				return -1;
		off += rec.len;
		n++;
	}
	return rc == 0 && off == s->next_off ? n : -1;
}

static int check_pattern(struct spool *s)
{
	return check_records(s, true);
}

/* A spool is mapped only once it writes over its oldest segment, then
 * takes records in place; one that ends near a segment's end moves to the
 * next (cap/2 = 50,000 is less than a mapped segment); after unmap the
 * same records read back through the file, and a next burst maps again. */
TEST(bulk_writer_writes_in_place_once_it_wraps)
{
	struct fixture f;
	struct spool_maps maps = {.n = 0, .max = 1};
	if (!setup_cap(&f, 100000, &maps))
		return;
	struct spool *s = &f.s;
	int in_place = 0;
	uint64_t i = 0;
	for (; s->next_gen < 2; i++) /* a second segment made, none written over */
		CHECK(write_pattern(s, i, &in_place) == 0);
	CHECK(in_place == 0 && maps.n == 0);
	for (uint64_t end = i + 2000; i < end; i++)
		CHECK(write_pattern(s, i, &in_place) == 0);
	CHECK(maps.n == 1 && s->mapped);
	CHECK(in_place > 1500);  /* all but those at a segment's end */
	CHECK(s->next_gen > 20); /* many segments written over */
	int n = check_pattern(s);
	CHECK(n > 10);
	spool_unmap(s);
	CHECK(maps.n == 0 && !s->mapped && !s->seg[0].map && !s->seg[1].map);
	CHECK(check_pattern(s) == n);
	CHECK(spool_window(s, 4096) == NULL);
	CHECK(write_pattern(s, i++, &in_place) == 0 && check_pattern(s) == n + 1);
	/* A next burst maps again once it writes over a segment. */
	int before = in_place;
	for (uint64_t end = i + 2000; i < end; i++)
		CHECK(write_pattern(s, i, &in_place) == 0);
	CHECK(maps.n == 1 && s->mapped && in_place - before > 1500);
	CHECK(check_pattern(s) > 10);
	teardown(&f);
}

/* maps->max spools at a time: the next one stays on pwritev, and gets a
 * slot once one is freed. */
TEST(mapped_spools_are_bounded)
{
	struct fixture f;
	struct spool_maps maps = {.n = 0, .max = 1};
	if (!setup_cap(&f, 100000, &maps))
		return;
	struct spool b;
	CHECK(spool_open(&b, f.dfd, 100000, &maps) == 0);
	int a_in = 0, b_in = 0;
	for (uint64_t i = 0; i < 500; i++) {
		CHECK(write_pattern(&f.s, i, &a_in) == 0);
		CHECK(write_pattern(&b, i, &b_in) == 0);
	}
	CHECK(a_in > 0 && b_in == 0 && maps.n == 1);
	CHECK(check_pattern(&f.s) > 0 && check_pattern(&b) > 0);
	spool_close(&f.s);
	CHECK(maps.n == 0);
	for (uint64_t i = 500; i < 1000; i++)
		CHECK(write_pattern(&b, i, &b_in) == 0);
	CHECK(b_in > 0 && maps.n == 1 && check_pattern(&b) > 0);
	spool_close(&b);
	CHECK(maps.n == 0);
	teardown(&f);
}

/* The disk fills under a mapped spool (docs/design/tasks.md#output-and-the-spool). A store into a
 * mapped file page that the filesystem cannot back is SIGBUS, which would end
 * the runner; blocks are allocated ahead, and where that fails the segment
 * goes back to pwritev, whose ENOSPC is an error like any other. Run in a
 * child (a tmpfs of its own, in its own mount namespace): exit 0, or the
 * number of the step that went wrong; killed by a signal is the SIGBUS.
 * Records of 40,000 bytes leave the last pages of each segment file never
 * written (the next record does not fit), so a mapped segment needs new
 * blocks exactly there. */
static int append_len(struct spool *s, uint32_t len, bool *unmapped)
{
	static char buf[40000];
	uint64_t i = s->next_seq; /* a refused record takes no number */
	struct spool_seg *g = &s->seg[s->nseg - 1];
	bool was = g->map != NULL;
	char *w = spool_window(s, len);
	if (w) {
		memset(w, (int)(i % 251), len);
		return spool_commit(s, SPOOL_STDOUT, len);
	}
	if (was && !s->seg[s->nseg - 1].map)
		*unmapped = true; /* refused and unmapped: the blocks were not had */
	memset(buf, (int)(i % 251), len);
	return spool_append(s, SPOOL_STDOUT, buf, len);
}

/* dir: made by the parent, which removes it (the child's mount goes with it). */
static int full_disk_child(const char *dir)
{
	if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0)
		return 100;
	if (mount("spooltest", dir, "tmpfs", 0, "size=16m") < 0)
		return 101;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	struct spool_maps maps = {.n = 0, .max = 1};
	struct spool sp;
	if (dfd < 0 || spool_open(&sp, dfd, 4 << 20, &maps) != 0)
		return 102;
	bool unmapped = false;
	uint64_t i = 0;
	while (!maps.n && i++ < 1000)
		if (append_len(&sp, 40000, &unmapped) != 0)
			return 1;
	if (!maps.n)
		return 2; /* never mapped: nothing tested */
	/* The disk is full now: every page of the tmpfs taken by another file. */
	int fill = openat(dfd, "filler", O_CREAT | O_WRONLY, 0600);
	static char page[4096];
	if (fill < 0)
		return 103;
	while (write(fill, page, sizeof(page)) > 0)
		;
	if (errno != ENOSPC)
		return 104;
	int enospc = 0;
	for (uint64_t end = i + 2000; i < end; i++) {
		int rc = append_len(&sp, 4000, &unmapped);
		if (rc == -ENOSPC)
			enospc++;
		else if (rc != 0)
			return 3;
	}
	if (!unmapped)
		return 4; /* the fallback was never taken */
	if (!enospc)
		return 5; /* the full disk was never reported */
	/* Room again: records go on, every retained one whole and in order. */
	close(fill);
	unlinkat(dfd, "filler", 0);
	for (uint64_t end = i + 2000; i < end; i++)
		if (append_len(&sp, 4000, &unmapped) != 0)
			return 6;
	if (check_records(&sp, false) < 10)
		return 7;
	spool_close(&sp);
	return maps.n == 0 ? 0 : 8;
}

TEST(full_disk_under_a_mapped_spool_is_an_error_not_sigbus)
{
	if (geteuid() != 0)
		SKIP("needs root (a tmpfs of its own to fill)");
	char dir[] = "/tmp/spoolfull-XXXXXX";
	if (!CHECKF(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno)))
		return;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		_exit(full_disk_child(dir));
	int st = 0;
	bool waited = pid > 0 && waitpid(pid, &st, 0) == pid;
	if (rmdir(dir) < 0)
		CHECKF(0, "rmdir %s: %s", dir, strerror(errno));
	if (!CHECK(pid >= 0) || !CHECK(waited))
		return;
	CHECKF(!WIFSIGNALED(st), "killed by signal %d (SIGBUS is %d)", WTERMSIG(st), SIGBUS);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "step %d failed",
	       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
