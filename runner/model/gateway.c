/* libcurl multi interface on the runner's loop: see gateway.h. */
#include "model/gateway.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/error.h"
#include "core/log.h"
#include "core/runner.h"
#include "core/buf.h"
#include "core/fileio.h"
#include "core/version.h"
#include "core/list.h"

struct gateway {
	struct runner *r;
	CURLM *multi;
	struct loop_timer timer;  /* curl's timeout */
	struct loop_timer reaper; /* drops cancelled calls outside curl callbacks */
	char *base;               /* the gateway URL without a trailing '/' */
	size_t root_len;          /* base without a trailing "/v1" */
	char *key;                /* the real key, or NULL (vault mode) */
	const char *ca;
	struct curl_blob ca_blob; /* ca's bytes, read once at start */
	int in_curl;              /* depth of curl calls that may run callbacks */
	struct gw_call *calls;
};

struct gw_sock {
	struct gateway *gw;
	struct loop_watch w;
};

struct gw_call {
	struct gateway *gw;
	CURL *easy;
	struct curl_slist *hdrs;
	const struct gw_call_ops *ops; /* NULL once cancelled */
	void *arg;
	bool head_done;
	bool cancelled;
	bool recv_paused; /* data() asked for a pause */
	bool send_paused; /* read() had nothing yet */
	long status;
	char ctype[128];
	char retry_after[32];
	char errbuf[CURL_ERROR_SIZE];
	struct gw_call *next, *prev;
};

const char *gw_err_code(enum gw_err e)
{
	switch (e) {
	case GW_OK:
		return "ok";
	case GW_UNREACHABLE:
		return "gateway_unreachable";
	case GW_TLS:
		return "tls_error";
	case GW_TIMEOUT:
		return "gateway_timeout";
	case GW_CONNECTION:
		return "gateway_connection_error";
	case GW_ABORTED:
		return "aborted";
	}
	return "unknown";
}

bool gateway_enabled(struct runner *r)
{
	return r->gateway != NULL;
}

static void check_done(struct gateway *gw);

static void socket_action(struct gateway *gw, curl_socket_t s, int flags)
{
	int running;
	gw->in_curl++;
	CURLMcode mc = curl_multi_socket_action(gw->multi, s, flags, &running);
	gw->in_curl--;
	if (mc != CURLM_OK)
		log_error("curl_multi_socket_action failed", "{s:s}", "error",
			  curl_multi_strerror(mc));
	check_done(gw);
}

static void on_sock_event(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	struct gw_sock *gs = w->arg;
	int flags = 0;
	if (events & EPOLLIN)
		flags |= CURL_CSELECT_IN;
	if (events & EPOLLOUT)
		flags |= CURL_CSELECT_OUT;
	if (events & (EPOLLERR | EPOLLHUP))
		flags |= CURL_CSELECT_ERR;
	socket_action(gs->gw, w->fd, flags);
}

static void free_sock_deferred(struct loop *loop, void *arg)
{
	(void)loop;
	free(arg);
}

static int on_socket(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
	(void)e;
	struct gateway *gw = userp;
	struct gw_sock *gs = socketp;
	struct loop *loop = &gw->r->loop;
	if (what == CURL_POLL_REMOVE) {
		if (gs) {
			loop_watch_del(loop, &gs->w);
			curl_multi_assign(gw->multi, s, NULL);
			/* The loop may still hold an event for it in this batch. */
			if (loop_defer(loop, free_sock_deferred, gs) < 0)
				log_error("out of memory freeing a socket watch", NULL);
		}
		return 0;
	}
	uint32_t ev = 0;
	if (what & CURL_POLL_IN)
		ev |= EPOLLIN;
	if (what & CURL_POLL_OUT)
		ev |= EPOLLOUT;
	if (!gs) {
		gs = calloc(1, sizeof(*gs));
		if (!gs) {
			log_error("out of memory watching a gateway socket", NULL);
			return -1;
		}
		gs->gw = gw;
		int rc = loop_watch_add(loop, &gs->w, s, ev, on_sock_event, gs);
		if (rc < 0) {
			log_errno("epoll_ctl(ADD) of a gateway socket failed", -rc, NULL);
			free(gs);
			return -1;
		}
		curl_multi_assign(gw->multi, s, gs);
		return 0;
	}
	int rc = loop_watch_set(loop, &gs->w, ev);
	if (rc < 0) {
		log_errno("epoll_ctl(MOD) of a gateway socket failed", -rc, NULL);
		return -1;
	}
	return 0;
}

static int on_curl_timer(CURLM *m, long timeout_ms, void *userp)
{
	(void)m;
	struct gateway *gw = userp;
	if (timeout_ms < 0) {
		loop_timer_stop(&gw->r->loop, &gw->timer);
		return 0;
	}
	/* 0 = "as soon as possible": never from inside this callback. */
	int rc = loop_timer_start(&gw->r->loop, &gw->timer, (uint64_t)timeout_ms, 0);
	if (rc < 0) {
		log_errno("timerfd_settime for curl failed", -rc, NULL);
		return -1;
	}
	return 0;
}

static void on_timer(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	socket_action(t->arg, CURL_SOCKET_TIMEOUT, 0);
}

/* A call that is in no list and no multi handle. */
static void call_free(struct gw_call *c)
{
	if (!c)
		return;
	if (c->easy)
		curl_easy_cleanup(c->easy);
	/* The slist holds the Authorization header: wipe it. */
	for (struct curl_slist *h = c->hdrs; h; h = h->next)
		explicit_bzero(h->data, strlen(h->data));
	curl_slist_free_all(c->hdrs);
	free(c);
}

static void call_freep(struct gw_call **c)
{
	call_free(*c);
}

static void call_unlink_free(struct gw_call *c)
{
	struct gateway *gw = c->gw;
	LIST_UNLINK(gw->calls, c);
	gw->in_curl++;
	curl_multi_remove_handle(gw->multi, c->easy);
	gw->in_curl--;
	call_free(c);
}

static void reap_cancelled(struct gateway *gw)
{
	for (struct gw_call *c = gw->calls, *next; c; c = next) {
		next = c->next;
		if (c->cancelled)
			call_unlink_free(c);
	}
}

static void on_reaper(struct loop *loop, struct loop_timer *t)
{
	(void)loop;
	reap_cancelled(t->arg);
}

static enum gw_err map_curl(CURLcode cc, bool got_head)
{
	switch (cc) {
	case CURLE_OK:
		return GW_OK;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
		return GW_UNREACHABLE;
	case CURLE_OPERATION_TIMEDOUT:
		return GW_TIMEOUT;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ENGINE_INITFAILED:
	case CURLE_USE_SSL_FAILED:
		return GW_TLS;
	case CURLE_WRITE_ERROR:
	case CURLE_ABORTED_BY_CALLBACK:
		return GW_ABORTED;
	default:
		return got_head ? GW_CONNECTION : GW_UNREACHABLE;
	}
}

static void check_done(struct gateway *gw)
{
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(gw->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		struct gw_call *c = NULL;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
		if (!c)
			continue;
		CURLcode cc = m->data.result;
		const struct gw_call_ops *ops = c->ops;
		void *arg = c->arg;
		enum gw_err e = map_curl(cc, c->head_done);
		char msg[CURL_ERROR_SIZE + 160];
		if (cc == CURLE_OK)
			msg[0] = 0;
		else
			snprintf(msg, sizeof(msg), "%s",
				 c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc));
		size_t n = strlen(msg);
		while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
			msg[--n] = 0;
		/* The message reaches the task (the proxy's 502 body) and the
		 * log: say where the fix is, not only what libcurl saw. */
		if (e == GW_UNREACHABLE)
			snprintf(msg + n, sizeof(msg) - n,
				 " (check --gateway-url / FORCEAI_GATEWAY_URL and that the box's "
				 "network lets the runner reach it)");
		if (cc == CURLE_OK && !c->head_done && ops && ops->head) {
			/* A response without a body. */
			c->head_done = true;
			curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &c->status);
			ops->head(c, arg, c->status, c->ctype, c->retry_after);
		}
		bool cancelled = c->cancelled;
		c->cancelled = true; /* no more callbacks while it is freed */
		call_unlink_free(c);
		if (!cancelled && ops && ops->done) {
			if (e != GW_OK && e != GW_ABORTED)
				log_warn("gateway call failed", "{s:s,s:s}", "code", gw_err_code(e),
					 "error", msg);
			ops->done(NULL, arg, e, msg);
		}
	}
}

static void copy_header_value(char *dst, size_t dstlen, const char *v, size_t n)
{
	while (n && (*v == ' ' || *v == '\t')) {
		v++;
		n--;
	}
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	if (n >= dstlen)
		n = dstlen - 1;
	memcpy(dst, v, n);
	dst[n] = 0;
}

static size_t on_header(char *p, size_t size, size_t nitems, void *userp)
{
	struct gw_call *c = userp;
	size_t n = size * nitems;
	if (c->cancelled || !c->ops)
		return 0;
	if (n >= 5 && !memcmp(p, "HTTP/", 5)) {
		/* A new response (after a 1xx): forget the previous head. */
		c->ctype[0] = c->retry_after[0] = 0;
		return n;
	}
	if (n <= 2 && (p[0] == '\r' || p[0] == '\n')) {
		long st = 0;
		curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &st);
		if (st >= 200 && !c->head_done) {
			c->head_done = true;
			c->status = st;
			if (c->ops->head)
				c->ops->head(c, c->arg, st, c->ctype, c->retry_after);
		}
		return n;
	}
	if (n > 13 && !strncasecmp(p, "content-type:", 13))
		copy_header_value(c->ctype, sizeof(c->ctype), p + 13, n - 13);
	else if (n > 12 && !strncasecmp(p, "retry-after:", 12))
		copy_header_value(c->retry_after, sizeof(c->retry_after), p + 12, n - 12);
	return n;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *userp)
{
	struct gw_call *c = userp;
	size_t n = size * nmemb;
	if (c->cancelled || !c->ops)
		return 0;
	if (!c->head_done) {
		c->head_done = true;
		curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &c->status);
		if (c->ops->head)
			c->ops->head(c, c->arg, c->status, c->ctype, c->retry_after);
		if (c->cancelled)
			return 0;
	}
	int rc = c->ops->data ? c->ops->data(c, c->arg, p, n) : 0;
	if (rc == 1) {
		c->recv_paused = true;
		return CURL_WRITEFUNC_PAUSE;
	}
	if (rc < 0 || c->cancelled)
		return 0;
	return n;
}

static size_t on_read(char *p, size_t size, size_t nitems, void *userp)
{
	struct gw_call *c = userp;
	if (c->cancelled || !c->ops || !c->ops->read)
		return CURL_READFUNC_ABORT;
	size_t n = c->ops->read(c, c->arg, p, size * nitems);
	if (n == GW_READ_PAUSE) {
		c->send_paused = true;
		return CURL_READFUNC_PAUSE;
	}
	return n;
}

static bool slist_add(struct curl_slist **h, const char *s)
{
	struct curl_slist *n = curl_slist_append(*h, s);
	if (!n)
		return false;
	*h = n;
	return true;
}

/* The request's header list (c->hdrs): its type, the client's headers
 * passed on, and the gateway's key. false when out of memory. */
static bool call_headers(struct gw_call *c, const struct gw_request *rq)
{
	char hdr[256];
	snprintf(hdr, sizeof(hdr), "Content-Type: %.200s",
		 rq->content_type ? rq->content_type : "application/json");
	bool ok = true;
	if (!strcmp(rq->method, "POST"))
		ok &= slist_add(&c->hdrs, hdr);
	if (rq->accept) {
		snprintf(hdr, sizeof(hdr), "Accept: %.200s", rq->accept);
		ok &= slist_add(&c->hdrs, hdr);
	}
	ok &= slist_add(&c->hdrs, "Expect:"); /* no 100-continue round trip */
	if (rq->stream_body && rq->body_size < 0)
		ok &= slist_add(&c->hdrs, "Transfer-Encoding: chunked");
	for (const char *const *h = rq->headers; h && *h; h++)
		ok &= slist_add(&c->hdrs, *h);
	if (c->gw->key) {
		/* Built here and wiped with the list (call_free). */
		cleanup_buf struct buf kh = {0};
		bool bearer = !rq->key_header || !strcasecmp(rq->key_header, "authorization");
		if (buf_appendf(&kh, "%s: %s%s", bearer ? "Authorization" : rq->key_header,
				bearer ? "Bearer " : "", c->gw->key) < 0 ||
		    buf_append(&kh, "", 1) < 0)
			ok = false;
		else
			ok &= slist_add(&c->hdrs, kh.data);
		if (kh.data)
			explicit_bzero(kh.data, kh.len);
	}
	return ok;
}

/* The transport's options: nothing the environment says (no netrc, no
 * proxy variables, no redirects), the operator's CA bundle and time limits,
 * the callbacks, the method and body. Non-zero when libcurl refused one. */
static int call_options(struct gw_call *c, const struct runner *r, const struct gw_request *rq,
			const char *url)
{
	CURL *e = c->easy;
	int bad = 0;
	bad |= curl_easy_setopt(e, CURLOPT_URL, url);
	bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	bad |= curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	bad |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	/* A libcurl built without netrc support (the static one) already
	 * ignores it and refuses the option: that is the state we want. */
	CURLcode nrc = curl_easy_setopt(e, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
	if (nrc != CURLE_OK && nrc != CURLE_UNKNOWN_OPTION && nrc != CURLE_NOT_BUILT_IN)
		bad = 1;
	/* "" = no proxy at all: http_proxy/HTTPS_PROXY/ALL_PROXY are ignored. */
	bad |= curl_easy_setopt(e, CURLOPT_PROXY, r->cfg.gateway_proxy ? r->cfg.gateway_proxy : "");
	/* The bundle in place of the file, not beside libcurl's default one. */
	if (c->gw->ca_blob.data)
		bad |= curl_easy_setopt(e, CURLOPT_CAINFO, NULL) |
		       curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &c->gw->ca_blob);
	bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
				(long)r->cfg.gateway_connect_timeout_ms);
	bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)r->cfg.gateway_timeout_ms);
	bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->hdrs);
	bad |= curl_easy_setopt(e, CURLOPT_USERAGENT, "forceai-runner/" FORCEAI_RUNNER_VERSION);
	bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
	bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
	bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
	bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
	bad |= curl_easy_setopt(e, CURLOPT_PRIVATE, c);
	if (!strcmp(rq->method, "POST") && rq->stream_body) {
		bad |= curl_easy_setopt(e, CURLOPT_POST, 1L);
		bad |= curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
		bad |= curl_easy_setopt(e, CURLOPT_READDATA, c);
		bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_size);
		/* The smallest upload buffer: bodies stream, they do not pool here. */
		bad |= curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 16384L);
	} else if (!strcmp(rq->method, "POST")) {
		bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
		bad |= curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, rq->body ? rq->body : "");
	} else {
		bad |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
	}
	return bad;
}

struct gw_call *gw_call_start(struct runner *r, const struct gw_request *rq,
			      const struct gw_call_ops *ops, void *arg)
{
	struct gateway *gw = r->gateway;
	if (!gw)
		return NULL;
	__attribute__((cleanup(call_freep))) struct gw_call *c = calloc(1, sizeof(*c));
	if (!c) {
		log_error("out of memory starting a gateway call", NULL);
		return NULL;
	}
	c->gw = gw;
	c->ops = ops;
	c->arg = arg;
	c->easy = curl_easy_init();
	cleanup_buf struct buf url = {0};
	if (!c->easy ||
	    buf_append(&url, gw->base, rq->from_root ? gw->root_len : strlen(gw->base)) < 0 ||
	    buf_append_str(&url, rq->path) < 0 || buf_append(&url, "", 1) < 0 ||
	    !call_headers(c, rq))
		return NULL;
	if (call_options(c, r, rq, url.data)) {
		log_error("curl_easy_setopt failed (libcurl lacks a needed feature?)", NULL);
		return NULL;
	}
	LIST_PUSH(gw->calls, c);
	gw->in_curl++;
	CURLMcode mc = curl_multi_add_handle(gw->multi, c->easy);
	gw->in_curl--;
	if (mc != CURLM_OK) {
		log_error("curl_multi_add_handle failed", "{s:s}", "error",
			  curl_multi_strerror(mc));
		c->cancelled = true;
		call_unlink_free(take_ptr(c));
		return NULL;
	}
	return take_ptr(c);
}

void gw_call_cancel(struct gw_call *c)
{
	if (!c || c->cancelled)
		return;
	c->cancelled = true;
	c->ops = NULL;
	struct gateway *gw = c->gw;
	if (gw->in_curl)
		loop_timer_start(&gw->r->loop, &gw->reaper, 0, 0);
	else
		call_unlink_free(c);
}

/* Set curl's pause state to what is still paused in either direction. */
static void repause(struct gw_call *c)
{
	struct gateway *gw = c->gw;
	int bits = (c->recv_paused ? CURLPAUSE_RECV : 0) | (c->send_paused ? CURLPAUSE_SEND : 0);
	gw->in_curl++;
	CURLcode cc = curl_easy_pause(c->easy, bits);
	gw->in_curl--;
	if (cc != CURLE_OK)
		log_error("curl_easy_pause failed", "{s:s}", "error", curl_easy_strerror(cc));
	/* Let curl look at its sockets again from the top of the loop. */
	loop_timer_start(&gw->r->loop, &gw->timer, 0, 0);
}

void gw_call_resume(struct gw_call *c)
{
	if (!c || c->cancelled)
		return;
	c->recv_paused = false;
	repause(c);
}

void gw_call_resume_send(struct gw_call *c)
{
	if (!c || c->cancelled || !c->send_paused)
		return;
	c->send_paused = false;
	repause(c);
}

static const char *pick_ca(const struct runner *r)
{
	if (r->cfg.gateway_ca)
		return r->cfg.gateway_ca;
	const char *v = getenv("SSL_CERT_FILE");
	if (v && *v)
		return v;
	v = getenv("CURL_CA_BUNDLE");
	if (v && *v)
		return v;
	/* The static (mbedTLS) build has no compiled-in default. */
	static const char *const sys[] = {"/etc/ssl/certs/ca-certificates.crt",
					  "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem",
					  NULL};
	for (const char *const *p = sys; *p; p++)
		if (access(*p, R_OK) == 0)
			return *p;
	return NULL;
}

int gateway_init(struct runner *r, struct error *err)
{
	if (!r->cfg.gateway_url)
		return 0;
	CURLcode cc = curl_global_init(CURL_GLOBAL_DEFAULT);
	if (cc != CURLE_OK)
		return error_set(err, 0, NULL, "curl_global_init: %s", curl_easy_strerror(cc));
	struct gateway *gw = calloc(1, sizeof(*gw));
	if (!gw)
		return error_set(err, ENOMEM, NULL, "gateway");
	gw->r = r;
	gw->base = strdup(r->cfg.gateway_url);
	if (!gw->base) {
		free(gw);
		return error_set(err, ENOMEM, NULL, "gateway");
	}
	size_t n = strlen(gw->base);
	while (n && gw->base[n - 1] == '/')
		gw->base[--n] = 0;
	gw->root_len = n >= 3 && !strcmp(gw->base + n - 3, "/v1") ? n - 3 : n;
	if (r->cfg.gateway_key && !(gw->key = strdup(r->cfg.gateway_key))) {
		free(gw->base);
		free(gw);
		return error_set(err, ENOMEM, NULL, "gateway");
	}
	gw->ca = pick_ca(r);
	r->gateway = gw;
	/* The bundle is read here, once, and handed to libcurl as bytes: given
	 * the name, libcurl (mbedTLS: at every connection) opened it on the
	 * loop, as root, blocking; where it lies in a directory a task can
	 * write, a FIFO swapped in would hold PID 1 in open() for good.
	 * read_regular refuses anything but a regular file of at most 16 MiB;
	 * links are followed (the path is the operator's, system bundles are
	 * links on some distributions). */
	if (gw->ca) {
		char *data;
		size_t len;
		struct stat st;
		int rc = read_regular(AT_FDCWD, gw->ca, 0, 16u << 20, &data, &len, &st);
		if (rc < 0)
			return error_set(err, 0, NULL, "gateway CA bundle %s: %s", gw->ca,
					 open_regular_strerror(rc, &st));
		gw->ca_blob =
			(struct curl_blob){.data = data, .len = len, .flags = CURL_BLOB_NOCOPY};
	}
	gw->multi = curl_multi_init();
	if (!gw->multi)
		return error_set(err, 0, NULL, "curl_multi_init failed");
	curl_multi_setopt(gw->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(gw->multi, CURLMOPT_SOCKETDATA, gw);
	curl_multi_setopt(gw->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(gw->multi, CURLMOPT_TIMERDATA, gw);
	int rc = loop_timer_init(&r->loop, &gw->timer, on_timer, gw);
	if (rc == 0)
		rc = loop_timer_init(&r->loop, &gw->reaper, on_reaper, gw);
	if (rc < 0)
		return error_set(err, -rc, NULL, "timerfd_create");
	log_info("gateway configured", "{s:s,s:b,s:s,s:b}", "url", gw->base, "key", gw->key != NULL,
		 "ca", gw->ca ? gw->ca : "(libcurl default)", "proxy",
		 r->cfg.gateway_proxy != NULL);
	return 0;
}

void gateway_stop(struct runner *r)
{
	struct gateway *gw = r->gateway;
	if (!gw)
		return;
	while (gw->calls) {
		gw->calls->cancelled = true;
		call_unlink_free(gw->calls);
	}
	if (gw->multi)
		curl_multi_cleanup(gw->multi);
	loop_timer_close(&r->loop, &gw->timer);
	loop_timer_close(&r->loop, &gw->reaper);
	if (gw->key) {
		explicit_bzero(gw->key, strlen(gw->key));
		free(gw->key);
	}
	free(gw->base);
	free(gw->ca_blob.data);
	free(gw);
	r->gateway = NULL;
	curl_global_cleanup();
}
