"""Hostile input against the real fencing-proxy binary (issue 4), over raw sockets.

The proxy is a security boundary: every hostile request below must end in the expected 4xx, with
the connection closed where the contract says so (Connection: close, then EOF), and with NOTHING
forwarded: the demo backend logs every request it applies, and after each case its log must hold
only what the case expects (usually nothing) plus a sentinel request sent afterwards.

Route /orders is fenced (enforce, missing_token: reject); its max_token is raised to 10 first, so a
hostile request carries the valid token 10 wherever the hostility alone must stop it, and the stale
token 5 where a bypass of the fence would otherwise be invisible (paths).

Then the resource limits: slowloris (header_read), idle keep-alive (idle), max_connections.
Python standard library only; 127.0.0.1 only; every wait is bounded.
"""

import http.client
import select
import socket
import time
import unittest

from harness import HarnessError, ProxyTestCase, ResponseReader, metric, read_until_closed

IO = 5.0  # seconds for one exchange in the table

SMUGGLED = (b"PUT /orders/smuggled HTTP/1.1\r\nHost: t\r\nX-Fencing-Token: 10\r\n"
            b"Content-Length: 0\r\n\r\n")


def head(lines, request_line=b"PUT /orders/1 HTTP/1.1"):
    """A request head from header lines (bytes), each ended with CRLF."""
    return request_line + b"\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n"


def put(lines, body=b"", target=b"/orders/1", version=b"HTTP/1.1"):
    return head([b"Host: t"] + lines, b"PUT " + target + b" " + version) + body


CHUNKED_HELLO = b"5\r\nhello\r\n0\r\n\r\n"
TOKEN10 = b"X-Fencing-Token: 10"
TOKEN5 = b"X-Fencing-Token: 5"


class Case:
    """One hostile request: the bytes, the status, whether the connection must close, and what
    the backend must have applied ((method, path, token) tuples; token None: not checked)."""

    def __init__(self, name, data, status, close, forwarded=(), http10=False, max_token=None):
        # Every 400 closes: after a malformed message the next request's boundary is unknown.
        self.name, self.data, self.status, self.close = name, data, status, close or status == 400
        self.forwarded, self.http10, self.max_token = list(forwarded), http10, max_token


def framing(name, data, status=400, **kw):
    return Case(name, data, status, True, **kw)


def path_case(target):
    return Case("path %s" % target.decode("latin-1"),
                put([TOKEN5, b"Content-Length: 0"], target=target), 400, True)


CASES = [
    # -- framing: 400 and the connection closed; the smuggled request after it is never read --
    framing("CL + TE", put([TOKEN10, b"Content-Length: 5", b"Transfer-Encoding: chunked"],
                           b"0\r\n\r\n" + SMUGGLED)),
    framing("TE + CL", put([TOKEN10, b"Transfer-Encoding: chunked", b"Content-Length: 5"],
                           b"0\r\n\r\n" + SMUGGLED)),
    framing("two Content-Length, different", put([TOKEN10, b"Content-Length: 5", b"Content-Length: 0"],
                                                 b"hello" + SMUGGLED)),
    framing("two Content-Length, equal", put([TOKEN10, b"Content-Length: 5", b"Content-Length: 5"],
                                             b"hello" + SMUGGLED)),
    framing("Content-Length '3, 3'", put([TOKEN10, b"Content-Length: 3, 3"], b"abc" + SMUGGLED)),
    framing("Content-Length abc", put([TOKEN10, b"Content-Length: abc"], b"hello")),
    framing("Content-Length -1", put([TOKEN10, b"Content-Length: -1"], b"hello")),
    framing("Content-Length +5", put([TOKEN10, b"Content-Length: +5"], b"hello")),
    framing("Content-Length 0x5", put([TOKEN10, b"Content-Length: 0x5"], b"hello")),
    framing("Content-Length empty", put([TOKEN10, b"Content-Length:"], b"hello")),
    framing("TE gzip", put([TOKEN10, b"Transfer-Encoding: gzip"], b"hello" + SMUGGLED)),
    framing("TE gzip with Content-Length", put([TOKEN10, b"Transfer-Encoding: gzip",
                                                b"Content-Length: 5"], b"hello" + SMUGGLED)),
    framing("TE identity", put([TOKEN10, b"Transfer-Encoding: identity"], b"hello" + SMUGGLED)),
    framing("TE 'chunked, gzip'", put([TOKEN10, b"Transfer-Encoding: chunked, gzip"], CHUNKED_HELLO)),
    framing("TE 'gzip, chunked'", put([TOKEN10, b"Transfer-Encoding: gzip, chunked"], CHUNKED_HELLO)),
    framing("TE twice", put([TOKEN10, b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"],
                            CHUNKED_HELLO)),
    framing("TE on HTTP/1.0", put([TOKEN10, b"Transfer-Encoding: chunked"], CHUNKED_HELLO + SMUGGLED,
                                  version=b"HTTP/1.0"), http10=True),
    framing("bad chunk size 'zz'", put([TOKEN10, b"Transfer-Encoding: chunked"],
                                       b"zz\r\nhello\r\n0\r\n\r\n" + SMUGGLED)),
    framing("chunk size overflow", put([TOKEN10, b"Transfer-Encoding: chunked"],
                                       b"fffffffffffffffff\r\nhello\r\n0\r\n\r\n" + SMUGGLED)),
    framing("chunk size with a sign", put([TOKEN10, b"Transfer-Encoding: chunked"],
                                          b"+5\r\nhello\r\n0\r\n\r\n" + SMUGGLED)),
    framing("chunk data longer than its size", put([TOKEN10, b"Transfer-Encoding: chunked"],
                                                   b"3\r\nhello\r\n0\r\n\r\n" + SMUGGLED)),
    framing("chunk size over max_body_bytes", put([TOKEN10, b"Transfer-Encoding: chunked"],
                                                  b"800\r\n" + b"x" * 64), status=413),
    # -- the head, byte by byte: 400 and closed --
    framing("obs-fold of the token ('5' + ' 1')", head([b"Host: t", TOKEN5, b" 1", b"Content-Length: 0"])),
    framing("obs-fold of an empty token (' 10')", head([b"Host: t", b"X-Fencing-Token:", b" 10",
                                                        b"Content-Length: 0"])),
    framing("obs-fold with a tab", head([b"Host: t", TOKEN10, b"\t0", b"Content-Length: 0"])),
    framing("bare LF line endings", b"PUT /orders/1 HTTP/1.1\nHost: t\nX-Fencing-Token: 10\n"
                                    b"Content-Length: 0\n\n"),
    framing("bare LF after one field", b"PUT /orders/1 HTTP/1.1\r\nHost: t\nX-Fencing-Token: 10\r\n"
                                       b"Content-Length: 0\r\n\r\n"),
    framing("bare CR in a value", head([b"Host: t", TOKEN10, b"X-A: a\rContent-Length: 5",
                                        b"Content-Length: 0"])),
    framing("bare CR before CRLF", head([b"Host: t", TOKEN10 + b"\r", b"Content-Length: 0"])),
    # A bare CR or LF with no empty line after it: answered at once, not by the header_read timeout.
    framing("bare CR and no line end at all", b"GET / HTTP/1.1\rHost: a\r\r"),
    framing("bare LF and no empty line", b"GET / HTTP/1.1\nHost: t\n"),
    framing("NUL in a header value", head([b"Host: t", TOKEN10 + b"\x00", b"Content-Length: 0"])),
    framing("NUL in a header name", head([b"Host: t", TOKEN10, b"X-\x00A: b", b"Content-Length: 0"])),
    framing("0x01 in a header value", head([b"Host: t", TOKEN10, b"X-A: \x01", b"Content-Length: 0"])),
    framing("space before colon", head([b"Host: t", TOKEN10, b"Content-Length : 5"]) + b"hello"),
    framing("three spaces in the request line", head([b"Host: t", TOKEN10, b"Content-Length: 0"],
                                                      b"PUT /orders/1 x HTTP/1.1")),
    framing("request line too long", head([b"Host: t"], b"GET /" + b"a" * 5000 + b" HTTP/1.1"),
            status=431),
    framing("header block too large", head([b"Host: t", TOKEN10] +
                                           [b"X-Pad-%03d: %s" % (i, b"p" * 60) for i in range(80)]),
            status=431),
    # Only the head is sent: the 413 must come without the body.
    framing("Content-Length over max_body_bytes", put([TOKEN10, b"Content-Length: 2048"]), status=413),
    # -- paths that could reach the backend as another route: 400, and (as after every 400) closed --
    path_case(b"/orders/../admin"),
    path_case(b"/x/../orders"),
    path_case(b"/%2e%2e/orders"),
    path_case(b"/%2E%2E/orders"),
    path_case(b"/orders%2fx"),
    path_case(b"//orders"),
    path_case(b"/orders\\x"),
    path_case(b"/%6Frders"),
    path_case(b"/x/..;a/orders"),
    path_case(b"http://h/x/../orders"),
    path_case(b"/orders;x/1"),  # a servlet container routes it as /orders/1
    path_case(b"/;x/orders"),
    Case("path /x/../orders with a body (never read)",
         put([TOKEN5, b"Content-Length: 5"], b"hello", target=b"/x/../orders"), 400, True),
    Case("a target that is no path (GET ! HTTP/1.1)", head([b"Host: t"], b"GET ! HTTP/1.1"), 400, True),
    Case("a method that is not a token", head([b"Host: t"], b"G(T / HTTP/1.1"), 400, True),
    # -- absolute-form: routed by its path --
    Case("absolute-form, stale token", put([TOKEN5, b"Content-Length: 0"], target=b"http://h/orders/1"),
         409, False, max_token="10"),
    Case("absolute-form, valid token", put([TOKEN10, b"Content-Length: 2"], b"ok",
                                           target=b"http://h/orders/abs"),
         200, False, [("PUT", "/orders/abs", "10")]),
    Case("absolute-form without a path", head([b"Host: t"], b"GET http://h HTTP/1.1"), 404, False,
         [("GET", "/", None)]),
    # -- methods and upgrades: the bytes after them belong to another protocol, so the proxy closes --
    Case("CONNECT", head([b"Host: h:443"], b"CONNECT h:443 HTTP/1.1"), 405, True),
    Case("Upgrade: websocket", head([b"Host: t", TOKEN10, b"Connection: Upgrade", b"Upgrade: websocket",
                                     b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="],
                                    b"GET /orders/ws HTTP/1.1"), 400, True),
    # -- Host: one valid RFC 3986 host[:port], else 400 and closed --
    Case("Host with a space", head([b"Host: a b", TOKEN10, b"Content-Length: 0"]), 400, True),
    Case("Host with userinfo", head([b"Host: user@h", TOKEN10, b"Content-Length: 0"]), 400, True),
    Case("Host with a slash", head([b"Host: a/b", TOKEN10, b"Content-Length: 0"]), 400, True),
    Case("an empty Host on HTTP/1.1", head([b"Host:", TOKEN10, b"Content-Length: 0"]), 400, True),
    Case("two Host headers", head([b"Host: a", b"Host: b", TOKEN10, b"Content-Length: 0"]), 400, True),
    Case("no Host on HTTP/1.1", head([TOKEN10, b"Content-Length: 0"]), 400, True),
    Case("absolute-form with userinfo", put([TOKEN10, b"Content-Length: 0"], target=b"http://u@h/orders/1"),
         400, True),
    # -- Connection naming what the decision or the framing rests on: 400 and closed --
    Case("Connection: Host", put([TOKEN10, b"Connection: Host", b"Content-Length: 0"]), 400, True),
    Case("Connection names the token header", put([TOKEN10, b"Connection: keep-alive, x-fencing-token",
                                                   b"Content-Length: 0"]), 400, True),
    Case("Connection: Content-Length", put([TOKEN10, b"Connection: Content-Length", b"Content-Length: 2"], b"ok"),
         400, True),
    Case("Connection: Transfer-Encoding", put([TOKEN10, b"Connection: Transfer-Encoding",
                                               b"Transfer-Encoding: chunked"], CHUNKED_HELLO), 400, True),
    # -- the token header: a malformed one is a 400, which closes --
    Case("token sent twice", put([TOKEN10, TOKEN10, b"Content-Length: 0"]), 400, True),
    Case("token '5, 6'", put([b"X-Fencing-Token: 5, 6", b"Content-Length: 0"]), 400, True),
    Case("token '0x5'", put([b"X-Fencing-Token: 0x5", b"Content-Length: 0"]), 400, True),
    Case("token '+10'", put([b"X-Fencing-Token: +10", b"Content-Length: 0"]), 400, True),
    Case("token empty", put([b"X-Fencing-Token:", b"Content-Length: 0"]), 400, True),
    Case("token 2^64", put([b"X-Fencing-Token: 18446744073709551616", b"Content-Length: 0"]), 400, True),
    Case("token in Arabic-Indic digits", put([b"X-Fencing-Token: \xd9\xa1\xd9\xa0", b"Content-Length: 0"]),
         400, True),
    Case("token missing", put([b"Content-Length: 0"]), 428, False),
    Case("token stale", put([TOKEN5, b"Content-Length: 0"]), 409, False, max_token="10"),
    Case("token ' 10 ' with surrounding whitespace",
         put([b"X-Fencing-Token:  \t10 \t", b"Content-Length: 1"], b"x", target=b"/orders/ws-token"),
         200, False, [("PUT", "/orders/ws-token", "10")]),
    Case("token header name in lower case", put([b"x-fencing-token: 10", b"Content-Length: 1"], b"x",
                                                target=b"/orders/lower"),
         200, False, [("PUT", "/orders/lower", "10")]),
]


def wait_closed(sock, timeout):
    """Seconds until the peer closes sock (data it sends first is ignored), or None."""
    start = time.monotonic()
    _, closed = read_until_closed(sock, timeout)
    return time.monotonic() - start if closed else None


def connect(port, timeout=IO):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def exchange(sock, data, reader=None, timeout=IO):
    """Sends data and reads one final response -> (status, headers, body, reader)."""
    reader = reader or ResponseReader(sock, timeout)
    sock.sendall(data)
    status, headers, body = reader.read()
    while 100 <= status < 200:
        status, headers, body = reader.read()
    return status, headers, body, reader


def config(**overrides):
    cfg = {"threads": 2,
           "unmatched": "pass",
           "timeouts": {"connect": "1s", "request": "5s", "idle": "10s", "header_read": "3s",
                        "shutdown": "2s"},
           "limits": {"max_header_bytes": 4096, "max_body_bytes": 1024, "max_connections": 100},
           "routes": [{"name": "orders", "prefix": "/orders"}]}
    for key, value in overrides.items():
        if isinstance(value, dict):
            cfg[key] = dict(cfg[key], **value)
        else:
            cfg[key] = value
    return cfg


class HostileTest(ProxyTestCase):

    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()

    def start(self, **overrides):
        proxy = self.start_proxy(config(**overrides), self.backend)
        # Raise the fence to 10, so 5 is stale and 10 is a valid (equal) token.
        self.assert2xx(proxy.request("PUT", "/orders/seed", 10, b"seed"), "seeding token 10")
        return proxy

    def applied(self, since):
        return [(r["method"], r["path"], r["token"]) for r in self.backend.records()[since:]]

    # -- the table ------------------------------------------------------------------------------

    def test_hostile_requests(self):
        proxy = self.start()
        for number, case in enumerate(CASES):
            with self.subTest(case=case.name):
                self.run_case(proxy, number, case)

    def run_case(self, proxy, number, case):
        before = len(self.backend.records())
        sock = connect(proxy.port)
        try:
            try:
                status, headers, body, reader = exchange(sock, case.data)
            except (OSError, HarnessError) as e:
                self.fail("%s: no response (%r); a refusal must be answered" % (case.name, e))
            self.assertEqual(status, case.status, "%s: expected %d, got %d %r"
                             % (case.name, case.status, status, body[:300]))
            if status >= 400 and not case.forwarded:
                self.assertProblem((status, headers, body), case.status, case.name)
            if case.max_token is not None:
                self.assertEqual(headers.get("x-fencing-token-max"), case.max_token,
                                 "%s: a 409 carries X-Fencing-Token-Max" % case.name)
            connection = headers.get("connection", "").lower()
            if case.close:
                if not case.http10:
                    self.assertEqual(connection, "close",
                                     "%s: the proxy announces Connection: close" % case.name)
                self.assertNotIn("keep-alive", connection, case.name)
                rest, closed = read_until_closed(sock, IO)
                self.assertTrue(closed, "%s: the connection must be closed after the response"
                                % case.name)
                self.assertEqual(reader.buf + rest, b"",
                                 "%s: nothing may follow the refusal (a smuggled request was "
                                 "answered?)" % case.name)
                sock.close()
                sock = connect(proxy.port)
                reader = None
            else:
                self.assertNotEqual(connection, "close",
                                    "%s: the connection stays usable after this refusal" % case.name)
            # The sentinel: on the same connection if it must stay open, else on a new one.
            sentinel = "/sentinel/%d" % number
            s_status, _, s_body, _ = exchange(
                sock, b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % sentinel.encode(), reader)
            self.assertEqual(s_status, 404, "%s: the sentinel GET after it reaches the backend: %r"
                             % (case.name, s_body[:200]))
        finally:
            sock.close()
        expected = [tuple(f) for f in case.forwarded] + [("GET", sentinel, None)]
        got = self.applied(before)
        self.assertEqual(len(got), len(expected),
                         "%s: the backend applied %r, expected only %r" % (case.name, got, expected))
        for (method, path, token), want in zip(got, expected):
            self.assertEqual((method, path), want[:2], "%s: applied %r" % (case.name, got))
            if want[2] is not None:
                self.assertEqual(token, want[2], "%s: the token the backend saw" % case.name)

    # -- on one connection ----------------------------------------------------------------------

    def test_pipelined_requests_answered_in_order(self):
        proxy = self.start()
        before = len(self.backend.records())
        data = (put([TOKEN10, b"Content-Length: 3"], b"one", target=b"/orders/pipe1") +
                put([TOKEN10, b"Content-Length: 3"], b"two", target=b"/orders/pipe2") +
                head([b"Host: t"], b"GET /orders/pipe1 HTTP/1.1"))
        with connect(proxy.port) as sock:
            sock.sendall(data)
            reader = ResponseReader(sock, IO)
            answers = [reader.read() for _ in range(3)]
        self.assertEqual([a[0] for a in answers], [200, 200, 200], answers)
        self.assertIn(b"/orders/pipe1", answers[0][2])
        self.assertIn(b"/orders/pipe2", answers[1][2])
        self.assertEqual(answers[2][2], b"one", "the third answer is the GET of the first write")
        self.assertEqual(self.applied(before), [("PUT", "/orders/pipe1", "10"),
                                                ("PUT", "/orders/pipe2", "10"),
                                                ("GET", "/orders/pipe1", None)])

    def test_stale_request_body_is_discarded_and_the_next_request_served(self):
        proxy = self.start()
        before = len(self.backend.records())
        # The stale request's body looks like a request: it must be skipped, not parsed.
        stale_body = SMUGGLED
        data = (put([TOKEN5, b"Content-Length: %d" % len(stale_body)], stale_body, target=b"/orders/s1") +
                put([TOKEN10, b"Content-Length: 3"], b"abc", target=b"/orders/s2"))
        with connect(proxy.port) as sock:
            sock.sendall(data)
            reader = ResponseReader(sock, IO)
            first, second = reader.read(), reader.read()
        self.assertProblem(first, 409, "the stale request")
        self.assertEqual(second[0], 200, "the valid request after it: %r" % (second,))
        self.assertIn(b"stored 3 bytes at /orders/s2", second[2])
        self.assertEqual(self.applied(before), [("PUT", "/orders/s2", "10")])

    # -- resource limits ------------------------------------------------------------------------

    def test_slowloris_closed_at_header_read(self):
        proxy = self.start(timeouts={"header_read": "1s", "idle": "10s"})
        before = len(self.backend.records())
        data = put([TOKEN10, b"Content-Length: 0"] + [b"X-Slow: %d" % i for i in range(20)])
        with connect(proxy.port) as slow:
            start = time.monotonic()
            closed_after = None
            for i in range(len(data)):
                try:
                    slow.sendall(data[i:i + 1])
                except OSError:
                    closed_after = time.monotonic() - start
                    break
                # Between bytes: did the proxy close (or answer)?
                readable, _, _ = select.select([slow], [], [], 0.5)
                if readable:
                    if wait_closed(slow, 2.0) is not None:
                        closed_after = time.monotonic() - start
                    break
                if i == 0:
                    # The proxy still serves others meanwhile.
                    self.assertEqual(proxy.request("GET", "/orders/other")[0], 404)
                if time.monotonic() - start > 4.0:
                    break
        self.assertIsNotNone(closed_after, "a head trickling in one byte per 0.5 s must be cut off")
        self.assertLess(closed_after, 2.0, "header_read is 1s: closed after %.2fs" % closed_after)
        self.assertGreater(closed_after, 0.7, "closed after %.2fs, before header_read" % closed_after)
        self.assertEqual(self.applied(before), [("GET", "/orders/other", None)])

    def test_idle_keep_alive_connection_closed(self):
        proxy = self.start(timeouts={"idle": "1s", "header_read": "5s"})
        with connect(proxy.port) as sock:
            status, _, _, _ = exchange(sock, head([b"Host: t"], b"GET /orders/idle HTTP/1.1"))
            self.assertEqual(status, 404)
            elapsed = wait_closed(sock, 4.0)
        self.assertIsNotNone(elapsed, "an idle keep-alive connection must be closed (idle: 1s)")
        self.assertLess(elapsed, 2.0, "idle is 1s: closed after %.2fs" % elapsed)
        self.assertGreater(elapsed, 0.7, "closed after %.2fs, before idle" % elapsed)
        # A connection that never sends a byte is idle too.
        with connect(proxy.port) as silent:
            elapsed = wait_closed(silent, 4.0)
        self.assertIsNotNone(elapsed, "a silent connection must be closed (idle: 1s)")
        self.assertLess(elapsed, 2.0, "idle is 1s: closed after %.2fs" % elapsed)

    def test_idle_connections_give_back_their_buffer_and_still_serve_and_close(self):
        # idle 4s: the sweep runs every second, so a connection idle for a second gives its read
        # buffer back and waits without one; then a request, or the client's close, wakes it.
        proxy = self.start(threads=1, timeouts={"idle": "4s", "header_read": "5s"})
        socks = [connect(proxy.port) for _ in range(3)]
        try:
            for i, sock in enumerate(socks):
                status, _, _, _ = exchange(sock, head([b"Host: t"], b"GET /orders/c%d HTTP/1.1" % i))
                self.assertEqual(status, 404)
            socks.pop().close()  # closed while the connection is still busy-idle
            time.sleep(2.5)      # the other two are idle past a sweep period: without a buffer now
            status, _, _, _ = exchange(socks[0], head([b"Host: t"], b"GET /orders/again HTTP/1.1"))
            self.assertEqual(status, 404, "a connection woken from the buffer-less wait is served")
            socks.pop().close()  # closed while waiting without a buffer
            deadline = time.monotonic() + 3.0
            while metric(proxy.metrics(), "fencing_proxy_connections") != 1:
                self.assertLess(time.monotonic(), deadline, "the closed connections are released")
                time.sleep(0.05)
            # Released, not spinning on the closed socket: the proxy is idle.
            cpu = proxy.cpu_seconds()
            time.sleep(1.0)
            self.assertLess(proxy.cpu_seconds() - cpu, 0.2, "an idle proxy uses no CPU")
        finally:
            for sock in socks:
                sock.close()

    def test_max_connections(self):
        # One worker, so "the longest-idle connection" is well defined for the test.
        proxy = self.start(threads=1, limits={"max_connections": 5})
        samples = proxy.metrics()
        refused_before = metric(samples, "fencing_proxy_connections_refused_total") or 0
        evicted_before = metric(samples, "fencing_proxy_connections_evicted_total") or 0
        held, busy = [], []
        try:
            for i in range(5):  # five keep-alive connections, each proven accepted by an answer
                sock = connect(proxy.port)
                held.append(sock)
                status, _, _, _ = exchange(sock, head([b"Host: t"], b"GET /orders/held%d HTTP/1.1" % i))
                self.assertEqual(status, 404, "connection %d of 5 is served" % (i + 1))
                time.sleep(0.02)  # distinct idle times: held[0] has waited longest
            # Full, but all five are idle: a new connection takes the slot of the longest-idle one.
            with connect(proxy.port) as extra:
                status, _, _, _ = exchange(extra, head([b"Host: t"], b"GET /orders/new HTTP/1.1"))
                self.assertEqual(status, 404, "a new client is served when an idle one can make room")
                _, closed = read_until_closed(held[0], 2.0)
                self.assertTrue(closed, "the longest-idle connection was closed to make room")
            held.pop(0).close()
            self.assertGreaterEqual((metric(proxy.metrics(), "fencing_proxy_connections_evicted_total") or 0)
                                    - evicted_before, 1, "evictions are counted")
            # Full and all busy (each holds a request at the backend): new connections are refused at once.
            for sock in held:
                sock.close()
            held = []
            for i in range(5):
                sock = connect(proxy.port)
                sock.sendall(head([b"Host: t", b"X-Demo-Delay-Ms: 3000"], b"GET /orders/busy%d HTTP/1.1" % i))
                busy.append(sock)
            deadline = time.monotonic() + 5.0
            while metric(proxy.metrics(), "fencing_proxy_inflight_requests", route="orders") != 5:
                self.assertLess(time.monotonic(), deadline, "five requests in flight")
                time.sleep(0.05)
            flood = [connect(proxy.port) for _ in range(20)]
            try:
                for sock in flood:
                    data, closed = read_until_closed(sock, 2.0)
                    self.assertTrue(closed, "with no idle connection to evict, extra connections are closed at once")
                    self.assertEqual(data, b"", "and get no answer")
            finally:
                for sock in flood:
                    sock.close()
            self.assertEqual(proxy.admin("GET", "/healthz")[0], 200, "admin answers during the flood")
            refused = metric(proxy.metrics(), "fencing_proxy_connections_refused_total") or 0
            self.assertGreaterEqual(refused - refused_before, 20,
                                    "refused connections are counted in connections_refused_total")
            for sock in busy:  # the held requests complete
                status, _, _, _ = exchange(sock, b"", timeout=10)
                self.assertEqual(status, 404, "a busy connection is still served")
            status = proxy.request("GET", "/orders/after", timeout=5.0)[0]
            self.assertEqual(status, 404, "after the busy requests the proxy serves new connections again")
        finally:
            for sock in held + busy:
                sock.close()

if __name__ == "__main__":
    unittest.main()
