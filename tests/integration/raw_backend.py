"""A scripted raw-socket HTTP/1.1 backend for the integration tests.

Unlike scripts/demo_backend.py, which logs the requests it applied, this one keeps the RAW BYTES
it received, per accepted connection and in accept order, whether or not they parse: a test can
then assert that nothing at all (not even a request head) reached the backend, or count how many
times a request was sent to it.

    backend = RawBackend("answer")                       # 200 to every request, keep-alive
    backend = RawBackend("read_then_close", nth=2)       # the 2nd request of a connection is read
                                                         # whole, then the connection is closed
    backend = RawBackend("read_then_close", nth=2, delay=2.5)   # ... 2.5 s after reading it
    backend = RawBackend("record")                       # never answers; only records
    backend = RawBackend("scripted", respond=fn)         # fn(request) -> [(delay_s, bytes)...]:
                                                         # each piece sent `delay_s` after the one
                                                         # before it (None instead of bytes: close)
    backend = RawBackend("answer", octal_lengths=True)   # a lenient parser: a Content-Length with
                                                         # a leading 0 is read as octal ("0300" is
                                                         # 192), as OpenLiteSpeed before 1.7.18 did
    backend = RawBackend("answer", tls=context)          # TLS (an ssl.SSLContext for the server
                                                         # side): what is recorded is what the
                                                         # connection decrypted; url is https://

backend.port, backend.url, backend.connections() (the bytes of each connection), handshakes()
(TLS: the handshakes that completed), handshake_failures() (the errors of those that did not),
peer_certificates() (the client certificate of each completed one, or None), received() (all
of them), received_since(snapshot) (what arrived after an earlier connections()), count(bytes),
requests() (the parsed requests), quiet() (waits until nothing has arrived for a while), stop().
Each Request also records when the backend had it whole (`started`, time.monotonic()), what the
backend sent in answer (`sent`: [(time, bytes)...]) and when it was done answering (`ended`, and
the event `done`); sent_log() lists every piece sent, on every connection.
Tests start it with harness.ProxyTestCase.start_raw_backend, which stops it in cleanup. Python standard library only, 127.0.0.1 only, and every wait is
bounded: a connection thread gives up after CONNECTION_LIFETIME seconds, stop() joins with a
timeout.
"""

import socket
import ssl
import threading
import time

POLL = 0.05                # seconds between checks of the stop flag while blocked on a socket
CONNECTION_LIFETIME = 60.0  # a connection thread never outlives this
MAX_HEAD = 1 << 20          # a head larger than this is not parsed (only recorded)
SCRIPTS = ("answer", "read_then_close", "record", "scripted")


class Request:
    """One request as the backend parsed it (minimally): framing by Content-Length or chunked."""

    def __init__(self, connection, index, head, body):
        self.connection, self.index = connection, index  # 0-based, and 1-based within it
        self.head, self.body = head, body
        self.started = time.monotonic()  # when the backend had it whole
        self.ended = None                # when the backend was done answering it
        self.sent = []                   # [(time.monotonic() before the send, bytes)] sent
                                         # in answer to it
        self.done = threading.Event()    # set once it was answered (or will never be)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        self.method = parts[0]
        self.target = parts[1] if len(parts) > 1 else ""
        self.headers = []  # (name, value) in order, names as sent
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers.append((name, value.strip(" \t")))

    def header(self, name):
        """The values of a field (case-insensitive name), in order."""
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def __repr__(self):
        return "Request(conn=%d, #%d, %s %s, %d body bytes)" % (
            self.connection, self.index, self.method, self.target, len(self.body))


class _Incomplete(Exception):
    pass


class _Unparseable(Exception):
    pass


def _parse_one(data, octal_lengths=False):
    """(head, body, consumed) for the first complete request in data; raises _Incomplete when
    more bytes are needed, _Unparseable when the framing makes no sense (then only record).
    octal_lengths: a Content-Length with a leading 0 is octal (a lenient backend's rule)."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > MAX_HEAD:
            raise _Unparseable()
        raise _Incomplete()
    head = data[:end]
    pos = end + 4
    length, chunked = None, False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip()
        if name == b"content-length":
            if not value.isdigit():
                raise _Unparseable()
            if octal_lengths and len(value) > 1 and value.startswith(b"0"):
                # As far as the octal digits go (an 8 or a 9 ends the number).
                octal = value[:len(value) - len(value.lstrip(b"01234567"))]
                length = int(octal, 8)
            else:
                length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if chunked:
        pieces = []
        while True:
            line_end = data.find(b"\r\n", pos)
            if line_end < 0:
                raise _Incomplete()
            size_text = data[pos:line_end].split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _Unparseable() from None
            pos = line_end + 2
            if size == 0:
                while True:  # trailer fields, then the empty line
                    line_end = data.find(b"\r\n", pos)
                    if line_end < 0:
                        raise _Incomplete()
                    empty = line_end == pos
                    pos = line_end + 2
                    if empty:
                        return head, b"".join(pieces), pos
            if len(data) < pos + size + 2:
                raise _Incomplete()
            pieces.append(data[pos:pos + size])
            pos += size + 2
    length = length or 0
    if len(data) < pos + length:
        raise _Incomplete()
    return head, data[pos:pos + length], pos + length


class RawBackend:
    """A listening socket on a free 127.0.0.1 port and one thread per accepted connection.

    script: "answer" (every request gets 200 with a small Content-Length body, keep-alive),
    "read_then_close" (like answer, but the nth request of every connection is read whole and
    then, after delay seconds, the connection is closed without an answer), "record" (nothing
    is ever answered) or "scripted" (respond(request) returns the answer as a list of
    (delay_seconds, bytes) pieces, sent in order, each delay_seconds after the one before; bytes
    None closes the connection there; an empty list answers nothing; the connection reads its
    next request only once the pieces are sent, as a one-thread-per-connection backend would).
    Whatever the script, every byte received is recorded. octal_lengths: parse requests as a
    lenient backend that reads a Content-Length with a leading 0 as octal.
    """

    def __init__(self, script="answer", nth=2, delay=0.0, body=b"ok\n", respond=None,
                 octal_lengths=False, tls=None):
        if script not in SCRIPTS:
            raise ValueError("unknown script %r (one of %s)" % (script, ", ".join(SCRIPTS)))
        if (script == "scripted") != (respond is not None):
            raise ValueError("respond is required by the scripted script, and only by it")
        self.script, self.nth, self.delay, self.body = script, nth, delay, body
        self.respond, self.octal_lengths, self.tls = respond, octal_lengths, tls
        self._handshakes = []          # TLS: the peer certificate (or None) of each completed one
        self._handshake_failures = []  # TLS: the error of each failed one
        self._sent = []       # (connection, time.monotonic(), bytes) for every piece sent
        self._lock = threading.Lock()
        self._received = []   # bytearray per accepted connection, in accept order
        self._requests = []   # Request objects, in the order they were complete
        self._sockets = []
        self._threads = []
        self._stopping = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(POLL)
        self.port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True,
                                          name="raw-backend-%d" % self.port)
        self._acceptor.start()

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)

    def handshakes(self):
        """TLS: how many handshakes completed."""
        with self._lock:
            return len(self._handshakes)

    def handshake_failures(self):
        """TLS: the errors (as text) of the handshakes that failed, in order."""
        with self._lock:
            return list(self._handshake_failures)

    def peer_certificates(self):
        """TLS: the client certificate (ssl.getpeercert()) of each completed handshake, or None."""
        with self._lock:
            return list(self._handshakes)

    # -- what was received --

    def connections(self):
        """The raw bytes received on each accepted connection so far, in accept order."""
        with self._lock:
            return [bytes(b) for b in self._received]

    def received(self):
        """All bytes received so far, on every connection, concatenated in accept order."""
        return b"".join(self.connections())

    def received_since(self, before):
        """The bytes received since `before` (an earlier connections()), concatenated: what a
        test step added, on the connections then open and on newer ones."""
        now = self.connections()
        return b"".join(c[len(before[i]):] if i < len(before) else c for i, c in enumerate(now))

    def requests(self):
        """The requests parsed so far (see Request), in the order they were complete."""
        with self._lock:
            return list(self._requests)

    def sent_log(self):
        """Every piece the backend sent, in order: (connection index, time.monotonic() taken
        before the send, bytes)."""
        with self._lock:
            return list(self._sent)

    def count(self, needle):
        """How often needle occurs in the bytes received, over all connections."""
        return sum(c.count(needle) for c in self.connections())

    def quiet(self, period=0.3, timeout=5.0):
        """Waits (bounded) until nothing new has arrived for `period` seconds: bytes still in
        flight from the proxy are in before a test asserts on what was (not) received."""
        deadline = time.monotonic() + timeout
        last = self.connections()
        since = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(POLL)
            now = self.connections()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= period:
                return
        return

    # -- lifecycle --

    def stop(self, timeout=5.0):
        self._stopping.set()
        self._acceptor.join(timeout)
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for sock in sockets:
            try:
                sock.close()
            except OSError:
                pass

    def _accept_loop(self):
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                index = len(self._received)
                self._received.append(bytearray())
                self._sockets.append(sock)
                thread = threading.Thread(target=self._serve, args=(sock, index), daemon=True,
                                          name="raw-backend-%d-conn%d" % (self.port, index))
                self._threads.append(thread)
            thread.start()

    # -- one connection --

    def _recv(self, sock, index, deadline):
        """Bytes from sock (recorded), b"" at EOF, None when stopping or past the deadline."""
        while not self._stopping.is_set() and time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return b""
            if chunk:
                with self._lock:
                    self._received[index] += chunk
            return chunk
        return None

    def _handshake(self, sock, index):
        """The TLS side of an accepted socket, or None when its handshake failed (recorded)."""
        sock.settimeout(5.0)
        try:
            tls_sock = self.tls.wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError) as e:
            with self._lock:
                self._handshake_failures.append("%s: %s" % (type(e).__name__, e))
            sock.close()
            return None
        with self._lock:
            self._handshakes.append(tls_sock.getpeercert() or None)
            self._sockets[index] = tls_sock
        return tls_sock

    def _serve(self, sock, index):
        deadline = time.monotonic() + CONNECTION_LIFETIME
        if self.tls is not None:
            sock = self._handshake(sock, index)
            if sock is None:
                return
        sock.settimeout(POLL)
        buf = b""
        served = 0
        parseable = True
        try:
            while True:
                chunk = self._recv(sock, index, deadline)
                if not chunk:
                    return  # EOF, stopping, or too old
                buf += chunk
                while parseable:
                    try:
                        head, body, used = _parse_one(buf, self.octal_lengths)
                    except _Incomplete:
                        break
                    except _Unparseable:
                        parseable = False  # keep recording, never answer again
                        break
                    buf = buf[used:]
                    served += 1
                    request = Request(index, served, head, body)
                    with self._lock:
                        self._requests.append(request)
                    if self.script == "record":
                        continue
                    if self.script == "read_then_close" and served == self.nth:
                        request.done.set()
                        self._stopping.wait(self.delay)
                        return  # closed (finally) without a byte of answer
                    if self.script == "scripted":
                        if not self._play(sock, request):
                            return  # the script closed the connection, or the backend stops
                        continue
                    self._answer(sock, request)
        finally:
            try:
                sock.close()
            except OSError:
                pass

    def _answer(self, sock, request):
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                b"X-Raw-Backend-Connection: %d\r\nX-Raw-Backend-Request: %d\r\n\r\n"
                % (len(self.body), request.connection, request.index))
        data = head if request.method == "HEAD" else head + self.body
        sock.settimeout(5.0)
        try:
            at = time.monotonic()
            sock.sendall(data)
            self._record_sent(request, at, data)
        except OSError:
            pass
        finally:
            sock.settimeout(POLL)
            request.ended = time.monotonic()
            request.done.set()

    def _record_sent(self, request, at, data):
        """Records a piece sent at `at` (taken before the send: whatever the peer does in
        answer to it comes later)."""
        with self._lock:
            request.sent.append((at, data))
            self._sent.append((request.connection, at, data))

    def _play(self, sock, request):
        """Sends the pieces respond(request) returns. False when the connection is to end."""
        try:
            for delay, data in self.respond(request):
                if delay > 0 and self._stopping.wait(delay):
                    return False
                if data is None:
                    return False
                sock.settimeout(5.0)
                at = time.monotonic()
                try:
                    sock.sendall(data)
                except OSError:
                    return False
                finally:
                    sock.settimeout(POLL)
                self._record_sent(request, at, data)
            return True
        finally:
            request.ended = time.monotonic()
            request.done.set()
