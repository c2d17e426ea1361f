"""A TCP relay between one proxy and etcd, with network faults a test can switch on and off.

One EtcdRelay per proxy->etcd link: the proxy's fence_store endpoint is relay.url, the relay
forwards to the real etcd. Python standard library only; one thread accepts, one thread per
connection pumps both directions (select with a short timeout, so a mode change reaches the
connections that are already open within ~50 ms, or at once for the ones paused on it).

Modes (set_mode):
  "pass"        forward everything (the default).
  "blackhole"   a partition: new connections are accepted, what they send is read and dropped,
                nothing is ever answered (they stay dead after the mode changes back: the request
                they carried is lost); open connections stop forwarding in both directions (no
                byte is read from either side: the kernel buffers it, as TCP does across a
                partition) and resume where they stopped when the mode goes back to "pass".
  "reset"       every open connection is closed with an RST (SO_LINGER 0) toward the proxy (its
                etcd side is closed too); new connections are accepted and reset at once.
  "hold_watch"  connections whose first request line starts with "POST /v3/watch" stop
                forwarding in both directions (paused as in "blackhole"); every other connection
                passes. A connection is classified by the request line of its first request
                (the proxy's etcd client speaks etcd's JSON gateway over HTTP/1.1 keep-alive, one
                request line per call, and a watch holds its connection as a stream). With
                existing_only=True only the watch connections already open when the mode is set
                are held: a watch the proxy opens afterwards (after noticing the stall) passes.

The proxy's etcd client decides what happens to a connection that stops answering (a timeout,
then a new connection); the relay never closes a paused connection by itself.
"""

import select
import socket
import struct
import threading
import time

MODES = ("pass", "blackhole", "reset", "hold_watch")
WATCH_LINE = b"POST /v3/watch"
_FIRST_LINE_LIMIT = 8192  # bytes of a connection's start read before it is classified anyway


def _rst_close(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _close(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Conn:
    def __init__(self, client):
        self.client = client
        self.upstream = None
        self.first_line = None      # bytes of the first request line, once complete
        self.start = b""            # client bytes held until the first line is known
        self.dead = False           # accepted in blackhole: read and drop forever
        self.closed = False
        self.opened = time.monotonic()

    @property
    def is_watch(self):
        return self.first_line is not None and self.first_line.startswith(WATCH_LINE)


class EtcdRelay:
    """A TCP relay 127.0.0.1:<port> -> target "host:port" (one per proxy->etcd link)."""

    def __init__(self, target_host, target_port):
        self.target = (target_host, int(target_port))
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.mode = "pass"
        self._existing_only = False
        self._hold_set = set()      # with existing_only: the connections open at set_mode
        self._cond = threading.Condition()
        self._conns = set()
        self._closing = False
        # Counters a test may print or assert on.
        self.accepted = 0
        self.dropped_bytes = 0      # read and dropped from blackholed connections
        self.resets = 0             # connections reset by "reset"
        self.watches_seen = 0       # connections classified as watches
        self._accept_thread = threading.Thread(target=self._accept, daemon=True,
                                               name="etcd-relay-accept-%d" % self.port)
        self._accept_thread.start()

    # -- control --

    def set_mode(self, mode, existing_only=False):
        """Switches the fault; takes effect on open connections too. existing_only applies to
        "hold_watch" (see the module's docstring)."""
        if mode not in MODES:
            raise ValueError("unknown relay mode %r (one of %s)" % (mode, ", ".join(MODES)))
        with self._cond:
            self.mode = mode
            self._existing_only = bool(existing_only) and mode == "hold_watch"
            self._hold_set = set(self._conns) if self._existing_only else set()
            victims = list(self._conns) if mode == "reset" else []
            if mode == "reset":
                for conn in victims:
                    conn.closed = True
                self._conns.clear()
                self.resets += len(victims)
            self._cond.notify_all()
        for conn in victims:
            _rst_close(conn.client)
            if conn.upstream is not None:
                _close(conn.upstream)

    def connections(self):
        """A snapshot: [(first request line or None, held?)] of the open connections."""
        with self._cond:
            return [(c.first_line, self._paused(c)) for c in self._conns]

    def held_watches(self):
        """How many watch connections are paused right now."""
        with self._cond:
            return sum(1 for c in self._conns if c.is_watch and self._paused(c))

    def watch_connections(self):
        """How many watch connections are open (held or not)."""
        with self._cond:
            return sum(1 for c in self._conns if c.is_watch)

    def close(self):
        with self._cond:
            self._closing = True
            conns, self._conns = list(self._conns), set()
            for conn in conns:
                conn.closed = True
            self._cond.notify_all()
        try:
            self._listener.close()
        except OSError:
            pass
        for conn in conns:
            _close(conn.client)
            if conn.upstream is not None:
                _close(conn.upstream)
        self._accept_thread.join(2.0)

    # -- internals --

    def _paused(self, conn):
        """Called with _cond held: must this connection forward nothing right now?"""
        if self.mode == "blackhole":
            return True
        if self.mode == "hold_watch" and conn.is_watch:
            return not self._existing_only or conn in self._hold_set
        return False

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(client)
            with self._cond:
                if self._closing:
                    _close(client)
                    return
                self.accepted += 1
                mode = self.mode
                if mode == "reset":
                    self.resets += 1
                    _rst_close(client)
                    continue
                conn.dead = mode == "blackhole"
                self._conns.add(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True,
                             name="etcd-relay-%d" % self.port).start()

    def _forget(self, conn):
        with self._cond:
            self._conns.discard(conn)
            self._hold_set.discard(conn)
            already = conn.closed
            conn.closed = True
        if not already:
            _close(conn.client)
            if conn.upstream is not None:
                _close(conn.upstream)

    def _run(self, conn):
        try:
            if conn.dead:
                self._drain_dead(conn)
                return
            try:
                conn.upstream = socket.create_connection(self.target, timeout=2.0)
            except OSError:
                _rst_close(conn.client)  # etcd itself refuses: the proxy sees a reset
                with self._cond:
                    conn.closed = True
                return
            conn.upstream.settimeout(None)
            conn.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pump(conn)
        except (OSError, ValueError):
            pass
        finally:
            self._forget(conn)

    def _drain_dead(self, conn):
        while True:
            with self._cond:
                if conn.closed or self._closing:
                    return
            ready, _, _ = select.select([conn.client], [], [], 0.1)
            if ready:
                data = conn.client.recv(65536)
                if not data:
                    return
                with self._cond:
                    self.dropped_bytes += len(data)

    def _pump(self, conn):
        client, upstream = conn.client, conn.upstream
        while True:
            with self._cond:
                while not conn.closed and not self._closing and self._paused(conn):
                    self._cond.wait(0.5)
                if conn.closed or self._closing:
                    return
            ready, _, _ = select.select([client, upstream], [], [], 0.05)
            if not ready:
                continue
            with self._cond:  # the mode may have changed while select waited
                if conn.closed or self._closing or self._paused(conn):
                    continue
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                if sock is client:
                    if conn.first_line is None:
                        conn.start += data
                        if b"\r\n" not in conn.start and len(conn.start) < _FIRST_LINE_LIMIT:
                            continue  # hold it until the connection can be classified
                        with self._cond:
                            conn.first_line = conn.start.split(b"\r\n", 1)[0]
                            if conn.is_watch:
                                self.watches_seen += 1
                            paused = self._paused(conn)
                        data, conn.start = conn.start, b""
                        if paused:
                            # A new watch under "hold_watch": its request waits here (already
                            # read) until the hold ends; what follows stays in the kernel.
                            with self._cond:
                                while not conn.closed and not self._closing and \
                                        self._paused(conn):
                                    self._cond.wait(0.5)
                                if conn.closed or self._closing:
                                    return
                    upstream.sendall(data)
                else:
                    client.sendall(data)
