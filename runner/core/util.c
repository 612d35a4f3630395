#include "core/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

bool sockaddr_text(const struct sockaddr *sa, char *out, size_t len)
{
	if (sa && sa->sa_family == AF_INET && len >= INET_ADDRSTRLEN) {
		/* musl's inet_ntop is a snprintf: two of them were 3% of a proxied
		 * request's CPU. */
		const unsigned char *b =
			(const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
		char *p = out;
		for (int i = 0; i < 4; i++) {
			unsigned v = b[i];
			if (v >= 100)
				*p++ = (char)('0' + v / 100);
			if (v >= 10)
				*p++ = (char)('0' + v / 10 % 10);
			*p++ = (char)('0' + v % 10);
			*p++ = i < 3 ? '.' : 0;
		}
		return true;
	}
	if (sa && sa->sa_family == AF_INET6 &&
	    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)len))
		return true;
	if (len >= 2)
		memcpy(out, "?", 2);
	return false;
}

const char *mem_find(const char *s, char c, size_t n)
{
#if defined(__SSE2__)
	const __m128i needle = _mm_set1_epi8(c);
	while (n >= 32) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(a, needle)) |
			     (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(b, needle)) << 16;
		if (m)
			return s + __builtin_ctz(m);
		s += 32;
		n -= 32;
	}
	if (n >= 16) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(a, needle));
		if (m)
			return s + __builtin_ctz(m);
		s += 16;
		n -= 16;
	}
	for (; n; s++, n--)
		if (*s == c)
			return s;
	return NULL;
#else
	return memchr(s, c, n);
#endif
}

const char *mem_find2(const char *s, char c1, char c2, size_t n)
{
#if defined(__SSE2__)
	const __m128i n1 = _mm_set1_epi8(c1), n2 = _mm_set1_epi8(c2);
	while (n >= 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)s);
		unsigned m = (unsigned)_mm_movemask_epi8(
			_mm_or_si128(_mm_cmpeq_epi8(v, n1), _mm_cmpeq_epi8(v, n2)));
		if (m)
			return s + __builtin_ctz(m);
		s += 16;
		n -= 16;
	}
#endif
	for (; n; s++, n--)
		if (*s == c1 || *s == c2)
			return s;
	return NULL;
}

int buf_reserve(struct buf *b, size_t extra)
{
	if (b->off && b->off == b->len) {
		b->off = b->len = 0;
	}
	if (b->len + extra <= b->cap)
		return 0;
	if (b->off) {
		/* Reuse the consumed prefix before growing. */
		memmove(b->data, b->data + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->len + extra <= b->cap)
			return 0;
	}
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra)
		cap *= 2;
	char *d = realloc(b->data, cap);
	if (!d)
		return -ENOMEM;
	b->data = d;
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
	if (!len)
		return 0; /* an empty buffer may have no storage yet */
	if (buf_reserve(b, len) < 0)
		return -ENOMEM;
	memcpy(b->data + b->len, data, len);
	b->len += len;
	return 0;
}

int buf_append_str(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int buf_append_sh_quoted(struct buf *b, const char *s)
{
	buf_append_lit(b, "'");
	for (; *s; s++) {
		if (*s == '\'')
			buf_append_lit(b, "'\\''");
		else
			buf_append(b, s, 1);
	}
	return buf_append_lit(b, "'");
}

int buf_appendf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || buf_reserve(b, (size_t)n + 1) < 0)
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void buf_reset(struct buf *b)
{
	b->len = b->off = 0;
}

size_t buf_take(struct buf *b, char *dst, size_t max)
{
	size_t n = buf_avail(b);
	if (n > max)
		n = max;
	if (n == 0)
		return 0; /* data may be NULL: no memcpy from it */
	memcpy(dst, b->data + b->off, n);
	b->off += n;
	return n;
}

void buf_free(struct buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t len)
{
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	size_t n;
	uint32_t cp;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (len < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

bool utf8_valid(const unsigned char *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
#if defined(__SSE2__)
		/* Sixteen ASCII bytes at a time. */
		if (i + 16 <= len &&
		    !_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(s + i)))) {
			i += 16;
			continue;
		}
#endif
		/* Eight ASCII bytes at a time. */
		if (i + 8 <= len) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (!(w & 0x8080808080808080ULL)) {
				i += 8;
				continue;
			}
		}
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		size_t n = utf8_seq(s + i, len - i);
		if (!n)
			return false;
		i += n;
	}
	return true;
}

size_t utf8_incomplete_tail(const unsigned char *s, size_t len)
{
	/* Look back at most 3 bytes for a lead byte whose sequence is cut. */
	for (size_t k = 1; k <= 3 && k <= len; k++) {
		unsigned char c = s[len - k];
		if ((c & 0xc0) == 0x80)
			continue; /* continuation: keep looking for the lead */
		size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
		if (need > k && c >= 0xc2 && c <= 0xf4)
			return k;
		return 0;
	}
	return 0;
}

/* Bytes a JSON string cannot hold as they are: controls, '"', '\\', DEL
 * (escaped like Go does) and everything >= 0x80 (checked as UTF-8). */
static const unsigned char json_special[256] = {
	[0 ... 0x1f] = 1,
	['"'] = 1,
	['\\'] = 1,
	[0x7f ... 0xff] = 1,
};

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Non-zero when one of the 8 bytes of w needs a look (json_special): below
 * 0x20, '"', '\\', 0x7f or above. Exact for "none" (which is all the fast
 * path needs). */
static inline uint64_t word_special(uint64_t w)
{
	uint64_t ctl = (w - ONES * 0x20) & ~w;
	uint64_t q = w ^ (ONES * '"'), bs = w ^ (ONES * '\\');
	uint64_t quote = (q - ONES) & ~q, back = (bs - ONES) & ~bs;
	uint64_t high = w | (w + ONES); /* 0x7f + 1 and >= 0x80 set the top bit */
	return (ctl | quote | back | high) & HIGHS;
}

#if defined(__SSE2__)
/* Bit i set when byte i of v needs a look (json_special). */
static inline unsigned sse_special(__m128i v)
{
	/* Unsigned comparisons through the signed ones: flip the top bit. */
	__m128i x = _mm_xor_si128(v, _mm_set1_epi8((char)0x80));
	__m128i ctl = _mm_cmplt_epi8(x, _mm_set1_epi8((char)(0x20 ^ 0x80)));
	__m128i high = _mm_cmpgt_epi8(x, _mm_set1_epi8((char)(0x7e ^ 0x80)));
	__m128i q = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
	__m128i bs = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
	return (unsigned)_mm_movemask_epi8(
		_mm_or_si128(_mm_or_si128(ctl, high), _mm_or_si128(q, bs)));
}
#endif

/* The escaper without quotes: from s into o until the input ends or fewer
 * than 6 bytes of room are left before end (a character is never split).
 * *used gets the input consumed, *invalid the bytes that were not UTF-8.
 * Returns the end of the output. */
static char *json_escape_core(char *o, const char *end, const char *str, size_t len, size_t *used,
			      size_t *invalid)
{
	const unsigned char *s = (const unsigned char *)str;
	static const char hex[] = "0123456789abcdef";
	size_t bad = 0;
	size_t i = 0;
	while (i < len) {
		/* Plain printable ASCII is copied 16 (SSE2) or 8 bytes at a time;
		 * in the block that holds a special byte, the lowest flagged byte
		 * is exactly the first special one (in the word test, borrows and
		 * carries only run upwards). */
#if defined(__SSE2__)
		while (i + 16 <= len && end - o >= 16) {
			__m128i v = _mm_loadu_si128((const __m128i *)(s + i));
			_mm_storeu_si128((__m128i *)o, v);
			unsigned m = sse_special(v);
			if (m) {
				size_t k = (size_t)__builtin_ctz(m);
				o += k;
				i += k;
				goto special;
			}
			o += 16;
			i += 16;
		}
#endif
		while (i + 8 <= len && end - o >= 8) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			memcpy(o, &w, 8);
			uint64_t m = word_special(w);
			if (m) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
				size_t k = (size_t)__builtin_ctzll(m) / 8;
#else
				size_t k = 0; /* the byte loop below finds it */
#endif
				o += k;
				i += k;
				break;
			}
			o += 8;
			i += 8;
		}
		while (i < len && o < end && !json_special[s[i]])
			*o++ = (char)s[i++];
#if defined(__SSE2__)
	special:
#endif
		if (i >= len || end - o < 6)
			break;
		unsigned char c = s[i];
		if (!json_special[c]) {
			/* Only when the room ended a fast loop: one byte, so every
			 * round makes progress whatever the block tests said. */
			*o++ = (char)c;
			i++;
			continue;
		}
		if (c >= 0x80) {
			size_t n = utf8_seq(s + i, len - i);
			if (n) {
				memcpy(o, s + i, n);
				o += n;
				i += n;
			} else {
				memcpy(o, "\xef\xbf\xbd", 3); /* U+FFFD */
				o += 3;
				i++;
				bad++;
			}
			continue;
		}
		i++;
		*o++ = '\\';
		switch (c) {
		case '"':
		case '\\':
			*o++ = (char)c;
			break;
		case '\n':
			*o++ = 'n';
			break;
		case '\r':
			*o++ = 'r';
			break;
		case '\t':
			*o++ = 't';
			break;
		default: /* other controls and DEL */
			memcpy(o, "u00", 3);
			o[3] = hex[c >> 4];
			o[4] = hex[c & 15];
			o += 5;
		}
	}
	*used = i;
	if (invalid)
		*invalid = bad;
	return o;
}

/* The whole literal, quotes included, into o (room for JSON_STR_MAX). */
static char *json_escape(char *o, const char *str, size_t len, size_t *invalid)
{
	size_t used;
	*o++ = '"';
	o = json_escape_core(o, o + len * 6, str, len, &used, invalid);
	*o++ = '"';
	return o;
}

char *json_escape_to(char *o, const char *s, size_t len)
{
	return json_escape(o, s, len, NULL);
}

size_t json_escape_part(char *o, size_t room, const char *s, size_t len, size_t *used,
			size_t *invalid)
{
	return (size_t)(json_escape_core(o, o + room, s, len, used, invalid) - o);
}

size_t base64_encode_to(char *o, const unsigned char *s, size_t len)
{
	static const char tbl[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *start = o;
	size_t i = 0;
	for (; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		*o++ = tbl[v >> 18];
		*o++ = tbl[(v >> 12) & 63];
		*o++ = tbl[(v >> 6) & 63];
		*o++ = tbl[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < len ? (uint32_t)s[i + 1] << 8 : 0);
		*o++ = tbl[v >> 18];
		*o++ = tbl[(v >> 12) & 63];
		*o++ = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	return (size_t)(o - start);
}

static int json_str(struct buf *b, const char *str, size_t len, size_t *invalid)
{
	if (buf_reserve(b, JSON_STR_MAX(len)) < 0)
		return -ENOMEM;
	b->len = (size_t)(json_escape(b->data + b->len, str, len, invalid) - b->data);
	return 0;
}

int buf_append_json_str(struct buf *b, const char *str, size_t len)
{
	return json_str(b, str, len, NULL);
}

int buf_append_json_utf8(struct buf *b, const char *str, size_t len)
{
	size_t start = b->len, bad;
	int rc = json_str(b, str, len, &bad);
	if (rc < 0)
		return rc;
	if (bad) {
		b->len = start;
		return 1;
	}
	return 0;
}

int buf_append_u64(struct buf *b, uint64_t v)
{
	char tmp[20];
	size_t n = 0;
	do
		tmp[sizeof(tmp) - ++n] = (char)('0' + v % 10);
	while ((v /= 10));
	return buf_append(b, tmp + sizeof(tmp) - n, n);
}

int buf_append_base64(struct buf *b, const unsigned char *s, size_t len)
{
	if (buf_reserve(b, (len + 2) / 3 * 4) < 0)
		return -ENOMEM;
	b->len += base64_encode_to(b->data + b->len, s, len);
	return 0;
}

int random_id(char out[33])
{
	unsigned char raw[16];
	size_t got = 0;
	while (got < sizeof(raw)) {
		ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
	}
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < 16; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[32] = 0;
	return 0;
}

bool secret_equal(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char diff = (unsigned char)(la != lb);
	/* Walk the expected secret's length whatever the input. */
	for (size_t i = 0; i < lb; i++)
		diff |= (unsigned char)((i < la ? a[i] : 0) ^ b[i]);
	return diff == 0;
}

bool is_hex_id(const char *s)
{
	size_t n = 0;
	for (; s[n]; n++)
		if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
			return false;
	return n == 32;
}

const char *signal_name(int sig)
{
	/* strsignal() texts differ between libcs; names do not. */
	static const struct {
		int sig;
		const char *name;
	} names[] = {
		{SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},
		{SIGILL, "SIGILL"},       {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},
		{SIGBUS, "SIGBUS"},       {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"},
		{SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
		{SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
		{SIGCHLD, "SIGCHLD"},     {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"},
		{SIGTSTP, "SIGTSTP"},     {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},
		{SIGURG, "SIGURG"},       {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
		{SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
		{SIGIO, "SIGIO"},         {SIGPWR, "SIGPWR"},   {SIGSYS, "SIGSYS"},
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].sig == sig)
			return names[i].name;
	return "SIG?";
}

#ifndef SYS_openat2
#define SYS_openat2 437 /* the same on every architecture */
#endif

int open_regular(int dirfd, const char *path, int rf_flags, size_t max, struct stat *st)
{
	/* O_NONBLOCK: a FIFO opens at once instead of waiting for a writer;
	 * O_NOCTTY: a terminal is never made PID 1's controlling tty. */
	int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
	if (rf_flags & (RF_NOFOLLOW | RF_NO_SYMLINKS))
		flags |= O_NOFOLLOW;
	int fd = -1;
	if (rf_flags & RF_NO_SYMLINKS) {
		struct open_how how = {.flags = (uint64_t)flags,
				       .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		/* No openat2 (Linux < 5.6, valgrind, a runtime's seccomp
		 * profile): below, the last component is still not followed. */
		if (fd < 0 && errno != ENOSYS)
			return -errno;
	}
	if (fd < 0)
		fd = openat(dirfd, path, flags);
	if (fd < 0)
		return -errno;
	struct stat own;
	if (!st)
		st = &own;
	int rc = 0, fl;
	if (fstat(fd, st) < 0)
		rc = -errno;
	else if (!S_ISREG(st->st_mode))
		rc = -EFTYPE_NOT_REGULAR;
	else if ((uint64_t)st->st_size > max)
		rc = -EFBIG;
	else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		rc = -errno;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

int read_regular(int dirfd, const char *path, int rf_flags, size_t max, char **data, size_t *len,
		 struct stat *st)
{
	*data = NULL;
	*len = 0;
	struct stat own;
	if (!st)
		st = &own;
	int fd = open_regular(dirfd, path, rf_flags, max, st);
	if (fd < 0)
		return fd;
	/* Read to the end, one byte past max at most: the size fstat gave may
	 * have grown since (a task appending). */
	size_t cap = (size_t)st->st_size + 1, n = 0;
	char *b = malloc(cap + 1);
	int rc = b ? 0 : -ENOMEM;
	while (rc == 0) {
		if (n == cap) {
			if (n > max) {
				rc = -EFBIG;
				break;
			}
			size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
			char *nb = realloc(b, ncap + 1);
			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			b = nb;
			cap = ncap;
		}
		ssize_t got = read(fd, b + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			rc = -errno;
		else if (got == 0)
			break;
		else
			n += (size_t)got;
	}
	if (rc == 0 && n > max)
		rc = -EFBIG;
	close(fd);
	if (rc < 0) {
		free(b);
		return rc;
	}
	b[n] = 0;
	*data = b;
	*len = n;
	return 0;
}

const char *open_regular_strerror(int rc, const struct stat *st)
{
	switch (-rc) {
	case ELOOP:
		return "a symbolic link, not followed";
	case EFBIG:
		return "larger than the limit";
	case EFTYPE_NOT_REGULAR:
		if (!st)
			return "not a regular file";
		switch (st->st_mode & S_IFMT) {
		case S_IFIFO:
			return "a FIFO, not a regular file";
		case S_IFCHR:
			return "a character device, not a regular file";
		case S_IFBLK:
			return "a block device, not a regular file";
		case S_IFSOCK:
			return "a socket, not a regular file";
		case S_IFDIR:
			return "a directory, not a regular file";
		default:
			return "not a regular file";
		}
	default:
		return strerror(-rc);
	}
}

/* off < 0: write at the file position; else pwrite at off. */
static int write_loop(int fd, const char *c, size_t n, off_t off)
{
	while (n) {
		ssize_t k = off < 0 ? write(fd, c, n) : pwrite(fd, c, n, off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		c += k;
		n -= (size_t)k;
		if (off >= 0)
			off += k;
	}
	return 0;
}

int write_all(int fd, const void *p, size_t n)
{
	return write_loop(fd, p, n, -1);
}

int pwrite_all(int fd, const void *p, size_t n, off_t off)
{
	return off < 0 ? -EINVAL : write_loop(fd, p, n, off);
}

void iso_time_ms(char *out, size_t len, uint64_t ms)
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&s, &tm);
	size_t n = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, len - n, ".%03uZ", (unsigned)(ms % 1000));
}
