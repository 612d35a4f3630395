/* The core helpers once in util.c, each in its file now: buf.c, memfind.c,
 * utf8.c, jsonesc.c, base64.c, randomid.c, signame.c, fileio.c, log.c's
 * iso_time_ms and http/peer.c's sockaddr_text. */
#include "core/buf.h"
#include "core/memfind.h"
#include "core/utf8.h"
#include "core/jsonesc.h"
#include "core/base64.h"
#include "core/randomid.h"
#include "core/signame.h"
#include "core/fileio.h"
#include "core/log.h"
#include "http/peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

static void json_case(const char *in, size_t len, const char *want)
{
	struct buf b = {0};
	buf_append_json_str(&b, in, len);
	buf_append(&b, "", 1);
	CHECK_STR(b.data, want);
	buf_free(&b);
}

static void b64_case(const char *in, const char *want)
{
	struct buf b = {0};
	buf_append_base64(&b, (const unsigned char *)in, strlen(in));
	buf_append(&b, "", 1);
	CHECK_STR(b.data, want);
	buf_free(&b);
}

TEST(json_string_escapes)
{
	json_case("plain", 5, "\"plain\"");
	json_case("q\"b\\n\n\r\t", 8, "\"q\\\"b\\\\n\\n\\r\\t\"");
	json_case("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\\u007f\"");
	json_case("caf\xc3\xa9", 5, "\"caf\xc3\xa9\"");
	json_case("\xff"
		  "a",
		  2,
		  "\"\xef\xbf\xbd"
		  "a\"");                         /* invalid byte */
	json_case("\xc3", 1, "\"\xef\xbf\xbd\""); /* truncated sequence */
	json_case("\xed\xa0\x80", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""); /* surrogate */
	json_case("\xc0\xaf", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");                 /* overlong */
	json_case("a\0b", 3, "\"a\\u0000b\"");
}

TEST(base64)
{
	b64_case("", "");
	b64_case("f", "Zg==");
	b64_case("fo", "Zm8=");
	b64_case("foo", "Zm9v");
	b64_case("foobar", "Zm9vYmFy");
}

TEST(utf8_valid)
{
	CHECK(utf8_valid((const unsigned char *)"caf\xc3\xa9", 5));
	CHECK(!utf8_valid((const unsigned char *)"\xff", 1));
	CHECK(!utf8_valid((const unsigned char *)"\xc3", 1));
}

TEST(utf8_incomplete_tail)
{
	CHECK(utf8_incomplete_tail((const unsigned char *)"ab\xc3", 3) == 1);
	CHECK(utf8_incomplete_tail((const unsigned char *)"ab\xe2\x82", 4) == 2);
	CHECK(utf8_incomplete_tail((const unsigned char *)"ab\xe2\x82\xac", 5) == 0);
	CHECK(utf8_incomplete_tail((const unsigned char *)"ab", 2) == 0);
	CHECK(utf8_incomplete_tail((const unsigned char *)"\xff", 1) == 0);
}

TEST(random_and_hex_ids)
{
	char id[33], id2[33];
	CHECK(random_id(id) == 0 && random_id(id2) == 0);
	CHECK(is_hex_id(id));
	CHECK(strcmp(id, id2) != 0);
	CHECK(!is_hex_id("ABCDEF0123456789abcdef0123456789"));
	CHECK(!is_hex_id("abc"));
}

TEST(secret_equal)
{
	CHECK(secret_equal("token", "token"));
	CHECK(!secret_equal("toke", "token"));
	CHECK(!secret_equal("tokenx", "token"));
	CHECK(!secret_equal("", "token"));
}

TEST(signal_name)
{
	CHECK_STR(signal_name(15), "SIGTERM");
	CHECK_STR(signal_name(9), "SIGKILL");
	CHECK_STR(signal_name(999), "SIG?");
}

TEST(buf_append_and_avail)
{
	struct buf b = {0};
	for (int i = 0; i < 1000; i++)
		buf_appendf(&b, "%04d", i);
	CHECK(b.len == 4000);
	b.off = 3990;
	CHECK(buf_avail(&b) == 10);
	buf_append(&b, "xyz", 3);
	CHECK(buf_avail(&b) == 13);
	CHECK(memcmp(b.data + b.off,
		     "97"
		     "0998"
		     "0999"
		     "xyz",
		     13) == 0);
	buf_free(&b);
}

/* An independent byte-at-a-time escaper: the reference the fast one must
 * match byte for byte. */
static size_t ref_seq(const unsigned char *s, size_t len)
{
	unsigned c = s[0];
	size_t n = c >= 0xf0 && c <= 0xf4   ? 4
		   : c >= 0xe0 && c <= 0xef ? 3
		   : c >= 0xc2 && c <= 0xdf ? 2
					    : 0;
	if (!n || len < n)
		return 0;
	unsigned long cp = c & (n == 2 ? 0x1f : n == 3 ? 0x0f : 0x07);
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static void ref_json(struct buf *b, const unsigned char *s, size_t len)
{
	buf_append(b, "\"", 1);
	for (size_t i = 0; i < len;) {
		unsigned c = s[i];
		if (c >= 0x80) {
			size_t n = ref_seq(s + i, len - i);
			buf_append(b, n ? (const char *)s + i : "\xef\xbf\xbd", n ? n : 3);
			i += n ? n : 1;
			continue;
		}
		i++;
		if (c == '"' || c == '\\')
			buf_appendf(b, "\\%c", c);
		else if (c == '\n')
			buf_append(b, "\\n", 2);
		else if (c == '\r')
			buf_append(b, "\\r", 2);
		else if (c == '\t')
			buf_append(b, "\\t", 2);
		else if (c < 0x20 || c == 0x7f)
			buf_appendf(b, "\\u%04x", c);
		else
			buf_append(b, (const char *)&c, 1);
	}
	buf_append(b, "\"", 1);
}

/* Random inputs over the bytes where the fast path's word test could go
 * wrong (around 0x20, '"', '\\', 0x7f, 0x80, UTF-8 leads), every length
 * up to 80 and every alignment. */
TEST(json_escaper_matches_reference)
{
	static const unsigned char alpha[] = {0x00, 0x01, 0x1f, 0x20, 0x21, '"',  '#',  '[',  '\\',
					      ']',  'a',  0x7e, 0x7f, 0x80, 0x81, 0xbf, 0xc0, 0xc2,
					      0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xed, 0xa0, 0xf0, 0x9f,
					      0xf4, 0x90, 0xff, '\n', '\r', '\t'};
	unsigned char in[200];
	unsigned seed = 12345;
	int bad = 0;
	for (int round = 0; round < 20000 && bad < 5; round++) {
		size_t len = (size_t)(round % 161), off = (size_t)(round / 161 % 16);
		for (size_t i = 0; i < len; i++) {
			seed = seed * 1103515245u + 12345u;
			unsigned r = seed >> 16;
			/* Mostly plain text, with special bytes sprinkled in. */
			in[off + i] = r % 4 ? (unsigned char)(0x20 + (r >> 3) % 0x5f)
					    : alpha[(r >> 3) % sizeof(alpha)];
		}
		struct buf got = {0}, want = {0};
		buf_append_json_str(&got, (const char *)in + off, len);
		ref_json(&want, in + off, len);
		if (got.len != want.len || memcmp(got.data, want.data, got.len)) {
			bad++;
			fprintf(stderr, "  json differential: round %d len %zu differs\n", round,
				len);
		}
		bool valid = utf8_valid(in + off, len);
		/* In pieces of random room: the same bytes as the whole literal,
		 * no character cut, every call with 6 bytes of room progresses. */
		char piece[600];
		struct buf parts = {0};
		buf_append(&parts, "\"", 1);
		size_t at = 0;
		bool stuck = false;
		while (at < len && !stuck) {
			seed = seed * 1103515245u + 12345u;
			size_t room = 6 + (seed >> 16) % 40, used = 0;
			size_t w = json_escape_part(piece, room, (const char *)in + off + at,
						    len - at, &used, NULL);
			stuck = used == 0 || w > room;
			buf_append(&parts, piece, w);
			at += used;
		}
		buf_append(&parts, "\"", 1);
		/* The count of bad bytes says what utf8_valid says (the native
		 * stream decides text or base64 by it). */
		size_t used_all = 0, invalid = 0;
		json_escape_part(piece, sizeof(piece), (const char *)in + off, len, &used_all,
				 &invalid);
		if (used_all != len || (invalid == 0) != valid) {
			bad++;
			fprintf(stderr,
				"  json invalid count: round %d len %zu valid %d invalid %zu\n",
				round, len, valid, invalid);
		}
		if (stuck || parts.len != got.len || memcmp(parts.data, got.data, got.len)) {
			bad++;
			fprintf(stderr, "  json pieces: round %d len %zu differs\n", round, len);
		}
		buf_free(&parts);
		buf_free(&got);
		buf_free(&want);
	}
	CHECK(bad == 0);
}

/* mem_find2 is the first of two memchr: every length up to 100, every alignment, the bytes
 * absent, first, last or anywhere. */
TEST(mem_find_matches_memchr)
{
	char in[160];
	unsigned seed = 777;
	int bad = 0;
	for (int round = 0; round < 20000 && bad < 5; round++) {
		size_t len = (size_t)(round % 101), off = (size_t)(round / 101 % 16);
		for (size_t i = 0; i < len; i++) {
			seed = seed * 1103515245u + 12345u;
			in[off + i] = (char)((seed >> 16) % 7 ? 'a' + (seed >> 20) % 26 : '\n');
		}
		const char *want = memchr(in + off, '\n', len);
		/* mem_find2: the first of '\n' and 'q'. */
		const char *q = memchr(in + off, 'q', len);
		const char *want2 = !want ? q : !q ? want : q < want ? q : want;
		if (mem_find2(in + off, '\n', 'q', len) != want2) {
			bad++;
			fprintf(stderr, "  mem_find2: round %d len %zu differs\n", round, len);
		}
	}
	CHECK(bad == 0);
	CHECK(mem_find2("", 'x', 'y', 0) == NULL);
	CHECK(mem_find2("\xff", (char)0xff, 'y', 1) != NULL);
}

/* ---- open_regular / read_regular: files a task may have swapped ---- */

static char util_dir[] = "/tmp/forceai-unit-util-XXXXXX";

static const char *util_scratch(void)
{
	static bool made;
	if (!made && !mkdtemp(util_dir)) {
		perror("mkdtemp");
		return NULL;
	}
	made = true;
	return util_dir;
}

__attribute__((destructor)) static void util_remove_scratch(void)
{
	if (strcmp(util_dir + strlen(util_dir) - 6, "XXXXXX")) {
		char cmd[64 + sizeof(util_dir)];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", util_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", util_dir);
	}
}

static const char *util_path(const char *name)
{
	static char p[4][256];
	static int i;
	i = (i + 1) % 4;
	snprintf(p[i], sizeof(p[i]), "%s/%s", util_scratch(), name);
	return p[i];
}

static void util_write(const char *name, const char *data, size_t len)
{
	FILE *f = fopen(util_path(name), "w");
	if (f) {
		fwrite(data, 1, len, f);
		fclose(f);
	}
}

TEST(read_regular_reads_a_regular_file)
{
	if (!util_scratch())
		SKIP("no scratch directory");
	util_write("pkg.json", "{\"v\":1}", 7);
	char *d;
	size_t n;
	struct stat st;
	CHECK(read_regular(AT_FDCWD, util_path("pkg.json"), RF_NO_SYMLINKS, 100, &d, &n, &st) == 0);
	CHECK(n == 7 && d && !strcmp(d, "{\"v\":1}"));
	CHECK(S_ISREG(st.st_mode) && st.st_size == 7);
	free(d);
	/* The descriptor open_regular hands back blocks again (O_NONBLOCK cleared). */
	int fd = open_regular(AT_FDCWD, util_path("pkg.json"), RF_NOFOLLOW, 100, NULL);
	CHECK(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
	if (fd >= 0)
		close(fd);
	/* An empty file is an empty string. */
	util_write("empty", "", 0);
	CHECK(read_regular(AT_FDCWD, util_path("empty"), 0, 100, &d, &n, NULL) == 0 && n == 0 &&
	      d && !d[0]);
	free(d);
}

TEST(open_regular_refuses_a_fifo_without_blocking)
{
	if (!util_scratch())
		SKIP("no scratch directory");
	CHECK(mkfifo(util_path("fifo"), 0600) == 0);
	/* No writer: a blocking open would never return (the test would hang). */
	struct stat st;
	int rc = open_regular(AT_FDCWD, util_path("fifo"), RF_NOFOLLOW, 100, &st);
	CHECK(rc == -EFTYPE_NOT_REGULAR);
	CHECK_STR(open_regular_strerror(rc, &st), "a FIFO, not a regular file");
	char *d = (char *)1;
	size_t n;
	CHECK(read_regular(AT_FDCWD, util_path("fifo"), 0, 100, &d, &n, NULL) ==
		      -EFTYPE_NOT_REGULAR &&
	      d == NULL);
}

TEST(open_regular_symlinks)
{
	if (!util_scratch())
		SKIP("no scratch directory");
	util_write("target", "x", 1);
	CHECK(symlink(util_path("target"), util_path("link")) == 0);
	CHECK(symlink("/dev/zero", util_path("zero")) == 0);
	struct stat st;
	/* Refused in the last component... */
	CHECK(open_regular(AT_FDCWD, util_path("link"), RF_NOFOLLOW, 100, NULL) == -ELOOP);
	CHECK(open_regular(AT_FDCWD, util_path("link"), RF_NO_SYMLINKS, 100, NULL) == -ELOOP);
	CHECK_STR(open_regular_strerror(-ELOOP, NULL), "a symbolic link, not followed");
	/* ...followed when allowed, and what it leads to is checked. */
	int fd = open_regular(AT_FDCWD, util_path("link"), 0, 100, NULL);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	int rc = open_regular(AT_FDCWD, util_path("zero"), 0, 100, &st);
	CHECK(rc == -EFTYPE_NOT_REGULAR);
	CHECK_STR(open_regular_strerror(rc, &st), "a character device, not a regular file");
	/* A link in a directory component: only RF_NO_SYMLINKS refuses it
	 * (openat2; where it is missing, only the last component is guarded). */
	CHECK(mkdir(util_path("real"), 0700) == 0);
	util_write("real/f", "y", 1);
	CHECK(symlink(util_path("real"), util_path("dirlink")) == 0);
	fd = open_regular(AT_FDCWD, util_path("dirlink/f"), RF_NOFOLLOW, 100, NULL);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	rc = open_regular(AT_FDCWD, util_path("dirlink/f"), RF_NO_SYMLINKS, 100, NULL);
	struct open_how how = {.flags = O_RDONLY | O_CLOEXEC};
	int probe = (int)syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));
	if (probe >= 0) {
		close(probe);
		CHECKF(rc == -ELOOP, "a link in a directory with openat2: %d", rc);
	} else {
		CHECKF(rc >= 0, "without openat2 the last component only: %d", rc);
		if (rc >= 0)
			close(rc);
	}
}

TEST(open_regular_bounds_and_types)
{
	if (!util_scratch())
		SKIP("no scratch directory");
	char big[300];
	memset(big, ' ', sizeof(big));
	util_write("big", big, sizeof(big));
	char *d;
	size_t n;
	CHECK(open_regular(AT_FDCWD, util_path("big"), 0, 299, NULL) == -EFBIG);
	CHECK(read_regular(AT_FDCWD, util_path("big"), 0, 299, &d, &n, NULL) == -EFBIG);
	CHECK(read_regular(AT_FDCWD, util_path("big"), 0, 300, &d, &n, NULL) == 0 && n == 300);
	free(d);
	struct stat st;
	int rc = open_regular(AT_FDCWD, util_scratch(), 0, 100, &st);
	CHECK(rc == -EFTYPE_NOT_REGULAR);
	CHECK_STR(open_regular_strerror(rc, &st), "a directory, not a regular file");
	CHECK(open_regular(AT_FDCWD, util_path("absent"), 0, 100, NULL) == -ENOENT);
	CHECK_STR(open_regular_strerror(-ENOENT, NULL), strerror(ENOENT));
	CHECK_STR(open_regular_strerror(-EFBIG, NULL), "larger than the limit");
}

/* write_all carries a write past a pipe's capacity (short writes, a reader
 * draining it meanwhile); pwrite_all lands at its offset; errors are -errno. */
TEST(write_all_and_pwrite_all)
{
	int p[2];
	if (!CHECK(pipe(p) == 0))
		return;
	static char big[200000];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)('a' + i % 26);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		_exit(write_all(p[1], big, sizeof(big)) == 0 ? 0 : 1);
	}
	close(p[1]);
	static char got[sizeof(big)];
	size_t n = 0;
	ssize_t k;
	while ((k = read(p[0], got + n, sizeof(got) - n)) > 0)
		n += (size_t)k;
	close(p[0]);
	int st = -1;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(n == sizeof(big) && !memcmp(got, big, n));

	char path[] = "/tmp/test_util_pwrite.XXXXXX";
	int fd = mkstemp(path);
	if (!CHECK(fd >= 0))
		return;
	unlink(path);
	CHECK(write_all(fd, "hello world", 11) == 0);
	CHECK(pwrite_all(fd, "W", 1, 6) == 0);
	char back[12] = {0};
	CHECK(pread(fd, back, 11, 0) == 11);
	CHECK_STR(back, "hello World");
	close(fd);
	CHECK(write_all(fd, "x", 1) == -EBADF);
	CHECK(pwrite_all(fd, "x", 1, 0) == -EBADF);
}

TEST(sh_quoted)
{
	struct buf b = {0};
	CHECK(buf_append_sh_quoted(&b, "it's a $x") == 0);
	CHECK(b.len == strlen("'it'\\''s a $x'") && !memcmp(b.data, "'it'\\''s a $x'", b.len));
	free(b.data);
}

TEST(iso_time_ms)
{
	char t[40];
	iso_time_ms(t, sizeof(t), 1767323045678ULL);
	CHECK_STR(t, "2026-01-02T03:04:05.678Z");
	iso_time_ms(t, sizeof(t), 0);
	CHECK_STR(t, "1970-01-01T00:00:00.000Z");
}

/* sockaddr_text writes IPv4 by hand: what inet_ntop writes, for the edges of every octet and random
 * addresses; IPv6 through inet_ntop; anything else "?". */
TEST(sockaddr_text_matches_inet_ntop)
{
	static const unsigned char edges[] = {0, 1, 9, 10, 11, 99, 100, 101, 199, 200, 249, 255};
	unsigned seed = 4242;
	int bad = 0;
	for (int round = 0; round < 30000 && bad < 5; round++) {
		struct sockaddr_in sin = {.sin_family = AF_INET};
		unsigned char *b = (unsigned char *)&sin.sin_addr;
		for (int i = 0; i < 4; i++) {
			seed = seed * 1103515245u + 12345u;
			b[i] = round < 20736 ? edges[(round / (i == 0   ? 1
							       : i == 1 ? 12
							       : i == 2 ? 144
									: 1728)) %
						     12]
					     : (unsigned char)(seed >> 16);
		}
		char got[INET6_ADDRSTRLEN], want[INET6_ADDRSTRLEN];
		inet_ntop(AF_INET, &sin.sin_addr, want, sizeof(want));
		if (!sockaddr_text((struct sockaddr *)&sin, got, sizeof(got)) ||
		    strcmp(got, want)) {
			bad++;
			fprintf(stderr, "  sockaddr_text: '%s' want '%s'\n", got, want);
		}
	}
	CHECK(bad == 0);
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
	inet_pton(AF_INET6, "2001:db8::1", &s6.sin6_addr);
	char t[INET6_ADDRSTRLEN];
	CHECK(sockaddr_text((struct sockaddr *)&s6, t, sizeof(t)));
	CHECK_STR(t, "2001:db8::1");
	struct sockaddr_in max = {.sin_family = AF_INET, .sin_addr.s_addr = 0xffffffffu};
	char small[8];
	CHECK(!sockaddr_text((struct sockaddr *)&max, small, sizeof(small)));
	CHECK_STR(small, "?");
	struct sockaddr un = {.sa_family = AF_UNIX};
	CHECK(!sockaddr_text(&un, t, sizeof(t)));
	CHECK_STR(t, "?");
	CHECK(!sockaddr_text(NULL, t, sizeof(t)));
}
