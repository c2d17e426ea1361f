"""Integration-test helpers: the real fencing-proxy binary and the demo backend on 127.0.0.1.

Python standard library only. Every process a test starts is stopped in its cleanup (use
ProxyTestCase.start_backend / start_raw_backend / start_proxy) and, as a last resort, at interpreter exit. Every wait
is bounded; a proxy that does not come up raises HarnessError with its stderr.

Environment:
  FP_BINARY      the fencing-proxy binary (default: build/proxy/fencing-proxy in the source tree)
  FP_SOURCE_DIR  the source tree (default: two levels above this file)
  FP_FAULT_SHIM  the drop_unsynced LD_PRELOAD shim built from tests/fault (default: looked for
                 in the build tree FP_BINARY belongs to; empty means not built)
"""

import atexit
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from raw_backend import RawBackend

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.environ.get("FP_SOURCE_DIR") or os.path.join(HERE, "..", ".."))
BINARY = os.path.abspath(os.environ.get("FP_BINARY") or
                         os.path.join(HERE, "..", "..", "build", "proxy", "fencing-proxy"))
DEMO_BACKEND = os.path.join(SOURCE_DIR, "scripts", "demo_backend.py")
TOKEN_HEADER = "X-Fencing-Token"
START_TIMEOUT = 10.0   # seconds for a process to come up or go down
IO_TIMEOUT = 10.0      # seconds for one HTTP exchange

_live = set()  # Popen objects not yet stopped; killed at exit if a test forgot


class HarnessError(RuntimeError):
    pass


def _stop_process(proc, sig=signal.SIGTERM, timeout=START_TIMEOUT):
    """Sends sig, waits (bounded), escalates to SIGKILL. Returns the exit code."""
    if proc.poll() is None:
        try:
            if sig != signal.SIGKILL:
                proc.send_signal(signal.SIGCONT)  # a paused (SIGSTOP) process cannot act on sig
            proc.send_signal(sig)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
        except ProcessLookupError:
            pass
    _live.discard(proc)
    return proc.returncode


@atexit.register
def _stop_all():
    for proc in list(_live):
        _stop_process(proc, signal.SIGKILL)


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout=START_TIMEOUT, interval=0.02, what="condition"):
    """Polls predicate() until it returns a true value (returned) or timeout (HarnessError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise HarnessError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def _port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


_binary_checked = []


def check_binary():
    """Raises HarnessError with a clear message when the proxy binary is missing or broken
    (not executable, or `--version` fails or hangs). The --version probe runs once."""
    if not os.path.isfile(BINARY) or not os.access(BINARY, os.X_OK):
        raise HarnessError("fencing-proxy binary not found or not executable at %s "
                           "(build it, or set FP_BINARY)" % BINARY)
    if not _binary_checked:
        try:
            probe = subprocess.run([BINARY, "--version"], capture_output=True, text=True,
                                   timeout=START_TIMEOUT, stdin=subprocess.DEVNULL)
            problem = None if probe.returncode == 0 else "exited %d: %s" % (
                probe.returncode, (probe.stderr or probe.stdout).strip()[:2000])
        except (OSError, subprocess.TimeoutExpired) as e:
            problem = repr(e)
        _binary_checked.append(problem)
    if _binary_checked[0] is not None:
        raise HarnessError("fencing-proxy at %s is broken: --version %s"
                           % (BINARY, _binary_checked[0]))


def fault_shim_path():
    """The drop_unsynced shim (tests/fault/drop_unsynced.c), or None when it was not built."""
    path = os.environ.get("FP_FAULT_SHIM")
    if path is None:  # run by hand: the build tree the binary came from
        path = os.path.join(os.path.dirname(BINARY), "..", "tests", "fault",
                            "libfp_drop_unsynced.so")
    return os.path.abspath(path) if path and os.path.isfile(path) else None


_sanitizer = []


def binary_sanitizer():
    """"address" or "thread" when the proxy binary is built with that sanitizer, else None."""
    if not _sanitizer:
        found, tail = None, b""
        with open(BINARY, "rb") as f:
            while found is None:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                data = tail + chunk
                found = ("address" if b"__asan_init" in data else
                         "thread" if b"__tsan_init" in data else None)
                tail = data[-16:]
        _sanitizer.append(found)
    return _sanitizer[0]


def preload_env(*libraries):
    """Extra environment to run the proxy with LD_PRELOAD libraries (in this order; none when the
    preloading is done by a wrapper such as fiu-run). A sanitizer build insists that its runtime
    come first in the library list; fault-injection libraries only wrap libc calls, so that check
    is turned off."""
    env = {}
    if libraries:
        env["LD_PRELOAD"] = " ".join(libraries)
    asan = os.environ.get("ASAN_OPTIONS")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
    return env


def run_cli(*args, timeout=START_TIMEOUT):
    """Runs the binary with args to completion: CompletedProcess with text stdout/stderr."""
    if not os.path.isfile(BINARY) or not os.access(BINARY, os.X_OK):
        check_binary()
    try:
        return subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise HarnessError("fencing-proxy %s did not exit within %ss" % (" ".join(map(str, args)),
                                                                        timeout)) from e


# ---------------------------------------------------------------------------------------------
# State-file records (proxy/state/FORMAT.md), to build or pad a log while no proxy runs on it.

def _crc32c_table():
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


STATE_MAGIC = b"FENCELOG"
STATE_VERSION = 1


def _masked_crc(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def state_header():
    """The 16-byte state-file header: magic, u32 version, masked CRC-32C of the first 12 bytes."""
    start = STATE_MAGIC + struct.pack("<I", STATE_VERSION)
    return start + struct.pack("<I", _masked_crc(start))


def write_state_file(path, fences):
    """A complete state file holding {fence: max_token}, for a proxy that is not running yet."""
    with open(path, "wb") as f:
        f.write(state_header() + b"".join(set_max_record(n, t) for n, t in fences.items()))
        f.flush()
        os.fsync(f.fileno())


def set_max_record(fence, token):
    """One SET_MAX record: masked CRC-32C of type+payload, u16 payload length, type 1, payload."""
    name = fence.encode()
    body = bytes([1]) + struct.pack("<QB", token, len(name)) + name
    return struct.pack("<IH", _masked_crc(body), len(body) - 1) + body


def key_max_record(fence, key, token):
    """One KEY_MAX record (format version 2): like SET_MAX with type 2 and the key after the name
    (u8 length, bytes)."""
    name, key = fence.encode(), key.encode()
    body = bytes([2]) + struct.pack("<QB", token, len(name)) + name + bytes([len(key)]) + key
    return struct.pack("<IH", _masked_crc(body), len(body) - 1) + body


def pad_state_file_with_keys(path, target_bytes, fence, keys):
    """Appends token-0 KEY_MAX records of keys the file already holds (they lower nothing and
    create no key) until the file reaches target_bytes, to pass the compaction threshold of a
    keyed fence. The file must be version 2 (a proxy has opened it)."""
    size = os.path.getsize(path)
    records = b"".join(key_max_record(fence, k, 0) for k in keys)
    with open(path, "ab") as f:
        f.write(records * max(1, (target_bytes - size) // len(records) + 1))
        f.flush()
        os.fsync(f.fileno())


def pad_state_file(path, target_bytes, fences):
    """Appends token-0 records of the fences (they lower nothing: replay keeps the maximum) until
    the file reaches target_bytes, e.g. to pass the size at which the log is compacted."""
    size = os.path.getsize(path)
    records = b"".join(set_max_record(f, 0) for f in fences)
    with open(path, "ab") as f:
        f.write(records * max(1, (target_bytes - size) // len(records) + 1))
        f.flush()
        os.fsync(f.fileno())


# ---------------------------------------------------------------------------------------------
# Route-file YAML: a small emitter for the shapes the contract uses (no PyYAML).

_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}


def _yaml_scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return "null"
    text = str(value)
    plain = re.fullmatch(r"[A-Za-z0-9_/][A-Za-z0-9_./-]*", text) is not None
    try:
        float(text)
        plain = False  # "1.0" must stay a string
    except ValueError:
        pass
    if plain and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def to_yaml(value, indent=0):
    """Block-style YAML for dicts, lists of dicts, lists of scalars (flow style) and scalars."""
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict) and item:
                lines.append("%s%s:" % (pad, key))
                lines.append(to_yaml(item, indent + 2))
            elif isinstance(item, list) and item and all(isinstance(x, dict) for x in item):
                lines.append("%s%s:" % (pad, key))
                lines.append(to_yaml(item, indent + 2))
            else:
                lines.append("%s%s: %s" % (pad, key, _yaml_inline(item)))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                body = to_yaml(item, indent + 2).split("\n")
                lines.append("%s- %s" % (pad, body[0].lstrip()))
                lines.extend(body[1:])
            else:
                lines.append("%s- %s" % (pad, _yaml_inline(item)))
    else:
        lines.append(pad + _yaml_inline(value))
    return "\n".join(lines)


def _yaml_inline(value):
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_inline(x) for x in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join("%s: %s" % (k, _yaml_inline(v)) for k, v in value.items()) + "}"
    return _yaml_scalar(value)


# ---------------------------------------------------------------------------------------------
# HTTP helpers

def http_request(port, method, path, body=b"", headers=None, conn=None, timeout=IO_TIMEOUT):
    """One exchange on 127.0.0.1:port -> (status, {lower-case name: value}, body bytes).

    A fresh connection is opened and closed unless conn (an http.client.HTTPConnection) is given;
    a passed connection is reused (http.client reopens it if the server closed it).
    """
    own = conn is None
    if own:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    except Exception:
        conn.close()  # never reuse a connection in an unknown state
        raise
    finally:
        if own:
            conn.close()


class ResponseReader:
    """Reads HTTP/1.1 responses from a raw socket, one at a time, keeping unread bytes.

    read() returns (status, headers with lower-case names, body). Interim (1xx) responses are
    returned like any other (body b""), so a caller can see a 100 Continue. The body is read by
    Content-Length or chunked, or until close when there is neither. socket.timeout propagates.
    """

    def __init__(self, sock, timeout=IO_TIMEOUT):
        self.sock, self.buf = sock, b""
        sock.settimeout(timeout)

    def _fill(self, what):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise HarnessError("connection closed before %s; got %r" % (what, self.buf[:300]))
        self.buf += chunk

    def _take(self, n):
        while len(self.buf) < n:
            self._fill("the end of the body")
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill("the end of a line")
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def read(self, head_request=False):
        while b"\r\n\r\n" not in self.buf:
            self._fill("a complete response head")
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200 or status in (204, 304) or head_request:
            return status, headers, b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():
                        pass
                    return status, headers, body
                body += self._take(size)
                self._take(2)
        if "content-length" in headers:
            return status, headers, self._take(int(headers["content-length"]))
        while True:
            try:
                self._fill("close")
            except HarnessError:
                body, self.buf = self.buf, b""
                return status, headers, body


def read_until_closed(sock, timeout):
    """Bytes the peer sends until it closes (EOF or reset) -> (bytes, closed)."""
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return data, False
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return data, False
        except OSError:  # reset, or refused after a close
            return data, True
        if not chunk:
            return data, True
        data += chunk


def read_response(sock, timeout=IO_TIMEOUT):
    """One response from a raw socket (see ResponseReader; use that to read several)."""
    return ResponseReader(sock, timeout).read()


def sigstop_and_wait(pid, timeout=10.0):
    """SIGSTOP, then returns once every thread of pid has stopped (state T in /proc): the signal
    takes effect as each thread is next scheduled, and on a loaded machine a process can still
    read, answer or admit something in between."""
    os.kill(pid, signal.SIGSTOP)

    def stopped():
        try:
            tasks = os.listdir("/proc/%d/task" % pid)
        except OSError:
            return True  # gone
        states = []
        for task in tasks:
            try:
                with open("/proc/%d/task/%s/stat" % (pid, task)) as f:
                    states.append(f.read().rpartition(")")[2].split()[0])
            except (OSError, IndexError):
                continue
        return all(state in ("T", "t", "Z", "X") for state in states)

    wait_for(stopped, timeout, 0.005, "process %d to stop" % pid)


def connect(port, timeout=IO_TIMEOUT):
    """A client connection to 127.0.0.1:port."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def send_all(sock, data):
    """Sends data; a proxy that already answered and closed may reset the rest: that is fine."""
    try:
        sock.sendall(data)
    except OSError:
        pass


def raw_exchange(port, request_bytes, timeout=IO_TIMEOUT):
    """Sends raw bytes on a new connection and reads one final (non-1xx) response."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request_bytes)
        reader = ResponseReader(sock, timeout)
        status, headers, body = reader.read()
        while 100 <= status < 200:
            status, headers, body = reader.read()
        return status, headers, body


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text):
    """Prometheus text format -> {(name, frozenset(labels.items())): float}."""
    samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise HarnessError("unparseable /metrics line: %r" % line)
        name, labels, value = match.groups()
        labels = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                  for k, v in _LABEL.findall(labels or "")}
        samples[(name, frozenset(labels.items()))] = float(value)
    return samples


def metric(samples, name, **labels):
    """The value of one sample, or None when absent."""
    return samples.get((name, frozenset(labels.items())))


def find_fence(doc, name):
    """The entry for fence `name` in the /fences JSON, whatever its exact nesting: an object
    keyed by the name, or an object whose "name"/"fence" is the name. None if absent."""
    if isinstance(doc, dict):
        entry = doc.get(name)
        if isinstance(entry, dict) and "max_token" in entry:
            return entry
        if (doc.get("name") == name or doc.get("fence") == name) and "max_token" in doc:
            return doc
        children = doc.values()
    elif isinstance(doc, list):
        children = doc
    else:
        return None
    for child in children:
        found = find_fence(child, name)
        if found is not None:
            return found
    return None


# ---------------------------------------------------------------------------------------------
# Processes

class Backend:
    """scripts/demo_backend.py on a free 127.0.0.1 port, logging to a temp file."""

    def __init__(self, workdir=None):
        self._own_dir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="fp-backend-")
        self.port = free_port()
        self.log_path = os.path.join(self.workdir, "backend-%d.log" % self.port)
        self._out = open(os.path.join(self.workdir, "backend-%d.out" % self.port), "wb")
        self.proc = subprocess.Popen(
            [sys.executable, DEMO_BACKEND, "--listen", "127.0.0.1:%d" % self.port,
             "--log", self.log_path],
            stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT,
            start_new_session=True)  # signals meant for the test runner's group stay there
        _live.add(self.proc)
        try:
            wait_for(lambda: self.proc.poll() is not None or _port_open(self.port),
                     what="demo backend on port %d" % self.port)
            if self.proc.poll() is not None:
                raise HarnessError("demo backend exited with %s" % self.proc.returncode)
        except Exception:
            self.stop()
            raise

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def records(self, path_prefix=None):
        """The applied requests so far, in log order (seq); optionally only paths under a prefix."""
        try:
            with open(self.log_path, encoding="utf-8") as f:
                out = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
        if path_prefix is not None:
            out = [r for r in out if r["path"] == path_prefix
                   or r["path"].startswith(path_prefix.rstrip("/") + "/")]
        return out

    def request(self, method, path, body=b"", headers=None):
        """Talks to the backend directly (not through the proxy)."""
        return http_request(self.port, method, path, body, headers)

    def stop(self):
        _stop_process(self.proc)
        self._out.close()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)


class Proxy:
    """The fencing-proxy binary with a route file written into a temp dir.

    config: a dict (emitted as YAML; listen, admin_listen, backend and state_file are filled in
    when absent) or YAML text (the same four keys are prepended when the text has no such
    top-level key). backend: a Backend, a RawBackend, a URL string, or None (then config must
    name one). fence_store: a dict ({"etcd": {...}}) that keeps the fences in etcd: it is added
    as the top-level `fence_store` in place of the state_file default (the two exclude each
    other), and state_file is None.
    """

    def __init__(self, config, backend=None, state_file=None, workdir=None, start=True,
                 wrapper=None, env=None, fence_store=None):
        check_binary()
        # wrapper: argv placed before the binary (e.g. a fault-injection launcher that execs it,
        # so the proxy keeps the wrapper's pid); env: variables added to the proxy's environment
        # (e.g. LD_PRELOAD). Both apply to every start() and restart(); change them in between
        # with set_launch().
        self.wrapper, self.env = list(wrapper or []), dict(env or {})
        self._own_dir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="fp-proxy-")
        self.config_path = os.path.join(self.workdir, "routes.yaml")
        self.stderr_path = os.path.join(self.workdir, "proxy-stderr.log")
        self.state_file = state_file or os.path.join(self.workdir, "fences.log")
        self.port = free_port()
        self.admin_port = free_port()
        backend_url = getattr(backend, "url", backend)  # a Backend, a RawBackend, or a URL
        defaults = {"listen": "127.0.0.1:%d" % self.port,
                    "admin_listen": "127.0.0.1:%d" % self.admin_port,
                    "backend": backend_url,
                    "state_file": self.state_file}
        if fence_store is not None:
            self.state_file = None
            del defaults["state_file"]
        if isinstance(config, dict):
            merged = {k: v for k, v in defaults.items() if k not in config and v is not None}
            merged.update(config)
            if fence_store is not None and "fence_store" not in config:
                merged["fence_store"] = fence_store
            text = to_yaml(merged) + "\n"
        else:
            present = {m.group(1) for m in re.finditer(r"^([a-z_]+):", config, re.M)}
            head = "".join("%s: %s\n" % (k, _yaml_scalar(v)) for k, v in defaults.items()
                           if k not in present and v is not None)
            if fence_store is not None and "fence_store" not in present:
                head += to_yaml({"fence_store": fence_store}) + "\n"
            text = head + config
        self._learn_ports(text)
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(text)
        self.config_text = text
        self.proc = None
        self._stderr = None
        if start:
            self.start()

    def _learn_ports(self, text):
        for key in ("listen", "admin_listen", "state_file"):
            m = re.search(r'^%s:\s*"?([^"\n#]*?)"?\s*(#.*)?$' % key, text, re.M)
            if not m:
                continue
            if key == "state_file":
                self.state_file = m.group(1)
            else:
                port = int(m.group(1).rpartition(":")[2])
                setattr(self, "port" if key == "listen" else "admin_port", port)

    # -- lifecycle --

    def start(self, wait=True):
        """Starts the binary; with wait, returns once admin /healthz answers 200."""
        if self.proc is not None and self.proc.poll() is None:
            raise HarnessError("proxy already running")
        self._stderr = open(self.stderr_path, "ab")
        env = dict(os.environ, **self.env) if self.env else None
        self.proc = subprocess.Popen([*self.wrapper, BINARY, "--config", self.config_path],
                                     stdin=subprocess.DEVNULL, stdout=self._stderr,
                                     stderr=self._stderr, cwd=self.workdir, env=env,
                                     start_new_session=True)
        _live.add(self.proc)
        if wait:
            self.wait_ready()
        return self

    def set_launch(self, wrapper=None, env=None):
        """Sets the wrapper argv and extra environment for the next start() (see __init__)."""
        self.wrapper, self.env = list(wrapper or []), dict(env or {})

    def wait_ready(self, timeout=START_TIMEOUT):
        def healthy():
            if self.proc.poll() is not None:
                return True
            try:
                return self.admin("GET", "/healthz", timeout=1.0)[0] == 200
            except OSError:
                return False
        try:
            wait_for(healthy, timeout, interval=0.05, what="GET /healthz on the admin port")
        except HarnessError as e:
            self.kill9()
            raise HarnessError("%s; proxy stderr:\n%s" % (e, self.stderr_text())) from None
        if self.proc.poll() is not None:
            code = self.proc.returncode
            self._close_stderr()
            raise HarnessError("fencing-proxy exited with %s during start; stderr:\n%s"
                               % (code, self.stderr_text()))

    def wait_exit(self, timeout=START_TIMEOUT):
        """Waits for the process to exit by itself: its exit code, or None if still running."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        _live.discard(self.proc)
        self._close_stderr()
        return code

    def terminate(self, timeout=START_TIMEOUT):
        """SIGTERM, wait (bounded; then SIGKILL), return the exit code."""
        return self._signal(signal.SIGTERM, timeout)

    def kill9(self):
        return self._signal(signal.SIGKILL, START_TIMEOUT)

    def restart(self, wait=True):
        """Starts again with the same route file and state file (stops first if running)."""
        if self.proc is not None and self.proc.poll() is None:
            self.terminate()
        return self.start(wait)

    def stop(self):
        """Kills the process (if running) and removes the temp dir the proxy made itself."""
        if self.proc is not None:
            self._signal(signal.SIGKILL, START_TIMEOUT)
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _signal(self, sig, timeout):
        if self.proc is None:
            return None
        was_running = self.proc.poll() is None
        code = _stop_process(self.proc, sig, timeout)
        self._close_stderr()
        if was_running and sig != signal.SIGKILL and code == -signal.SIGKILL:
            raise HarnessError("proxy did not exit within %ss of %s" % (timeout, sig.name))
        return code

    def _close_stderr(self):
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stderr_text(self):
        try:
            with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def access_log(self):
        """The access lines logged so far: the stderr JSON lines whose "msg" is "access", parsed,
        in order (other lines, and lines that are not JSON, are skipped). A line is written after
        its response, so a test waits for it with wait_for."""
        lines = []
        for line in self.stderr_text().splitlines():
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("msg") == "access":
                lines.append(entry)
        return lines

    # -- HTTP --

    def connect(self, timeout=IO_TIMEOUT):
        """A keep-alive connection to the proxy listener, for passing to request()."""
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, token=None, body=b"", headers=None, conn=None,
                timeout=IO_TIMEOUT):
        """One request through the proxy -> (status, headers with lower-case names, body).

        token: None sends no token header; anything else is sent as str() (bytes as they are).
        """
        h = dict(headers or {})
        if token is not None:
            h[TOKEN_HEADER] = token if isinstance(token, bytes) else str(token)
        if isinstance(body, str):
            body = body.encode()
        return http_request(self.port, method, path, body, h, conn, timeout)

    def admin(self, method, path, timeout=IO_TIMEOUT):
        return http_request(self.admin_port, method, path, timeout=timeout)

    def fence(self, name):
        """This fence's entry in admin /fences (a dict; {} when not listed)."""
        status, _, body = self.admin("GET", "/fences")
        if status != 200:
            raise HarnessError("GET /fences answered %d: %r" % (status, body[:200]))
        return find_fence(json.loads(body), name) or {}

    def metrics(self):
        status, _, body = self.admin("GET", "/metrics")
        if status != 200:
            raise HarnessError("GET /metrics answered %d: %r" % (status, body[:200]))
        return parse_prometheus(body.decode("utf-8"))

    def metrics_counting(self, name, at_least, timeout=5.0, **labels):
        """The metrics once the sample name{labels} has reached at_least (or, after timeout, as
        they are). A forwarded request is counted once its exchange with the backend has ended,
        which can be just after its client has the whole response: a scrape made at once can
        come a moment too early."""
        deadline = time.monotonic() + timeout
        while True:
            samples = self.metrics()
            if (metric(samples, name, **labels) or 0) >= at_least or time.monotonic() >= deadline:
                return samples
            time.sleep(0.02)

    def cpu_seconds(self):
        """User + system CPU time the proxy process has used so far."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def raw(self, request_bytes, timeout=IO_TIMEOUT):
        """Raw bytes to the proxy listener on a new connection -> one final response."""
        return raw_exchange(self.port, request_bytes, timeout)


# ---------------------------------------------------------------------------------------------

class ProxyTestCase(unittest.TestCase):
    """Base class: processes started through it are stopped in cleanup, pass or fail; when a test
    fails, the proxies' stderr is printed to help the reader."""

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="fp-it-")
        self.addCleanup(shutil.rmtree, self.workdir, True)
        self._proxies = []

    def in_thread(self, fn, *args, **kwargs):
        """Runs fn in a thread; the returned dict gets "response" (or "error"), "sent", "done"."""
        out = {}

        def run():
            out["sent"] = time.monotonic()
            try:
                out["response"] = fn(*args, **kwargs)
            except Exception as e:  # reported by the test's assertions
                out["error"] = e
            out["done"] = time.monotonic()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        out["thread"] = thread
        return out

    def joined(self, out, timeout, what):
        """The response of an in_thread call, once it has ended (a test failure if not in time)."""
        out["thread"].join(timeout)
        self.assertFalse(out["thread"].is_alive(), "%s: no answer within %.0fs" % (what, timeout))
        self.assertNotIn("error", out, "%s: %r" % (what, out.get("error")))
        return out["response"]

    def start_backend(self):
        backend = Backend(self.workdir)
        self.addCleanup(backend.stop)
        return backend

    def start_raw_backend(self, script="answer", **options):
        """A raw_backend.RawBackend (records the raw bytes it receives), stopped in cleanup."""
        backend = RawBackend(script, **options)
        self.addCleanup(backend.stop)
        return backend

    def start_proxy(self, config, backend=None, state_file=None, start=True, name=None,
                    wrapper=None, env=None, fence_store=None):
        workdir = os.path.join(self.workdir, name or "proxy%d" % len(self._proxies))
        os.makedirs(workdir, exist_ok=True)
        proxy = Proxy(config, backend, state_file, workdir, start=False, wrapper=wrapper, env=env,
                      fence_store=fence_store)
        self.addCleanup(self._report_and_stop, proxy)
        self._proxies.append(proxy)
        if start:
            proxy.start()
        return proxy

    def _report_and_stop(self, proxy):
        proxy.stop()
        if self._failed() and proxy.stderr_text():
            tail = proxy.stderr_text()[-4000:]
            sys.stderr.write("\n--- fencing-proxy stderr (%s, last 4000 chars) ---\n%s\n---\n"
                             % (self.id(), tail))

    def _failed(self):
        outcome = getattr(self, "_outcome", None)
        result = getattr(outcome, "result", None)
        if result is None:
            return False
        return any(getattr(test, "test_case", test) is self  # a failed subTest names its test
                   for test, _ in list(result.failures) + list(result.errors))

    # -- assertions shared by the test modules --

    def assertProblem(self, response, status, msg=""):
        """A rejection per the contract: the status and an application/problem+json body with
        title, status and detail. Returns the parsed body."""
        code, headers, body = response
        self.assertEqual(code, status, "%s: contract expects %d, got %d %r"
                         % (msg, status, code, body[:300]))
        ctype = headers.get("content-type", "")
        self.assertTrue(ctype.startswith("application/problem+json"),
                        "%s: contract expects Content-Type application/problem+json on a %d, got %r"
                        % (msg, status, ctype))
        try:
            problem = json.loads(body)
        except ValueError:
            self.fail("%s: problem body must be JSON (RFC 9457), got %r" % (msg, body[:300]))
        for field in ("title", "status", "detail"):
            self.assertIn(field, problem,
                          "%s: problem+json must have %r: %r" % (msg, field, problem))
        self.assertEqual(problem["status"], status,
                         "%s: problem 'status' must equal the HTTP status" % msg)
        return problem

    def assert2xx(self, response, msg=""):
        code, _, body = response
        self.assertTrue(200 <= code < 300, "%s: contract expects the request forwarded (2xx), got "
                        "%d %r" % (msg, code, body[:300]))
