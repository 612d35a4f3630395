"""One set of hop-by-hop rules (runner/relay/hop.c) for both proxies: the
model proxy drops the fields every Connection field of the request names,
as the port proxy does, with the same splitting of the list. Before the
rules had one home the model proxy read only the first Connection field, so
a task could pass a field its client meant for the hop (a second Connection
list's) on to the gateway."""
import unittest

from test_wire import WireBase, curl_anthropic, http_codes, out
from wire_gateways import a_text


class ModelProxyHopRules(WireBase):
    def test_every_connection_field_names_hop_fields(self):
        self.gw.script(a_text("ok", usage=(2, 1)))
        extra = ("-H 'Connection: keep-alive' -H 'Connection: X-Second, X-Third' "
                 "-H 'X-Second: hop' -H 'X-Third: hop' -H 'X-Kept: end' ")
        ev = self.chat(curl_anthropic(extra=extra))
        body = out(ev)
        self.assertEqual(http_codes(body), ["200"], body)
        rq = self.gw.requests[0]["headers"]
        self.assertEqual(rq.get("x-kept"), "end")
        for h in ("x-second", "x-third"):
            self.assertNotIn(h, rq, "%s named by the second Connection field was forwarded" % h)
        self.no_secrets_forwarded()


if __name__ == "__main__":
    unittest.main()
