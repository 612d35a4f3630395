/* The port proxy's upgraded connections (relay/portproxy.c has the whole
 * story): after a 101, both sockets spliced as raw bytes on the loop. */
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "core/log.h"
#include "core/runner.h"
#include "relay/portproxy_internal.h"

void relay_upgrade_close(struct relay_req *p)
{
	struct loop *loop = &p->r->loop;
	loop_watch_del(loop, &p->cl_w);
	relay_up_close(p);
	relay_splice_free(&p->sp);
	p->phase = P_DONE;
	struct MHD_UpgradeResponseHandle *urh = p->urh;
	p->urh = NULL;
	if (urh) {
		/* libmicrohttpd closes the client socket and completes the
		 * request (proxy_req_free). */
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
		http_run_soon(p->r);
	}
}

void relay_upgrade_pump(struct relay_req *p)
{
	if (relay_splice_pump(&p->sp, p->client_fd, p->up_fd) <= 0) {
		relay_upgrade_close(p);
		return;
	}
	loop_watch_set(&p->r->loop, &p->cl_w, relay_splice_client_events(&p->sp));
	relay_up_events(p);
}

static void on_client_event(struct loop *loop, struct loop_watch *w, uint32_t events)
{
	(void)loop;
	(void)events;
	relay_upgrade_pump(w->arg);
}

void relay_on_upgraded(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
		       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	(void)conn;
	(void)con_cls;
	struct relay_req *p = cls;
	p->urh = urh;
	p->client_fd = sock;
	p->phase = P_UPGRADED;
	buf_free(&p->out);
	/* Bytes that came with the heads belong to the new protocol. */
	int src = relay_splice_open(&p->sp, extra_in, extra_in_size, p->in + p->pend_off,
				    p->in_len - p->pend_off);
	relay_in_put(p->r->proxies, p->in);
	p->in = NULL;
	p->in_len = p->pend_off = 0;
	int fl = fcntl(sock, F_GETFL);
	if (src < 0 || p->up_fd < 0 || fl < 0 || fcntl(sock, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    loop_watch_add(&p->r->loop, &p->cl_w, sock, 0, on_client_event, p) < 0) {
		log_warn("proxy: cannot splice an upgraded connection", "{s:i}", "port",
			 (int)p->port);
		relay_upgrade_close(p);
		return;
	}
	int one = 1;
	setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	relay_upgrade_pump(p);
}
