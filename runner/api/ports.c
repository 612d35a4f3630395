/* GET /v1/ports (docs/design/interactive.md#the-listening-ports): the TCP ports listening in the
 * box, each with its process and task where known. The scan is task/ports.c's. */
#include "api/api.h"
#include "core/error.h"
#include "task/ports.h"

enum MHD_Result api_ports(struct http_req *req)
{
	struct port_list ls;
	struct error err;
	if (ports_scan(req->r, &ls, &err) < 0) {
		ports_free(&ls);
		return http_fail(req, &err);
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < ls.n; i++) {
		struct port_listen *s = &ls.v[i];
		json_t *o = json_pack("{s:i,s:s,s:s,s:i}", "port", (int)s->port, "address", s->addr,
				      "family", s->v6 ? "ipv6" : "ipv4", "uid", (int)s->uid);
		if (!o)
			continue;
		if (s->pid) {
			json_object_set_new(o, "pid", json_integer(s->pid));
			json_object_set_new(o, "process", json_string(s->process));
			if (s->runner)
				json_object_set_new(o, "runner", json_true());
			else if (s->task_id[0])
				json_object_set_new(o, "task_id", json_string(s->task_id));
		}
		json_array_append_new(arr, o);
	}
	enum MHD_Result res =
		http_json(req, 200,
			  json_pack("{s:o,s:b,s:b}", "ports", arr, "truncated", ls.truncated,
				    "owners_partial", ls.owners_partial));
	ports_free(&ls);
	return res;
}
