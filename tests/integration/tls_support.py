"""What the listener's TLS tests share (test_tls, test_tls_hostile, test_tls_scan): certificates
made at test time with the `openssl` command line (Pki), a directory laid out as Kubernetes mounts
a Secret (Secret), Python ssl client helpers, and TlsTestCase: a proxy with TLS on `listen` in
front of the raw recording backend (raw_backend.py), so "nothing reached the backend" is checked
on its bytes.
"""

import http.client
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import unittest

from harness import IO_TIMEOUT, HarnessError, ProxyTestCase, free_port, http_request, metric


def openssl(*args, cwd):
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=30,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise HarnessError("openssl %s failed: %s" % (" ".join(args), result.stderr))
    return result.stdout


class Pki:
    """Certificates made with the openssl CLI in one directory (P-256 keys: fast to make)."""

    def __init__(self, directory):
        self.dir = directory
        self.ca = self._ca("ca", "fencing-proxy test CA")
        self.other_ca = self._ca("other-ca", "another CA")

    def path(self, name):
        return os.path.join(self.dir, name)

    def _key(self, name):
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name + ".key",
                cwd=self.dir)

    def _ca(self, name, cn):
        self._key(name)
        openssl("req", "-x509", "-new", "-key", name + ".key", "-out", name + ".crt", "-days", "30", "-subj",
                "/CN=" + cn, "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=self.dir)
        return name

    def leaf(self, name, serial, cn=None, sans=None, usage="serverAuth", ca=None, days=30):
        """A certificate signed by `ca` (default: the test CA); returns (crt path, key path)."""
        ca = ca or self.ca
        self._key(name)
        subject = "/CN=" + (cn or name).replace("/", "\\/")  # '/' separates RDNs in -subj
        openssl("req", "-new", "-key", name + ".key", "-out", name + ".csr", "-subj", subject, cwd=self.dir)
        lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature",
                 "extendedKeyUsage=" + usage]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        with open(self.path(name + ".ext"), "w") as f:
            f.write("\n".join(lines) + "\n")
        openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key", "-set_serial",
                str(serial), "-days", str(days), "-extfile", name + ".ext", "-out", name + ".crt", cwd=self.dir)
        return self.path(name + ".crt"), self.path(name + ".key")

    def server(self, name, serial, days=30):
        return self.leaf(name, serial, sans=["DNS:localhost", "IP:127.0.0.1"], usage="serverAuth", days=days)

    def client(self, name, serial, sans=None, cn=None, ca=None):
        return self.leaf(name, serial, cn=cn, sans=sans, usage="clientAuth", ca=ca)


class Secret:
    """A directory laid out as Kubernetes mounts a Secret: the files are symlinks through
    `..data`, which points to a timestamped directory; an update writes a new directory and swaps
    `..data` with one rename (kubelet's AtomicWriter)."""

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory)
        self.version = 0

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, files):
        """files: {name: source path or bytes}. Swaps them all in at once."""
        self.version += 1
        stamp = "..2024_01_01_00_00_%02d.%d" % (self.version, os.getpid())
        target = os.path.join(self.dir, stamp)
        os.makedirs(target)
        for name, source in files.items():
            if isinstance(source, bytes):
                with open(os.path.join(target, name), "wb") as f:
                    f.write(source)
            else:
                shutil.copyfile(source, os.path.join(target, name))
        tmp = os.path.join(self.dir, "..data_tmp")
        os.symlink(stamp, tmp)
        os.rename(tmp, os.path.join(self.dir, "..data"))
        for name in files:
            link = os.path.join(self.dir, name)
            if not os.path.islink(link):
                os.symlink(os.path.join("..data", name), link)


def client_context(cert=None, ca=None, minimum=None, maximum=None, alpn=("http/1.1",)):
    """A client's TLS context that trusts the test CA (ca: another file) and presents `cert` (a
    (crt, key) pair) when given."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    if cert:
        ctx.load_cert_chain(*cert)
    if minimum:
        ctx.minimum_version = minimum
    if maximum:
        ctx.maximum_version = maximum
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def tls_connect(port, ctx, timeout=IO_TIMEOUT):
    """A TLS connection to 127.0.0.1:port, handshake done."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        return ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    except Exception:
        sock.close()
        raise


def client_hello(ctx, server_hostname="127.0.0.1"):
    """The bytes `ctx` opens a handshake with (one TLS record holding a ClientHello), made in
    memory: a hostile or hand-edited client sends them, or part of them, on a raw socket."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    if hello[:1] != b"\x16" or hello[5:6] != b"\x01":
        raise HarnessError("not a ClientHello record: %r" % hello[:10])
    return hello


def https(port, ctx, timeout=IO_TIMEOUT):
    """A keep-alive HTTPS connection for harness.http_request."""
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ctx)


def request(port, ctx, method, path, token=None, body=b"", headers=None, conn=None):
    h = dict(headers or {})
    if token is not None:
        h["X-Fencing-Token"] = str(token)
    own = conn is None
    conn = conn or https(port, ctx)
    try:
        return http_request(port, method, path, body, h, conn)
    finally:
        if own:
            conn.close()


class TlsTestCase(ProxyTestCase):
    """A test CA and a server certificate (server-a: SANs localhost and 127.0.0.1), made once per
    class; each test gets the raw backend and a Secret directory holding tls.crt, tls.key and
    ca.crt. start() runs the proxy with TLS on `listen`, routes ROUTES by default."""

    ROUTES = [{"name": "open", "prefix": "/open"}]

    @classmethod
    def setUpClass(cls):
        if shutil.which("openssl") is None:
            raise unittest.SkipTest("the openssl command line is not installed")
        cls.pki_dir = tempfile.mkdtemp(prefix="fp-pki-")
        pki = cls.pki = Pki(cls.pki_dir)
        cls.server_a = pki.server("server-a", 0x1A01)
        cls.ca_file = pki.path(pki.ca + ".crt")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.pki_dir, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.backend = self.start_raw_backend("answer")
        self.secret = Secret(os.path.join(self.workdir, "tls"))
        self.secret.write({"tls.crt": self.server_a[0], "tls.key": self.server_a[1], "ca.crt": self.ca_file})

    def tls_block(self, **extra):
        """The route file's `tls:`; a key given as None is left out (e.g. client_ca_file=None:
        no client certificates asked for)."""
        block = {"cert_file": self.secret.path("tls.crt"), "key_file": self.secret.path("tls.key"),
                 "client_ca_file": self.secret.path("ca.crt")}
        block.update(extra)
        return {k: v for k, v in block.items() if v is not None}

    def start(self, routes=None, timeouts=None, plain_listen=False, **tls):
        config = {"tls": self.tls_block(**tls), "routes": routes or self.ROUTES}
        if timeouts:
            config["timeouts"] = timeouts
        if plain_listen:
            self.plain_port = free_port()
            config["plain_listen"] = "127.0.0.1:%d" % self.plain_port
        return self.start_proxy(config, self.backend)

    def ctx(self, cert=None, **kwargs):
        return client_context(cert, self.ca_file, **kwargs)

    def handshakes(self, proxy, result):
        return metric(proxy.metrics(), "fencing_proxy_tls_handshakes_total", listener="listen", result=result) or 0

    def reloads(self, proxy, result):
        return metric(proxy.metrics(), "fencing_proxy_tls_reloads_total", result=result) or 0

    def last_reload_ok(self, proxy):
        return metric(proxy.metrics(), "fencing_proxy_tls_last_reload_successful")
