"""TLS to the backend (`backend: https://...`, `backend_tls:`) against the real fencing-proxy binary.

A CA, a second unrelated CA, a server certificate for 127.0.0.1 and localhost and a client
certificate are made at test time with the openssl command line. The backend is
raw_backend.RawBackend wrapped in TLS (Python's ssl on the server side): it records the bytes each
connection decrypted, counts the handshakes that completed and keeps the errors of those that
failed. What is checked, through the binary:

  - requests are forwarded over TLS and the backend connection is reused (one handshake);
  - a chain that does not verify (another CA, the system's trust store for a private CA) or a
    name that does not match is a 502 of type backend-tls, and the backend got no request byte;
  - a client certificate is presented when configured (the backend requires one), and without
    one the request is refused the same way;
  - a handshake that stalls ends at timeouts.connect;
  - a fenced raise and write work end to end over TLS;
  - a backend that sends stray bytes after a response gets that connection discarded, not
    reused; a non-idempotent request is not resent after a TLS connection broke under it;
  - whole or nothing: a torn or abandoned body within the buffered limit opens no backend
    connection at all;
  - --check loads the files (a missing one is FILE:LINE:COL at its key), a reload with new
    settings closes the pooled connections, and a reload naming a missing file keeps them.

Python standard library and the openssl command; 127.0.0.1 only; every wait is bounded.
"""

import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import unittest

from harness import ProxyTestCase, connect, metric, run_cli, wait_for

IO = 5.0
PROBLEM_TLS = "urn:fencing-proxy:problem:backend-tls"
OK2 = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
HANDSHAKES = "fencing_proxy_upstream_tls_handshakes_total"

_certs = None  # the module's certificates (made once)


class Certificates:
    """Files made with the openssl command line in a temporary directory (EC P-256 keys)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="fp-backend-tls-")
        d = self.dir
        self.ca, self.ca_key = d + "/ca.pem", d + "/ca.key"
        self.other_ca = d + "/other.pem"
        self.server, self.server_key = d + "/server.pem", d + "/server.key"
        self.client, self.client_key = d + "/client.pem", d + "/client.key"
        key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        with open(d + "/server.ext", "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        with open(d + "/client.ext", "w") as f:
            f.write("subjectAltName=URI:spiffe://test/ns/shop/sa/writer\nextendedKeyUsage=clientAuth\n")
        steps = [
            ["req", "-x509", *key, "-days", "2", "-subj", "/CN=fp-test-ca", "-keyout", self.ca_key,
             "-out", self.ca],
            ["req", "-x509", *key, "-days", "2", "-subj", "/CN=fp-other-ca", "-keyout",
             d + "/other.key", "-out", self.other_ca],
            ["req", *key, "-subj", "/CN=fp-test-server", "-keyout", self.server_key, "-out",
             d + "/server.csr"],
            ["x509", "-req", "-days", "2", "-in", d + "/server.csr", "-CA", self.ca, "-CAkey",
             self.ca_key, "-CAcreateserial", "-extfile", d + "/server.ext", "-out", self.server],
            ["req", *key, "-subj", "/CN=fp-test-client", "-keyout", self.client_key, "-out",
             d + "/client.csr"],
            ["x509", "-req", "-days", "2", "-in", d + "/client.csr", "-CA", self.ca, "-CAkey",
             self.ca_key, "-CAcreateserial", "-extfile", d + "/client.ext", "-out", self.client],
        ]
        for step in steps:
            subprocess.run(["openssl", *step], check=True, capture_output=True, timeout=30)

    def server_context(self, client_ca=None):
        """The backend's side: its certificate, and with client_ca, a client certificate
        signed by it required."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server, self.server_key)
        if client_ca:
            context.load_verify_locations(client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def setUpModule():
    global _certs
    if shutil.which("openssl") is None:
        raise unittest.SkipTest("the openssl command is needed to make the test certificates")
    _certs = Certificates()


def tearDownModule():
    if _certs is not None:
        shutil.rmtree(_certs.dir, ignore_errors=True)


def config(backend_tls=None, **extra):
    """One worker (one upstream pool), a fenced route /fenced."""
    cfg = {"threads": 1, "unmatched": "pass", "routes": [{"name": "fenced", "prefix": "/fenced"}],
           "timeouts": {"connect": "2s", "request": "5s", "idle": "10s", "header_read": "5s",
                        "shutdown": "2s"}}
    if backend_tls is not None:
        cfg["backend_tls"] = backend_tls
    cfg.update(extra)
    return cfg


class BackendTlsTest(ProxyTestCase):

    def tls_backend(self, script="answer", client_ca=None, **options):
        return self.start_raw_backend(script, tls=_certs.server_context(client_ca), **options)

    def assertBackendTls(self, response, what):
        problem = self.assertProblem(response, 502, what)
        self.assertEqual(problem.get("type"), PROBLEM_TLS, "%s: %r" % (what, problem))
        return problem

    def assertNothingReached(self, backend, what):
        """The backend's handshake failed and no request byte was decrypted."""
        wait_for(lambda: backend.handshake_failures(), IO, what="%s: the failed handshake" % what)
        self.assertEqual(backend.handshakes(), 0, what)
        self.assertEqual(backend.received(), b"", "%s: request bytes reached the backend" % what)

    # -- verified and reused --

    def test_requests_are_forwarded_over_tls_on_one_connection(self):
        backend = self.tls_backend()
        proxy = self.start_proxy(config({"ca_file": _certs.ca}), backend)
        for i in range(3):
            self.assert2xx(proxy.request("GET", "/plain/%d" % i), "request %d" % i)
        self.assertEqual(backend.handshakes(), 1, "the TLS connection is reused")
        self.assertEqual(len(backend.connections()), 1)
        self.assertEqual([r.target for r in backend.requests()], ["/plain/0", "/plain/1", "/plain/2"])
        samples = proxy.metrics()
        self.assertEqual(metric(samples, HANDSHAKES, result="success"), 1)
        self.assertEqual(metric(samples, HANDSHAKES, result="certificate"), 0)

    def test_the_server_name_is_checked_and_sent(self):
        backend = self.tls_backend()
        proxy = self.start_proxy(config({"ca_file": _certs.ca, "server_name": "localhost"}), backend)
        self.assert2xx(proxy.request("GET", "/by-name"))

    # -- refused handshakes: 502 backend-tls, nothing sent --

    def test_another_ca_is_a_502_and_nothing_is_sent(self):
        backend = self.tls_backend()
        proxy = self.start_proxy(config({"ca_file": _certs.other_ca}), backend)
        problem = self.assertBackendTls(proxy.request("PUT", "/fenced/a", token=5, body=b"w"), "other CA")
        self.assertIn("certificate verify failed", problem["detail"])
        self.assertNothingReached(backend, "other CA")
        self.assertEqual(proxy.fence("fenced").get("max_token"), 5,
                         "the raise is durable before the backend is asked; only the write failed")
        samples = proxy.metrics_counting(HANDSHAKES, 1, result="certificate")
        self.assertEqual(metric(samples, HANDSHAKES, result="certificate"), 1)
        self.assertEqual(metric(samples, "fencing_proxy_requests_total", route="fenced",
                                outcome="upstream_error"), 1)

    def test_another_name_is_a_502_and_nothing_is_sent(self):
        backend = self.tls_backend()
        proxy = self.start_proxy(config({"ca_file": _certs.ca, "server_name": "db.elsewhere.test"}),
                                 backend)
        problem = self.assertBackendTls(proxy.request("GET", "/x"), "wrong name")
        self.assertIn("hostname mismatch", problem["detail"])
        self.assertNothingReached(backend, "wrong name")

    def test_the_system_trust_store_refuses_a_private_ca(self):
        backend = self.tls_backend()
        proxy = self.start_proxy(config(), backend)  # no backend_tls: every default
        self.assertBackendTls(proxy.request("GET", "/x"), "system trust store")
        self.assertNothingReached(backend, "system trust store")

    def test_a_handshake_that_stalls_ends_at_the_connect_timeout(self):
        silent = self.start_raw_backend("record")  # takes the ClientHello, never answers
        cfg = config({"ca_file": _certs.ca})
        cfg["timeouts"]["connect"] = "300ms"
        proxy = self.start_proxy(cfg, "https://127.0.0.1:%d" % silent.port)
        problem = self.assertBackendTls(proxy.request("GET", "/x"), "stalled handshake")
        self.assertIn("timeouts.connect", problem["detail"])
        samples = proxy.metrics_counting(HANDSHAKES, 1, result="timeout")
        self.assertEqual(metric(samples, HANDSHAKES, result="timeout"), 1)

    # -- client certificates --

    def test_a_client_certificate_is_presented_when_configured(self):
        backend = self.tls_backend(client_ca=_certs.ca)
        proxy = self.start_proxy(config({"ca_file": _certs.ca, "cert_file": _certs.client,
                                         "key_file": _certs.client_key}), backend)
        self.assert2xx(proxy.request("GET", "/mtls"))
        [peer] = backend.peer_certificates()
        self.assertIn(("URI", "spiffe://test/ns/shop/sa/writer"), peer["subjectAltName"])

    def test_without_the_client_certificate_the_backend_refuses_and_gets_nothing(self):
        backend = self.tls_backend(client_ca=_certs.ca)
        proxy = self.start_proxy(config({"ca_file": _certs.ca}), backend)
        # TLS 1.3: the backend refuses after the proxy's side of the handshake is done, with an
        # alert the proxy reads in place of the answer, or by resetting the connection as the
        # request is written (it did not read the proxy's last handshake record); TLS 1.2:
        # during the handshake. Each round lets the other happen.
        for i in range(3):
            problem = self.assertBackendTls(proxy.request("POST", "/x", body=b"w"), "no client certificate")
            self.assertRegex(problem["detail"], "certificate required|client certificate")
        wait_for(lambda: len(backend.handshake_failures()) == 3, IO, what="the refused handshakes")
        self.assertNothingReached(backend, "no client certificate")

    # -- the fence over TLS --

    def test_a_fenced_raise_and_write_work_end_to_end(self):
        backend = self.tls_backend()
        proxy = self.start_proxy(config({"ca_file": _certs.ca}), backend)
        self.assert2xx(proxy.request("PUT", "/fenced/a", token=7, body=b"seven"), "raise to 7")
        self.assertProblem(proxy.request("PUT", "/fenced/a", token=6, body=b"six"), 409, "stale 6")
        self.assert2xx(proxy.request("PUT", "/fenced/a", token=7, body=b"again"), "equal 7")
        self.assertEqual(proxy.fence("fenced").get("max_token"), 7)
        writes = [(r.method, r.header("X-Fencing-Token"), r.body) for r in backend.requests()]
        self.assertEqual(writes, [("PUT", ["7"], b"seven"), ("PUT", ["7"], b"again")])
        self.assertEqual(backend.handshakes(), 1)

    # -- a connection out of step is never reused --

    def test_stray_bytes_after_a_response_discard_the_connection(self):
        def respond(request):
            if request.target == "/stray":
                return [(0, OK2), (0, b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON")]
            return [(0, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nclean")]
        backend = self.tls_backend("scripted", respond=respond)
        proxy = self.start_proxy(config({"ca_file": _certs.ca}), backend)
        status, _, body = proxy.request("GET", "/stray")
        self.assertEqual((status, body), (200, b"ok"))
        wait_for(lambda: len(backend.sent_log()) == 2, IO, what="the stray bytes sent")
        status, _, body = proxy.request("GET", "/next")
        self.assertEqual((status, body), (200, b"clean"), "the stray bytes became an answer")
        self.assertEqual(backend.handshakes(), 2, "the connection that spoke was reused")
        self.assertEqual([r.connection for r in backend.requests()], [0, 1])

    def test_a_post_is_not_resent_when_the_tls_connection_breaks_under_it(self):
        # The second request of every connection is read, then the connection is closed (without
        # a close_notify) and nothing is answered.
        backend = self.tls_backend("read_then_close", nth=2)
        proxy = self.start_proxy(config({"ca_file": _certs.ca}), backend)
        self.assert2xx(proxy.request("GET", "/warm"))
        self.assertProblem(proxy.request("POST", "/once", body=b"w"), 502, "POST on a dying connection")
        self.assertEqual(sum(1 for r in backend.requests() if r.target == "/once"), 1,
                         "a POST that may have reached the backend was sent again")
        # An idempotent one is sent again once, on a new connection.
        self.assert2xx(proxy.request("GET", "/warm2"))
        self.assert2xx(proxy.request("GET", "/twice"))
        self.assertEqual(sum(1 for r in backend.requests() if r.target == "/twice"), 2)

    def test_a_torn_or_abandoned_body_opens_no_tls_connection(self):
        # Whole or nothing, as with a plain backend: the body is read and checked before a
        # backend connection is taken, so not even a handshake happens.
        backend = self.tls_backend()
        proxy = self.start_proxy(config({"ca_file": _certs.ca}, access_log=True), backend)
        with connect(proxy.port) as sock:
            sock.sendall(b"PUT /fenced/torn HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 2\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n7d00\r\n" + b"a" * 32000 + b"\r\nzz\r\n")
            self.assertEqual(sock.recv(64)[:12], b"HTTP/1.1 400", "a bad chunk size after 32,000 bytes")
        with connect(proxy.port) as sock:
            sock.sendall(b"PUT /fenced/abandoned HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 2\r\n"
                         b"Content-Length: 200000\r\n\r\n" + b"c" * 100000)
        wait_for(lambda: [e for e in proxy.access_log() if e.get("path") == "/fenced/abandoned"], IO,
                 what="the access line of the abandoned upload")
        self.assertEqual(backend.handshakes(), 0, "a TLS connection was opened for a body that never came whole")
        self.assertEqual(backend.received(), b"")
        self.assertEqual(proxy.fence("fenced").get("max_token", 0), 0, "nothing raised")

    # -- files: --check, start and reload --

    def test_check_loads_the_files_and_names_a_missing_one_at_its_key(self):
        backend = self.tls_backend()
        missing = os.path.join(self.workdir, "missing-ca.pem")
        proxy = self.start_proxy(config({"server_name": "localhost", "ca_file": missing}), backend,
                                 start=False)
        result = run_cli("--config", proxy.config_path, "--check")
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        line = next((l for l in proxy.config_text.splitlines() if "ca_file" in l), "")
        line_number = proxy.config_text.splitlines().index(line) + 1
        column = line.index("ca_file") + 1
        self.assertIn("%s:%d:%d: backend_tls.ca_file: cannot read %s: No such file or directory"
                      % (proxy.config_path, line_number, column, missing), result.stderr)
        # It does not start either.
        proxy.start(wait=False)
        proxy.wait_exit()
        self.assertIn("backend_tls.ca_file", proxy.stderr_text())

        with open(proxy.config_path, "w") as f:
            f.write(proxy.config_text.replace(missing, _certs.ca))
        result = run_cli("--config", proxy.config_path, "--check")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_check_refuses_backend_tls_with_an_http_backend(self):
        plain = self.start_raw_backend()
        proxy = self.start_proxy(config({"ca_file": _certs.ca}), plain, start=False)
        result = run_cli("--config", proxy.config_path, "--check")
        self.assertEqual(result.returncode, 1)
        self.assertIn("backend_tls: the backend is http://", result.stderr)

    def test_a_reload_with_new_settings_closes_the_pooled_connections(self):
        backend = self.tls_backend()
        proxy = self.start_proxy(config({"ca_file": _certs.ca}), backend)
        self.assert2xx(proxy.request("GET", "/before"))
        # A reload whose CA file is missing is refused: the running settings and the pooled
        # connection are kept.
        text = proxy.config_text
        with open(proxy.config_path, "w") as f:
            f.write(text.replace(_certs.ca, os.path.join(self.workdir, "gone.pem")))
        proxy.proc.send_signal(signal.SIGHUP)
        proxy.metrics_counting("fencing_proxy_config_reloads_total", 1, result="failure")
        self.assert2xx(proxy.request("GET", "/kept"))
        self.assertEqual(backend.handshakes(), 1)
        # A reload that trusts another CA only: the pooled connection (verified by the old one)
        # is closed, and the next request's handshake fails.
        with open(proxy.config_path, "w") as f:
            f.write(text.replace(_certs.ca, _certs.other_ca))
        proxy.proc.send_signal(signal.SIGHUP)
        proxy.metrics_counting("fencing_proxy_config_reloads_total", 1, result="success")
        self.assertBackendTls(proxy.request("GET", "/after"), "after the reload")
        self.assertEqual(backend.handshakes(), 1)
        self.assertEqual([r.target for r in backend.requests()], ["/before", "/kept"])


    def test_a_rotated_ca_file_is_a_reload_without_sighup(self):
        # The CA file swapped in place as a Secret volume swaps it (a new file renamed over the
        # old), the route file untouched: the proxy sees the change itself, reloads, closes the
        # pooled connection (verified by the old CA), and the next handshake uses the new file.
        backend = self.tls_backend()
        ca_file = os.path.join(self.workdir, "backend-ca.pem")
        shutil.copyfile(_certs.ca, ca_file)
        proxy = self.start_proxy(config({"ca_file": ca_file}), backend)
        self.assert2xx(proxy.request("GET", "/before"))
        shutil.copyfile(_certs.other_ca, ca_file + ".new")
        os.rename(ca_file + ".new", ca_file)
        proxy.metrics_counting("fencing_proxy_config_reloads_total", 1, result="success")
        self.assertBackendTls(proxy.request("GET", "/after"), "after the CA file changed")
        self.assertEqual(backend.handshakes(), 1)
        self.assertEqual([r.target for r in backend.requests()], ["/before"])


if __name__ == "__main__":
    unittest.main()
