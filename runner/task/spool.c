#include "task/spool.h"

#include "core/log.h"
#include "core/statedir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* Never a file a task could open by name (core/statedir.h). */
static int tmpfile_in(int dirfd)
{
	return statedir_tmpfile(dirfd, "forceai-spool");
}

static void seg_free_mem(struct spool_seg *g)
{
	free(g->mem);
	g->mem = NULL;
	g->memcap = 0;
}

/* Blocks are allocated ahead of the writer in steps of this much (a
 * task that prints a little never reserves a whole segment). */
#define SPOOL_BACK_STEP (1u << 20)

/* The largest a segment gets: cap/2, or one record when that is more. */
static uint64_t seg_len(const struct spool *s)
{
	uint64_t len = s->cap / 2;
	if (len < sizeof(struct spool_rec) + SPOOL_MAX_REC)
		len = sizeof(struct spool_rec) + SPOOL_MAX_REC;
	long page = sysconf(_SC_PAGESIZE);
	uint64_t pg = page > 0 ? (uint64_t)page : 4096;
	return (len + pg - 1) / pg * pg;
}

/* Map a file segment; one that cannot be stays on pwritev. */
static void seg_map(const struct spool *s, struct spool_seg *g)
{
	uint64_t len = seg_len(s);
	if (ftruncate(g->fd, (off_t)len) < 0)
		return;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
	if (m == MAP_FAILED)
		return;
	(void)madvise(m, len, MADV_DONTFORK); /* a forked child never holds it */
	g->map = m;
	g->map_len = len;
	g->backed = 0;
}

static void seg_unmap(struct spool_seg *g)
{
	if (g->map)
		munmap(g->map, g->map_len);
	g->map = NULL;
	g->map_len = g->backed = 0;
}

/* Blocks allocated up to end at least, else false. A segment whose blocks
 * cannot be had (a full disk, no fallocate) is unmapped: what it holds is
 * in the file, and pwritev reports a full disk as an error. */
static bool seg_back(struct spool_seg *g, uint64_t end)
{
	if (end <= g->backed)
		return true;
	uint64_t want = (end + SPOOL_BACK_STEP - 1) / SPOOL_BACK_STEP * SPOOL_BACK_STEP;
	if (want > g->map_len)
		want = g->map_len;
	if (end > want || fallocate(g->fd, 0, (off_t)g->backed, (off_t)(want - g->backed)) < 0) {
		seg_unmap(g);
		return false;
	}
	g->backed = want;
	return true;
}

/* Mapping the largest segments would put that much in the runner's RSS
 * for each of maps->max spools: past this, stay on pwritev. */
#define SPOOL_MAP_SEG_MAX (32u << 20)

static bool may_map(struct spool *s)
{
	if (s->mapped)
		return true;
	if (!s->maps || s->maps->n >= s->maps->max || seg_len(s) > SPOOL_MAP_SEG_MAX)
		return false;
	s->maps->n++;
	s->mapped = true;
	return true;
}

static int new_segment(struct spool *s)
{
	int fd;
	char *map = NULL;
	uint64_t map_len = 0, backed = 0;
	bool recycled = s->nseg == 2 && s->seg[0].fd >= 0;
	if (recycled) {
		/* The oldest segment's file is written over from the start
		 * (its logical size restarts at 0): its pages are in the cache
		 * and its blocks reserved already, where a new file would
		 * allocate them all again and dropping the old one free them. */
		fd = s->seg[0].fd;
		map = s->seg[0].map;
		map_len = s->seg[0].map_len;
		backed = s->seg[0].backed;
	} else {
		fd = tmpfile_in(s->dirfd);
		if (fd < 0)
			return fd;
	}
	if (s->nseg == 2) {
		s->dropped_bytes = s->seg[1].first_off;
		seg_free_mem(&s->seg[0]);
		s->seg[0] = s->seg[1];
		s->nseg = 1;
	}
	struct spool_seg *g = &s->seg[s->nseg++];
	memset(g, 0, sizeof(*g));
	g->fd = fd;
	g->gen = s->next_gen++;
	g->first_seq = s->next_seq;
	g->first_off = s->next_off;
	if (map) {
		g->map = map;
		g->map_len = map_len;
		g->backed = backed;
	} else if (recycled && may_map(s)) {
		seg_map(s, g); /* the oldest one's pages, written over */
	}
	return 0;
}

int spool_open(struct spool *s, int dirfd, uint64_t cap, struct spool_maps *maps)
{
	memset(s, 0, sizeof(*s));
	s->dirfd = dirfd;
	s->cap = cap;
	s->maps = maps;
	s->seg[0].fd = s->seg[1].fd = -1;
	/* The first segment starts in memory: most tasks print little, and
	 * creating a file is most of what a short task costs here. */
	s->nseg = 1;
	s->next_gen = 1;
	return 0;
}

void spool_unmap(struct spool *s)
{
	for (int i = 0; i < s->nseg; i++)
		seg_unmap(&s->seg[i]);
	if (s->mapped)
		s->maps->n--;
	s->mapped = false;
}

void spool_close(struct spool *s)
{
	spool_unmap(s);
	for (int i = 0; i < s->nseg; i++) {
		if (s->seg[i].fd >= 0)
			close(s->seg[i].fd);
		s->seg[i].fd = -1;
		seg_free_mem(&s->seg[i]);
	}
	s->nseg = 0;
}

/* Header and payload in one call. */
static int pwrite2_all(int fd, const void *a, size_t alen, const void *b, size_t blen, uint64_t off)
{
	struct iovec iov[2] = {{(void *)a, alen}, {(void *)b, blen}};
	int n_iov = blen ? 2 : 1;
	struct iovec *v = iov;
	while (n_iov) {
		ssize_t n = pwritev(fd, v, n_iov, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		off += (uint64_t)n;
		while (n_iov && (size_t)n >= v->iov_len) {
			n -= (ssize_t)v->iov_len;
			v++;
			n_iov--;
		}
		if (n_iov) {
			v->iov_base = (char *)v->iov_base + n;
			v->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static int pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* The memory segment moves to a file (it outgrew SPOOL_MEM_MAX). */
static int spill(struct spool *s, struct spool_seg *g)
{
	int fd = tmpfile_in(s->dirfd);
	if (fd < 0)
		return fd;
	int r = pwrite2_all(fd, g->mem, g->size, NULL, 0, 0);
	if (r < 0) {
		close(fd);
		return r;
	}
	g->fd = fd;
	seg_free_mem(g);
	return 0;
}

static int seg_write(struct spool_seg *g, const struct spool_rec *rec, const void *data,
		     uint32_t len)
{
	if (g->map && seg_back(g, g->size + sizeof(*rec) + len)) {
		memcpy(g->map + g->size, rec, sizeof(*rec));
		if (len)
			memcpy(g->map + g->size + sizeof(*rec), data, len);
		return 0;
	}
	if (g->fd >= 0)
		return pwrite2_all(g->fd, rec, sizeof(*rec), data, len, g->size);
	size_t need = g->size + sizeof(*rec) + len;
	if (need > g->memcap) {
		size_t cap = g->memcap ? g->memcap : 512;
		while (cap < need)
			cap *= 2;
		char *m = realloc(g->mem, cap);
		if (!m)
			return -ENOMEM;
		g->mem = m;
		g->memcap = cap;
	}
	memcpy(g->mem + g->size, rec, sizeof(*rec));
	if (len)
		memcpy(g->mem + g->size + sizeof(*rec), data, len);
	return 0;
}

static int seg_read(const struct spool_seg *g, void *buf, size_t len, uint64_t off)
{
	if (g->map) {
		if (off + len > g->size)
			return -EIO;
		memcpy(buf, g->map + off, len);
		return 0;
	}
	if (g->fd >= 0)
		return pread_all(g->fd, buf, len, off);
	if (off + len > g->size)
		return -EIO;
	memcpy(buf, g->mem + off, len);
	return 0;
}

/* The current segment for a record of len bytes: a new one when it would
 * pass cap/2 (not for its first record), the file when it outgrew memory. */
static int seg_for(struct spool *s, uint32_t len, struct spool_seg **out)
{
	struct spool_seg *g = &s->seg[s->nseg - 1];
	uint64_t after = g->size + sizeof(struct spool_rec) + len;
	if (g->size > 0 && after > s->cap / 2) {
		int r = new_segment(s);
		if (r < 0)
			return r;
		g = &s->seg[s->nseg - 1];
	} else if (g->fd < 0 && after > SPOOL_MEM_MAX) {
		int r = spill(s, g);
		if (r < 0)
			return r;
	}
	*out = g;
	return 0;
}

static struct spool_rec next_rec(const struct spool *s, uint16_t type, uint32_t len)
{
	return (struct spool_rec){.seq = s->next_seq,
				  .off = s->next_off,
				  .ts_ms = now_ms(),
				  .len = len,
				  .type = type};
}

/* The record written at the end of g: it is the last one now. */
static void appended(struct spool *s, struct spool_seg *g, const struct spool_rec *rec)
{
	s->last = *rec;
	s->last_gen = g->gen;
	s->last_pos = g->size;
	s->hot = NULL;
	g->size += sizeof(*rec) + rec->len;
	s->next_seq++;
	if (rec->type != SPOOL_EVENT)
		s->next_off += rec->len; /* offsets count output bytes only */
}

int spool_append(struct spool *s, uint16_t type, const void *data, uint32_t len)
{
	if (len > SPOOL_MAX_REC)
		return -EMSGSIZE;
	struct spool_seg *g;
	int r = seg_for(s, len, &g);
	if (r < 0)
		return r;
	struct spool_rec rec = next_rec(s, type, len);
	/* Header then payload; only this process reads the file back. */
	r = seg_write(g, &rec, data, len);
	if (r < 0)
		return r;
	appended(s, g, &rec);
	return 0;
}

void *spool_window(struct spool *s, uint32_t max)
{
	struct spool_seg *g = &s->seg[s->nseg - 1];
	uint64_t end = g->size + sizeof(struct spool_rec) + max;
	if (!g->map || max > SPOOL_MAX_REC || end > g->map_len || !seg_back(g, end))
		return NULL;
	return g->map + g->size + sizeof(struct spool_rec);
}

int spool_commit(struct spool *s, uint16_t type, uint32_t len)
{
	struct spool_seg *g = &s->seg[s->nseg - 1];
	const char *data = g->map + g->size + sizeof(struct spool_rec);
	if (g->size > 0 && g->size + sizeof(struct spool_rec) + len > s->cap / 2)
		/* It belongs at the start of the next segment (a different
		 * file, or the oldest one's, never this one): copied there. */
		return spool_append(s, type, data, len);
	struct spool_rec rec = next_rec(s, type, len);
	memcpy(g->map + g->size, &rec, sizeof(rec));
	appended(s, g, &rec);
	return 0;
}

int spool_append_hot(struct spool *s, uint16_t type, const void *data, uint32_t len)
{
	int r = spool_append(s, type, data, len);
	if (r == 0)
		s->hot = data;
	return r;
}

void spool_cursor_start(const struct spool *s, struct spool_cursor *c)
{
	c->gen = s->seg[0].gen;
	c->pos = 0;
	c->seq = s->seg[0].first_seq;
}

static struct spool_seg *seg_of(struct spool *s, uint64_t gen)
{
	for (int i = 0; i < s->nseg; i++)
		if (s->seg[i].gen == gen)
			return &s->seg[i];
	return NULL;
}

int spool_next_ref(struct spool *s, struct spool_cursor *c, struct spool_rec *rec, void *buf,
		   const void **data, bool *skipped)
{
	if (skipped)
		*skipped = false;
	struct spool_seg *g = seg_of(s, c->gen);
	if (!g) {
		/* Our segment was dropped: continue from the oldest kept. */
		spool_cursor_start(s, c);
		if (skipped)
			*skipped = true;
		g = &s->seg[0];
	}
	while (c->pos >= g->size) {
		if (g == &s->seg[s->nseg - 1])
			return 0;
		g++;
		c->gen = g->gen;
		c->pos = 0;
	}
	if (s->hot && c->gen == s->last_gen && c->pos == s->last_pos) {
		*rec = s->last;
		*data = s->hot;
	} else if (g->map) {
		int r = seg_read(g, rec, sizeof(*rec), c->pos);
		if (r < 0)
			return r;
		*data = g->map + c->pos + sizeof(*rec);
		if (c->pos + sizeof(*rec) + rec->len > g->size)
			return -EIO;
	} else {
		int r = seg_read(g, rec, sizeof(*rec), c->pos);
		if (r == 0 && rec->len)
			r = seg_read(g, buf, rec->len, c->pos + sizeof(*rec));
		if (r < 0)
			return r;
		*data = buf;
	}
	c->pos += sizeof(*rec) + rec->len;
	c->seq = rec->seq + 1;
	return 1;
}

int spool_payload(struct spool *s, uint64_t gen, uint64_t pos, uint32_t off, uint32_t len,
		  void *buf, const void **data)
{
	if (s->hot && gen == s->last_gen && pos == s->last_pos) {
		*data = (const char *)s->hot + off;
		return 0;
	}
	struct spool_seg *g = seg_of(s, gen);
	if (!g || pos + sizeof(struct spool_rec) + off + len > g->size)
		return -ESTALE;
	if (g->map) {
		*data = g->map + pos + sizeof(struct spool_rec) + off;
		return 0;
	}
	int r = len ? seg_read(g, buf, len, pos + sizeof(struct spool_rec) + off) : 0;
	if (r < 0)
		return r;
	*data = buf;
	return 0;
}

int spool_next(struct spool *s, struct spool_cursor *c, struct spool_rec *rec, void *buf,
	       bool *skipped)
{
	const void *data;
	int r = spool_next_ref(s, c, rec, buf, &data, skipped);
	if (r == 1 && data != buf && rec->len)
		memcpy(buf, data, rec->len);
	return r;
}

void spool_seek_seq(struct spool *s, struct spool_cursor *c, uint64_t seq)
{
	spool_cursor_start(s, c);
	int i = 0;
	if (s->nseg == 2 && seq >= s->seg[1].first_seq)
		i = 1;
	struct spool_seg *g = &s->seg[i];
	c->gen = g->gen;
	c->pos = 0;
	c->seq = g->first_seq;
	while (c->seq < seq && c->pos < g->size) {
		struct spool_rec rec;
		if (seg_read(g, &rec, sizeof(rec), c->pos) < 0)
			return;
		c->pos += sizeof(rec) + rec.len;
		c->seq = rec.seq + 1;
	}
}

uint64_t spool_first_off(const struct spool *s)
{
	return s->seg[0].first_off;
}

void spool_seek_off(struct spool *s, struct spool_cursor *c, uint64_t off, uint32_t *skip)
{
	*skip = 0;
	int i = (s->nseg == 2 && off >= s->seg[1].first_off) ? 1 : 0;
	struct spool_seg *g = &s->seg[i];
	c->gen = g->gen;
	c->pos = 0;
	c->seq = g->first_seq;
	while (c->pos < g->size) {
		struct spool_rec rec;
		if (seg_read(g, &rec, sizeof(rec), c->pos) < 0)
			return;
		if (rec.type != SPOOL_EVENT && off < rec.off + rec.len) {
			if (off > rec.off)
				*skip = (uint32_t)(off - rec.off);
			return;
		}
		c->pos += sizeof(rec) + rec.len;
		c->seq = rec.seq + 1;
	}
}
