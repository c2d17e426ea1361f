"""One lane of the differential oracle: a fencing-proxy process, the backend behind it, and a
client, used one client connection at a time. Standard library only; 127.0.0.1 only; every wait
bounded.

Backend: one thread, one selector. Every byte each upstream connection delivers is recorded; a
request it can frame (leniently: Content-Length read with int(), chunked with extensions cut) is
answered at once with a fixed 200 "ok", unless its target starts with /resp/: then the script
registered for that key is played (bytes, pauses, a close), which is how hostile responses are
made (a ("stray", delay, bytes) action sends bytes that much later without holding up the
answers to the requests that follow). take() is a barrier: the thread reads whatever is readable right now on every connection,
then hands over what each connection received since the last take(), in the order of each one's
first byte.

Attribution: every client connection comes from its own 127.x.y.z address, so the proxy's access
lines (their "client") say which connection each line belongs to, and the proxy runs one I/O
thread, so a connection's lines are all written before the next connection's first one.
"""

import json
import os
import selectors
import socket
import subprocess
import threading
import time

from common import die_with_parent, port_open, stop, track, wait_for

FIXED_BODY = b"ok"
FIXED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
CLIENT_TIMEOUT = 8.0   # after the last write, for the proxy to close the connection


# -- the backend ------------------------------------------------------------------------------

def frame_request(buf):
    """(method, target, length consumed) of the first request in buf, None when incomplete,
    False when it cannot be framed."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None if len(buf) < (1 << 20) else False
    lines = bytes(buf[:end]).split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) < 2:
        return False
    pos = end + 4
    length, chunked = None, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip()
        if name == b"content-length" and length is None:
            try:
                length = int(value)
            except ValueError:
                return False
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if chunked:
        while True:
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                return None
            try:
                size = int(bytes(buf[pos:line_end]).split(b";")[0].strip(), 16)
            except ValueError:
                return False
            pos = line_end + 2
            if size == 0:
                while True:
                    line_end = buf.find(b"\r\n", pos)
                    if line_end < 0:
                        return None
                    empty = line_end == pos
                    pos = line_end + 2
                    if empty:
                        return parts[0], parts[1], pos
            if len(buf) < pos + size + 2:
                return None
            pos += size + 2
    length = length or 0
    if length < 0:
        return False
    if len(buf) < pos + length:
        return None
    return parts[0], parts[1], pos + length


class _Upstream:
    __slots__ = ("id", "sock", "pending", "log", "first", "out", "stuck", "closed", "busy_until")


class Backend:
    def __init__(self):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.conns = []
        self.seq = 0
        self.timers = []          # (when, conn, action)
        self.scripts = {}         # key bytes -> list of actions
        self.lock = threading.Lock()
        self.take_wanted = False
        self.taken = None
        self.take_done = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True, name="diff-backend")
        self.thread.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    # -- called from the lane --

    def script(self, key, actions):
        with self.lock:
            self.scripts[key] = actions

    def take(self, timeout=10.0):
        """Barrier: [(connection id, bytes)] received since the last take, by first arrival."""
        self.take_done.clear()
        with self.lock:
            self.take_wanted = True
        self.wake_w.send(b"x")
        if not self.take_done.wait(timeout):
            raise RuntimeError("backend thread did not answer take()")
        return self.taken

    def close(self):
        self.stopping = True
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass
        self.thread.join(5)
        for c in self.conns:
            if not c.closed:
                c.sock.close()
        self.listener.close()
        self.wake_r.close()
        self.wake_w.close()
        self.sel.close()

    # -- the thread --

    def _run(self):
        while not self.stopping:
            now = time.monotonic()
            timeout = 0.5
            if self.timers:
                timeout = max(0.0, min(timeout, min(t[0] for t in self.timers) - now))
            self._poll(timeout)
            self._fire_timers()
            with self.lock:
                wanted = self.take_wanted
                self.take_wanted = False
            if wanted:
                for _ in range(1000):  # read all that is readable now
                    if not self._poll(0):
                        break
                taken = []
                for c in self.conns:
                    if c.log:
                        taken.append((c.first, c.id, bytes(c.log)))
                        c.log = bytearray()
                        c.first = None
                taken.sort()
                self.taken = [(cid, data) for _, cid, data in taken]
                self.take_done.set()

    def _poll(self, timeout):
        events = self.sel.select(timeout)
        got = False
        for key, mask in events:
            if key.data is None:
                self._accept()
                got = True
            elif key.data == "wake":
                try:
                    self.wake_r.recv(4096)
                except BlockingIOError:
                    pass
            else:
                c = key.data
                if mask & selectors.EVENT_WRITE:
                    self._flush(c)
                if mask & selectors.EVENT_READ and not c.closed:
                    got = self._read(c) or got
        return got

    def _accept(self):
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, OSError):
                return
            sock.setblocking(False)
            c = _Upstream()
            c.id, c.sock = len(self.conns), sock
            c.pending, c.log, c.first, c.out = bytearray(), bytearray(), None, bytearray()
            c.stuck = c.closed = False
            c.busy_until = 0.0
            self.conns.append(c)
            self.sel.register(sock, selectors.EVENT_READ, c)

    def _read(self, c):
        try:
            chunk = c.sock.recv(262144)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        if not chunk:
            self._close(c)
            return True
        if c.first is None:
            self.seq += 1
            c.first = self.seq
        c.log += chunk
        if c.stuck:
            return True
        c.pending += chunk
        while c.pending and not c.stuck:
            framed = frame_request(c.pending)
            if framed is None:
                break
            if framed is False:
                c.stuck = True  # recorded, never answered: the proxy's request timeout decides
                break
            method, target, used = framed
            del c.pending[:used]
            self._answer(c, method, target)
        return True

    def _answer(self, c, method, target):
        if target.startswith(b"/resp/"):
            key = target[len(b"/resp/"):].split(b"?")[0]
            with self.lock:
                actions = self.scripts.get(key)
            if actions is not None:
                when = max(time.monotonic(), c.busy_until)
                for action in actions:
                    if action[0] == "sleep":
                        when += action[1]
                    elif action[0] == "stray":  # ("stray", delay, bytes): later, unasked, never
                        self.timers.append((when + action[1], c, ("send", action[2])))  # delays an answer
                    else:
                        self.timers.append((when, c, action))
                c.busy_until = when
                self._fire_timers()
                return
        self._send(c, FIXED_HEAD if method == b"HEAD" else FIXED_HEAD + FIXED_BODY)

    def _fire_timers(self):
        if not self.timers:
            return
        now = time.monotonic()
        due = [t for t in self.timers if t[0] <= now]
        if not due:
            return
        self.timers = [t for t in self.timers if t[0] > now]
        due.sort(key=lambda t: t[0])
        for _, c, action in due:
            if c.closed:
                continue
            if action[0] == "send":
                self._send(c, action[1])
            elif action[0] == "close":
                self._flush(c)
                self._close(c)

    def _send(self, c, data):
        if c.closed:
            return
        c.out += data
        self._flush(c)

    def _flush(self, c):
        if c.closed:
            return
        while c.out:
            try:
                sent = c.sock.send(c.out)
            except BlockingIOError:
                break
            except OSError:
                self._close(c)
                return
            del c.out[:sent]
        self.sel.modify(c.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if c.out else 0), c)

    def _close(self, c):
        if c.closed:
            return
        c.closed = True
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()


# -- the proxy ---------------------------------------------------------------------------------

CONFIG = """listen: "127.0.0.1:{port}"
admin_listen: "127.0.0.1:{admin}"
backend: "{backend}"
state_file: "{state}"
threads: 1
unmatched: pass
timeouts: {{connect: 1s, request: 3s, idle: 5s, header_read: 1s, shutdown: 2s}}
limits: {{max_header_bytes: 16KiB, max_body_bytes: 1MiB, max_connections: 1000}}
routes:
  - name: orders
    prefix: /orders
  - name: fenced
    prefix: /fenced
  - name: hostile
    prefix: /hostile
  - name: mut
    prefix: /m
  - name: observed
    prefix: /observe
    mode: observe
  - name: notes
    prefix: /notes
    methods: [POST]
    missing_token: allow
"""


class Proxy:
    def __init__(self, binary, workdir, backend_url):
        from common import free_port
        self.binary, self.workdir = binary, workdir
        self.port, self.admin = free_port(), free_port()
        self.config = os.path.join(workdir, "routes.yaml")
        self.stderr_path = os.path.join(workdir, "proxy-stderr.log")
        with open(self.config, "w") as f:
            f.write(CONFIG.format(port=self.port, admin=self.admin, backend=backend_url,
                                  state=os.path.join(workdir, "fences.log")))
        self.proc = None

    def start(self):
        err = open(self.stderr_path, "ab")
        self.proc = track(subprocess.Popen([self.binary, "--config", self.config],
                                           stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                           cwd=self.workdir, start_new_session=True,
                                           preexec_fn=die_with_parent))
        err.close()
        try:
            wait_for(lambda: self.proc.poll() is not None or port_open(self.port), 10.0,
                     "the proxy to listen")
        except RuntimeError:
            stop(self.proc)
            raise
        if self.proc.poll() is not None:
            with open(self.stderr_path, "rb") as f:
                raise RuntimeError("fencing-proxy exited %s: %s" % (self.proc.returncode, f.read()[-2000:]))

    def stderr_tail(self, size=3000):
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.stderr_path) - size))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def terminate(self):
        """SIGTERM (the access log is flushed at exit), bounded."""
        return stop(self.proc, timeout=10.0)


class LogTail:
    """The proxy's access lines as they are written: (client ip, entry) in order."""

    def __init__(self, path):
        self.path, self.offset, self.partial = path, 0, b""

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        out = []
        for line in lines:
            if not line.startswith(b"{") or b'"msg":"access"' not in line:
                continue
            try:
                entry = json.loads(line.decode("utf-8", "surrogateescape"))
            except ValueError:
                continue
            out.append(entry)
        return out


def as_bytes(text):
    """A string from the access log back to the bytes the proxy wrote."""
    return text.encode("utf-8", "surrogateescape") if isinstance(text, str) else b""


# -- the client --------------------------------------------------------------------------------

def run_client(port, source_ip, parts, timeout=CLIENT_TIMEOUT):
    """Sends parts ((delay before, bytes) each) on one connection from source_ip, shuts the write
    side, reads until the proxy closes -> (bytes received, closed by the proxy)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((source_ip, 0))
    sock.settimeout(5.0)
    received = bytearray()
    closed = False
    try:
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(sock, selectors.EVENT_READ)
        writable = True
        try:
            for delay, data in parts:
                if delay:
                    end = time.monotonic() + delay
                    while not closed and time.monotonic() < end:
                        closed = _pump(sel, sock, received, end - time.monotonic())
                view = memoryview(data)
                write_deadline = time.monotonic() + timeout
                while view and writable and not closed:
                    try:
                        sent = sock.send(view)
                        view = view[sent:]
                    except BlockingIOError:
                        if time.monotonic() > write_deadline:
                            writable = False
                            break
                        sel.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
                        closed = _pump(sel, sock, received, 0.05)
                        sel.modify(sock, selectors.EVENT_READ)
                    except OSError:
                        writable = False  # the proxy closed: read what it sent before
            if writable and not closed:
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            end = time.monotonic() + timeout
            while not closed and time.monotonic() < end:
                closed = _pump(sel, sock, received, end - time.monotonic())
        finally:
            sel.close()
    except OSError:
        closed = True
    finally:
        sock.close()
    return bytes(received), closed


def _pump(sel, sock, received, timeout):
    """Reads what arrives within timeout; True once the peer has closed."""
    for _, mask in sel.select(max(0.0, timeout)):
        if mask & selectors.EVENT_READ:
            try:
                chunk = sock.recv(262144)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not chunk:
                return True
            received += chunk
    return False
