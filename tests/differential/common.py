"""Shared pieces of the differential oracle: views, processes, bounded waits. Standard library only.

A *view* is what one parser read of one request: (method, target, token values, body length,
body hash), with method, target and tokens as bytes. Every request parser reports it the same way,
in an X-Diff-View response header: hex(method) hex(target) COUNT:hex(tok),hex(tok) LENGTH SHA1-16.
"""

import atexit
import ctypes
import hashlib
import os
import select
import signal
import socket
import subprocess
import time

END_TARGET = b"/__diff_end__"
END_REQUEST = b"GET /__diff_end__ HTTP/1.1\r\nHost: diff\r\nConnection: close\r\n\r\n"
TOKEN_HEADER = b"x-fencing-token"

_live = []  # Popen objects to stop at exit


try:
    _LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:
    _LIBC = None


def die_with_parent():
    """preexec_fn: the child gets SIGKILL when the process that started it dies, however it dies
    (prctl PR_SET_PDEATHSIG), so a killed run leaves no proxy, nginx or HAProxy behind."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL)


def sha16(data):
    return hashlib.sha1(data).hexdigest()[:16]


EMPTY_SHA = sha16(b"")


class View(tuple):
    """(method, target, tokens, length, sha) of one request as a parser read it."""
    __slots__ = ()

    def __new__(cls, method, target, tokens, length, sha):
        return tuple.__new__(cls, (bytes(method), bytes(target), tuple(tokens), int(length), sha))

    method = property(lambda self: self[0])
    target = property(lambda self: self[1])
    tokens = property(lambda self: self[2])
    length = property(lambda self: self[3])
    sha = property(lambda self: self[4])

    def show(self):
        return "%s %s tokens=%s body=%d sha=%s" % (
            shown(self.method), shown(self.target),
            "[" + ",".join(shown(t) for t in self.tokens) + "]", self.length, self.sha)


class Refusal(tuple):
    """A request a parser did not read: (status, reason)."""
    __slots__ = ()

    def __new__(cls, status, reason):
        return tuple.__new__(cls, (int(status), reason))

    status = property(lambda self: self[0])
    reason = property(lambda self: self[1])

    def show(self):
        return "refused %d (%s)" % (self.status, self.reason)


def parse_view(text):
    """An X-Diff-View header value -> View (raises ValueError)."""
    m, t, tok, n, sha = text.strip().split(" ")
    count, _, values = tok.partition(":")
    tokens = [bytes.fromhex(v) for v in values.split(",")] if int(count) else []
    if len(tokens) != int(count):
        raise ValueError("token count")
    return View(bytes.fromhex(m), bytes.fromhex(t), tokens, int(n), sha)


def shown(data, limit=None):
    """Bytes as a readable Python-style literal body (CR, LF, control bytes escaped)."""
    if isinstance(data, str):
        data = data.encode("latin-1", "replace")
    out = repr(bytes(data))[2:-1]
    if limit is not None and len(out) > limit:
        out = out[:limit] + "...(%d bytes)" % len(data)
    return out


# -- processes --------------------------------------------------------------------------------

def start_server(argv, name, env=None, cwd=None, log_path=None, timeout=30.0):
    """Starts a view server that prints "PORT <n>" first and stops when its stdin closes.
    Returns (Popen, port)."""
    err = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                            env=env, cwd=cwd, start_new_session=True, preexec_fn=die_with_parent)
    if log_path:
        err.close()
    _live.append(proc)
    line = read_line(proc.stdout, timeout)
    if not line.startswith(b"PORT "):
        stop(proc)
        raise RuntimeError("%s did not start (first line %r)" % (name, line))
    return proc, int(line.split()[1])


def read_line(stream, timeout):
    """One line from a pipe, waiting at most timeout seconds (b"" on timeout or EOF)."""
    fd = stream.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            return data
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return data
        chunk = os.read(fd, 1)
        if not chunk:
            return data
        data += chunk
    return data


class LineReader:
    """Lines from a pipe, read in blocks, each wait bounded."""

    def __init__(self, stream):
        self.fd = stream.fileno()
        self.buf = b""

    def line(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return b""
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return b""
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return b""
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"


def stop(proc, timeout=5.0):
    """Closes stdin, SIGTERM, waits (bounded), SIGKILL."""
    if proc is None:
        return None
    try:
        if proc.stdin:
            proc.stdin.close()
    except OSError:
        pass
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
        except ProcessLookupError:
            pass
    if proc in _live:
        _live.remove(proc)
    return proc.returncode


def track(proc):
    _live.append(proc)
    return proc


@atexit.register
def _stop_all():
    for proc in list(_live):
        try:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
        except Exception:
            pass


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port, timeout=0.5):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for(predicate, timeout, what, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise RuntimeError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)
