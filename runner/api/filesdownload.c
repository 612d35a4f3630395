/* GET /files/download (api/files.c is its prologue): a file's content served from its
 * descriptor (sendfile), whole, as one byte Range, or as a range of lines found by a scan
 * in slices. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/filesroute.h"
#include <strings.h>
#include <time.h>

#include "core/cleanup.h"
#include "files/ops.h"
#include "files/path.h"

/* ---- GET /files/download ---- */

static int parse_u64(const char **pp, uint64_t *out)
{
	const char *p = *pp;
	uint64_t v = 0;
	if (*p < '0' || *p > '9')
		return -1;
	while (*p >= '0' && *p <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p++ - '0');
	}
	*pp = p;
	*out = v;
	return 0;
}

/* The first satisfiable range of a "bytes=" Range header (later ranges are
 * ignored, as execd does). 0 with start/len; -1: nothing satisfiable (416);
 * -2: not a valid bytes range set, which RFC 9110 §14.2 says to ignore
 * (the whole file, 200). */
static int parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *len)
{
	while (*h == ' ' || *h == '\t')
		h++;
	if (strncasecmp(h, "bytes=", 6) != 0)
		return -2;
	const char *p = h + 6;
	bool found = false;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		uint64_t a = 0, b = 0;
		bool has_a = false, has_b = false;
		if (*p >= '0' && *p <= '9') {
			if (parse_u64(&p, &a) < 0)
				return -2;
			has_a = true;
		}
		if (*p != '-')
			return -2;
		p++;
		if (*p >= '0' && *p <= '9') {
			if (parse_u64(&p, &b) < 0)
				return -2;
			has_b = true;
		}
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p && *p != ',')
			return -2;
		if (!has_a && !has_b)
			return -2;
		if (has_a && has_b && b < a)
			return -2;
		if (!found) {
			if (!has_a) { /* the last b bytes */
				if (b > 0 && size > 0) {
					*start = b > size ? 0 : size - b;
					*len = size - *start;
					found = true;
				}
			} else if (a < size) {
				*start = a;
				*len = (has_b && b < size - 1 ? b : size - 1) - a + 1;
				found = true;
			}
		}
		if (!*p)
			break;
		p++;
	}
	return found ? 0 : -1;
}

/* attachment; filename="name" — RFC 5987 filename* when the name is not
 * plain printable ASCII (or has quotes), as execd does. */
static void content_disposition(char *out, size_t outsz, const char *name)
{
	bool plain = true;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\')
			plain = false;
	if (plain) {
		snprintf(out, outsz, "attachment; filename=\"%s\"", name);
		return;
	}
	char enc[3 * NAME_MAX + 1];
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)name; *p && n + 4 < sizeof(enc); p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~", *p))
			enc[n++] = (char)*p;
		else
			n += (size_t)snprintf(enc + n, sizeof(enc) - n, "%%%02X", *p);
	}
	enc[n] = 0;
	if (snprintf(out, outsz, "attachment; filename=\"%s\"; filename*=UTF-8''%s", enc, enc) >=
	    (int)outsz)
		snprintf(out, outsz, "attachment; filename*=UTF-8''%s", enc);
}

static enum MHD_Result queue_resp(struct http_req *req, unsigned status, struct MHD_Response *resp)
{
	if (!resp)
		return MHD_NO;
	req->responded = true;
	req->status = status;
	enum MHD_Result rc = MHD_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* 416 with the Content-Range the client needs (RFC 9110 §15.5.17). */
static int answer_416(struct fcall *c, uint64_t size)
{
	error_set(&c->err, 0, "RANGE_NOT_SATISFIABLE", "range not satisfiable (file size %llu)",
		  (unsigned long long)size);
	json_t *j = json_pack("{s:s,s:s}", "code", error_code(&c->err), "message", c->err.msg);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return fapi_oom(&c->err);
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(s);
		return fapi_oom(&c->err);
	}
	char hv[48];
	snprintf(hv, sizeof(hv), "bytes */%llu", (unsigned long long)size);
	MHD_add_response_header(resp, "Content-Type", "application/json");
	MHD_add_response_header(resp, "Content-Range", hv);
	c->res = queue_resp(c->req, error_http_status(&c->err), resp);
	return 0;
}

/* Open a file to read its content: resolved without magic links (ordinary
 * links are followed, as a task's open() would), checked through an O_PATH
 * descriptor first so that a FIFO or device is never opened, refused on
 * /proc (resolved by the runner, /proc/self is the runner: its memory map,
 * its descriptors), then opened non-blocking and checked to be the same
 * file. -1 with c->err, or the descriptor and its stat. */
static int open_content(struct fcall *c, const char *path, struct stat *st)
{
	cleanup_close int pfd = files_open(AT_FDCWD, path, O_PATH, 0);
	if (pfd < 0 || fstat(pfd, st) < 0)
		return fapi_fs_error(&c->err, pfd < 0 ? pfd : -errno, "download", path, &c->id,
				     false);
	if (S_ISDIR(st->st_mode))
		return error_set(&c->err, 0, "INVALID_FILE",
				 "%.1024s is a directory (use GET /directories/list)", path);
	if (!S_ISREG(st->st_mode))
		return error_set(&c->err, 0, "INVALID_FILE", "%.1024s is not a regular file", path);
	int proc = files_on_procfs(pfd);
	if (proc < 0)
		return fapi_fs_error(&c->err, proc, "download", path, &c->id, false);
	if (proc)
		return error_set(&c->err, 0, "PERMISSION_DENIED",
				 "download %.1024s: files under /proc are not served (a task reads "
				 "its own)",
				 path);
	int fd = files_open(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
	struct stat now;
	if (fd < 0 || fstat(fd, &now) < 0) {
		int rc = fd < 0 ? fd : -errno;
		if (fd >= 0)
			close(fd);
		return fapi_fs_error(&c->err, rc, "download", path, &c->id, false);
	}
	if (now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
		close(fd);
		return fapi_fs_error(&c->err, -ESTALE, "download", path, &c->id, false);
	}
	*st = now;
	return fd;
}

/* The answer: the byte range [start, start+len) straight from the
 * descriptor (sendfile; nothing buffered); fd is taken. */
static int answer_file(struct fcall *c, int fd, const struct stat *st, const char *path,
		       uint64_t start, uint64_t len, bool lines, unsigned status,
		       const char *crange)
{
	struct MHD_Response *resp;
	if (len == 0) {
		close(fd);
		resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
	} else {
		/* MHD closes fd with the response. */
		resp = MHD_create_response_from_fd_at_offset64(len, fd, start);
		if (!resp)
			close(fd);
	}
	if (!resp) {
		c->res = MHD_NO;
		return 0;
	}
	if (lines) {
		MHD_add_response_header(resp, "Content-Type", "text/plain");
	} else {
		char cd[6 * NAME_MAX + 80], lm[64];
		struct tm tm;
		time_t mt = st->st_mtim.tv_sec;
		content_disposition(cd, sizeof(cd),
				    strrchr(path, '/')[1] ? strrchr(path, '/') + 1 : "file");
		MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
		MHD_add_response_header(resp, "Content-Disposition", cd);
		MHD_add_response_header(resp, "Accept-Ranges", "bytes");
		if (gmtime_r(&mt, &tm) &&
		    strftime(lm, sizeof(lm), "%a, %d %b %Y %H:%M:%S GMT", &tm))
			MHD_add_response_header(resp, "Last-Modified", lm);
		if (crange && crange[0])
			MHD_add_response_header(resp, "Content-Range", crange);
	}
	http_audit_note(c->req, json_pack("{s:s,s:s,s:I}", "operation", "read", "path", path,
					  "bytes_out", (json_int_t)len));
	c->res = queue_resp(c->req, status, resp);
	return 0;
}

/* offset/limit: the line range is found by a scan, in slices. */
struct lines_job {
	struct fjob j;
	int fd;
	struct stat st;
	struct files_lines l;
	char path[PATH_MAX];
};

static int lines_step(struct files_userjob *j, uint64_t deadline_ms)
{
	struct lines_job *lj = (struct lines_job *)j;
	int rc = files_lines_step(&lj->l, lj->fd, deadline_ms);
	if (rc == -FILES_ELIMIT)
		return error_set(
			&j->err, 0, "INVALID_QUERY",
			"download %.1024s: the line range ends more than %llu MiB into the "
			"file; read it with a byte Range instead",
			lj->path, (unsigned long long)(FILES_LINES_SCAN_MAX >> 20));
	if (rc < 0)
		return fapi_fs_error(&j->err, rc, "download", lj->path, &j->id, false);
	return rc;
}

static int lines_answer(struct fcall *c, struct fjob *j)
{
	struct lines_job *lj = (struct lines_job *)j;
	int fd = take_fd(lj->fd);
	return answer_file(c, fd, &lj->st, lj->path, (uint64_t)lj->l.start, (uint64_t)lj->l.len,
			   true, 200, NULL);
}

static void lines_release(struct files_userjob *j)
{
	struct lines_job *lj = (struct lines_job *)j;
	if (lj->fd >= 0)
		close(lj->fd);
}

static int op_download(struct fcall *c)
{
	struct http_req *req = c->req;
	const char *path = c->paths[0];
	size_t ol = 0, ll = 0;
	const char *off_s = fapi_query_n(req, "offset", &ol),
		   *lim_s = fapi_query_n(req, "limit", &ll);
	bool lines = (off_s && ol) || (lim_s && ll);
	uint64_t first = 0, count = 0;
	const char *range = http_header(req, "Range");
	if (lines) {
		if (!(off_s && ol) || !(lim_s && ll))
			return error_set(&c->err, 0, "INVALID_QUERY",
					 "both offset and limit must be provided together for "
					 "line-based reading");
		if (fapi_parse_count(off_s, ol, 1ULL << 50, &first) < 0 || first < 1)
			return error_set(&c->err, 0, "INVALID_QUERY",
					 "offset must be a positive integer (1-based)");
		if (fapi_parse_count(lim_s, ll, 1ULL << 50, &count) < 0 || count < 1)
			return error_set(&c->err, 0, "INVALID_QUERY",
					 "limit must be a positive integer");
		if (range)
			return error_set(
				&c->err, 0, "INVALID_QUERY",
				"offset/limit and the Range header are mutually exclusive");
	}
	struct stat st;
	cleanup_close int fd = open_content(c, path, &st);
	if (fd < 0)
		return -1;
	if (lines) {
		struct lines_job *lj =
			fjob_new(c, sizeof(*lj), lines_step, lines_answer, lines_release);
		if (!lj)
			return fapi_oom(&c->err);
		lj->fd = take_fd(fd);
		lj->st = st;
		snprintf(lj->path, sizeof(lj->path), "%s", path);
		files_lines_init(&lj->l, first, count);
		return fjob_run(c, &lj->j);
	}
	uint64_t size = (uint64_t)st.st_size, start = 0, len = size;
	unsigned status = 200;
	char crange[96] = "";
	if (range) {
		int rc = parse_range(range, size, &start, &len);
		if (rc == -1)
			return answer_416(c, size);
		if (rc == 0) {
			status = 206;
		} else { /* malformed: ignored */
			start = 0;
			len = size;
		}
	}
	if (status == 206) {
		snprintf(crange, sizeof(crange), "bytes %llu-%llu/%llu", (unsigned long long)start,
			 (unsigned long long)(start + len - 1), (unsigned long long)size);
	}
	return answer_file(c, take_fd(fd), &st, path, start, len, false, status, crange);
}

enum MHD_Result api_files_download(struct http_req *req)
{
	return files_route(req, IN_PATH, op_download);
}
