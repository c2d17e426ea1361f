"""A recording h2c backend for the end-to-end tests of HTTP/1.1 clients in front of an HTTP/2
backend (test_http1_to_h2.py), scripted with Debian's python3-h2 (the HTTP/2 state machine, no
I/O of its own): one thread per connection on a free 127.0.0.1 port, HTTP/2 with prior
knowledge, as the proxy speaks to a `backend_protocol: h2c` backend.

It RECORDS every stream it receives (its head as a list of (name, value), its body, whether the
request ended, whether it was reset, the connection it came on), and answers by path:

    /reset...        resets the stream (INTERNAL_ERROR) as soon as its head came: no response head
    /refuse-once...  the first such stream is reset with REFUSED_STREAM (the backend never
                     processed it), later ones are answered as below
    /refuse...       every such stream is reset with REFUSED_STREAM
    /hold...         never answered (the proxy's timeouts.request has to end it)
    /big/N...        200 with N bytes of body, sent as the flow-control windows allow
    /length...       200 with a content-length
    /short...        200 with a content-length 5 bytes longer than the DATA that follows
    /trailers...     200, then trailers x-backend-trailer: done
    anything else    200 with the body "echo:<method>:<request body>", without content-length

Every response has content-type text/plain and x-backend: h2. Waits are bounded: reads time out
after IO_TIMEOUT of silence.

missing() says python3-h2 is absent (the test module skips) unless FP_REQUIRE_LOCK_SERVICES=1
makes that a failure, as for the other test packages.
"""

import copy
import os
import socket
import threading

from harness import IO_TIMEOUT, HarnessError, wait_for

try:
    import h2.config
    import h2.connection
    import h2.errors
    import h2.events
    import h2.exceptions
except ImportError:  # pragma: no cover - depends on the machine
    h2 = None


def missing():
    if h2 is not None:
        return None
    reason = "missing: python3-h2 (import h2); scripts/install-deps.sh --with-tests installs it"
    if os.environ.get("FP_REQUIRE_LOCK_SERVICES", "") not in ("", "0"):
        raise HarnessError("FP_REQUIRE_LOCK_SERVICES is set but " + reason)
    return reason


def big_body(n):
    """The body of /big/N: a pattern that shows a lost or repeated piece."""
    pattern = b"".join(b"%07d\n" % i for i in range(n // 8 + 1))
    return pattern[:n]


class RecordedStream:
    def __init__(self, connection, stream_id, headers):
        self.connection = connection          # the backend's count of connections when it came
        self.stream_id = stream_id
        self.headers = [(k, v) for k, v in headers]  # [(name, value)], pseudo-headers first
        self.body = b""
        self.ended = False                    # the request's END_STREAM came
        self.reset = False                    # the proxy reset it
        self.answer = None                    # "answered", "reset", "refused", "held"

    def get(self, name):
        return [v for k, v in self.headers if k == name]

    def one(self, name):
        values = self.get(name)
        return values[0] if len(values) == 1 else values or None

    @property
    def path(self):
        return self.one(":path")

    def __repr__(self):
        return "RecordedStream(%s %s, %d body bytes, ended=%s, reset=%s, answer=%s)" % (
            self.one(":method"), self.path, len(self.body), self.ended, self.reset, self.answer)


class H2Backend:
    def __init__(self):
        self._lock = threading.Lock()
        self._streams = []
        self._refused_once = False
        self.connections = 0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._sockets = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        self._closed = True
        for s in [self._listener] + self._sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    # -- what it received --

    def streams(self, path_prefix=None):
        with self._lock:
            return [copy.deepcopy(s) for s in self._streams
                    if path_prefix is None or (s.path or "").startswith(path_prefix)]

    def wait_streams(self, path_prefix, count, what, ended=False, answered=False):
        """The streams under path_prefix once there are `count` of them (ended or answered when
        asked)."""
        def ready():
            found = self.streams(path_prefix)
            if len(found) >= count and all((s.ended or not ended) and (s.answer or not answered)
                                           for s in found[:count]):
                return found
            return None
        return wait_for(ready, IO_TIMEOUT, 0.01, what)

    # -- serving --

    def _accept(self):
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                number = self.connections
            self._sockets.append(sock)
            threading.Thread(target=self._serve, args=(sock, number), daemon=True).start()

    def _serve(self, sock, number):
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        conn = h2.connection.H2Connection(config=config)
        conn.initiate_connection()
        pending = {}  # stream id -> [body left, trailers or None]
        records = {}
        sock.settimeout(IO_TIMEOUT)
        try:
            sock.sendall(conn.data_to_send())
            while True:
                data = sock.recv(65536)
                if not data:
                    return
                for event in conn.receive_data(data):
                    self._on_event(conn, event, number, records, pending)
                self._flush(conn, pending)
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
        except (OSError, h2.exceptions.ProtocolError):
            return
        finally:
            sock.close()

    def _on_event(self, conn, event, number, records, pending):
        if isinstance(event, h2.events.RequestReceived):
            record = RecordedStream(number, event.stream_id, event.headers)
            records[event.stream_id] = record
            with self._lock:
                self._streams.append(record)
            path = record.path or ""
            if path.startswith("/reset"):
                conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)
                record.answer = "reset"
            elif path.startswith("/refuse"):
                with self._lock:
                    refuse = not path.startswith("/refuse-once") or not self._refused_once
                    if path.startswith("/refuse-once"):
                        self._refused_once = True
                if refuse:
                    conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                    record.answer = "refused"
            elif path.startswith("/hold"):
                record.answer = "held"
            if event.stream_ended is not None:
                self._ended(conn, record, pending)
        elif isinstance(event, h2.events.DataReceived):
            record = records.get(event.stream_id)
            if record is not None:
                with self._lock:
                    record.body += event.data
            try:
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            except h2.exceptions.StreamClosedError:
                pass
        elif isinstance(event, h2.events.StreamEnded):
            record = records.get(event.stream_id)
            if record is not None:
                self._ended(conn, record, pending)
        elif isinstance(event, h2.events.StreamReset):
            record = records.get(event.stream_id)
            pending.pop(event.stream_id, None)
            if record is not None and record.answer not in ("reset", "refused"):
                with self._lock:
                    record.reset = True

    def _ended(self, conn, record, pending):
        with self._lock:
            record.ended = True
        if record.answer is not None:
            return
        path = record.path or ""
        headers = [(":status", "200"), ("content-type", "text/plain"), ("x-backend", "h2")]
        trailers = None
        if path.startswith("/big/"):
            body = big_body(int(path[5:].split("?")[0]))
        else:
            body = b"echo:%s:%s" % (record.one(":method").encode(), record.body)
        if path.startswith("/length"):
            headers.append(("content-length", str(len(body))))
        if path.startswith("/short"):  # a content-length its DATA falls short of
            headers.append(("content-length", str(len(body) + 5)))
        if path.startswith("/trailers"):
            trailers = [("x-backend-trailer", "done")]
        if record.one(":method") == "HEAD":  # the length a GET would have, no body
            conn.send_headers(record.stream_id, headers, end_stream=True)
        else:
            conn.send_headers(record.stream_id, headers)
            pending[record.stream_id] = [body, trailers]
        with self._lock:
            record.answer = "answered"

    def _flush(self, conn, pending):
        for stream_id in list(pending):
            body, trailers = pending[stream_id]
            try:
                while body:
                    room = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
                    if room <= 0:
                        break
                    conn.send_data(stream_id, body[:room])
                    body = body[room:]
                pending[stream_id][0] = body
                if not body:
                    if trailers:
                        conn.send_headers(stream_id, trailers, end_stream=True)
                    else:
                        conn.end_stream(stream_id)
                    del pending[stream_id]
            except h2.exceptions.StreamClosedError:
                del pending[stream_id]
