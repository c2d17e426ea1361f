"""Forwarding as a reverse proxy must: bodies arrive intact in every framing, both ways, over
kept-alive connections, for HTTP/1.1 and HTTP/1.0 clients, and HEAD gets no body."""

import socket

from harness import ProxyTestCase, read_response

ROUTES = [{"name": "orders", "prefix": "/orders"}]
BIG = bytes(range(256)) * 4096  # 1 MiB: many relay buffers' worth, every byte value


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
