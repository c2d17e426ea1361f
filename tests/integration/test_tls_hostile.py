"""Hostile clients on the TLS port, on raw sockets: a ClientHello cut short and then closed, a
ClientHello cut short and then silence (cut at timeouts.header_read), 4 KiB of random bytes, a TLS
record header announcing a huge length and then garbage. After each: the handshake is counted as
failed (or timeout) in fencing_proxy_tls_handshakes_total, nothing reached the backend, the answer
is at most a TLS alert, and a normal TLS request right after is served. (Plain HTTP on the TLS
port and a bare record header then silence: test_tls.)
"""

import os
import socket
import ssl
import time
import unittest

from harness import IO_TIMEOUT, read_until_closed, wait_for
from tls_support import TlsTestCase, client_hello, request

HEADER_READ = 1.0  # seconds: timeouts.header_read of these tests, the handshake's bound
SWEEP_SLACK = 2.0  # the deadline is enforced by a periodic sweep: allow it this much past


class HostileTlsClientTest(TlsTestCase):
    def setUp(self):
        super().setUp()
        # No client certificates asked for: the hostile clients never get that far, and the
        # normal request afterwards needs none.
        self.proxy = self.start(timeouts={"header_read": "%gs" % HEADER_READ}, client_ca_file=None)

    def hello(self):
        return client_hello(self.ctx())

    def send(self, data, close=False):
        """data on a new raw connection; with close, closed at once (-> None); otherwise the
        bytes the proxy sends until it closes the connection, its close awaited for the
        handshake's bound -> (bytes, closed, seconds from the first byte sent to the close)."""
        sock = socket.create_connection(("127.0.0.1", self.proxy.port), timeout=IO_TIMEOUT)
        with sock:
            started = time.monotonic()
            try:
                sock.sendall(data)
            except OSError:  # closed by the proxy while the rest was still being sent
                pass
            if close:
                return None
            reply, closed = read_until_closed(sock, HEADER_READ + SWEEP_SLACK + 1.0)
            return reply, closed, time.monotonic() - started

    def assertAtMostAnAlert(self, reply):
        self.assertNotIn(b"HTTP/", reply, "no HTTP answer: %r" % reply[:100])
        # Nothing but TLS alert records (content type 21), if anything.
        self.assertTrue(reply == b"" or reply[:1] == b"\x15", "not an alert: %r" % reply[:20])

    def assertCountedAndHealthy(self, results=("failed",)):
        """Exactly one handshake ended with one of `results`, none succeeded, nothing reached
        the backend; then a normal request is served and is the only one the backend saw."""
        proxy = self.proxy

        def counted():
            return {r: self.handshakes(proxy, r) for r in ("ok", "failed", "timeout")}
        wait_for(lambda: sum(counted()[r] for r in ("failed", "timeout")) >= 1,
                 what="the hostile client's handshake counted")
        counts = counted()
        self.assertEqual(sum(counts[r] for r in results), 1, counts)
        self.assertEqual(counts["ok"] + counts["failed"] + counts["timeout"], 1, counts)
        self.assertEqual(self.backend.received(), b"", "nothing reached the backend")

        status, _, body = request(proxy.port, self.ctx(), "GET", "/open/after")
        self.assertEqual((status, body), (200, b"ok\n"), "a normal TLS request right after")
        self.assertEqual([r.target for r in self.backend.requests()], ["/open/after"])
        self.assertEqual(self.handshakes(proxy, "ok"), 1)
        self.assertTrue(proxy.running())

    def test_a_client_hello_cut_short_then_closed(self):
        hello = self.hello()
        self.send(hello[:len(hello) // 2], close=True)
        self.assertCountedAndHealthy(("failed",))

    def test_a_client_hello_cut_short_then_silence_is_cut_at_header_read(self):
        hello = self.hello()
        reply, closed, took = self.send(hello[:len(hello) // 2])
        self.assertTrue(closed, "closed by the proxy")
        self.assertGreaterEqual(took, HEADER_READ - 0.1, "not before header_read")
        self.assertLess(took, HEADER_READ + SWEEP_SLACK, "within header_read and a sweep period")
        self.assertAtMostAnAlert(reply)
        self.assertCountedAndHealthy(("timeout",))

    def test_random_bytes(self):
        data = os.urandom(4096)
        reply, closed, _ = self.send(data)
        self.assertTrue(closed, "closed by the proxy (first bytes %s)" % data[:8].hex())
        self.assertAtMostAnAlert(reply)
        # Random bytes that happen to read as the head of an SSLv2-style hello announce more than
        # was sent: the proxy then waits for the rest until header_read. Either is a refusal.
        self.assertCountedAndHealthy(("failed", "timeout"))

    def test_a_record_header_announcing_a_huge_length_then_garbage(self):
        # A handshake record of 65535 bytes: past TLS's limit (2^14 plaintext, 2^14 + 2048
        # ciphertext), so refused on its header, without waiting for (or buffering) the body.
        reply, closed, took = self.send(b"\x16\x03\x01\xff\xff" + os.urandom(4096))
        self.assertTrue(closed, "closed by the proxy")
        self.assertLess(took, HEADER_READ, "refused on the header, not cut at header_read")
        self.assertAtMostAnAlert(reply)
        self.assertCountedAndHealthy(("failed",))


if __name__ == "__main__":
    unittest.main()
