/* A task's output log: records appended to unlinked files in the private
 * state dir, so memory stays small whatever a task prints (the first
 * SPOOL_MEM_MAX bytes stay in memory: short tasks never create a file). At most two
 * segments of cap/2 bytes are kept; the oldest is dropped when a third would
 * start. Readers hold cursors; a cursor left behind a dropped segment jumps
 * to the oldest retained record. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPOOL_MAX_REC 65536u
/* Up to this much of the first segment is kept in memory, no file. */
#define SPOOL_MEM_MAX 8192u

enum spool_type { SPOOL_STDOUT = 1, SPOOL_STDERR = 2, SPOOL_EVENT = 3 /* JSON event */ };

struct spool_rec {
	uint64_t seq;   /* 0, 1, 2, ... */
	uint64_t off;   /* offset of this payload among all output (stdout+stderr) bytes */
	uint64_t ts_ms; /* wall clock when the bytes were read */
	uint32_t len;
	uint16_t type;
	uint16_t pad;
};

struct spool_seg {
	int fd; /* -1: the segment is in memory (mem) */
	char *mem;
	size_t memcap;
	/* A file segment mapped shared (NULL: written with pwritev): its
	 * records are written and read in place. `backed` bytes of it have
	 * blocks allocated (fallocate), so a store never meets a full disk
	 * (that would be SIGBUS, not an error). */
	char *map;
	uint64_t map_len, backed;
	uint64_t gen;
	uint64_t first_seq, first_off;
	uint64_t size; /* bytes in the file */
};

/* How many spools may have their segments mapped at once (shared by a
 * runner's spools; see spool_window). */
struct spool_maps {
	unsigned n, max;
};

struct spool {
	int dirfd;
	uint64_t cap;
	/* NULL: never mapped. mapped: this spool counts in maps->n. */
	struct spool_maps *maps;
	bool mapped;
	struct spool_seg seg[2];
	int nseg;
	uint64_t next_seq, next_off, next_gen;
	uint64_t dropped_bytes; /* payload bytes no longer retained */
	/* The last record appended, and where its payload still is in the
	 * caller's memory (hot; NULL when not): a reader that has caught up
	 * takes it from there instead of reading the file back. */
	struct spool_rec last;
	uint64_t last_gen, last_pos;
	const void *hot;
};

struct spool_cursor {
	uint64_t gen, pos; /* segment and file position of the next record */
	uint64_t seq;      /* seq of the next record */
};

/* maps: the bound shared by the spools that may be mapped (spool_window);
 * NULL: never mapped. */
int spool_open(struct spool *s, int dirfd, uint64_t cap, struct spool_maps *maps);
void spool_close(struct spool *s);
int spool_append(struct spool *s, uint16_t type, const void *data, uint32_t len);
/* spool_append, and the payload stays readable at data until
 * spool_drop_hot (the caller's buffer is about to be reused). */
int spool_append_hot(struct spool *s, uint16_t type, const void *data, uint32_t len);
static inline void spool_drop_hot(struct spool *s)
{
	s->hot = NULL;
}
/* Where the payload of the next record (at most max bytes) can be put in
 * place, saving a copy: read(2) straight into it, then spool_commit. NULL
 * when the current segment cannot take it so (in memory, not mapped, or
 * too near its end): use spool_append. Only a spool that wrote over its
 * whole cap (a bulk writer, whose oldest segment is being written over)
 * maps its segments, and only maps->max spools at once: a mapped page
 * is in the runner's RSS, where a written one is only in the page cache. */
void *spool_window(struct spool *s, uint32_t max);
/* The record whose payload (len bytes) was put at spool_window's pointer. */
int spool_commit(struct spool *s, uint16_t type, uint32_t len);
/* Segments back to pwritev/pread (the writer is done, or prints little):
 * the map slot is freed; the spool maps again when it next writes over a
 * segment. Pointers spool_next_ref gave are void. */
void spool_unmap(struct spool *s);
/* Cursor at the oldest retained record. */
void spool_cursor_start(const struct spool *s, struct spool_cursor *c);
/* Next record into rec/buf (buf holds SPOOL_MAX_REC). 1 = got one, 0 = none
 * yet, -errno on I/O error. Sets *skipped when records were lost. */
int spool_next(struct spool *s, struct spool_cursor *c, struct spool_rec *rec, void *buf,
	       bool *skipped);
/* spool_next without the copy where it can: *data points at the payload,
 * in the hot buffer when the cursor is at the hot record, else read into
 * buf. Valid until the next append or spool_drop_hot. */
int spool_next_ref(struct spool *s, struct spool_cursor *c, struct spool_rec *rec, void *buf,
		   const void **data, bool *skipped);
/* The payload of the record at (gen, pos) from byte off, len bytes: *data
 * points into the hot buffer when that record is hot, else into buf (read
 * from the file). -ESTALE when its segment was dropped meanwhile. */
int spool_payload(struct spool *s, uint64_t gen, uint64_t pos, uint32_t off, uint32_t len,
		  void *buf, const void **data);
/* Position c at the first record with seq >= seq. */
void spool_seek_seq(struct spool *s, struct spool_cursor *c, uint64_t seq);
uint64_t spool_first_off(const struct spool *s);
/* Position c at the record holding output byte `off` (or the first one
 * after it); *skip gets the bytes of that record before `off`. */
void spool_seek_off(struct spool *s, struct spool_cursor *c, uint64_t off, uint32_t *skip);
