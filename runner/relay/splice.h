/* Two connected sockets relayed as raw bytes both ways (an upgraded
 * connection of the port proxy, docs/design/interactive.md): through a pipe per
 * direction the kernel moves the bytes through (splice), or a plain
 * buffer when no pipe can be had. Nothing is read from one side while
 * anything read before is still on its way to the other, so a reader that
 * does not read holds the writer back, through TCP. The caller owns the
 * sockets and the loop's watches; this moves bytes and says which events
 * to wait for. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One direction: bytes that came with the heads (data[off..len), sent
 * first), then the pipe, or data as a plain buffer. */
struct relay_pipe {
	char *data;
	size_t len, off;
	int pipe[2];    /* -1 when copying through data */
	size_t in_pipe; /* bytes in the pipe */
	bool eof;       /* the source ended */
	bool shut;      /* ... and the destination was told (shutdown SHUT_WR) */
};

struct relay_splice {
	struct relay_pipe c2u, u2c; /* client to upstream, upstream to client */
};

/* Nothing held (so relay_splice_free is safe). */
void relay_splice_init(struct relay_splice *s);
/* Buffers and pipes, with the bytes each side sent along with the heads
 * (at most 64 KiB of each is kept). -1 when out of memory. */
int relay_splice_open(struct relay_splice *s, const char *to_up, size_t to_up_len,
		      const char *to_client, size_t to_client_len);
/* Move what can be moved now: 1 to go on (then wait for the events below),
 * 0 when both directions ended, -1 when a side broke. */
int relay_splice_pump(struct relay_splice *s, int client_fd, int up_fd);
/* The epoll events to wait for on each socket. */
uint32_t relay_splice_client_events(const struct relay_splice *s);
uint32_t relay_splice_up_events(const struct relay_splice *s);
void relay_splice_free(struct relay_splice *s);
