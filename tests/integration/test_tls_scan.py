"""The TLS listener as a scanner sees it: sslscan's XML report on the running binary, checked
against the contract ("Transport security": TLS 1.2 and 1.3 only, forward-secret AEAD suites, no
renegotiation, no compression), with min_version "1.2" and "1.3".

Two of the contract's points are checked here without sslscan, because sslscan 2.0's own checks
cannot see them on this server: its renegotiation and compression probes connect with TLS 1.0
only (so against a server without TLS 1.0 they report "not supported" whatever the server
does), and its compression probe needs an OpenSSL built with zlib (Debian's is not; the report
then has no <compression> element). Renegotiation is tried over TLS 1.2 with `openssl s_client`'s
R command; compression is offered (DEFLATE, then null) in a ClientHello edited on a raw socket,
and the ServerHello's choice is read.
"""

import re
import shutil
import socket
import ssl
import subprocess
import unittest
import xml.etree.ElementTree as ET

from harness import IO_TIMEOUT, HarnessError
from tls_support import TlsTestCase, client_hello, request

# TLS 1.3's suites that are AEAD with a full tag; the rest (TLS_AES_128_CCM_8_SHA256, and RFC
# 9150's integrity-only TLS_SHA256_SHA256 / TLS_SHA384_SHA384) are not acceptable.
TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                "TLS_AES_128_CCM_SHA256"}
# TLS 1.2 (OpenSSL's names, which sslscan prints): an ephemeral key exchange and an AEAD with a
# full tag (GCM, ChaCha20-Poly1305, CCM; not CCM8).
TLS12_ACCEPTABLE = re.compile(
    r"^(ECDHE|DHE)-(ECDSA|RSA)-([A-Z0-9]+-GCM-SHA(256|384)|CHACHA20-POLY1305|AES(128|256)-CCM)$")
# Named in a failure: what makes a suite unacceptable.
WEAKNESSES = ("RC4", "3DES", "DES-CBC", "NULL", "EXP", "anon", "ADH", "AECDH", "CBC", "MD5", "PSK", "SRP")
OLD_PROTOCOLS = (("ssl", "2"), ("ssl", "3"), ("tls", "1.0"), ("tls", "1.1"))


def sslscan(port):
    """sslscan's XML report on 127.0.0.1:port -> the <ssltest> element."""
    result = subprocess.run(["sslscan", "--no-colour", "--xml=-", "127.0.0.1:%d" % port], capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise HarnessError("sslscan exited %d: %s" % (result.returncode, result.stderr or result.stdout))
    try:
        document = ET.fromstring(result.stdout)
    except ET.ParseError as e:
        raise HarnessError("sslscan's XML does not parse (%s): %r" % (e, result.stdout[:500])) from None
    test = document.find("ssltest")
    if test is None:
        raise HarnessError("no <ssltest> in sslscan's report: %r" % result.stdout[:500])
    return test


class Report:
    """What one sslscan report says."""

    def __init__(self, test):
        self.xml = ET.tostring(test, encoding="unicode")
        self.protocols = {(p.get("type"), p.get("version")): p.get("enabled") == "1" for p in test.iter("protocol")}
        self.ciphers = [(c.get("sslversion"), c.get("cipher")) for c in test.iter("cipher")]
        self.renegotiation = test.find("renegotiation")
        self.compression = test.find("compression")
        self.heartbleed = [h.get("sslversion") for h in test.iter("heartbleed") if h.get("vulnerable") != "0"]

    def enabled(self):
        return sorted("%s %s" % key for key, on in self.protocols.items() if on)

    def accepted(self, version):
        return [name for v, name in self.ciphers if v == version]


def cipher_problem(version, name):
    """Why an accepted suite is unacceptable, or None."""
    if version == "TLSv1.3":
        return None if name in TLS13_SUITES else "not an AEAD suite with a full tag"
    if version != "TLSv1.2":
        return "accepted on %s" % version
    weak = [w for w in WEAKNESSES if w in name]
    if weak or not TLS12_ACCEPTABLE.match(name):
        return "not ephemeral key exchange with an AEAD" + (" (%s)" % ", ".join(weak) if weak else "")
    return None


def offer_compression(port, ctx):
    """A TLS 1.2 ClientHello from ctx with its compression methods made [DEFLATE, null], sent
    on a raw socket -> the compression method of the ServerHello (0: null), or None when the
    server answered without a ServerHello (an alert or a close)."""
    hello = bytearray(client_hello(ctx))
    at = 5 + 4 + 2 + 32  # record header, handshake header, client_version, random
    at += 1 + hello[at]  # session_id
    suites_length = int.from_bytes(hello[at:at + 2], "big")
    offered = {bytes(hello[i:i + 2]) for i in range(at + 2, at + 2 + suites_length, 2)}
    at += 2 + suites_length
    if hello[at:at + 2] != b"\x01\x00":
        raise HarnessError("the ClientHello offers compression methods %r" % bytes(hello[at:at + 4]))
    hello[at:at + 2] = b"\x02\x01\x00"
    hello[3:5] = (int.from_bytes(hello[3:5], "big") + 1).to_bytes(2, "big")  # record length
    hello[6:9] = (int.from_bytes(hello[6:9], "big") + 1).to_bytes(3, "big")  # handshake length
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT) as sock:
        sock.sendall(bytes(hello))
        data = b""
        while len(data) < 5 or len(data) < 5 + int.from_bytes(data[3:5], "big"):
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    if data[0] != 22 or data[5] != 2:  # not a handshake record holding a ServerHello
        return None
    at = 5 + 4 + 2 + 32
    at += 1 + data[at]  # session_id
    if data[at:at + 2] not in offered:  # the parse is off
        raise HarnessError("the ServerHello's suite %s was not offered" % data[at:at + 2].hex())
    return data[at + 2]  # after the cipher suite


def try_renegotiation(port, ca_file):
    """A TLS 1.2 connection with openssl s_client, then its R command (a client-initiated
    renegotiation) -> (ServerHellos received, s_client's output)."""
    proc = subprocess.Popen(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-tls1_2", "-CAfile", ca_file,
                             "-servername", "localhost", "-msg"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # s_client reads its commands once the handshake is done; a refused renegotiation ends
        # it (an alert), an accepted one leaves it running: cut at IO_TIMEOUT.
        proc.stdin.write("R\n")
        proc.stdin.flush()
        try:
            output, _ = proc.communicate(timeout=IO_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if "RENEGOTIATING" not in output:
        raise HarnessError("s_client did not try to renegotiate:\n%s" % output[-3000:])
    return len(re.findall(r"^<<< .*ServerHello$", output, re.M)), output


class ScanTest(TlsTestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("sslscan") is None:
            raise unittest.SkipTest("sslscan is not installed (Debian package sslscan; "
                                    "scripts/install-deps.sh --with-tests installs it)")
        super().setUpClass()

    def scan(self, proxy):
        report = Report(sslscan(proxy.port))
        # The scan itself must have worked: the handshakes it made are the proxy's.
        self.assertTrue(report.ciphers, "sslscan saw no suite at all:\n%s" % report.xml)
        return report

    def check_common(self, report, proxy):
        """What holds for either min_version."""
        for key in OLD_PROTOCOLS:
            self.assertIn(key, report.protocols, "sslscan reported on %s %s" % key)
            self.assertFalse(report.protocols[key], "%s %s enabled:\n%s" % (key + (report.xml,)))
        self.assertTrue(report.protocols.get(("tls", "1.3")), "TLS 1.3 enabled")
        self.assertTrue(report.accepted("TLSv1.3"), "TLS 1.3 suites accepted")
        problems = [(v, name, why) for v, name in report.ciphers for why in [cipher_problem(v, name)] if why]
        self.assertEqual(problems, [], "unacceptable suites accepted")
        # sslscan's own verdicts, where it gives them (see the module's docstring).
        self.assertIsNotNone(report.renegotiation, "a <renegotiation> element")
        self.assertEqual(report.renegotiation.get("supported"), "0", "renegotiation supported")
        if report.compression is not None:
            self.assertEqual(report.compression.get("supported"), "0", "compression supported")
        self.assertEqual(report.heartbleed, [], "heartbleed")
        # The server still serves.
        self.assertEqual(request(proxy.port, self.ctx(), "GET", "/open/1")[0], 200)

    def test_min_version_1_2(self):
        proxy = self.start(client_ca_file=None)  # client certificates would stop sslscan's handshakes
        report = self.scan(proxy)
        self.check_common(report, proxy)
        self.assertEqual(report.enabled(), ["tls 1.2", "tls 1.3"])
        self.assertTrue(report.accepted("TLSv1.2"), "TLS 1.2 suites accepted:\n%s" % report.xml)

        # No compression: offered DEFLATE first, the server picks null.
        ctx = self.ctx(maximum=ssl.TLSVersion.TLSv1_2)
        self.assertEqual(offer_compression(proxy.port, ctx), 0, "the ServerHello's compression method")

        # No renegotiation: the server answers a TLS 1.2 client's new ClientHello with the
        # no_renegotiation alert, and no second ServerHello comes. Its hellos carry RFC 5746's
        # renegotiation_info, so no legacy (insecure) renegotiation could follow either.
        hellos, output = try_renegotiation(proxy.port, self.ca_file)
        self.assertIn("Secure Renegotiation IS supported", output)
        self.assertEqual(hellos, 1, "a renegotiation completed:\n%s" % output[-3000:])
        self.assertRegex(output, r"<<< TLS 1\.2, Alert \[length 0002\], warning no_renegotiation")

    def test_min_version_1_3(self):
        proxy = self.start(client_ca_file=None, min_version="1.3")
        report = self.scan(proxy)
        self.check_common(report, proxy)
        self.assertEqual(report.enabled(), ["tls 1.3"])
        self.assertFalse(report.protocols[("tls", "1.2")], "TLS 1.2 enabled:\n%s" % report.xml)
        self.assertEqual(report.accepted("TLSv1.2"), [])


if __name__ == "__main__":
    unittest.main()
