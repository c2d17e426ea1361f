"""The contract's reference scenarios, through the real fencing-proxy binary and the demo backend.

Each test starts its own backend and proxy (fresh state file) on 127.0.0.1, so tests are
independent. Assertion messages say what the contract expects.
"""

import json
import os
import re
import socket
import time
import unittest

from harness import ProxyTestCase, ResponseReader, find_fence, free_port, metric, run_cli

ROUTES = [
    {"name": "orders", "prefix": "/orders", "mode": "enforce", "missing_token": "reject"},
    {"name": "notes", "prefix": "/notes", "mode": "observe"},
    {"name": "open", "prefix": "/open", "missing_token": "allow"},
    {"name": "blind", "prefix": "/blind", "forward_token": False},
]


def config(request_timeout="5s", routes=ROUTES, **extra):
    cfg = {"threads": 2,
           "timeouts": {"connect": "1s", "request": request_timeout, "idle": "10s",
                        "header_read": "5s", "shutdown": "5s"},
           "routes": routes}
    cfg.update(extra)
    return cfg


class FencingTest(ProxyTestCase):

    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()

    def proxy(self, **kw):
        return self.start_proxy(config(**kw), self.backend)

    def tokens_at_backend(self, prefix, methods=("PUT", "POST", "PATCH", "DELETE")):
        return [r["token"] for r in self.backend.records(prefix) if r["method"] in methods]

    # -- the core guarantee ---------------------------------------------------------------------

    def test_stale_token_rejected_with_409_problem(self):
        proxy = self.proxy()
        self.assert2xx(proxy.request("PUT", "/orders/1", 33, b"from 33"), "token 33 (first)")
        self.assert2xx(proxy.request("PUT", "/orders/1", 34, b"from 34"), "token 34 (raise)")
        response = proxy.request("PUT", "/orders/1", 33, b"late 33")
        problem = self.assertProblem(response, 409, "token 33 after 34")
        self.assertEqual(response[1].get("x-fencing-token-max"), "34",
                         "a 409 carries X-Fencing-Token-Max: <max>")
        expected = {"route": "orders", "fence": "orders", "token": 33, "max_token": 34}
        for field, value in expected.items():
            with self.subTest(field=field):
                self.assertIn(field, problem, "the 409 problem body names %r" % field)
                self.assertEqual(problem[field], value, "problem %r must be %r" % (field, value))
                if field in ("token", "max_token"):
                    self.assertIs(type(problem[field]), int, "%r is a JSON number" % field)
        self.assertEqual(self.tokens_at_backend("/orders"), ["33", "34"],
                         "the backend sees 33 then 34, never the late 33")
        self.assertEqual(self.backend.request("GET", "/orders/1")[2], b"from 34",
                         "the stale write must not overwrite the holder's data")

    def test_equal_tokens_write_repeatedly(self):
        proxy = self.proxy()
        conn = proxy.connect()
        self.addCleanup(conn.close)
        for i in range(20):
            self.assert2xx(proxy.request("PUT", "/orders/eq/%d" % i, 7, b"x", conn=conn),
                           "write %d with the equal token 7" % i)
        self.assertEqual(self.tokens_at_backend("/orders"), ["7"] * 20,
                         "token == max_token is forwarded every time")

    def test_1000_alternating_grants(self):
        proxy = self.proxy()
        clients = [proxy.connect(), proxy.connect()]  # A and B, keep-alive
        for c in clients:
            self.addCleanup(c.close)
        problems = []
        started = time.monotonic()
        for token in range(1, 1001):
            holder, previous = clients[token % 2], clients[(token + 1) % 2]
            status, _, body = proxy.request("PUT", "/orders/alt", token, b"w", conn=holder)
            if not 200 <= status < 300:
                problems.append("holder token %d: expected 2xx, got %d %r" % (token, status, body))
            if token > 1:
                status, headers, _ = proxy.request("PUT", "/orders/alt", token - 1, b"late",
                                                   conn=previous)
                if status != 409 or headers.get("x-fencing-token-max") != str(token):
                    problems.append("late token %d after %d: expected 409 with max %d, got %d %s"
                                    % (token - 1, token, token, status,
                                       headers.get("x-fencing-token-max")))
            if len(problems) > 10:
                break
        self.assertEqual(problems, [], "every grant is accepted, every previous holder refused")
        tokens = [int(t) for t in self.tokens_at_backend("/orders")]
        self.assertEqual(tokens, list(range(1, 1001)),
                         "the backend sees exactly the accepted tokens, in increasing order")
        print("\n  1000 grants + 999 late writes in %.1fs" % (time.monotonic() - started))

    def test_observe_mode_forwards_stale_and_counts_it(self):
        proxy = self.proxy()
        self.assert2xx(proxy.request("PUT", "/notes/a", 5, b"new holder"), "token 5")
        self.assert2xx(proxy.request("PUT", "/notes/a", 4, b"stale writer"),
                       "observe mode forwards a stale token")
        self.assertEqual(self.tokens_at_backend("/notes"), ["5", "4"],
                         "the stale write reaches the backend in observe mode")
        status, _, body = proxy.request("GET", "/notes/a")
        self.assertEqual((status, body), (200, b"stale writer"),
                         "observe mode makes the damage visible: the stale body overwrote 5's")
        self.assert2xx(proxy.request("PUT", "/notes/b", None, b"no token"),
                       "observe mode forwards a missing token too")
        samples = proxy.metrics_counting("fencing_proxy_requests_total", 1, route="notes",
                                         outcome="observed_missing")
        self.assertEqual(metric(samples, "fencing_proxy_requests_total", route="notes",
                                outcome="observed_stale"), 1.0,
                         'requests_total{route="notes",outcome="observed_stale"} counts it once')
        self.assertEqual(metric(samples, "fencing_proxy_requests_total", route="notes",
                                outcome="observed_missing"), 1.0,
                         'requests_total{route="notes",outcome="observed_missing"} counts it once')
        self.assertIn(metric(samples, "fencing_proxy_requests_total", route="notes",
                             outcome="rejected_stale"), (None, 0.0),
                      "observe mode never counts rejected_stale")

    # -- request validation -------------------------------------------------------------------

    def test_missing_token(self):
        proxy = self.proxy()
        problem = self.assertProblem(proxy.request("PUT", "/orders/m", None, b"body"), 428,
                                     "no token, missing_token: reject")
        self.assertEqual(problem.get("route"), "orders", "the 428 problem names the route")
        self.assertEqual(self.backend.records("/orders"), [], "a 428 is not forwarded")
        self.assert2xx(proxy.request("PUT", "/open/m", None, b"body"),
                       "no token, missing_token: allow")
        self.assertEqual(len(self.backend.records("/open")), 1,
                         "missing_token: allow forwards the write")

    def test_malformed_tokens_rejected_with_400(self):
        proxy = self.proxy()
        self.assert2xx(proxy.request("PUT", "/orders/base", 100, b"x"), "token 100")
        malformed = ["", "abc", "-1", "+1", "1.0", "0x10", "\uff11", "18446744073709551616",
                     "123456789012345678901", "1,2", "1 2", "99999999999999999999"]
        for i, value in enumerate(malformed):
            with self.subTest(token=value):
                path = "/orders/malformed/%d" % i
                response = proxy.request("PUT", path, value.encode("utf-8"), b"x")
                self.assertProblem(response, 400, "malformed token %r" % value)
                self.assertEqual(self.backend.records(path), [], "a 400 is not forwarded")
        for values in (("5", "5"), ("200", "201")):
            with self.subTest(sent_twice=values):
                path = "/orders/twice/" + values[1]
                conn = proxy.connect()
                try:
                    conn.putrequest("PUT", path)
                    for v in values:
                        conn.putheader("X-Fencing-Token", v)
                    conn.putheader("Content-Length", "1")
                    conn.endheaders(b"x")
                    resp = conn.getresponse()
                    response = (resp.status, {k.lower(): v for k, v in resp.getheaders()},
                                resp.read())
                finally:
                    conn.close()
                self.assertProblem(response, 400, "token header sent twice %r" % (values,))
                self.assertEqual(self.backend.records(path), [], "a 400 is not forwarded")
        self.assert2xx(proxy.request("PUT", "/orders/max", "18446744073709551615", b"x"),
                       "2^64-1 is the largest valid token")
        self.assertEqual(self.tokens_at_backend("/orders"), ["100", "18446744073709551615"],
                         "only the valid tokens reach the backend")

    def test_unfenced_method_passes_untouched(self):
        proxy = self.proxy()
        self.assert2xx(proxy.request("PUT", "/orders/g", 3, b"stored"), "token 3")
        status, headers, body = proxy.request("GET", "/orders/g")
        self.assertEqual((status, body), (200, b"stored"), "GET is not fenced: no token needed")
        status, headers, body = proxy.request("GET", "/orders/g", 1)
        self.assertEqual((status, body), (200, b"stored"),
                         "GET is not fenced: even a stale token passes")
        self.assertEqual(headers.get("x-demo-seen-token"), "1",
                         "an unfenced request is forwarded untouched (token header kept)")
        status, _, body = proxy.request("HEAD", "/orders/g")
        self.assertEqual((status, body), (200, b""), "HEAD passes, without a body")

    # -- durability -----------------------------------------------------------------------------

    def test_restart_keeps_the_max(self):
        proxy = self.proxy()
        self.assert2xx(proxy.request("PUT", "/orders/r", 50, b"x"), "token 50")
        self.assertEqual(proxy.terminate(), 0, "SIGTERM: the process exits 0")
        proxy.restart()
        response = proxy.request("PUT", "/orders/r", 49, b"x")
        self.assertProblem(response, 409, "token 49 after a restart at max 50")
        self.assertEqual(response[1].get("x-fencing-token-max"), "50",
                         "max_token survives SIGTERM and restart")
        self.assert2xx(proxy.request("PUT", "/orders/r", 51, b"x"), "token 51 after restart")
        proxy.kill9()
        proxy.restart()
        response = proxy.request("PUT", "/orders/r", 50, b"x")
        self.assertProblem(response, 409, "token 50 after kill -9 at max 51")
        self.assertEqual(response[1].get("x-fencing-token-max"), "51",
                         "an acknowledged raise survives kill -9")
        self.assertEqual(self.tokens_at_backend("/orders"), ["50", "51"],
                         "no stale write reached the backend across restarts")

    # -- admin --------------------------------------------------------------------------------

    def test_admin_metrics_health_fences(self):
        proxy = self.proxy()
        self.assert2xx(proxy.request("PUT", "/orders/x", 10, b"x"), "token 10")
        self.assert2xx(proxy.request("PUT", "/orders/x", 10, b"x"), "token 10 again")
        self.assert2xx(proxy.request("PUT", "/orders/x", 11, b"x"), "token 11")
        self.assertEqual(proxy.request("PUT", "/orders/x", 10, b"x")[0], 409, "late token 10")
        self.assertEqual(proxy.request("GET", "/orders/x")[0], 200, "unfenced GET")
        samples = proxy.metrics_counting("fencing_proxy_requests_total", 1, route="orders",
                                         outcome="unfenced")
        expected = [
            ("fencing_proxy_requests_total", {"route": "orders", "outcome": "forwarded"}, 3),
            ("fencing_proxy_requests_total", {"route": "orders", "outcome": "rejected_stale"}, 1),
            ("fencing_proxy_requests_total", {"route": "orders", "outcome": "unfenced"}, 1),
            ("fencing_proxy_max_token", {"fence": "orders"}, 11),
            ("fencing_proxy_token_raises_total", {"fence": "orders"}, 2),
        ]
        for name, labels, value in expected:
            with self.subTest(metric=name, **labels):
                self.assertEqual(metric(samples, name, **labels), value,
                                 "%s%s should be %s" % (name, labels, value))
        build = [dict(labels) for (name, labels) in samples if name == "fencing_proxy_build_info"]
        self.assertTrue(build and "version" in build[0],
                        "fencing_proxy_build_info{version=...} is exported")
        for path in ("/healthz", "/readyz"):
            with self.subTest(path=path):
                self.assertEqual(proxy.admin("GET", path)[0], 200, "%s answers 200" % path)
        status, headers, body = proxy.admin("GET", "/fences")
        self.assertEqual(status, 200, "/fences answers 200")
        self.assertIn("json", headers.get("content-type", ""), "/fences is JSON")
        entry = find_fence(json.loads(body), "orders")
        self.assertIsNotNone(entry, "/fences lists fence orders: %r" % body[:500])
        self.assertEqual(entry["max_token"], 11, "/fences shows the fence's max_token")

    # -- command line ---------------------------------------------------------------------------

    def test_check_version_and_state_show(self):
        proxy = self.start_proxy(config(), self.backend, start=False)
        result = run_cli("--config", proxy.config_path, "--check")
        self.assertEqual(result.returncode, 0,
                         "--check on a valid file exits 0: %s" % result.stderr)
        self.assertEqual(len(result.stdout.strip().splitlines()), 1,
                         "--check prints a one-line summary: %r" % result.stdout)

        result = run_cli("--version")
        self.assertEqual(result.returncode, 0, "--version exits 0")
        self.assertTrue(result.stdout.strip(), "--version prints the version")

        proxy.start()
        self.assert2xx(proxy.request("PUT", "/orders/s", 34, b"x"), "token 34")
        self.assert2xx(proxy.request("PUT", "/notes/s", 5, b"x"), "token 5")
        self.assertEqual(proxy.terminate(), 0, "SIGTERM exits 0")
        result = run_cli("state", "show", "--state-file", proxy.state_file)
        self.assertEqual(result.returncode, 0, "state show exits 0: %s" % result.stderr)
        try:
            shown = json.loads(result.stdout)
        except ValueError:
            self.fail("state show prints JSON: %r" % result.stdout)
        self.assertIn("fences", shown, 'state show prints {"fences": {...}}')
        self.assertEqual(shown["fences"].get("orders"), 34, "state show: orders max is 34")
        self.assertEqual(shown["fences"].get("notes"), 5, "state show: notes max is 5")

        result = run_cli("--config", proxy.config_path, "--check")
        self.assertEqual(result.returncode, 0,
                         "--check with an existing valid state file exits 0: %s" % result.stderr)

    def test_check_with_a_fence_store(self):
        """With fence_store the fences are in etcd: --check opens no state file (and does not
        connect to etcd), and its summary names the store instead."""
        path = os.path.join(self.workdir, "shared.yaml")
        with open(path, "w") as f:
            f.write('backend: "%s"\n'
                    'fence_store:\n'
                    '  etcd: {endpoints: ["http://127.0.0.1:1", "http://127.0.0.1:2"], prefix: /fp/orders}\n'
                    'routes:\n  - name: orders\n    prefix: /orders\n' % self.backend.url)
        before = sorted(os.listdir(self.workdir))
        result = run_cli("--config", path, "--check")
        self.assertEqual(result.returncode, 0, "--check with a fence_store exits 0: %s" % result.stderr)
        self.assertIn("fence store etcd http://127.0.0.1:1,http://127.0.0.1:2 prefix /fp/orders", result.stdout,
                      "--check names the fence store in its summary")
        self.assertNotIn("state file", result.stdout, "--check speaks of no state file")
        self.assertEqual(sorted(os.listdir(self.workdir)), before, "--check creates no file")

    def test_check_invalid_file(self):
        path = os.path.join(self.workdir, "bad.yaml")
        ports = (free_port(), free_port())
        lines = [
            'listen: "127.0.0.1:%d"' % ports[0],
            'admin_listen: "127.0.0.1:%d"' % ports[1],
            'backend: "%s"' % self.backend.url,
            'state_file: "%s"' % os.path.join(self.workdir, "bad-state.log"),
            "bogus_key: 1",           # line 5, column 1: unknown key
            "routes:",
            "  - name: orders",
            "    prefix: /orders",
            "    mode: sometimes",    # line 9: bad value
        ]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        result = run_cli("--config", path, "--check")
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 1, "--check on an invalid file exits 1: %r" % output)
        with self.subTest(error="unknown key"):
            self.assertIn("%s:5:1:" % path, output,
                          "an unknown key is reported as FILE:LINE:COL: message")
        with self.subTest(error="bad mode"):
            self.assertRegex(output, re.escape(path) + r":9:\d+: ",
                             "every error is reported, each as FILE:LINE:COL: message")

        dup = os.path.join(self.workdir, "dup.yaml")
        with open(dup, "w") as f:
            f.write("\n".join(lines[:4] + ["routes:", "  - name: a", "    prefix: /a",
                                           "  - name: a", "    prefix: /b"]) + "\n")
        result = run_cli("--config", dup, "--check")
        self.assertEqual(result.returncode, 1, "duplicate route names are invalid")
        self.assertRegex(result.stdout + result.stderr, re.escape(dup) + r":\d+:\d+: ",
                         "the duplicate is reported as FILE:LINE:COL: message")

        result = run_cli("--config", path)
        self.assertNotEqual(result.returncode, 0, "nothing starts on an invalid file")

    def test_second_proxy_on_same_state_file_refuses(self):
        first = self.start_proxy(config(), self.backend, name="first")
        second = self.start_proxy(config(), self.backend, state_file=first.state_file,
                                  start=False, name="second")
        second.start(wait=False)
        code = second.wait_exit(10)
        self.assertIsNotNone(code, "a second proxy on the same state file must refuse to start")
        self.assertNotEqual(code, 0, "the second proxy exits non-zero")
        self.assertRegex(second.stderr_text(), r"(?i)lock|another",
                         "the second proxy says why (the state file is locked by another)")
        self.assert2xx(first.request("PUT", "/orders/1", 1, b"x"), "the first proxy still serves")

    # -- upstream failures ----------------------------------------------------------------------

    def test_backend_down_is_502(self):
        proxy = self.start_proxy(config(), "http://127.0.0.1:%d" % free_port())
        self.assertProblem(proxy.request("GET", "/orders/x"), 502, "backend unreachable (GET)")
        self.assertProblem(proxy.request("PUT", "/orders/x", 1, b"x"), 502,
                           "backend unreachable (fenced PUT)")

    def test_backend_too_slow_is_504(self):
        proxy = self.proxy(request_timeout="500ms")
        started = time.monotonic()
        response = proxy.request("PUT", "/orders/slow", 1, b"x",
                                 headers={"X-Demo-Delay-Ms": "2000"})
        elapsed = time.monotonic() - started
        self.assertEqual(response[0], 504, "backend slower than timeouts.request: contract "
                         "expects 504, got %d %r" % (response[0], response[2][:200]))
        self.assertLess(elapsed, 1.8, "the 504 comes at timeouts.request (500ms), not later")

    def test_a_response_that_never_ends_is_cut_at_the_request_timeout(self):
        # The backend answers at once but sends its body a byte every 50 ms, forever: the admitted
        # write must still end at timeouts.request, or a raise would wait behind it for ever.
        proxy = self.proxy(request_timeout="1s")
        self.assert2xx(proxy.request("PUT", "/orders/t", 40, b"x"), "token 40")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            sock.sendall(b"PUT /orders/t HTTP/1.1\r\nHost: t\r\nX-Fencing-Token: 40\r\n"
                         b"X-Demo-Trickle-Ms: 50\r\nContent-Length: 1\r\n\r\nx")
            started = time.monotonic()
            received = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
                self.assertLess(time.monotonic() - started, 5.0, "still relaying after 5 s")
            elapsed = time.monotonic() - started
        self.assertIn(b" 200 ", received.split(b"\r\n", 1)[0], "the head was relayed")
        self.assertLess(len(received), 1000, "the body was cut off, not completed")
        self.assertGreater(elapsed, 0.8, "cut at %.2fs, before timeouts.request" % elapsed)
        self.assertLess(elapsed, 2.5, "timeouts.request is 1s: cut at %.2fs" % elapsed)
        # The admission is released: a raise goes through.
        self.assert2xx(proxy.request("PUT", "/orders/t", 41, b"y"), "the raise after the cut-off write")

    # -- wire details -----------------------------------------------------------------------------

    def test_expect_100_continue_stale_rejected_before_body(self):
        proxy = self.proxy()
        self.assert2xx(proxy.request("PUT", "/orders/e", 34, b"x"), "token 34")
        head = (b"PUT /orders/e HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Fencing-Token: %s\r\n"
                b"Content-Type: text/plain\r\nContent-Length: 11\r\n"
                b"Expect: 100-continue\r\n\r\n")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
            sock.sendall(head % b"33")
            try:
                status, headers, _ = ResponseReader(sock, timeout=5).read()
            except socket.timeout:
                self.fail("a stale token with Expect: 100-continue must be answered 409 "
                          "before the body is sent (nothing arrived within 5s)")
            self.assertEqual(status, 409, "the stale token is rejected before 100 Continue, "
                             "before the body is read")
            self.assertEqual(headers.get("x-fencing-token-max"), "34")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
            sock.sendall(head % b"34")
            reader = ResponseReader(sock, timeout=2)
            try:
                status = reader.read()[0]
            except socket.timeout:
                status = None  # no 100: a client sends the body after a while anyway
            self.assertIn(status, (100, None), "a valid token gets 100 Continue (or silence)")
            sock.sendall(b"hello world")
            status = reader.read()[0]
            while status == 100:
                status = reader.read()[0]
            self.assertTrue(200 <= status < 300, "the valid write is forwarded: got %d" % status)
        self.assertEqual(self.tokens_at_backend("/orders"), ["34", "34"],
                         "the rejected request never reached the backend")

    def test_forwarded_for_and_forward_token(self):
        proxy = self.proxy()
        status, headers, _ = proxy.request("PUT", "/orders/f", 5, b"x")
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("x-demo-seen-forwarded-for"), "127.0.0.1",
                         "X-Forwarded-For is set to the client address")
        self.assertEqual(headers.get("x-demo-seen-token"), "5",
                         "forward_token: true (default) passes the token header on")
        _, headers, _ = proxy.request("GET", "/orders/f",
                                      headers={"X-Forwarded-For": "203.0.113.7"})
        self.assertRegex(headers.get("x-demo-seen-forwarded-for", ""),
                         r"^203\.0\.113\.7\s*,\s*127\.0\.0\.1$",
                         "X-Forwarded-For is appended to, not replaced")
        status, headers, _ = proxy.request("PUT", "/blind/f", 5, b"x")
        self.assertEqual(status, 200, "token 5 on the forward_token: false route")
        self.assertNotIn("x-demo-seen-token", headers,
                         "forward_token: false strips the token header before the backend")
        self.assertEqual([r["token"] for r in self.backend.records("/blind")], [None],
                         "the backend never saw the token on forward_token: false")
        self.assertEqual(proxy.request("PUT", "/blind/f", 4, b"x")[0], 409,
                         "forward_token: false still fences")


if __name__ == "__main__":
    unittest.main()
