"""HTTP/2's own attacks against the real binary (issue 26), with raw frames over a socket.

Behind the proxy here is the recording gRPC backend of the gRPC tests (`backend_protocol: h2c`);
Http1BackendBodyTest puts a raw HTTP/1.1 backend there instead, for request bodies whose DATA do
not match their content-length or whose client resets them mid-stream. Each attack ends with the connection
closed by the proxy (after its GOAWAY), the proxy still serving a new client, and nothing of the
attack's requests at the backend beyond what a well-behaved client could have sent:

- rapid reset (CVE-2023-44487): thousands of streams opened and reset at once;
- a CONTINUATION flood (CVE-2024-28182): a head that never ends;
- bytes that are not HTTP/2 after the preface.

The codec's own unit tests (tests/unit/h2/connection_test.cpp) and its fuzz target cover the
rest of the table in proxy/h2/connection.h; these check that the session does not undo them.
"""

import socket
import struct
import threading
import time
import unittest

import grpc_support as gs
from harness import IO_TIMEOUT, ProxyTestCase, wait_for

SKIP = gs.missing()

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY, CONTINUATION = 0x0, 0x1, 0x3, 0x4, 0x7, 0x9
END_STREAM, END_HEADERS = 0x1, 0x4
CANCEL = 0x8
# A request head in HPACK, from the static table: :method POST, :scheme http, :path / and a
# literal :authority "a" (never indexed in the dynamic table).
HEAD_BLOCK = b"\x83\x86\x84\x01\x01a"


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def read_frames(sock, until_closed_within=IO_TIMEOUT):
    """The frames the proxy sends until it closes the connection (or the bound passes):
    [(type, flags, stream, payload)], and whether it closed."""
    sock.settimeout(0.5)
    data = b""
    end = time.monotonic() + until_closed_within
    closed = False
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
    frames = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        if len(data) < 9 + length:
            break
        frames.append((data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF, data[9:9 + length]))
        data = data[9 + length:]
    return frames, closed


@unittest.skipIf(SKIP, SKIP)
class Http2HostileTest(ProxyTestCase):

    def setUp(self):
        super().setUp()
        self.backend = gs.GrpcBackend()
        self.addCleanup(self.backend.stop)
        self.proxy = self.start_proxy(
            {"threads": 1, "backend_protocol": "h2c",
             "timeouts": {"connect": "1s", "request": "5s", "idle": "10s", "header_read": "5s",
                          "shutdown": "5s"},
             "routes": [{"name": "orders", "prefix": "/orders.v1.OrderStore"}]},
            self.backend.url)

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.proxy.port), timeout=IO_TIMEOUT)
        self.addCleanup(sock.close)
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        return sock

    def assertGoneAway(self, frames, closed, what):
        kinds = [f[0] for f in frames]
        self.assertIn(GOAWAY, kinds, "%s: the proxy ends the connection with GOAWAY; it sent %r"
                      % (what, sorted(set(kinds))))
        self.assertTrue(closed, "%s: then closes it" % what)

    def assertStillServes(self, what):
        channel = gs.insecure_channel(self.proxy.port)
        self.addCleanup(channel.close)
        result = gs.unary(channel, b"after", token=1, tag="after-" + what)
        self.assertEqual(result.code, gs.grpc.StatusCode.OK,
                         "%s: a new client is served afterwards: %r" % (what, result))

    def test_rapid_reset_ends_the_connection(self):
        sock = self.connect()
        burst = b"".join(frame(HEADERS, END_HEADERS, stream, HEAD_BLOCK) +
                         frame(RST_STREAM, 0, stream, struct.pack(">I", CANCEL))
                         for stream in range(1, 2 * 5000, 2))
        try:
            sock.sendall(burst)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed before all of it was read: the point
        frames, closed = read_frames(sock)
        self.assertGoneAway(frames, closed, "5000 streams opened and reset at once")
        self.assertLess(len(self.backend.calls()), 100,
                        "streams reset as they were opened must not each become a backend call")
        self.assertStillServes("rapid reset")

    def test_continuation_flood_ends_the_connection(self):
        sock = self.connect()
        flood = frame(HEADERS, 0, 1, HEAD_BLOCK[:2]) + b"".join(
            frame(CONTINUATION, 0, 1, b"\x40\x01x\x01y") for _ in range(2000))
        try:
            sock.sendall(flood)
        except (BrokenPipeError, ConnectionResetError):
            pass
        frames, closed = read_frames(sock)
        self.assertGoneAway(frames, closed, "a head continued 2000 times")
        self.assertEqual(self.backend.calls(), [], "a head that never ended reached the backend")
        self.assertStillServes("continuation flood")

    def test_garbage_after_the_preface_ends_the_connection(self):
        sock = self.connect()
        try:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" * 4)
        except (BrokenPipeError, ConnectionResetError):
            pass
        frames, closed = read_frames(sock)
        self.assertGoneAway(frames, closed, "HTTP/1.1 bytes after the HTTP/2 preface")
        self.assertEqual(self.backend.calls(), [], "nothing reaches the backend")
        self.assertStillServes("garbage")


def literal(name, value):
    """An HPACK field line, literal without indexing, new name (lengths below 127)."""
    name, value = name.encode(), value.encode()
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def request_block(method, path, fields=()):
    """A request head in HPACK: :method and :path literal with their static-table names."""
    block = b"\x02" + bytes([len(method)]) + method.encode() + b"\x86" + \
        b"\x04" + bytes([len(path)]) + path.encode() + b"\x01\x01a"
    return block + b"".join(literal(n, v) for n, v in fields)


def stream_end(sock, stream=1, timeout=IO_TIMEOUT):
    """Reads frames until stream `stream` ends (its RST_STREAM, or a frame with END_STREAM) or
    the connection closes -> (the frames seen, how it ended: "reset", "end" or "closed")."""
    sock.settimeout(timeout)
    data, frames = b"", []
    while True:
        while len(data) >= 9 and len(data) >= 9 + int.from_bytes(data[:3], "big"):
            length = int.from_bytes(data[:3], "big")
            kind, flags = data[3], data[4]
            sid = int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
            frames.append((kind, flags, sid, data[9:9 + length]))
            data = data[9 + length:]
            if sid == stream and kind == RST_STREAM:
                return frames, "reset"
            if sid == stream and kind in (HEADERS, DATA) and flags & END_STREAM:
                return frames, "end"
        chunk = sock.recv(65536)
        if not chunk:
            return frames, "closed"
        data += chunk


class StreamingBackend:
    """An HTTP/1.1 backend that answers its first request with a `size`-byte body, written in
    64 KiB pieces as fast as the proxy takes them; `sent` counts what the socket accepted."""

    def __init__(self, size):
        self.size, self.sent, self.done = size, 0, False
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        self.listener.settimeout(IO_TIMEOUT)
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
            conn.settimeout(IO_TIMEOUT)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.size)
            piece = b"p" * 65536
            try:
                while self.sent < self.size and not self.done:
                    self.sent += conn.send(piece[:self.size - self.sent])
            except OSError:
                pass

    def stop(self):
        self.done = True
        self.listener.close()


@unittest.skipIf(SKIP, SKIP)
class Http1BackendBackPressureTest(ProxyTestCase):
    """A slow HTTP/2 client holds back the HTTP/1.1 backend's read: the proxy queues at most a
    window's worth for the stream, so what the backend manages to send is bounded by that and
    the sockets' buffers, not by the response's size."""

    SIZE = 256 * 1024 * 1024

    def test_a_client_that_does_not_read_holds_back_the_backend(self):
        backend = StreamingBackend(self.SIZE)
        self.addCleanup(backend.stop)
        proxy = self.start_proxy(
            {"threads": 1,
             "timeouts": {"connect": "1s", "request": "30s", "idle": "30s", "header_read": "5s",
                          "shutdown": "5s"},
             "routes": [{"name": "orders", "prefix": "/orders"}]},
            "http://127.0.0.1:%d" % backend.port)
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT)
        self.addCleanup(sock.close)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        # A client that gives the proxy a window of its default size and never reads further.
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0) +
                     frame(HEADERS, END_HEADERS | END_STREAM, 1, request_block("GET", "/orders/big")))

        def stalled():
            before = backend.sent
            time.sleep(0.3)
            return backend.sent > 0 and backend.sent == before
        wait_for(stalled, timeout=20, what="the backend's writes to stall")
        self.assertLess(backend.sent, 32 * 1024 * 1024,
                        "the backend sent %d bytes of %d to a client that read nothing: the proxy "
                        "must stop reading once a window's worth is queued" % (backend.sent, self.SIZE))


@unittest.skipIf(SKIP, SKIP)
class Http1BackendBodyTest(ProxyTestCase):
    """An HTTP/2 request body whose DATA do not match its content-length, in front of an HTTP/1.1
    backend (backend_protocol: http1, raw frames): the stream is reset, and nothing complete
    reaches the backend; a body that streamed leaves the backend connection unfinished and
    closed, never reused."""

    def setUp(self):
        super().setUp()
        self.backend = self.start_raw_backend("answer")
        self.proxy = self.start_proxy(
            {"threads": 1,
             "timeouts": {"connect": "1s", "request": "5s", "idle": "10s", "header_read": "5s",
                          "shutdown": "5s"},
             "limits": {"buffered_body_bytes": 16384},
             "routes": [{"name": "orders", "prefix": "/orders"}]},
            self.backend.url)

    def send_short_body(self, declared, sent, before_end=None):
        """A PUT declaring `declared` bytes that sends `sent`, then END_STREAM (once before_end()
        holds, when given)."""
        sock = socket.create_connection(("127.0.0.1", self.proxy.port), timeout=IO_TIMEOUT)
        self.addCleanup(sock.close)
        head = request_block("PUT", "/orders/1", [("x-fencing-token", "5"),
                                                  ("content-length", str(declared))])
        body = b"b" * sent
        data = b"".join(frame(DATA, 0, 1, body[i:i + 16384]) for i in range(0, len(body), 16384))
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS, 1, head) + data)
        if before_end:
            wait_for(before_end, what="the streamed part at the backend")
        sock.sendall(frame(DATA, END_STREAM, 1))
        frames, how = stream_end(sock)
        statuses = [f for f in frames if f[0] == HEADERS and f[2] == 1]
        self.assertTrue(how == "reset" or statuses,
                        "the stream with %d of %d bytes ends in a reset or a refusal; it %s"
                        % (sent, declared, how))
        return how

    def test_a_streamed_chunked_body_whose_client_resets_is_left_unfinished(self):
        sock = socket.create_connection(("127.0.0.1", self.proxy.port), timeout=IO_TIMEOUT)
        self.addCleanup(sock.close)
        head = request_block("PUT", "/orders/1", [("x-fencing-token", "5")])  # no content-length
        data = b"".join(frame(DATA, 0, 1, b"c" * 16384) for _ in range(3))
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS, 1, head) + data)
        wait_for(lambda: self.backend.connections() and len(self.backend.connections()[0]) > 16384,
                 what="the streamed part at the backend")
        sock.sendall(frame(RST_STREAM, 0, 1, struct.pack(">I", CANCEL)))
        answer = gs.nghttp("http://127.0.0.1:%d/orders/2" % self.proxy.port, "GET")
        self.assertEqual(answer.status, 200, "%r" % answer)
        self.backend.quiet(period=0.2)
        first = self.backend.connections()[0]
        self.assertTrue(b"Transfer-Encoding: chunked\r\n" in first.split(b"\r\n\r\n")[0] + b"\r\n",
                        "it streamed chunked: %r" % first[:300])
        self.assertFalse(first.endswith(b"0\r\n\r\n"), "no last chunk: the message stays unfinished")
        requests = self.backend.requests()
        self.assertEqual([(r.connection, r.target) for r in requests], [(1, "/orders/2")],
                         "the reset PUT never becomes a complete request, and its backend "
                         "connection is not reused: %r" % requests)

    def test_a_held_body_shorter_than_its_length_never_reaches_the_backend(self):
        self.send_short_body(10, 5)
        self.backend.quiet(period=0.2)
        self.assertEqual(self.backend.received(), b"",
                         "a body held whole that fell short reaches the backend not at all")

    def test_a_streamed_body_shorter_than_its_length_is_left_unfinished(self):
        self.send_short_body(60000, 40000, before_end=lambda: self.backend.connections() and
                             len(self.backend.connections()[0]) > 16384)
        self.backend.quiet(period=0.2)
        first = self.backend.connections()[0]
        self.assertTrue(first.startswith(b"PUT /orders/1 HTTP/1.1\r\n"), first[:100])
        self.assertTrue(b"Content-Length: 60000\r\n" in first.split(b"\r\n\r\n")[0] + b"\r\n",
                        "it streamed with the client's length: %r" % first[:300])
        self.assertEqual(self.backend.requests(), [],
                         "the backend never has a complete request: %r" % self.backend.requests())
        # The connection that carries an unfinished message is closed: the next request goes on
        # a new one (on the old one it would be read as the rest of the body).
        answer = gs.nghttp("http://127.0.0.1:%d/orders/2" % self.proxy.port, "GET")
        self.assertEqual(answer.status, 200, "%r" % answer)
        requests = self.backend.requests()
        self.assertEqual([(r.connection, r.target) for r in requests], [(1, "/orders/2")],
                         "the next request is on a new backend connection: %r" % requests)


if __name__ == "__main__":
    unittest.main()
