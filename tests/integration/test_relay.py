"""Forwarding as a reverse proxy must: bodies arrive intact in every framing, both ways, over
kept-alive connections, for HTTP/1.1 and HTTP/1.0 clients, and HEAD gets no body."""

import queue
import socket
import threading

from harness import ProxyTestCase, raw_exchange, read_response

ROUTES = [{"name": "orders", "prefix": "/orders"}]
BIG = bytes(range(256)) * 4096  # 1 MiB: many relay buffers' worth, every byte value


class HeadRecorder:
    """A backend on 127.0.0.1 that keeps the head of every request it gets (bodyless requests
    only) and answers each with 204, so that a test can see exactly what the proxy forwarded."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.heads = queue.Queue()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, data = data.split(b"\r\n\r\n", 1)
                self.heads.put(head.decode("latin-1"))
                conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")

    def next_head(self):
        """(request line, [(name, value)...]) of the next request it got."""
        lines = self.heads.get(timeout=10).split("\r\n")
        return lines[0], [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]

    def close(self):
        self.listener.close()


class ForwardedHeadTest(ProxyTestCase):
    """What the backend sees of the client's head: the Host an absolute-form target names, and no
    field named with '_' unless headers_with_underscores says allow."""

    def start(self, **config):
        recorder = HeadRecorder()
        self.addCleanup(recorder.close)
        proxy = self.start_proxy(dict({"routes": ROUTES}, **config), recorder.url)
        return proxy, recorder

    def test_absolute_form_forwards_its_authority_as_the_host(self):
        proxy, recorder = self.start()
        status, _, _ = raw_exchange(proxy.port, b"GET http://other.example:81/orders/x?q=1 HTTP/1.1\r\n"
                                                b"Host: proxy.example\r\n\r\n")
        self.assertEqual(status, 204)
        line, fields = recorder.next_head()
        self.assertEqual(line, "GET /orders/x?q=1 HTTP/1.1")
        self.assertEqual([v for n, v in fields if n.lower() == "host"], ["other.example:81"])

    def test_fields_named_with_an_underscore_are_dropped_by_default_and_kept_on_allow(self):
        request = (b"GET /orders/u HTTP/1.1\r\nHost: t\r\nX_Fencing_Token: 99\r\nX-Kept: 1\r\n"
                   b"a_b: 2\r\n\r\n")
        for policy, kept in ((None, False), ("allow", True)):
            with self.subTest(headers_with_underscores=policy or "drop (default)"):
                proxy, recorder = self.start(**({"headers_with_underscores": policy} if policy else {}))
                self.assertEqual(raw_exchange(proxy.port, request)[0], 204)
                _, fields = recorder.next_head()
                names = [n for n, _ in fields]
                self.assertIn("X-Kept", names)
                for name in ("X_Fencing_Token", "a_b"):
                    self.assertEqual(name in names, kept, "%s under %s: %r" % (name, policy, fields))

    def test_fields_named_with_an_underscore_are_refused_on_reject(self):
        proxy, recorder = self.start(headers_with_underscores="reject")
        status, headers, body = raw_exchange(proxy.port, b"PUT /orders/u HTTP/1.1\r\nHost: t\r\n"
                                                         b"X-Fencing-Token: 1\r\nX_Fencing_Token: 99\r\n"
                                                         b"Content-Length: 0\r\n\r\n")
        self.assertProblem((status, headers, body), 400, "an underscored field under reject")
        self.assertEqual(headers.get("connection", "").lower(), "close")
        self.assertTrue(recorder.heads.empty(), "nothing reached the backend")


class RelayTest(ProxyTestCase):
    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()
        self.proxy = self.start_proxy({"routes": ROUTES}, self.backend)

    def raw(self, data):
        with socket.create_connection(("127.0.0.1", self.proxy.port), timeout=10) as s:
            s.sendall(data)
            return read_response(s)

    def test_large_body_with_content_length_both_ways(self):
        self.assert2xx(self.proxy.request("PUT", "/orders/big", 1, BIG), "a 1 MiB write")
        status, headers, body = self.proxy.request("GET", "/orders/big")
        self.assertEqual(status, 200)
        self.assertEqual(body, BIG, "the 1 MiB body comes back byte for byte")
        self.assertEqual(headers.get("content-length"), str(len(BIG)))

    def test_chunked_request_body_is_relayed(self):
        chunks = [b"hello ", b"chunked ", b"world"]
        body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        status, _, _ = self.raw(b"PUT /orders/c HTTP/1.1\r\nHost: t\r\nX-Fencing-Token: 1\r\n"
                                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + body)
        self.assertEqual(status, 200)
        self.assertEqual(self.proxy.request("GET", "/orders/c")[2], b"hello chunked world")

    def test_chunked_response_body_is_relayed(self):
        self.assert2xx(self.proxy.request("PUT", "/orders/r", 1, BIG[:5000]))
        status, headers, body = self.proxy.request("GET", "/orders/r", headers={"X-Demo-Chunked": "1"})
        self.assertEqual(status, 200)
        self.assertEqual(body, BIG[:5000], "a chunked response arrives whole")
        self.assertEqual(headers.get("transfer-encoding"), "chunked")

    def test_http10_client_gets_a_complete_response(self):
        self.assert2xx(self.proxy.request("PUT", "/orders/h", 1, b"for an old client"))
        for extra in (b"", b"X-Demo-Chunked: 1\r\n"):
            with self.subTest(chunked_backend=bool(extra)):
                status, headers, body = self.raw(b"GET /orders/h HTTP/1.0\r\n" + extra + b"\r\n")
                self.assertEqual(status, 200)
                self.assertEqual(body, b"for an old client")
                self.assertNotIn("transfer-encoding", headers, "HTTP/1.0 has no chunked coding")

    def test_head_has_no_body_and_keeps_the_connection(self):
        self.assert2xx(self.proxy.request("PUT", "/orders/x", 1, b"12345"))
        conn = self.proxy.connect()
        for _ in range(3):
            status, headers, body = self.proxy.request("HEAD", "/orders/x", conn=conn)
            self.assertEqual((status, body), (200, b""))
            self.assertEqual(headers.get("content-length"), "5", "HEAD keeps the entity's length")
        self.assertEqual(self.proxy.request("GET", "/orders/x", conn=conn)[2], b"12345")
        conn.close()

    def test_many_requests_on_one_connection(self):
        conn = self.proxy.connect()
        for i in range(200):
            self.assert2xx(self.proxy.request("PUT", "/orders/k%d" % (i % 5), 1, b"v%d" % i, conn=conn))
        self.assertEqual(self.proxy.request("GET", "/orders/k4", conn=conn)[2], b"v199")
        conn.close()
