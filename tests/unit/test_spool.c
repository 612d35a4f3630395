#include "task/spool.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "unit.h"

int main(void)
{
	char dir[] = "/tmp/spooltest-XXXXXX";
	if (!mkdtemp(dir))
		return 2;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	struct spool s;
	CHECK(spool_open(&s, dfd, 4096) == 0);
	static char rbuf[SPOOL_MAX_REC];
	struct spool_rec rec;
	struct spool_cursor c;
	spool_cursor_start(&s, &c);
	CHECK(spool_next(&s, &c, &rec, rbuf, NULL) == 0);

	/* Records come back in order with their type and offsets. */
	CHECK(spool_append(&s, SPOOL_STDOUT, "hello", 5) == 0);
	CHECK(spool_append(&s, SPOOL_EVENT, "exit\n{}", 7) == 0);
	CHECK(spool_append(&s, SPOOL_STDERR, "err", 3) == 0);
	CHECK(spool_next(&s, &c, &rec, rbuf, NULL) == 1);
	CHECK(rec.type == SPOOL_STDOUT && rec.len == 5 && rec.off == 0 && rec.seq == 0);
	CHECK(memcmp(rbuf, "hello", 5) == 0);
	CHECK(spool_next(&s, &c, &rec, rbuf, NULL) == 1);
	CHECK(rec.type == SPOOL_EVENT && rec.seq == 1);
	CHECK(spool_next(&s, &c, &rec, rbuf, NULL) == 1);
	CHECK(rec.type == SPOOL_STDERR && rec.off == 5); /* events do not count as output */
	CHECK(spool_next(&s, &c, &rec, rbuf, NULL) == 0);

	/* Seeking by output offset lands inside the right record. */
	uint32_t skip;
	spool_seek_off(&s, &c, 6, &skip);
	CHECK(spool_next(&s, &c, &rec, rbuf, NULL) == 1 && rec.type == SPOOL_STDERR && skip == 1);

	/* Past the cap the oldest segment goes; a cursor left behind jumps. */
	struct spool_cursor old;
	spool_cursor_start(&s, &old);
	char chunk[500];
	memset(chunk, 'x', sizeof(chunk));
	for (int i = 0; i < 40; i++)
		CHECK(spool_append(&s, SPOOL_STDOUT, chunk, sizeof(chunk)) == 0);
	CHECK(spool_first_off(&s) > 0);
	bool skipped = false;
	CHECK(spool_next(&s, &old, &rec, rbuf, &skipped) == 1);
	CHECK(skipped);
	CHECK(rec.off == spool_first_off(&s));

	/* Seek by sequence number. */
	spool_seek_seq(&s, &c, s.next_seq - 2);
	CHECK(spool_next(&s, &c, &rec, rbuf, NULL) == 1 && rec.seq == s.next_seq - 2);
	CHECK(spool_next(&s, &c, &rec, rbuf, NULL) == 1 && rec.seq == s.next_seq - 1);
	CHECK(spool_next(&s, &c, &rec, rbuf, NULL) == 0);
	CHECK(spool_append(&s, SPOOL_STDOUT, chunk, SPOOL_MAX_REC + 1) < 0);
	spool_close(&s);
	close(dfd);
	rmdir(dir);
	return unit_done();
}
