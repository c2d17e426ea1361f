"""Request-side integrity (issue 23) against the real fencing-proxy binary, over raw sockets.

Each test pins one observation of the issue:

  4  bytes that can never become a valid request (a NUL as the first byte, a TLS ClientHello on
     the plain port, a control character in the method, a request line starting with a space)
     were held until timeouts.header_read (10 s) where nginx answers 400 at once;
  5  an encoded ';' (`PUT /fenced%3Bx/y`) matched no route and reached the backend unfenced,
     where a Servlet-family backend reads it as /fenced/y;
  6  (request side) an empty line before the request line (RFC 9112 §2.2: a server should
     ignore it) was 400; TRACE was forwarded; a 409'd request declaring 65,537 body bytes was
     drained and the connection kept, though only a body of up to 64 KiB is to be drained.

The backend is raw_backend.RawBackend ("answer": 200 to every request), which records every byte
it receives, so "nothing reached the backend" is checked on the bytes themselves. The proxy keeps
the default header_read of 10 s, so "at once" (under a second) cannot be the timeout. Fence
`fenced` (prefix /fenced, PUT/POST/PATCH/DELETE) is seeded offline to max_token 1000.

Python standard library only; 127.0.0.1 only; every wait is bounded.
"""

import os
import socket
import struct
import time
import unittest

from harness import (connect as harness_connect, send_all as send, HarnessError, ProxyTestCase, ResponseReader, read_until_closed,
                     write_state_file)

IO = 5.0            # seconds for one exchange
AT_ONCE = 1.0       # "answered at once": far below header_read (10 s here)
CLOSE_WAIT = 3.0    # seconds for the proxy to close a connection it said it would close
ROUTES = [{"name": "fenced", "prefix": "/fenced"}]
SENTINEL = b"GET /sentinel HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


def config(**extra):
    """One worker, unmatched paths forwarded, fence `fenced`, header_read at its default 10 s."""
    cfg = {"threads": 1, "unmatched": "pass", "routes": ROUTES,
           "timeouts": {"connect": "1s", "request": "5s", "idle": "10s", "header_read": "10s",
                        "shutdown": "2s"}}
    cfg.update(extra)
    return cfg


def tls_client_hello():
    """A TLS 1.3 ClientHello record (SNI localhost, ALPN http/1.1), as a TLS client opens a
    connection with. Built without a CR or LF byte anywhere (real ones often carry 0x0a, the
    supported_groups extension's type, which the proxy refused at once before as a bare LF): the
    proxy must recognise the handshake itself, not stumble on a line ending."""
    def ext(kind, data):
        return struct.pack("!HH", kind, len(data)) + data
    name = b"localhost"
    server_name = ext(0x0000, struct.pack("!HBH", len(name) + 3, 0, len(name)) + name)
    versions = ext(0x002B, b"\x04\x03\x04\x03\x03")
    alpn = ext(0x0010, struct.pack("!HB", 9, 8) + b"http/1.1")
    extensions = server_name + versions + alpn
    suites = b"\x13\x01\x13\x02\x13\x03\xc0\x2b\xc0\x2f\x00\xff"
    body = (b"\x03\x03" + bytes(range(0x20, 0x40)) +            # legacy version, random
            b"\x20" + bytes(range(0x40, 0x60)) +                  # legacy session id
            struct.pack("!H", len(suites)) + suites + b"\x01\x00" +  # ciphers, no compression
            struct.pack("!H", len(extensions)) + extensions)
    handshake = b"\x01" + struct.pack("!I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack("!H", len(handshake)) + handshake


def connect(port, timeout=IO):
    return harness_connect(port, timeout)


class RequestIntegrityTest(ProxyTestCase):

    def start(self, proxy_config=None):
        backend = self.start_raw_backend("answer")
        state = os.path.join(self.workdir, "fences-%d.log" % backend.port)
        write_state_file(state, {"fenced": 1000})
        proxy = self.start_proxy(proxy_config or config(), backend, state_file=state,
                                 name="proxy-%d" % backend.port)
        return backend, proxy

    def read(self, sock, what):
        """One response (interim ones skipped) -> (status, headers, body, reader); a failure,
        not an error, when none comes."""
        reader = ResponseReader(sock, IO)
        try:
            status, headers, body = reader.read()
            while 100 <= status < 200:
                status, headers, body = reader.read()
        except (OSError, HarnessError) as e:
            self.fail("%s: no response: %r" % (what, e))
        return status, headers, body, reader

    def exchange(self, proxy, data, what):
        with connect(proxy.port) as sock:
            send(sock, data)
            return self.read(sock, what)[:3]

    def assertNothingReached(self, backend, proxy, before, what):
        """Nothing arrived since `before` (a connections() snapshot); then a sentinel GET shows
        the proxy and the backend still work, so the check was not vacuous."""
        backend.quiet(period=0.2)
        arrived = backend.received_since(before)
        self.assertEqual(arrived, b"", "%s: no byte of it may reach the backend; it received %r"
                         % (what, arrived[:300]))
        status, _, _ = self.exchange(proxy, SENTINEL, "the sentinel")
        self.assertEqual(status, 200, "%s: the sentinel GET after it is forwarded" % what)
        self.assertIn(b"GET /sentinel HTTP/1.1\r\n", backend.received_since(before))

    # -- 4. what can never be a request is refused at once ----------------------------------------

    def test_bytes_that_can_never_start_a_request_are_refused_at_once(self):
        """Observation 4: a NUL as the first byte, a TLS ClientHello on the plain port, a control
        character in the method, a request line starting with a space; each is sent without the
        empty line that would end a head, and each must be answered 400 or closed at once (under
        a second; header_read is 10 s), with nothing forwarded."""
        hello = tls_client_hello()
        self.assertFalse(b"\r" in hello or b"\n" in hello,
                         "premise: the ClientHello has no CR or LF byte: %r" % hello)
        backend, proxy = self.start()
        cases = [
            ("NUL as the first byte", b"\x00GET /x HTTP/1.1\r\nHost: t\r\n"),
            ("TLS ClientHello", hello),
            ("control character in the method", b"GE\x01T /x HTTP/1.1\r\nHost: t\r\n"),
            ("request line starting with a space", b" GET /x HTTP/1.1\r\nHost: t\r\n"),
        ]
        for what, data in cases:
            with self.subTest(case=what):
                before = backend.connections()
                with connect(proxy.port) as sock:
                    started = time.monotonic()
                    send(sock, data)
                    got, closed = b"", False
                    deadline = started + AT_ONCE + 0.5
                    while b"\r\n\r\n" not in got and not closed and time.monotonic() < deadline:
                        more, closed = read_until_closed(sock, min(0.1, deadline - time.monotonic()))
                        got += more
                    elapsed = time.monotonic() - started
                answered = b"\r\n\r\n" in got
                self.assertTrue(answered or closed,
                                "%s: neither answered nor closed within %.1fs (header_read is "
                                "10 s): it can never become a valid request" % (what, elapsed))
                self.assertLess(elapsed, AT_ONCE, "%s: answered after %.2fs" % (what, elapsed))
                if got:
                    self.assertTrue(got.startswith(b"HTTP/1.1 400 "),
                                    "%s: the answer must be 400: %r" % (what, got[:200]))
                self.assertNothingReached(backend, proxy, before, what)

    # -- 5. an encoded ';' ------------------------------------------------------------------------

    def test_encoded_semicolon_in_the_path_is_refused(self):
        """Observation 5: `PUT /fenced%3Bx/y` (and `%3b`) without a token matches no route here,
        but a backend that decodes before dropping path parameters reads /fenced;x/y, that is
        /fenced/y: a tokenless write on a fenced path. 400 (problem+json), nothing forwarded."""
        backend, proxy = self.start()
        for target in (b"/fenced%3Bx/y", b"/fenced%3bx/y"):
            what = target.decode()
            with self.subTest(target=what):
                before = backend.connections()
                response = self.exchange(proxy, b"PUT " + target + b" HTTP/1.1\r\nHost: t\r\n"
                                         b"Content-Length: 2\r\n\r\nhi", what)
                self.assertProblem(response, 400, what)
                self.assertNothingReached(backend, proxy, before, what)

    # -- 6. small ones ------------------------------------------------------------------------------

    def test_empty_line_before_the_request_line_is_ignored(self):
        """Observation 6: an empty line (CRLF) before a request line is ignored (RFC 9112 §2.2),
        on a new connection and on a kept-alive one after a first request: the request is
        served, not refused with 400."""
        backend, proxy = self.start()
        with self.subTest(connection="new"):
            status, _, body = self.exchange(
                proxy, b"\r\nGET /after-empty-line HTTP/1.1\r\nHost: t\r\n\r\n", "new")
            self.assertEqual(status, 200, "a leading CRLF: %r" % body[:200])
            backend.quiet(period=0.1)
            self.assertIn(b"GET /after-empty-line HTTP/1.1\r\n", backend.received())
        with self.subTest(connection="kept alive"):
            with connect(proxy.port) as sock:
                send(sock, b"GET /first HTTP/1.1\r\nHost: t\r\n\r\n")
                status, _, _, reader = self.read(sock, "the first request")
                self.assertEqual(status, 200)
                send(sock, b"\r\nGET /second HTTP/1.1\r\nHost: t\r\n\r\n")
                try:
                    status, _, body = reader.read()
                except (OSError, HarnessError) as e:
                    self.fail("the request after a CRLF on a kept-alive connection: %r" % e)
            self.assertEqual(status, 200, "a CRLF before the second request: %r" % body[:200])
            backend.quiet(period=0.1)
            self.assertIn(b"GET /second HTTP/1.1\r\n", backend.received())

    def test_trace_is_refused_with_405_and_not_forwarded(self):
        """Observation 6: TRACE (which would echo the request, credentials included, back to
        whoever can read the response) is answered 405 with a problem+json body, as nginx does,
        and is not forwarded; on an unmatched path and on a fenced one."""
        backend, proxy = self.start()
        for target in (b"/trace", b"/fenced/x"):
            what = "TRACE " + target.decode()
            with self.subTest(request=what):
                before = backend.connections()
                response = self.exchange(proxy, b"TRACE " + target + b" HTTP/1.1\r\nHost: t\r\n"
                                         b"Connection: close\r\n\r\n", what)
                self.assertProblem(response, 405, what)
                self.assertNothingReached(backend, proxy, before, what)

    def test_rejected_request_declaring_more_than_64KiB_closes_instead_of_draining(self):
        """Observation 6: a stale (409) request declaring 65,537 body bytes is answered 409 with
        `Connection: close`, and the connection is closed: its body is not read to keep the
        connection (the request pipelined after it is neither answered nor forwarded). One
        declaring 65,536 bytes (64 KiB, the documented limit) is still drained and the request
        after it served."""
        backend, proxy = self.start()
        after = b"GET /after-stale HTTP/1.1\r\nHost: t\r\n\r\n"
        for length, drained in ((65537, False), (65536, True)):
            with self.subTest(content_length=length):
                before = backend.connections()
                data = (b"PUT /fenced/stale HTTP/1.1\r\nHost: t\r\nX-Fencing-Token: 5\r\n"
                        b"Content-Length: %d\r\n\r\n" % length) + b"b" * length + after
                with connect(proxy.port) as sock:
                    send(sock, data)
                    status, headers, body, reader = self.read(sock, "the stale request")
                    self.assertProblem((status, headers, body), 409, "the stale request")
                    rest, closed = read_until_closed(sock, CLOSE_WAIT)
                rest = reader.buf + rest
                backend.quiet(period=0.2)
                arrived = backend.received_since(before)
                if drained:
                    self.assertTrue(rest.startswith(b"HTTP/1.1 200 "),
                                    "a 64 KiB body is drained and the next request served: %r"
                                    % rest[:200])
                    self.assertIn(b"GET /after-stale HTTP/1.1\r\n", arrived)
                    continue
                self.assertEqual(headers.get("connection", "").lower(), "close",
                                 "the 409 to a request declaring %d body bytes announces "
                                 "Connection: close: %r" % (length, headers))
                self.assertEqual(rest, b"", "the request pipelined after the undrained body was "
                                 "answered: %r" % rest[:200])
                self.assertTrue(closed, "the proxy must close the connection (still open after "
                                "%.1fs)" % CLOSE_WAIT)
                self.assertEqual(arrived, b"", "nothing reaches the backend: %r" % arrived[:200])


if __name__ == "__main__":
    unittest.main()
