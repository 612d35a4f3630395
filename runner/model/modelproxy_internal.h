/* What the loopback model proxy's two files share (model/modelproxy.c, the
 * transport; model/modelproxy_admit.c, a request's head admitted): the
 * proxy, one request's record, and the admission steps. Not for use
 * outside model/. */
#pragma once
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/buf.h"
#include "core/error.h"
#include "http/server.h"
#include "model/gateway.h"
#include "model/tasktoken.h"
#include "model/wire.h"

#define MP_MAX_BODY (8u << 20)     /* request bodies (long conversations) */
#define MP_HIGH_WATER (256u << 10) /* response bytes buffered before curl pauses */
#define MP_UP_WINDOW (64u << 10)   /* request bytes held before the client is paused */
#define MP_MEM_MAX (32u << 20)     /* all buffered bytes of all requests together */
#define MP_PER_TASK 64             /* requests in flight per task token */
#define MP_MAX_CONNS 512
#define MP_PER_CLIENT 256     /* connections per uid (tasks of one uid share it) */
#define MP_IDLE_S 120         /* a connection silent this long (not waiting on us) */
#define MP_NEXT_HEAD_MS 30000 /* a kept-alive connection's next request head */

struct modelproxy {
	struct runner *r;
	struct http_daemon daemon;
	unsigned port;
	struct task_tokens tokens;
	struct mp_req *reqs;
	struct gate *gate;
	size_t mem; /* bytes buffered in all requests (MP_MEM_MAX) */
	bool stopping;
	bool budget_blocked; /* someone waits for memory to be released */
};

enum mp_state { MP_RECV, MP_WAIT_HEAD, MP_STREAM };

struct mp_req {
	struct modelproxy *p;
	struct MHD_Connection *conn;
	struct task_token *tok;
	bool begun;           /* on_request has seen it */
	uid_t uid;            /* the caller's, from the gate; (uid_t)-1: unknown */
	char *target;         /* the raw request target (path and query), from on_uri */
	const struct wire *w; /* its format (OpenAI's until the path says) */
	struct wire_route rt;
	bool post;
	struct buf path; /* the gateway path and the forwarded query, NUL-terminated */
	char accept[128];
	char ctype_in[128];
	char **hdrs; /* request headers passed on ("Name: value", NULL-terminated) */
	size_t n_hdrs;
	long long content_length; /* -1: chunked */
	/* The request body streams through `up` (at most MP_UP_WINDOW). */
	struct buf up;
	uint64_t body_seen;
	bool body_done;    /* the client sent all of it */
	bool body_blocked; /* the client is paused until there is room */
	bool send_paused;  /* curl waits for body bytes */
	bool discard;      /* the rest of the body goes nowhere */
	bool too_big, start_failed;
	bool counted;  /* in tok->inflight */
	bool called;   /* the gateway call was started (it may be over) */
	bool admitted; /* by the budget: holds `hold` tokens until settled */
	bool settled;  /* charged, its hold released */
	uint64_t hold;
	uint64_t out_bytes;     /* of a 200 answer, from the gateway */
	uint64_t out_at_report; /* out_bytes when the answer last reported usage */
	enum mp_state state;
	bool responded;
	struct gw_call *call;
	bool head;
	long status;
	char ctype[128];
	char retry_after[32];
	struct buf out;
	bool eof;
	enum gw_err err;
	char errmsg[256];
	const char *fail_code; /* the runner's own refusal (mp_fail), for the audit */
	unsigned fail_status;
	bool upstream_paused;
	bool suspended;
	struct wire_scan us;
	bool scanning;
	struct mp_req *next, *prev;
};

/* model/modelproxy_admit.c: the call's audit event; the runner's own
 * refusal, in the caller's format; the request head is in: who calls,
 * which route, within which budget (answered when refused). */
json_t *mp_audit_call(const struct mp_req *q, bool completed);
enum MHD_Result mp_failf(struct mp_req *q, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
enum MHD_Result mp_begin(struct mp_req *q, const char *method);
