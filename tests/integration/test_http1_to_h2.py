"""HTTP/1.1 clients in front of an HTTP/2 backend (`backend_protocol: h2c`), through the real
binary: each admitted HTTP/1.1 request becomes one stream to the backend, and its answer comes back
as HTTP/1.1 framed by the proxy.

Behind the proxy is h2_backend.H2Backend, a recording h2c backend (python3-h2) whose answer
depends on the path (see its docstring). The route `prefix: /orders` fences writes with
X-Fencing-Token, as in the HTTP/1.1 tests. What each test pins down:

- a stale token is refused (409 with the max) and nothing reaches the backend, as over HTTP/1.1;
- an admitted PUT reaches the backend whole, with :method, :scheme, :authority (from Host) and
  :path (from the target, absolute-form too), the client's end-to-end fields lower-cased, none of
  the hop-by-hop ones (Connection and what it names, Keep-Alive, Proxy-Connection, TE but
  trailers, Transfer-Encoding, Host; Upgrade is refused before, as for any backend), the token as
  read and X-Forwarded-For; a chunked body arrives whole with its length;
- a response without content-length comes back chunked, exactly framed (read by a strict reader
  and by http.client); one with content-length keeps it, and DATA short of it is never relayed
  as a complete response; trailers reach a client that sent
  `TE: trailers` and no other;
- a body torn or abandoned within limits.buffered_body_bytes reaches nothing (not even a
  connection is opened); a larger one streams and arrives whole, and one broken off mid-way
  leaves the backend a reset stream, never a complete request;
- two requests on one client connection (keep-alive);
- the backend resetting the stream before its head is a 502 problem+json, and the connection
  serves on; REFUSED_STREAM is tried once more, and only once;
- a response far larger than the HTTP/2 windows arrives whole;
- timeouts.request ends a request the backend never answers: 504, and the stream is reset
  toward the backend;
- a real gRPC server (grpc_support.GrpcBackend) answers a gRPC call made over HTTP/1.1 with
  TE: trailers: its message and its grpc-status trailers come back as chunks and chunked trailers.
"""

import http.client
import struct
import unittest

import grpc_support as gs
import h2_backend
from harness import IO_TIMEOUT, ProxyTestCase, connect, read_until_closed, wait_for

SKIP = h2_backend.missing()
ROUTE = {"name": "orders", "prefix": "/orders"}


def timeouts(request="10s"):
    return {"connect": "1s", "request": request, "idle": "10s", "header_read": "5s",
            "shutdown": "5s"}


class StrictReader:
    """Reads HTTP/1.1 responses off a socket, refusing anything not framed exactly: one status
    line, field lines, then Content-Length bytes or chunks with lower-case hex sizes, CRLF after
    each, no extensions, and a last chunk with optional trailers. read() -> (status, [(name,
    value)], body, [(trailer name, value)])."""

    def __init__(self, sock, test):
        self.sock, self.buf, self.test = sock, b"", test
        sock.settimeout(IO_TIMEOUT)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("closed with %r unread" % self.buf[:200])
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        self.test.assertNotIn(b"\n", line, "a bare LF in %r" % line)
        self.test.assertNotIn(b"\r", line, "a bare CR in %r" % line)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _fields(self):
        fields = []
        while True:
            line = self._line()
            if not line:
                return fields
            name, sep, value = line.partition(b":")
            self.test.assertTrue(sep and name and name == name.strip(), "a bad field line %r" % line)
            fields.append((name.decode().lower(), value.strip().decode("latin-1")))

    def read(self, head_request=False):
        status_line = self._line()
        self.test.assertRegex(status_line, rb"^HTTP/1\.1 [1-5][0-9][0-9] ", "the status line")
        status = int(status_line.split()[1])
        fields = self._fields()
        names = [n for n, _ in fields]
        lengths = [v for n, v in fields if n == "content-length"]
        chunked = [v for n, v in fields if n == "transfer-encoding"]
        self.test.assertLessEqual(len(lengths) + len(chunked), 1,
                                  "one framing field at most: %r" % fields)
        if head_request or status in (204, 304):
            return status, fields, b"", []
        if chunked:
            self.test.assertEqual(chunked, ["chunked"])
            body = b""
            while True:
                size = self._line()
                self.test.assertRegex(size, rb"^[0-9a-f]+$", "a chunk-size line as the proxy writes it")
                n = int(size, 16)
                if n == 0:
                    return status, fields, body, self._fields()
                body += self._take(n)
                self.test.assertEqual(self._take(2), b"\r\n", "CRLF after a chunk")
        self.test.assertEqual(len(lengths), 1, "framed by a Content-Length or chunks: %r" % names)
        return status, fields, self._take(int(lengths[0])), []


def field(fields, name):
    values = [v for n, v in fields if n == name]
    return values[0] if len(values) == 1 else values or None


@unittest.skipIf(SKIP, SKIP)
class Http1ToH2Test(ProxyTestCase):

    def setUp(self):
        super().setUp()
        self.backend = h2_backend.H2Backend()
        self.addCleanup(self.backend.stop)

    def start(self, request_timeout="10s", **extra):
        config = {"threads": 2, "backend_protocol": "h2c", "timeouts": timeouts(request_timeout),
                  "routes": [ROUTE]}
        config.update(extra)
        return self.start_proxy(config, self.backend.url)

    def exchange(self, proxy, request, head_request=False):
        """One request on a new connection, read strictly -> (status, fields, body, trailers)."""
        with connect(proxy.port) as sock:
            sock.sendall(request)
            return StrictReader(sock, self).read(head_request)

    # -- requests --

    def test_stale_token_refused_and_nothing_at_the_backend(self):
        proxy = self.start()
        ok = proxy.request("PUT", "/orders/1", token=6, body=b"six")
        self.assertEqual(ok[0], 200, "token 6 (a raise) is forwarded to the h2c backend: %r" % (ok,))
        self.backend.wait_streams("/orders/1", 1, "the backend to receive token 6", ended=True)
        stale = proxy.request("PUT", "/orders/2", token=5, body=b"five")
        self.assertProblem(stale, 409, "token 5 below the max 6")
        self.assertEqual(stale[1].get("x-fencing-token-max"), "6")
        self.assertEqual(self.backend.streams("/orders/2"), [],
                         "a refused request never reaches the backend, whatever its protocol")

    def test_put_reaches_the_backend_whole_with_translated_head(self):
        proxy = self.start()
        body = b"order-body-" * 300
        request = (b"PUT /orders/7?v=1 HTTP/1.1\r\nHost: shop.example:8080\r\nX-Fencing-Token: 007\r\n"
                   b"Connection: keep-alive, X-Hop\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\n"
                   b"Proxy-Connection: keep-alive\r\nTE: deflate\r\nX-Custom-Field: Mixed Case\r\n"
                   b"X-Forwarded-For: 198.51.100.9\r\nContent-Type: application/octet-stream\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body)) + body
        status, fields, answer, _ = self.exchange(proxy, request)
        self.assertEqual(status, 200, "an admitted PUT is answered by the h2c backend: %r" % answer[:200])
        self.assertEqual(answer, b"echo:PUT:" + body, "the backend's body comes back")
        [stream] = self.backend.wait_streams("/orders/7", 1, "the PUT at the backend", ended=True)
        self.assertEqual(stream.body, body, "the body reaches the backend whole")
        self.assertEqual([n for n, _ in stream.headers[:4]], [":method", ":scheme", ":authority", ":path"])
        self.assertEqual(stream.one(":method"), "PUT")
        self.assertEqual(stream.one(":scheme"), "http")
        self.assertEqual(stream.one(":authority"), "shop.example:8080", ":authority is the client's Host")
        self.assertEqual(stream.one(":path"), "/orders/7?v=1")
        for name in ("connection", "x-hop", "keep-alive", "upgrade", "te", "transfer-encoding",
                     "host", "proxy-connection"):
            self.assertEqual(stream.get(name), [], "hop-by-hop %s must not reach the backend: %r"
                             % (name, stream.headers))
        self.assertEqual(stream.one("x-custom-field"), "Mixed Case", "end-to-end fields go on, lower-cased")
        self.assertEqual(stream.one("x-fencing-token"), "7", "the token as the fence read it")
        self.assertEqual(stream.one("x-forwarded-for"), "198.51.100.9, 127.0.0.1")
        self.assertEqual(stream.one("content-length"), str(len(body)))
        self.assertEqual(field(fields, "x-backend"), "h2", "the backend's fields come back")

    def test_absolute_form_target_and_te_trailers(self):
        proxy = self.start()
        status, _, answer, _ = self.exchange(
            proxy, b"GET http://other.example/orders/9 HTTP/1.1\r\nHost: other.example\r\n"
                   b"Connection: TE\r\nTE: trailers\r\n\r\n")
        self.assertEqual(status, 200, answer)
        [stream] = self.backend.wait_streams("/orders/9", 1, "the GET at the backend", ended=True)
        self.assertEqual(stream.one(":path"), "/orders/9", "absolute-form: its path")
        self.assertEqual(stream.one(":authority"), "other.example")
        self.assertEqual(stream.get("te"), ["trailers"], "TE: trailers is the one TE HTTP/2 carries")

    def test_chunked_request_body_arrives_whole(self):
        proxy = self.start()
        with connect(proxy.port) as sock:
            sock.sendall(b"PUT /orders/3 HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            sock.sendall(b"7;ext=1\r\n-second\r\n")
            sock.sendall(b"6\r\n-third\r\n0\r\n\r\n")
            status, _, answer, _ = StrictReader(sock, self).read()
        self.assertEqual(status, 200, answer)
        [stream] = self.backend.wait_streams("/orders/3", 1, "the chunked PUT", ended=True)
        self.assertEqual(stream.body, b"first-second-third", "the decoded body, whole")
        self.assertEqual(stream.one("content-length"), "18", "a body held whole goes with its length")
        self.assertEqual(answer, b"echo:PUT:first-second-third")

    def test_torn_or_abandoned_body_within_the_buffered_limit_reaches_nothing(self):
        # Whole or nothing, as for an HTTP/1.1 backend: the body is read and checked before a
        # stream is opened.
        proxy = self.start(access_log=True)
        with connect(proxy.port) as sock:
            sock.sendall(b"PUT /orders/torn HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 2\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n7d00\r\n" + b"a" * 32000 + b"\r\nzz\r\n")
            status, fields, body, _ = StrictReader(sock, self).read()
        self.assertProblem((status, dict(fields), body), 400, "a bad chunk size after 32,000 bytes")
        with connect(proxy.port) as sock:
            sock.sendall(b"PUT /orders/abandoned HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 2\r\n"
                         b"Content-Length: 200000\r\n\r\n" + b"c" * 100000)
        wait_for(lambda: [e for e in proxy.access_log() if e.get("path") == "/orders/abandoned"],
                 IO_TIMEOUT, 0.02, "the access line of the abandoned upload")
        self.assertEqual(self.backend.streams("/orders/"), [],
                         "nothing of a torn or abandoned body reaches the h2c backend")
        self.assertEqual(self.backend.connections, 0, "not even a connection was needed")

    def test_body_above_the_buffered_limit_streams_whole(self):
        proxy = self.start()
        payload = bytes(range(256)) * (2000000 // 256) + b"end"  # above the default 1 MiB
        status, _, body = proxy.request("PUT", "/orders/big", 10, payload)
        self.assertEqual(status, 200, body[:200])
        [stream] = self.backend.wait_streams("/orders/big", 1, "the streamed PUT", ended=True)
        self.assertEqual(len(stream.body), len(payload), "the body arrived whole")
        self.assertEqual(stream.body, payload, "byte for byte")
        self.assertEqual(stream.one("content-length"), str(len(payload)))

    def test_streamed_body_broken_off_resets_the_stream(self):
        # Above the buffered limit the body streams; a client that goes mid-way leaves the
        # backend a reset stream, never a complete request (a chunked one has no length the
        # backend could check it against).
        proxy = self.start()
        chunk = b"d" * 100000
        cases = [
            ("content-length", b"/orders/cut-length", b"Content-Length: 3000000", b"d" * 1500000),
            ("chunked", b"/orders/cut-chunked", b"Transfer-Encoding: chunked",
             b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(15))),
        ]
        for name, path, framing, sent in cases:
            with self.subTest(framing=name):
                with connect(proxy.port) as sock:
                    sock.sendall(b"PUT %s HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 2\r\n%s\r\n\r\n"
                                 % (path, framing) + sent)
                    self.backend.wait_streams(path.decode(), 1, "the streamed PUT to begin")
                [stream] = wait_for(lambda: [s for s in self.backend.streams(path.decode())
                                             if s.reset or s.ended],
                                    IO_TIMEOUT, 0.01, "the backend to see the stream end or reset")
                self.assertTrue(stream.reset, "the stream is reset: %r" % stream)
                self.assertFalse(stream.ended, "the request never ends at the backend: %r" % stream)
                self.assertLessEqual(len(stream.body), 1500000)

    # -- responses --

    def test_response_without_length_is_chunked(self):
        proxy = self.start()
        status, fields, body, trailers = self.exchange(proxy, b"GET /orders/1 HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(status, 200)
        self.assertEqual(field(fields, "transfer-encoding"), "chunked",
                         "no content-length from the backend: chunks the proxy encodes")
        self.assertIsNone(field(fields, "content-length"))
        self.assertEqual(body, b"echo:GET:")
        self.assertEqual(trailers, [])
        for name, _ in fields:
            self.assertFalse(name.startswith(":"), "no pseudo-header reaches HTTP/1.1: %r" % fields)
        # the same through Python's own client
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=IO_TIMEOUT)
        self.addCleanup(conn.close)
        conn.request("GET", "/orders/2")
        response = conn.getresponse()
        self.assertEqual((response.status, response.read()), (200, b"echo:GET:"))

    def test_response_with_length_keeps_it(self):
        proxy = self.start()
        status, fields, body, _ = self.exchange(proxy, b"GET /length/1 HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual((status, body), (200, b"echo:GET:"))
        self.assertEqual(field(fields, "content-length"), "9")
        self.assertIsNone(field(fields, "transfer-encoding"))
        status, fields, body, _ = self.exchange(proxy, b"HEAD /length/1 HTTP/1.1\r\nHost: h\r\n\r\n",
                                                head_request=True)
        self.assertEqual(status, 200)
        self.assertEqual(field(fields, "content-length"), "10", "a HEAD answer keeps the length a GET has")

    def test_data_short_of_the_content_length_is_never_a_complete_response(self):
        # The codec resets a stream whose DATA falls short of its content-length. Before a byte
        # went to the client that is a 502; after, the client connection closes short.
        proxy = self.start()
        with connect(proxy.port) as sock:
            sock.sendall(b"GET /short/1 HTTP/1.1\r\nHost: h\r\n\r\n")
            reader = StrictReader(sock, self)
            try:
                while b"\r\n\r\n" not in reader.buf:
                    reader._fill()
            except EOFError:
                self.fail("closed before a response head: %r" % reader.buf)
            if reader.buf.startswith(b"HTTP/1.1 502 "):
                status, fields, body, _ = reader.read()
                self.assertProblem((status, dict(fields), body), 502, "DATA short of content-length")
                return
            rest, closed = read_until_closed(sock, IO_TIMEOUT)
        data = reader.buf + rest
        head, _, body = data.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 200 "), data[:300])
        self.assertIn(b"content-length: 14", head.lower())
        self.assertTrue(closed, "the proxy closes the client connection")
        self.assertLess(len(body), 14, "the client connection closes without a complete response")

    def test_trailers_only_to_a_client_that_asked(self):
        proxy = self.start()
        _, _, body, trailers = self.exchange(
            proxy, b"GET /trailers/1 HTTP/1.1\r\nHost: h\r\nTE: trailers\r\n\r\n")
        self.assertEqual(body, b"echo:GET:")
        self.assertEqual(trailers, [("x-backend-trailer", "done")], "TE: trailers: the trailers come as chunked trailers")
        _, _, body, trailers = self.exchange(proxy, b"GET /trailers/2 HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(body, b"echo:GET:")
        self.assertEqual(trailers, [], "a client that did not send TE: trailers gets none")

    def test_keep_alive_two_requests_on_one_connection(self):
        proxy = self.start()
        with connect(proxy.port) as sock:
            reader = StrictReader(sock, self)
            sock.sendall(b"PUT /orders/1 HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 3\r\nContent-Length: 3\r\n\r\none")
            first = reader.read()
            sock.sendall(b"PUT /orders/2 HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 3\r\nContent-Length: 3\r\n\r\ntwo")
            second = reader.read()
        self.assertEqual((first[0], first[2]), (200, b"echo:PUT:one"))
        self.assertEqual((second[0], second[2]), (200, b"echo:PUT:two"),
                         "the connection serves a second request after the first")
        self.assertEqual([s.body for s in self.backend.streams("/orders/")], [b"one", b"two"])

    def test_large_response_arrives_whole(self):
        proxy = self.start()
        size = 3 * 1024 * 1024 + 17  # well over a stream's window (64 KiB) and the connection's (1 MiB)
        status, fields, body, _ = self.exchange(proxy, b"GET /big/%d HTTP/1.1\r\nHost: h\r\n\r\n" % size)
        self.assertEqual(status, 200)
        self.assertEqual(len(body), size)
        self.assertEqual(body, h2_backend.big_body(size), "every byte, in order")

    # -- failures --

    def test_reset_before_head_is_502_and_the_connection_serves_on(self):
        proxy = self.start()
        with connect(proxy.port) as sock:
            reader = StrictReader(sock, self)
            sock.sendall(b"PUT /reset/1 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nab")
            status, fields, body, _ = reader.read()
            self.assertProblem((status, dict(fields), body), 502,
                               "the backend reset the stream before its head")
            sock.sendall(b"GET /orders/1 HTTP/1.1\r\nHost: h\r\n\r\n")
            self.assertEqual(reader.read()[:3:2], (200, b"echo:GET:"), "the next request on the connection")
        self.assertEqual(len(self.backend.streams("/reset/")), 1,
                         "a stream reset with INTERNAL_ERROR is never sent again")

    def test_refused_stream_tried_once_more(self):
        proxy = self.start(access_log=True)
        status, _, body, _ = self.exchange(
            proxy, b"POST /refuse-once/1 HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbody")
        self.assertEqual((status, body), (200, b"echo:POST:body"),
                         "REFUSED_STREAM: the backend never processed it; sent once more")
        refused, answered = self.backend.streams("/refuse-once/")
        self.assertEqual((refused.answer, answered.answer), ("refused", "answered"))
        self.assertEqual(answered.body, b"body")
        [line] = wait_for(lambda: [e for e in proxy.access_log() if e.get("path") == "/refuse-once/1"],
                          IO_TIMEOUT, 0.02, "the access line of the refused-once request")
        self.assertEqual(line.get("upstream_attempts"), 2, "the access line counts both sends: %r" % line)
        status, fields, body, _ = self.exchange(
            proxy, b"POST /refuse/2 HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbody")
        self.assertProblem((status, dict(fields), body), 502, "refused twice")
        self.assertEqual(len(self.backend.streams("/refuse/")), 2, "tried once more, and only once")

    def test_request_timeout_resets_the_stream(self):
        proxy = self.start(request_timeout="1s")
        status, fields, body, _ = self.exchange(
            proxy, b"PUT /hold/1 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx")
        self.assertProblem((status, dict(fields), body), 504, "no answer within timeouts.request")
        wait_for(lambda: [s for s in self.backend.streams("/hold/") if s.reset], IO_TIMEOUT, 0.01,
                 "the backend to see the stream reset at the bound")


GRPC_SKIP = SKIP or gs.missing()


@unittest.skipIf(GRPC_SKIP, GRPC_SKIP)
class Http1ToGrpcTest(ProxyTestCase):

    def test_grpc_call_over_http1_gets_message_and_trailers(self):
        backend = gs.GrpcBackend()
        self.addCleanup(backend.stop)
        proxy = self.start_proxy({"threads": 2, "backend_protocol": "h2c", "timeouts": timeouts(),
                                  "routes": [{"name": "orders", "prefix": "/orders.v1.OrderStore"}]},
                                 backend.url)
        message = b"order-1"
        framed = b"\x00" + struct.pack(">I", len(message)) + message
        request = (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/grpc\r\n"
                   b"TE: trailers\r\nX-Fencing-Token: 4\r\nX-Test-Call: h1\r\nContent-Length: %d\r\n\r\n"
                   % (gs.PUT.encode(), proxy.port, len(framed))) + framed
        with connect(proxy.port) as sock:
            sock.sendall(request)
            status, fields, body, trailers = StrictReader(sock, self).read()
        self.assertEqual(status, 200, body[:300])
        self.assertEqual(field(fields, "content-type"), "application/grpc")
        self.assertEqual(field(fields, "x-backend"), "orders-store", "the call's initial metadata")
        answer = b"put:" + message
        self.assertEqual(body, b"\x00" + struct.pack(">I", len(answer)) + answer)
        self.assertEqual(dict(trailers).get("grpc-status"), "0", "grpc-status as a chunked trailer: %r" % trailers)
        self.assertEqual(dict(trailers).get("x-backend-trailer"), "put-done")
        call = backend.call("h1")
        self.assertEqual(call.token, "4")
        self.assertEqual([m for _, m in call.messages], [message])


if __name__ == "__main__":
    unittest.main()
