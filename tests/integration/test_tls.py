"""TLS on the client listener through the real binary (contract "Transport security"): versions,
ALPN, plain HTTP on the TLS port, the handshake's deadline, client certificates (require and
optional), who may write (writers, 403 writer-not-allowed before the token is read),
identity_header, plain_listen, certificate rotation through a Kubernetes-Secret-style `..data`
symlink swap while a connection stays open, SIGHUP, a broken new certificate, and --check.

The certificates are made at test time with the `openssl` command line (tls_support.Pki): a CA,
two server certificates (SANs localhost and 127.0.0.1), client certificates with a SPIFFE URI SAN,
with a DNS SAN, with only a CN, and one from another CA. Clients are Python's ssl module; the
backend is the raw recording backend (raw_backend.py), so "nothing reached the backend" is checked
on its bytes. Hostile bytes on the TLS port: test_tls_hostile; a scanner's view: test_tls_scan.
"""

import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import unittest

import tls_support
from harness import IO_TIMEOUT, http_request, metric, read_until_closed, run_cli, wait_for
from tls_support import https, request, tls_connect

WRITER = "spiffe://cluster.local/ns/shop/sa/order-writer"
READER = "spiffe://cluster.local/ns/shop/sa/reader"
BATCH = "batch.shop.svc"
IDENTITY_HEADER = "X-Client-Identity"
ROUTES = [
    {"name": "orders", "prefix": "/orders", "writers": [WRITER, "dns:" + BATCH],
     "identity_header": IDENTITY_HEADER},
    {"name": "open", "prefix": "/open", "identity_header": IDENTITY_HEADER},
]


def refused(port, ctx, method="GET", path="/open"):
    """Whether the server refuses this client: the handshake fails, or (TLS 1.3, where a client
    certificate is judged after the client's side of the handshake is done) the connection
    ends with an alert instead of an answer."""
    try:
        request(port, ctx, method, path)
    except (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected):
        return True
    return False


def peer_serial(port, ctx):
    """The serial number (hex, upper case) of the certificate a new handshake gets."""
    with tls_connect(port, ctx) as sock:
        return sock.getpeercert()["serialNumber"]


class TlsTestCase(tls_support.TlsTestCase):
    """The base's server certificate, a second one for the rotation tests, and the clients."""

    ROUTES = ROUTES

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        pki = cls.pki
        cls.server_b = pki.server("server-b", 0x1B02, days=60)  # outlives server-a: a rotation shows
        cls.writer = pki.client("writer", 0x2001, sans=["URI:" + WRITER])
        cls.reader = pki.client("reader", 0x2002, sans=["URI:" + READER])
        cls.batch = pki.client("batch", 0x2003, sans=["DNS:" + BATCH.upper()])  # DNS names fold case
        cls.cn_only = pki.client("cn-only", 0x2004, cn=WRITER)  # a CN is never an identity
        cls.stranger = pki.client("stranger", 0x2005, sans=["URI:" + WRITER], ca=pki.other_ca)


class HandshakeTest(TlsTestCase):
    def test_tls_1_2_and_1_3_with_alpn_http_1_1(self):
        proxy = self.start()
        for version, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
            # h2 is offered to every client, first (an HTTP/1.1 backend too: stream by stream)
            both = self.ctx(self.writer, minimum=version, maximum=version, alpn=("h2", "http/1.1"))
            with tls_connect(proxy.port, both) as sock:
                self.assertEqual(sock.selected_alpn_protocol(), "h2", name)
            ctx = self.ctx(self.writer, minimum=version, maximum=version, alpn=("http/1.1",))
            with tls_connect(proxy.port, ctx) as sock:
                self.assertEqual(sock.version(), name)
                self.assertEqual(sock.selected_alpn_protocol(), "http/1.1")
                if name == "TLSv1.2":
                    cipher = sock.cipher()[0]
                    self.assertTrue(cipher.startswith("ECDHE-") and ("GCM" in cipher or "CHACHA20" in cipher), cipher)
            status, _, body = request(proxy.port, ctx, "GET", "/open/1")
            self.assertEqual((status, body), (200, b"ok\n"), name)
        # A client that offers no ALPN is served HTTP/1.1 all the same.
        ctx = self.ctx(self.writer, alpn=None)
        with tls_connect(proxy.port, ctx) as sock:
            self.assertIsNone(sock.selected_alpn_protocol())
        self.assertEqual(request(proxy.port, ctx, "GET", "/open/2")[0], 200)
        self.assertGreaterEqual(self.handshakes(proxy, "ok"), 7)

    def test_h2_client_over_tls_in_front_of_an_http1_backend(self):
        """h2 chosen by ALPN, the backend HTTP/1.1: the stream becomes one HTTP/1.1 request with
        the client's identity, its body whole with its Content-Length."""
        proxy = self.start()
        cert, key = self.writer
        body = b"over h2 and TLS"
        run = subprocess.run(
            ["curl", "-sS", "--http2", "--cacert", self.ca_file, "--cert", cert, "--key", key,
             "-X", "PUT", "-H", "x-fencing-token: 5", "--data-binary", "@-", "-o", "/dev/null",
             "-w", "%{http_code} %{http_version}", "--max-time", str(int(IO_TIMEOUT)),
             "https://127.0.0.1:%d/orders/1" % proxy.port],
            input=body, capture_output=True, timeout=IO_TIMEOUT + 5)
        self.assertEqual(run.stdout, b"200 2", "an h2 PUT over TLS: %r %r" % (run.stdout, run.stderr))
        requests = self.backend.requests()
        self.assertEqual(len(requests), 1, "%r" % requests)
        self.assertEqual(requests[0].body, body)
        self.assertEqual(requests[0].header("Content-Length"), [str(len(body))])
        self.assertEqual(requests[0].header(IDENTITY_HEADER), [WRITER],
                         "the client certificate's identity reaches the backend")

    def test_alpn_with_no_protocol_the_proxy_speaks_is_refused(self):
        """RFC 7301: a client whose protocols the server speaks none of gets no_application_protocol
        (an h2-only client is served h2, whatever the backend speaks)."""
        proxy = self.start()
        with tls_connect(proxy.port, self.ctx(self.writer, alpn=("h2",))) as sock:
            self.assertEqual(sock.selected_alpn_protocol(), "h2")
        with self.assertRaises(ssl.SSLError) as caught:
            tls_connect(proxy.port, self.ctx(self.writer, alpn=("spdy/3.1", "h3")))
        self.assertIn("NO APPLICATION PROTOCOL", str(caught.exception).upper().replace("_", " "))
        wait_for(lambda: self.handshakes(proxy, "failed") >= 1, what="the failed handshake counted")
        self.assertEqual(self.backend.received(), b"")

    def test_tls_1_1_is_refused(self):
        proxy = self.start()
        ctx = self.ctx(self.writer, minimum=ssl.TLSVersion.TLSv1_1, maximum=ssl.TLSVersion.TLSv1_1)
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.1 at all
        with self.assertRaises((ssl.SSLError, ConnectionError)):
            tls_connect(proxy.port, ctx)
        # The refusal is the proxy's: its handshake failed (the ClientHello reached it).
        wait_for(lambda: self.handshakes(proxy, "failed") >= 1, what="the refused TLS 1.1 handshake counted")
        self.assertEqual(self.handshakes(proxy, "ok"), 0)

    def test_min_version_1_3_refuses_1_2(self):
        proxy = self.start(min_version="1.3")
        with self.assertRaises(ssl.SSLError):
            tls_connect(proxy.port, self.ctx(self.writer, maximum=ssl.TLSVersion.TLSv1_2))
        with tls_connect(proxy.port, self.ctx(self.writer)) as sock:
            self.assertEqual(sock.version(), "TLSv1.3")
        wait_for(lambda: self.handshakes(proxy, "failed") == 1, what="one failed handshake")

    def test_plain_http_to_the_tls_port_reaches_nothing(self):
        """The handshake fails on the first bytes and the connection is closed without an HTTP
        answer; the request reaches neither the backend nor the fence."""
        proxy = self.start(routes=[{"name": "orders", "prefix": "/orders"}])
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT) as sock:
            sock.sendall(b"PUT /orders/1 HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 5\r\nContent-Length: 2\r\n\r\nhi")
            data, closed = read_until_closed(sock, IO_TIMEOUT)
        self.assertTrue(closed, "the connection is closed")
        self.assertNotIn(b"HTTP/", data, "no HTTP answer: %r" % data[:100])
        # At most a TLS alert record (content type 21).
        self.assertTrue(data == b"" or data[:1] == b"\x15", data[:20])
        wait_for(lambda: self.handshakes(proxy, "failed") >= 1, what="the failed handshake counted")
        self.assertEqual(self.backend.received(), b"")
        self.assertEqual(proxy.fence("orders").get("max_token", 0), 0)

    def test_a_slow_handshake_is_cut_at_header_read(self):
        proxy = self.start(timeouts={"header_read": "1s"})
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT) as sock:
            started = time.monotonic()
            sock.sendall(b"\x16\x03\x01\x02\x00")  # the head of a ClientHello record, then nothing
            data, closed = read_until_closed(sock, 6.0)
            took = time.monotonic() - started
        self.assertTrue(closed, "closed by the proxy")
        self.assertGreaterEqual(took, 0.9, "not before header_read")
        self.assertLess(took, 3.0, "within header_read and a sweep period")
        wait_for(lambda: self.handshakes(proxy, "timeout") == 1, what="the timeout counted")
        self.assertEqual(self.backend.received(), b"")


class ClientCertificateTest(TlsTestCase):
    def test_require_refuses_no_certificate_and_another_ca(self):
        proxy = self.start()
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            self.assertTrue(refused(proxy.port, self.ctx(None, maximum=version)), "no certificate, %s" % version)
            self.assertTrue(refused(proxy.port, self.ctx(self.stranger, maximum=version)), "another CA, %s" % version)
        self.assertFalse(refused(proxy.port, self.ctx(self.writer)))
        wait_for(lambda: self.handshakes(proxy, "failed") >= 4, what="four failed handshakes")
        self.assertEqual(len(self.backend.requests()), 1, "only the writer's request reached the backend")

    def test_optional_serves_a_client_without_a_certificate_without_an_identity(self):
        proxy = self.start(client_certificate="optional")
        anonymous = self.ctx(None)
        status, _, _ = request(proxy.port, anonymous, "GET", "/open/1", headers={IDENTITY_HEADER: WRITER})
        self.assertEqual(status, 200)
        self.assertEqual(self.backend.requests()[-1].header(IDENTITY_HEADER), [], "a forged identity is dropped")
        # Without an identity it may not write where writers are listed.
        problem = self.assertProblem(request(proxy.port, anonymous, "PUT", "/orders/1", token=5, body=b"x"), 403)
        self.assertEqual(problem["type"], "urn:fencing-proxy:problem:writer-not-allowed")
        self.assert2xx(request(proxy.port, self.ctx(self.writer), "PUT", "/orders/1", token=5, body=b"x"))
        # A certificate that is sent is verified, optional or not.
        self.assertTrue(refused(proxy.port, self.ctx(self.stranger)))


class WritersTest(TlsTestCase):
    def test_only_writers_send_fenced_methods_and_the_rest_is_decided_before_the_token(self):
        proxy = self.start()
        writer, reader, cn_only = self.ctx(self.writer), self.ctx(self.reader), self.ctx(self.cn_only)
        self.assert2xx(request(proxy.port, writer, "PUT", "/orders/1", token=5, body=b"w"), "the writer writes")
        before = len(self.backend.requests())

        for who, ctx in (("a reader", reader), ("a certificate with only a CN", cn_only)):
            for token in (10, 3, 5):  # a raise, a stale token, the max: all refused the same way
                response = request(proxy.port, ctx, "PUT", "/orders/1", token=token, body=b"r")
                problem = self.assertProblem(response, 403, "%s, token %d" % (who, token))
                self.assertEqual(problem["type"], "urn:fencing-proxy:problem:writer-not-allowed")
                self.assertNotIn("max_token", problem)
                self.assertNotIn("token", problem)
                self.assertNotIn("fence", problem, "nothing about the fence in a stranger's answer")
                self.assertNotIn("x-fencing-token-max", response[1])
            # Not fenced (GET): passes.
            self.assertEqual(request(proxy.port, ctx, "GET", "/orders/1")[0], 200, who)
        problem = self.assertProblem(request(proxy.port, reader, "PUT", "/orders/1", token=10, body=b"r"), 403)
        self.assertIn(READER, problem["detail"])

        self.assertEqual([r.method for r in self.backend.requests()[before:]], ["GET", "GET"],
                         "only the unfenced requests reached the backend")
        self.assertEqual(proxy.fence("orders")["max_token"], 5, "nothing raised the fence")
        samples = proxy.metrics_counting("fencing_proxy_requests_total", 7, route="orders", outcome="rejected_writer")
        self.assertEqual(metric(samples, "fencing_proxy_requests_total", route="orders", outcome="rejected_writer"), 7)

        # A DNS SAN is dns:NAME, in lower case; a prefix of the list admits too.
        self.assert2xx(request(proxy.port, self.ctx(self.batch), "PUT", "/orders/1", token=6, body=b"b"))
        self.assertEqual(self.backend.requests()[-1].header(IDENTITY_HEADER), ["dns:" + BATCH])
        self.assertEqual(proxy.fence("orders")["max_token"], 6)

    def test_writers_are_applied_on_reload(self):
        proxy = self.start()
        reader = self.ctx(self.reader)
        self.assertEqual(request(proxy.port, reader, "PUT", "/orders/1", token=1, body=b"r")[0], 403)
        text = proxy.config_text.replace(json.dumps(WRITER), json.dumps("spiffe://cluster.local/ns/shop/*"))
        self.assertNotEqual(text, proxy.config_text)
        with open(proxy.config_path, "w", encoding="utf-8") as f:
            f.write(text)
        proxy.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: request(proxy.port, reader, "PUT", "/orders/1", token=1, body=b"r")[0] == 200,
                 what="the reader admitted by the new writers")

    def test_the_identity_header_is_the_proxys_alone(self):
        proxy = self.start()
        forged = {IDENTITY_HEADER: "spiffe://cluster.local/ns/shop/sa/admin"}
        self.assertEqual(request(proxy.port, self.ctx(self.writer), "GET", "/open/1", headers=forged)[0], 200)
        self.assertEqual(self.backend.requests()[-1].header(IDENTITY_HEADER), [WRITER])
        self.assertEqual(request(proxy.port, self.ctx(self.cn_only), "GET", "/open/2", headers=forged)[0], 200)
        self.assertEqual(self.backend.requests()[-1].header(IDENTITY_HEADER), [], "no identity, no field")
        # The access log carries the identity.
        lines = wait_for(lambda: [l for l in proxy.access_log() if l.get("path") == "/open/1"], what="access line")
        self.assertEqual(lines[0]["identity"], WRITER)
        lines = wait_for(lambda: [l for l in proxy.access_log() if l.get("path") == "/open/2"], what="access line")
        self.assertNotIn("identity", lines[0])

    def test_plain_listen_serves_without_an_identity(self):
        proxy = self.start(plain_listen=True)
        forged = {IDENTITY_HEADER: WRITER}
        status, _, _ = http_request(self.plain_port, "GET", "/open/1", headers=forged)
        self.assertEqual(status, 200)
        self.assertEqual(self.backend.requests()[-1].header(IDENTITY_HEADER), [])
        received = self.backend.received()
        problem = self.assertProblem(http_request(self.plain_port, "PUT", "/orders/1", b"p",
                                                  {"X-Fencing-Token": "5", **forged}), 403)
        self.assertEqual(problem["type"], "urn:fencing-proxy:problem:writer-not-allowed")
        self.assertEqual(self.backend.received(), received, "nothing reached the backend")
        self.assertEqual(proxy.fence("orders").get("max_token", 0), 0)
        # TLS on listen all the same.
        self.assert2xx(request(proxy.port, self.ctx(self.writer), "PUT", "/orders/1", token=5, body=b"w"))


class ReloadTest(TlsTestCase):
    def test_a_secret_swap_rotates_the_certificate_and_open_connections_keep_theirs(self):
        proxy = self.start()
        ctx = self.ctx(self.writer)
        kept = https(proxy.port, ctx)
        self.addCleanup(kept.close)
        self.assertEqual(request(proxy.port, ctx, "GET", "/open/1", conn=kept)[0], 200)
        kept_socket = kept.sock
        self.assertEqual(kept_socket.getpeercert()["serialNumber"], "1A01")
        expiry_before = metric(proxy.metrics(), "fencing_proxy_tls_certificate_expiry_timestamp_seconds",
                               file=self.secret.path("tls.crt"))
        self.assertIsNotNone(expiry_before)

        self.secret.write({"tls.crt": self.server_b[0], "tls.key": self.server_b[1], "ca.crt": self.ca_file})
        started = time.monotonic()
        wait_for(lambda: peer_serial(proxy.port, ctx) == "1B02", timeout=12.0, interval=0.1,
                 what="a new handshake with the new certificate")
        self.assertLess(time.monotonic() - started, 10.0)
        self.assertEqual(self.reloads(proxy, "ok"), 1)
        self.assertEqual(self.reloads(proxy, "failed"), 0)
        self.assertEqual(self.last_reload_ok(proxy), 1)
        expiry_after = metric(proxy.metrics(), "fencing_proxy_tls_certificate_expiry_timestamp_seconds",
                              file=self.secret.path("tls.crt"))
        self.assertGreater(expiry_after - expiry_before, 29 * 86400, "the expiry series follows the new certificate")

        # The open connection still works, on its own handshake.
        self.assertEqual(request(proxy.port, ctx, "GET", "/open/2", conn=kept)[0], 200)
        self.assertIs(kept.sock, kept_socket, "the same connection")
        self.assertEqual(kept.sock.getpeercert()["serialNumber"], "1A01")

    def test_sighup_reloads_the_files(self):
        proxy = self.start()
        proxy.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: self.reloads(proxy, "ok") == 1, what="the TLS files reloaded on SIGHUP")
        self.assertEqual(peer_serial(proxy.port, self.ctx(self.writer)), "1A01")
        self.assertIn("TLS certificate reloaded", proxy.stderr_text())

    def test_a_broken_new_certificate_keeps_the_old_one(self):
        proxy = self.start()
        ctx = self.ctx(self.writer)
        self.assertEqual(self.last_reload_ok(proxy), 1)
        with open(self.server_b[0], "rb") as f:
            half = f.read()[:200]  # half a certificate
        self.secret.write({"tls.crt": half, "tls.key": self.server_b[1], "ca.crt": self.ca_file})
        wait_for(lambda: self.reloads(proxy, "failed") == 1, timeout=12.0, what="the failed reload counted")
        self.assertEqual(peer_serial(proxy.port, ctx), "1A01", "the running certificate keeps serving")
        self.assertEqual(request(proxy.port, ctx, "GET", "/open/1")[0], 200)
        self.assertIn("TLS files not reloaded", proxy.stderr_text())
        # The counter counts the failure once; the gauge says 0 for as long as the files stay
        # broken (the alert follows the gauge).
        self.assertEqual(self.last_reload_ok(proxy), 0)

        # A key of another certificate: refused the same way.
        self.secret.write({"tls.crt": self.server_b[0], "tls.key": self.server_a[1], "ca.crt": self.ca_file})
        wait_for(lambda: self.reloads(proxy, "failed") == 2, timeout=12.0, what="the mismatched key refused")
        self.assertEqual(peer_serial(proxy.port, ctx), "1A01")

        # Fixed: taken.
        self.secret.write({"tls.crt": self.server_b[0], "tls.key": self.server_b[1], "ca.crt": self.ca_file})
        wait_for(lambda: peer_serial(proxy.port, ctx) == "1B02", timeout=12.0, interval=0.1, what="the fixed files")
        self.assertEqual(self.reloads(proxy, "ok"), 1)
        self.assertEqual(self.last_reload_ok(proxy), 1)


class CheckTest(TlsTestCase):
    def test_check_reads_the_files(self):
        config = {"tls": self.tls_block(), "routes": ROUTES}
        proxy = self.start_proxy(config, self.backend, start=False)
        result = run_cli("--config", proxy.config_path, "--check")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("TLS, certificate serial 1A01", result.stdout)

        missing = os.path.join(self.workdir, "no-such.key")
        config = {"tls": self.tls_block(key_file=missing), "routes": ROUTES}
        proxy = self.start_proxy(config, self.backend, start=False, name="missing")
        result = run_cli("--config", proxy.config_path, "--check")
        self.assertEqual(result.returncode, 1)
        line = next(l for l in proxy.config_text.splitlines() if "key_file" in l)
        self.assertRegex(result.stderr, r"%s:\d+:\d+: tls.key_file %s: cannot read: No such file or directory"
                         % (proxy.config_path, missing))
        self.assertIn(missing, line)
        # The start refuses the same way.
        proxy.start(wait=False)
        self.assertEqual(proxy.wait_exit(), 1)
        self.assertIn("tls.key_file", proxy.stderr_text())

        with open(os.path.join(self.workdir, "garbage.crt"), "w") as f:
            f.write("not a certificate\n")
        config = {"tls": self.tls_block(cert_file=os.path.join(self.workdir, "garbage.crt")), "routes": ROUTES}
        proxy = self.start_proxy(config, self.backend, start=False, name="garbage")
        result = run_cli("--config", proxy.config_path, "--check")
        self.assertEqual(result.returncode, 1)
        self.assertIn("tls.cert_file", result.stderr)
        self.assertIn("holds no PEM certificate", result.stderr)

    def test_check_names_each_missing_file_and_writers_without_client_cas(self):
        cases = (
            ("cert_file", {"cert_file": os.path.join(self.workdir, "no-such.crt")}, ROUTES,
             r"tls\.cert_file .*no-such\.crt: cannot read"),
            ("client_ca_file", {"client_ca_file": os.path.join(self.workdir, "no-such-ca.crt")}, ROUTES,
             r"tls\.client_ca_file .*no-such-ca\.crt: cannot read"),
            # Writers are identities from verified client certificates: without client CAs no
            # client has one, so the route could never be written; refused, not failed open.
            ("writers", {"client_ca_file": None}, ROUTES, r"routes\[0\]\.writers: needs tls\.client_ca_file"),
        )
        for name, tls, routes, expected in cases:
            config = {"tls": self.tls_block(**tls), "routes": routes}
            proxy = self.start_proxy(config, self.backend, start=False, name="check-" + name)
            result = run_cli("--config", proxy.config_path, "--check")
            self.assertEqual(result.returncode, 1, name)
            self.assertRegex(result.stderr, re.escape(proxy.config_path) + r":\d+:\d+: " + expected, name)
            proxy.start(wait=False)
            self.assertEqual(proxy.wait_exit(), 1, "the start refuses the same way (%s)" % name)


if __name__ == "__main__":
    unittest.main()
