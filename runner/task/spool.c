#include "task/spool.h"

#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static int tmpfile_in(int dirfd)
{
	if (dirfd < 0) {
		/* No state dir (non-root mode, statedir.h): memory only. */
		int m = memfd_create("forceai-spool", MFD_CLOEXEC);
		return m < 0 ? -errno : m;
	}
	int fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd < 0 ? -errno : fd;
	/* Filesystems without O_TMPFILE: create, then unlink at once. */
	static unsigned long counter;
	char name[64];
	for (int tries = 0; tries < 100; tries++) {
		snprintf(name, sizeof(name), ".spool-%d-%lu", (int)getpid(), ++counter);
		fd = openat(dirfd, name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0) {
			unlinkat(dirfd, name, 0);
			return fd;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

static void seg_free_mem(struct spool_seg *g)
{
	free(g->mem);
	g->mem = NULL;
	g->memcap = 0;
}

static int new_segment(struct spool *s)
{
	int fd;
	if (s->nseg == 2 && s->seg[0].fd >= 0) {
		/* The oldest segment's file is written over from the start
		 * (its logical size restarts at 0): its pages are in the cache
		 * and its blocks reserved already, where a new file would
		 * allocate them all again and dropping the old one free them. */
		fd = s->seg[0].fd;
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
	return 0;
}

int spool_open(struct spool *s, int dirfd, uint64_t cap)
{
	memset(s, 0, sizeof(*s));
	s->dirfd = dirfd;
	s->cap = cap;
	s->seg[0].fd = s->seg[1].fd = -1;
	/* The first segment starts in memory: most tasks print little, and
	 * creating a file is most of what a short task costs here. */
	s->nseg = 1;
	s->next_gen = 1;
	return 0;
}

void spool_close(struct spool *s)
{
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
	if (g->fd >= 0)
		return pread_all(g->fd, buf, len, off);
	if (off + len > g->size)
		return -EIO;
	memcpy(buf, g->mem + off, len);
	return 0;
}

int spool_append(struct spool *s, uint16_t type, const void *data, uint32_t len)
{
	if (len > SPOOL_MAX_REC)
		return -EMSGSIZE;
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
	struct spool_rec rec = {.seq = s->next_seq,
				.off = s->next_off,
				.ts_ms = now_ms(),
				.len = len,
				.type = type};
	/* Header then payload; only this process reads the file back. */
	int r = seg_write(g, &rec, data, len);
	if (r < 0)
		return r;
	s->last = rec;
	s->last_gen = g->gen;
	s->last_pos = g->size;
	s->hot = NULL;
	g->size += sizeof(rec) + len;
	s->next_seq++;
	if (type != SPOOL_EVENT)
		s->next_off += len; /* offsets count output bytes only */
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
