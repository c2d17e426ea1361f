"""Fence keys on the request side, through the real binary and the recording backend: where a
keyed route finds a request's key, and what happens when it is missing or malformed.

The per-key fences themselves (independent maxima, the key cap) are tested with the fence
registry; here a key error must be a 400 that never reaches the backend, in observe mode too,
and problem bodies must carry the key.
"""

import unittest

from harness import ProxyTestCase, metric

ROUTES = [
    {"name": "objects", "prefix": "/objects", "fence_key": {"path_segment": 1}},
    {"name": "tenants", "prefix": "/tenants", "mode": "observe", "fence_key": {"header": "X-Tenant"}},
    {"name": "plain", "prefix": "/plain"},
]

PROBLEM = "urn:fencing-proxy:problem:"


def config():
    return {"threads": 1,
            "timeouts": {"connect": "1s", "request": "5s", "idle": "10s", "header_read": "5s",
                         "shutdown": "5s"},
            "routes": ROUTES}


class KeyRequestTest(ProxyTestCase):

    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()
        self.proxy = self.start_proxy(config(), self.backend)

    def test_a_key_error_is_400_and_never_forwarded(self):
        cases = [
            ("PUT", "/objects", {}, "missing-fence-key", "no segment after the prefix"),
            ("PUT", "/objects/", {}, "missing-fence-key", "an empty segment"),
            ("PUT", "/objects/a%20b", {}, "bad-fence-key", "a percent-encoded key"),
            ("PUT", "/objects/k1;v=2", {}, "bad-fence-key", "a path parameter"),
            ("PUT", "/objects/" + "k" * 129, {}, "bad-fence-key", "a key of 129 bytes"),
            # Observe mode forwards what enforce would refuse, but a key error is the request's.
            ("PUT", "/tenants/x", {}, "missing-fence-key", "no key header, observe mode"),
            ("PUT", "/tenants/y", {"X-Tenant": "a b"}, "bad-fence-key", "a space in the key header"),
        ]
        for method, path, headers, kind, what in cases:
            with self.subTest(what=what):
                problem = self.assertProblem(self.proxy.request(method, path, 5, b"x", headers=headers), 400, what)
                self.assertEqual(problem.get("type"), PROBLEM + kind, what)
                self.assertNotIn("key", problem, "%s: a key error carries no key" % what)
        self.assertEqual(self.backend.records("/objects"), [], "a key error is not forwarded")
        self.assertEqual(self.backend.records("/tenants"), [], "a key error is not forwarded, observe mode too")
        samples = self.proxy.metrics()
        self.assertEqual(metric(samples, "fencing_proxy_requests_total", route="objects", outcome="rejected_key"),
                         5.0, "each key error counts as rejected_key")
        self.assertEqual(metric(samples, "fencing_proxy_requests_total", route="tenants", outcome="rejected_key"),
                         2.0)

    def test_the_key_header_twice_is_400(self):
        conn = self.proxy.connect()
        try:
            conn.putrequest("PUT", "/tenants/x")
            conn.putheader("X-Fencing-Token", "5")
            conn.putheader("X-Tenant", "t-1")
            conn.putheader("X-Tenant", "t-1")
            conn.putheader("Content-Length", "1")
            conn.endheaders(b"x")
            resp = conn.getresponse()
            response = (resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()
        problem = self.assertProblem(response, 400, "the key header twice")
        self.assertEqual(problem.get("type"), PROBLEM + "bad-fence-key")
        self.assertEqual(self.backend.records("/tenants"), [])

    def test_a_keyed_write_is_fenced_and_its_problems_carry_the_key(self):
        self.assert2xx(self.proxy.request("PUT", "/objects/k1/part", 5, b"from 5"), "token 5 on key k1")
        problem = self.assertProblem(self.proxy.request("PUT", "/objects/k1/part", 4, b"late 4"), 409, "token 4 after 5")
        self.assertEqual(problem.get("key"), "k1", "the 409 names the key")
        self.assertEqual(problem.get("fence"), "objects")
        self.assert2xx(self.proxy.request("PUT", "/tenants/x", 5, b"x", headers={"X-Tenant": " t-1 "}),
                       "a header key, OWS around it")
        self.assertEqual([r["path"] for r in self.backend.records("/objects")], ["/objects/k1/part"],
                         "only the accepted write reached the backend")

    def test_a_request_that_is_not_fenced_needs_no_key(self):
        status, headers, _ = self.proxy.request("GET", "/objects")
        self.assertEqual(status, 404, "GET is not fenced: forwarded without a key (the backend has nothing there)")
        self.assertFalse(headers.get("content-type", "").startswith("application/problem+json"),
                         "the 404 is the backend's, not a problem from the proxy")
        self.assert2xx(self.proxy.request("PUT", "/plain/x", 5, b"x"), "an unkeyed route needs no key")

    def test_connection_must_not_name_the_key_header(self):
        response = self.proxy.request("PUT", "/tenants/x", 5, b"x",
                                      headers={"X-Tenant": "t-1", "Connection": "x-tenant"})
        problem = self.assertProblem(response, 400, "Connection names the key header")
        self.assertEqual(problem.get("type"), PROBLEM + "bad-connection-header")
        self.assertEqual(self.backend.records("/tenants"), [])


if __name__ == "__main__":
    unittest.main()
