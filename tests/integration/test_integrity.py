"""Request integrity against the real fencing-proxy binary: what reaches the backend, byte for byte.

The contract's "Per request" and "Request integrity" sections promise that a write reaches the
backend at most once, that a rejected or abandoned body reaches it not at all (not even the
head), that a client cannot strip or forge what the proxy's decision rests on (Connection naming
Host, the token header or framing; an invalid Host; an underscore twin of the token header), that
a malformed head is answered 400 at once and the connection closed, and that a damaged state file
stops the start. Every test here talks to raw_backend.RawBackend, which records the raw bytes it
receives per connection, so "nothing reached the backend" is checked on the bytes themselves.

Fence orders is seeded offline to max_token 10 (a state file written before the start), so token
10 is valid without a raise and the backend receives nothing before the case under test.

The access log is read from the proxy's stderr: the JSON lines with "msg": "access"
(harness.Proxy.access_log); each line has "method", "path", "status", and "upstream_attempts",
the number of times the request was sent to the backend.

Python standard library only; 127.0.0.1 only; every wait is bounded.
"""

import os
import socket
import time
import unittest

from harness import (connect as harness_connect, send_all as send, HarnessError, ProxyTestCase, ResponseReader, read_until_closed, run_cli, wait_for,
                     write_state_file)

IO = 5.0            # seconds for one exchange
CLOSE_WAIT = 1.5    # seconds to wait for the proxy to close a connection after a 400
AT_ONCE = 1.0       # "answered at once": well below every timeout in play
ROUTES = [{"name": "orders", "prefix": "/orders"}]  # fences POST, PUT, PATCH, DELETE
SENTINEL = b"GET /sentinel HTTP/1.1\r\nHost: a\r\n\r\n"


def config(timeouts=True, **extra):
    """One worker (one upstream pool, so a warmed connection is the one reused), unmatched paths
    forwarded, fence orders. timeouts=False keeps the defaults (header_read 10s, request 30s)."""
    cfg = {"threads": 1, "unmatched": "pass", "routes": ROUTES}
    if timeouts:
        cfg["timeouts"] = {"connect": "1s", "request": "5s", "idle": "10s", "header_read": "5s",
                           "shutdown": "2s"}
    cfg.update(extra)
    return cfg


def fenced_put(target, lines, body=b""):
    """A PUT of fence orders with the valid token 10, extra header lines (bytes, no CRLF)."""
    head = [b"PUT " + target + b" HTTP/1.1", b"Host: a", b"X-Fencing-Token: 10"] + lines
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def chunked(*chunks):
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)


def connect(port, timeout=IO):
    return harness_connect(port, timeout)


class IntegrityTest(ProxyTestCase):

    def start(self, script="answer", proxy_config=None, **backend_options):
        """A raw backend and a proxy in front of it, fence orders seeded to max_token 10."""
        backend = self.start_raw_backend(script, **backend_options)
        state = os.path.join(self.workdir, "fences-%d.log" % backend.port)
        write_state_file(state, {"orders": 10})
        proxy = self.start_proxy(proxy_config or config(), backend, state_file=state,
                                 name="proxy-%d" % backend.port)
        return backend, proxy

    def answer(self, proxy, data, within=IO, close=True):
        """Sends raw bytes on a new connection -> (status, headers, body, seconds, sock, reader).
        Fails (not errors) when no response comes within `within` seconds. The socket is closed
        at cleanup, or at once when close is set."""
        sock = connect(proxy.port)
        self.addCleanup(sock.close)
        started = time.monotonic()
        send(sock, data)
        reader = ResponseReader(sock, within)
        try:
            status, headers, body = reader.read()
            while 100 <= status < 200:
                status, headers, body = reader.read()
        except socket.timeout:
            self.fail("no response within %.1fs to %r" % (within, data[:120]))
        except (OSError, HarnessError) as e:
            self.fail("no response to %r: %r" % (data[:120], e))
        elapsed = time.monotonic() - started
        if close:
            sock.close()
        return status, headers, body, elapsed, sock, reader

    def assertNothingReached(self, backend, proxy, before, what):
        """Nothing was received since `before` (a backend.connections() snapshot); then the
        sentinel GET shows the proxy and the backend still work, so the check was not vacuous."""
        backend.quiet()
        arrived = backend.received_since(before)
        self.assertEqual(arrived, b"", "%s: no byte of it may reach the backend (not even the "
                         "head); the backend received %d bytes: %r"
                         % (what, len(arrived), arrived[:300]))
        status, _, _, _, _, _ = self.answer(proxy, SENTINEL)
        self.assertEqual(status, 200, "%s: the sentinel GET after it is forwarded" % what)
        self.assertIn(b"GET /sentinel HTTP/1.1\r\n", backend.received_since(before),
                      "%s: the sentinel reached the backend" % what)

    def assertAllRefused(self, backend, proxy, cases, status=400):
        """Each (name, request bytes) gets `status` and sends nothing to the backend."""
        for name, data in cases:
            with self.subTest(case=name):
                before = backend.connections()
                got, headers, body, _, _, _ = self.answer(proxy, data)
                self.assertProblem((got, headers, body), status, name)
                self.assertNothingReached(backend, proxy, before, name)

    def access_line(self, proxy, method, path):
        """The access-log line of the request (waited for: it is written after the response)."""
        def find():
            lines = [l for l in proxy.access_log()
                     if l.get("method") == method and l.get("path") == path]
            return lines[-1] if lines else None
        try:
            return wait_for(find, timeout=3.0, what="the access line of %s %s" % (method, path))
        except HarnessError as e:
            self.fail(str(e))

    # -- 1. at most once --------------------------------------------------------------------------

    def dropped_after_read(self, method, delay=0.0):
        """The backend answers the first request of a connection and, on the 2nd request of a
        connection, reads it whole, waits `delay` seconds and closes without answering. A GET
        warms the proxy's pool, then `method` goes out on that reused connection."""
        backend, proxy = self.start("read_then_close", nth=2, delay=delay)
        status, headers, _ = proxy.request("GET", "/warm")
        self.assertEqual((status, headers.get("x-raw-backend-connection")), (200, "0"),
                         "the warm-up GET is answered on backend connection 0")
        path = "/orders/once-" + method.lower()
        response = proxy.request(method, path, 10, b"payload-once")
        request_line = method.encode() + b" " + path.encode() + b" HTTP/1.1\r\n"
        connections = backend.connections()
        self.assertIn(request_line, connections[0], "premise: %s went out first on the reused "
                      "(warmed) backend connection: %r" % (method, connections))
        return backend, proxy, response, path, sum(c.count(request_line) for c in connections)

    def test_non_idempotent_request_is_not_resent_once_the_backend_read_it(self):
        """A POST or PATCH that the backend read whole on a reused connection, then dropped
        without answering (at once, or after holding it 2.5 s), is not sent again: the backend
        receives it exactly once and the client gets 502 (problem+json). A PUT in the same
        situation may be resent once (the client then gets 200). The access log counts the
        attempts as upstream_attempts."""
        for method, delay in (("POST", 0.0), ("PATCH", 0.0), ("POST", 2.5)):
            with self.subTest(method=method, held_for=delay):
                backend, proxy, response, path, sent = self.dropped_after_read(method, delay)
                self.assertEqual(sent, 1, "%s reached the backend %d times: once the backend may "
                                 "have read it, a non-idempotent request is never resent"
                                 % (method, sent))
                self.assertProblem(response, 502, "%s dropped by the backend after it was read"
                                   % method)
                line = self.access_line(proxy, method, path)
                self.assertEqual(line.get("status"), 502, "access line: %r" % line)
                self.assertIn("upstream_attempts", line,
                              "the access line records the upstream attempts: %r" % line)
                self.assertEqual(line["upstream_attempts"], 1, "access line: %r" % line)
        with self.subTest(method="PUT"):
            backend, proxy, response, path, sent = self.dropped_after_read("PUT")
            self.assert2xx(response, "an idempotent PUT dropped by the backend is resent once")
            self.assertEqual(sent, 2, "the PUT was sent once on the dropped connection and once "
                             "again (at most twice)")
            line = self.access_line(proxy, "PUT", path)
            self.assertIn("upstream_attempts", line,
                          "the access line records the upstream attempts: %r" % line)
            self.assertEqual(line["upstream_attempts"], sent,
                             "upstream_attempts counts every send to the backend: %r" % line)

    # -- 2. whole or nothing ----------------------------------------------------------------------

    def test_rejected_or_abandoned_body_reaches_nothing(self):
        """A body up to limits.buffered_body_bytes (default 1 MiB) is read whole before any byte
        of the request goes to the backend: a fenced PUT (valid token) whose chunked body breaks
        after a 32,000-byte chunk, or after 900 KB, gets 400 and the backend receives nothing of
        it; a client that sends 100,000 of the 200,000 bytes it announced and closes leaves the
        backend nothing either."""
        backend, proxy = self.start()
        cases = [
            ("bad chunk size after a 32,000-byte chunk",
             fenced_put(b"/orders/torn-small", [b"Transfer-Encoding: chunked"],
                        chunked(b"a" * 32000) + b"zz\r\nhello\r\n0\r\n\r\n")),
            ("bad chunk size after 900 KB",
             fenced_put(b"/orders/torn-large", [b"Transfer-Encoding: chunked"],
                        chunked(*[b"b" * 100000] * 9) + b"zz\r\nhello\r\n0\r\n\r\n")),
        ]
        self.assertAllRefused(backend, proxy, cases)
        with self.subTest(case="client abandons the body half way"):
            before = backend.connections()
            with connect(proxy.port) as sock:
                send(sock, fenced_put(b"/orders/abandoned", [b"Content-Length: 200000"],
                                      b"c" * 100000))
                time.sleep(0.3)  # the proxy has read what was sent before the client goes
            self.assertNothingReached(backend, proxy, before, "an abandoned body")

    def test_complete_body_above_the_buffered_limit_still_reaches_the_backend_whole(self):
        """Guard for the whole-or-nothing change: a 2 MB body (above the default 1 MiB
        buffered_body_bytes, so it streams) that the client sends completely arrives whole."""
        backend, proxy = self.start()
        payload = bytes(range(256)) * (2000000 // 256) + b"end"
        self.assert2xx(proxy.request("PUT", "/orders/big", 10, payload), "a 2 MB fenced PUT")
        puts = [r for r in backend.requests() if r.method == "PUT"]
        self.assertEqual(len(puts), 1, "one PUT reached the backend: %r" % puts)
        self.assertEqual(len(puts[0].body), len(payload), "the body arrived whole")
        self.assertEqual(puts[0].body, payload, "the body arrived byte for byte")

    def test_a_slow_upload_does_not_hold_up_a_raise(self):
        """Admission starts only once a buffered body is in: a client trickling a token-10 body
        holds no admission, so a raise to 11 goes through at once (before, the raise waited for
        the upload's exchange, up to timeouts.request). When the slow body is complete, its
        token is stale: 409, and nothing of it reached the backend."""
        backend, proxy = self.start()
        before = backend.connections()
        slow = connect(proxy.port)
        self.addCleanup(slow.close)
        send(slow, fenced_put(b"/orders/slow", [b"Content-Length: 1000"], b"s" * 100))
        time.sleep(0.3)  # the proxy has the head and part of the body
        started = time.monotonic()
        response = proxy.request("PUT", "/orders/raise", 11, b"raise")
        elapsed = time.monotonic() - started
        self.assert2xx(response, "the raise to 11 while a token-10 body is still arriving")
        self.assertLess(elapsed, AT_ONCE, "the raise waited %.2fs for an upload that holds no "
                        "admission" % elapsed)
        send(slow, b"s" * 900)
        reader = ResponseReader(slow, IO)
        self.assertProblem(reader.read(), 409, "the slow body's token 10 is stale once it is in")
        arrived = backend.received_since(before)
        self.assertIn(b"PUT /orders/raise HTTP/1.1\r\n", arrived)
        self.assertNotIn(b"/orders/slow", arrived, "nothing of the stale upload reached the backend")

    # -- 3. Connection naming what the proxy relies on --------------------------------------------

    def test_connection_header_naming_host_token_or_framing_is_refused(self):
        """A Connection header that names Host, the token header or Content-Length would let the
        client strip, before the backend, what the proxy decided on: 400, nothing forwarded."""
        backend, proxy = self.start()
        cases = [
            ("Connection: Host", b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: Host\r\n\r\n"),
            ("Connection: X-Fencing-Token",
             fenced_put(b"/orders/strip-token", [b"Connection: X-Fencing-Token",
                                                 b"Content-Length: 2"], b"ok")),
            ("Connection: close, Content-Length",
             fenced_put(b"/orders/strip-length", [b"Connection: close, Content-Length",
                                                  b"Content-Length: 5"], b"hello")),
        ]
        self.assertAllRefused(backend, proxy, cases)

    # -- 4. bare CR / LF answered at once ---------------------------------------------------------

    def test_bare_cr_or_lf_is_answered_400_at_once(self):
        """A bare CR in a head, or a bare LF ending a chunked body, is a 400 at once (within 1 s),
        not an answer by timeout (header_read 10s and request 30s here, the defaults); nothing
        reaches the backend."""
        backend, proxy = self.start(proxy_config=config(timeouts=False))
        cases = [
            ("bare CR in the head", b"GET / HTTP/1.1\rHost: a\r\r"),
            ("chunked body ending with bare LF",
             fenced_put(b"/orders/bare-lf", [b"Transfer-Encoding: chunked"],
                        b"5\r\nhello\r\n0\n\n")),
        ]
        for name, data in cases:
            with self.subTest(case=name):
                before = backend.connections()
                status, headers, body, elapsed, _, _ = self.answer(proxy, data, within=1.5)
                self.assertLess(elapsed, AT_ONCE, "%s: answered after %.2fs" % (name, elapsed))
                self.assertProblem((status, headers, body), 400, name)
                self.assertNothingReached(backend, proxy, before, name)

    # -- 5. every 400 closes the connection -------------------------------------------------------

    def test_400_closes_the_connection_and_a_pipelined_request_is_not_served(self):
        """After a 400 the next request's boundary is unknown, so the proxy closes: a request
        pipelined behind a duplicate Host, a missing Host (HTTP/1.1) or the target '!' is neither
        answered nor forwarded."""
        backend, proxy = self.start()
        after = b"GET /pipelined-after HTTP/1.1\r\nHost: a\r\n\r\n"
        cases = [
            ("duplicate Host", b"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            ("missing Host", b"GET /x HTTP/1.1\r\n\r\n"),
            ("target '!'", b"GET ! HTTP/1.1\r\nHost: a\r\n\r\n"),
        ]
        for name, data in cases:
            with self.subTest(case=name):
                before = backend.connections()
                status, headers, body, _, sock, reader = self.answer(proxy, data + after,
                                                                     close=False)
                self.assertProblem((status, headers, body), 400, name)
                rest, closed = read_until_closed(sock, CLOSE_WAIT)
                sock.close()
                self.assertEqual(reader.buf + rest, b"", "%s: the pipelined request after the "
                                 "400 was answered: %r" % (name, (reader.buf + rest)[:200]))
                self.assertTrue(closed, "%s: the proxy must close the connection after the 400 "
                                "(still open after %.1fs)" % (name, CLOSE_WAIT))
                self.assertNothingReached(backend, proxy, before, name)
                self.assertEqual(headers.get("connection", "").lower(), "close",
                                 "%s: the 400 announces Connection: close" % name)

    # -- 6. Host ----------------------------------------------------------------------------------

    def test_invalid_host_refused_and_absolute_form_sets_host(self):
        """Host must be a valid RFC 3986 host[:port]: 'a b' and 'a/b' get 400 and reach nothing.
        For an absolute-form target the backend gets the target's authority as Host (RFC 9112
        §3.2.2) and the origin-form target."""
        backend, proxy = self.start()
        for host in (b"a b", b"a/b"):
            name = "Host: %s" % host.decode()
            with self.subTest(case=name):
                before = backend.connections()
                status, headers, body, _, _, _ = self.answer(
                    proxy, b"GET /x HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
                self.assertProblem((status, headers, body), 400, name)
                self.assertNothingReached(backend, proxy, before, name)
        with self.subTest(case="absolute-form"):
            before = backend.connections()
            status, _, _, _, _, _ = self.answer(
                proxy, b"GET http://other.example/x HTTP/1.1\r\nHost: a\r\n\r\n")
            self.assertEqual(status, 200, "the absolute-form GET is forwarded")
            backend.quiet()
            arrived = backend.received_since(before)
            self.assertTrue(arrived.startswith(b"GET /x HTTP/1.1\r\n"),
                            "the backend gets the origin-form target: %r" % arrived[:200])
            self.assertIn(b"\r\nHost: other.example\r\n", arrived,
                          "the forwarded Host is the target's authority: %r" % arrived[:300])
            self.assertEqual(arrived.lower().count(b"\r\nhost:"), 1,
                             "exactly one Host reaches the backend: %r" % arrived[:300])

    # -- 7. underscore twins of header names ------------------------------------------------------

    def test_underscore_twin_of_the_token_header(self):
        """X_Fencing_Token: 3 next to a valid X-Fencing-Token: 10 (a WSGI/CGI/PHP backend reads
        both as HTTP_X_FENCING_TOKEN): dropped before the backend by default and with
        headers_with_underscores: drop, 400 with reject, forwarded with allow."""
        data = fenced_put(b"/orders/twin", [b"X_Fencing_Token: 3", b"Content-Length: 2"], b"ok")
        for mode in (None, "drop", "reject", "allow"):
            with self.subTest(headers_with_underscores=mode or "(default)"):
                extra = {} if mode is None else {"headers_with_underscores": mode}
                backend, proxy = self.start(proxy_config=config(**extra))
                status, headers, body, _, _, _ = self.answer(proxy, data)
                if mode == "reject":
                    self.assertProblem((status, headers, body), 400, "reject")
                    self.assertNothingReached(backend, proxy, [], "reject")
                    continue
                self.assertEqual(status, 200, "the PUT with token 10 is forwarded: %r" % body)
                backend.quiet()
                arrived = backend.received()
                self.assertIn(b"\r\nX-Fencing-Token: 10\r\n", arrived,
                              "the real token reaches the backend: %r" % arrived[:300])
                if mode == "allow":
                    self.assertIn(b"\r\nX_Fencing_Token: 3\r\n", arrived,
                                  "allow passes the underscore field on: %r" % arrived[:300])
                else:
                    self.assertNotIn(b"x_fencing_token", arrived.lower(),
                                     "the underscore twin must be dropped before the backend: %r"
                                     % arrived[:300])

    # -- 8. damaged state file --------------------------------------------------------------------

    def test_empty_or_headerless_state_file_stops_the_start(self):
        """State files are created atomically, so an existing empty file, or one holding only the
        start of a header, is damage: the proxy refuses to start (non-zero exit) and names the
        file, and --check reports it (exit 1, naming the file). Starting every fence at 0 would
        let stale writes through."""
        for name, content in (("an empty", b""), ("a header-prefix", b"FENCELOG\x01\x00")):
            state = os.path.join(self.workdir, "damaged-%d.log" % len(content))
            with open(state, "wb") as f:
                f.write(content)
            proxy = self.start_proxy(config(), "http://127.0.0.1:9", state_file=state,
                                     start=False, name="damaged-%d" % len(content))
            with self.subTest(state_file=name, run="--check"):
                check = run_cli("--config", proxy.config_path, "--check")
                output = check.stdout + check.stderr
                self.assertEqual(check.returncode, 1, "--check on %s state file (%d bytes) "
                                 "exits 1: %r" % (name, len(content), output))
                self.assertIn(state, output, "--check names the state file")
            with self.subTest(state_file=name, run="start"):
                proxy.start(wait=False)

                def settled():
                    if not proxy.running():
                        return True
                    try:
                        return proxy.admin("GET", "/healthz", timeout=1.0)[0] == 200
                    except OSError:
                        return False
                wait_for(settled, what="the proxy to exit or serve")
                self.assertFalse(proxy.running(), "the proxy must refuse to start on %s state "
                                 "file (%d bytes); it serves instead" % (name, len(content)))
                code = proxy.wait_exit(5)
                self.assertNotEqual(code, 0, "the refusal exits non-zero")
                self.assertIn(state, proxy.stderr_text(), "the error names the state file")

if __name__ == "__main__":
    unittest.main()
