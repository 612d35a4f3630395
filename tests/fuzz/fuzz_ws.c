/* fuzz_ws: the WebSocket input path, from the bytes a client sends to the
 * PTY session's frame handling: runner/http/ws.c (microhttpd_ws on the runner's
 * loop: framing, masking, fragmentation, control frames, close codes,
 * UTF-8 of text, the message size limit, input pausing, the output queue)
 * and pty_parse_frame (runner/pty/session.c, the client frames of execd's PTY
 * API).
 *
 * Each input is raw client bytes (after the handshake, which is HTTP and
 * fuzz_http's) written into one end of a socketpair whose other end is a
 * server connection (ws_open_fd). Byte 0 of the input is not sent: its bits
 * pick how the handler behaves, so the pause/resume and backpressure paths
 * run too: bit 0 pauses input after every message and resumes it on the
 * next loop step, bit 1 answers each message with an echo of it (output
 * queue), bit 2 closes from the server side after the first message. The
 * loop is stepped until the connection is gone or nothing happens; the
 * server's output is read and thrown away.
 *
 * Invariants (abort = finding): the connection always ends (client EOF
 * tears it down), on_close runs exactly once, a parsed frame is consistent
 * (stdin data inside the input or the JSON, resize sizes 1..65535, a
 * delivered signal from the allowed set), and the fd count does not grow. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/api.h"
#include "pty/session.h"
#include "core/runner.h"
#include "http/ws.h"
#include "task/pty.h"

static struct runner R;
static int fd_baseline = -1;
static unsigned long long n_inputs;

struct conn_state {
	unsigned mode;
	int closes;
	int messages;
	bool paused;
	struct ws_conn *c;
	const uint8_t *in;
	size_t in_len;
};

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void check_frame(const struct pty_frame *f, const uint8_t *data, size_t len)
{
	switch (f->kind) {
	case PTY_FRAME_STDIN:
		/* Binary stdin points into the message; JSON stdin into the
		 * parsed object. */
		if (!f->json && (f->data != data + 1 || f->len != len - 1))
			abort();
		if (f->json && !f->data && f->len)
			abort();
		break;
	case PTY_FRAME_RESIZE:
		if (f->cols < 1 || f->cols > 65535 || f->rows < 1 || f->rows > 65535)
			abort();
		break;
	case PTY_FRAME_SIGNAL:
		if (f->sig && f->sig != SIGINT && f->sig != SIGTERM && f->sig != SIGHUP &&
		    f->sig != SIGQUIT && f->sig != SIGUSR1 && f->sig != SIGUSR2 &&
		    f->sig != SIGKILL && f->sig != SIGSTOP && f->sig != SIGCONT &&
		    f->sig != SIGWINCH)
			abort();
		break;
	case PTY_FRAME_INVALID:
		if (!memchr(f->message, 0, sizeof(f->message)) || !f->message[0])
			abort();
		break;
	default:
		break;
	}
}

static void on_open(struct ws_conn *c)
{
	struct conn_state *st = ws_arg(c);
	st->c = c;
	/* What a PTY session says first. */
	static const char connected[] =
		"{\"type\":\"connected\",\"session_id\":\"x\",\"mode\":\"pty\"}";
	ws_send(c, WS_TEXT, connected, sizeof(connected) - 1);
}

static void on_message(struct ws_conn *c, int opcode, const uint8_t *data, size_t len)
{
	struct conn_state *st = ws_arg(c);
	st->messages++;
	if (opcode == WS_TEXT && len && !data)
		abort();
	struct pty_frame f;
	pty_parse_frame(opcode, data, len, &f);
	check_frame(&f, data, len);
	pty_frame_free(&f);
	if (st->mode & 2) {
		unsigned char ch = 0x01;
		/* The output window: only while there is room. */
		if (ws_has_room(c))
			ws_send2(c, WS_BINARY, &ch, 1, data, len);
	}
	if (st->mode & 1) {
		ws_pause_input(c, true);
		st->paused = true;
	}
	if ((st->mode & 4) && st->messages == 1)
		ws_close(c, 1000, "enough");
}

static void on_writable(struct ws_conn *c)
{
	(void)c;
}

static void on_close(struct ws_conn *c)
{
	struct conn_state *st = ws_arg(c);
	st->closes++;
	st->c = NULL;
}

static const struct ws_ops ops = {on_open, on_message, on_writable, on_close};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	if (loop_init(&R.loop) < 0)
		abort();
	R.cfg.stream_window = 64 * 1024;
	return 0;
}

static void drain(int fd)
{
	char buf[65536];
	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 256 * 1024)
		return 0;
	struct conn_state st = {.mode = data[0]};
	data++;
	size--;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	int big = 1 << 20;
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	/* Part of the input may arrive with the handshake (extra bytes). */
	size_t extra = size ? data[0] % 16 : 0;
	if (extra > size)
		extra = size;
	struct ws_conn *c = ws_open_fd(&R, sv[0], data, extra, &ops, &st, 0);
	if (!c)
		abort();
	size_t off = extra;
	bool shut = false;
	for (int step = 0; step < 10000; step++) {
		if (off < size) {
			ssize_t n = write(sv[1], data + off, size - off);
			if (n > 0)
				off += (size_t)n;
		}
		if (off >= size && !shut) {
			shutdown(sv[1], SHUT_WR); /* the client is done: EOF */
			shut = true;
		}
		drain(sv[1]);
		if (st.paused && st.c) {
			st.paused = false;
			ws_pause_input(st.c, false);
		}
		int n = loop_run_once(&R.loop, 0);
		if (!st.c && !st.closes)
			abort(); /* gone without on_close */
		if (st.closes)
			break;
		if (n == 0 && shut && !st.paused) {
			/* Idle with EOF sent: the EOF must have ended it. One
			 * more round for a last readiness edge. */
			n = loop_run_once(&R.loop, 10);
			if (!st.closes && n == 0)
				break;
		}
	}
	if (!st.closes)
		ws_close_all(&R);  /* e.g. waiting for a close answer */
	loop_run_once(&R.loop, 0); /* deferred frees */
	if (st.closes != 1)
		abort();
	close(sv[1]);
	if (++n_inputs % 256 == 0) {
		int now = count_fds();
		if (fd_baseline < 0)
			fd_baseline = now;
		else if (now > fd_baseline + 2) {
			fprintf(stderr, "fuzz_ws: fd count grew from %d to %d\n", fd_baseline, now);
			abort();
		}
	}
	return 0;
}
