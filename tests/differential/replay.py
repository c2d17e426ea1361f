"""Replaying captured bytes to the parsers. Standard library only.

Requests: Replayer.run(segments) sends each captured upstream segment, followed by a sentinel
request (GET /__diff_end__, Connection: close), to every request-view server over a fresh TCP
connection at once (one selector loop), reads what each answers until it closes, and turns that
into a list of entries per segment: a View for every request the server read (its X-Diff-View
header), a Refusal for every request it answered otherwise (its own 4xx/5xx). The sentinel ends
the list; a list without it means the server framed the segment's last request differently (it
took the sentinel as body, or waits for more) or closed early.

Responses: python_responses (http.client, in this process) and LineDriver (goparse / nodeparse
"responses" over a pipe) read the bytes a client received, for the methods it sent.
"""

import http.client
import io
import json
import selectors
import socket
import time

from common import END_REQUEST, END_TARGET, LineReader, die_with_parent, Refusal, parse_view, sha16, shown, stop, track

REPLAY_TIMEOUT = 10.0  # for a server to answer a segment and close (bounds a loaded machine too)
DRAIN_TIMEOUT = 2.0   # then, after our write side is shut


class SegmentResult:
    __slots__ = ("entries", "ended", "timed_out", "raw")

    def __init__(self, entries, ended, timed_out, raw):
        self.entries, self.ended, self.timed_out, self.raw = entries, ended, timed_out, raw


def parse_answers(data):
    """A server's answers -> (entries, ended). 1xx are skipped."""
    entries = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        if end < 0:
            entries.append(Refusal(0, "unreadable answer %s" % shown(data[pos:pos + 80])))
            break
        lines = data[pos:end].split(b"\r\n")
        pos = end + 4
        parts = lines[0].split(b" ", 2)
        try:
            status = int(parts[1])
        except (IndexError, ValueError):
            entries.append(Refusal(0, "unreadable status line %s" % shown(lines[0][:80])))
            break
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200:
            continue
        if b"content-length" in headers:
            length = int(headers[b"content-length"])
            body, pos = data[pos:pos + length], pos + length
        elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = bytearray()
            while True:
                line_end = data.find(b"\r\n", pos)
                if line_end < 0:
                    pos = len(data)
                    break
                size = int(data[pos:line_end].split(b";")[0], 16)
                pos = line_end + 2
                if size == 0:
                    trailer_end = data.find(b"\r\n\r\n", pos - 2)
                    pos = len(data) if trailer_end < 0 else trailer_end + 4
                    break
                body += data[pos:pos + size]
                pos += size + 2
            body = bytes(body)
        else:
            body, pos = data[pos:], len(data)
        if b"x-diff-view" in headers:
            try:
                entry = parse_view(headers[b"x-diff-view"].decode("ascii"))
            except (ValueError, UnicodeDecodeError):
                entries.append(Refusal(status, "unreadable view %s" % shown(headers[b"x-diff-view"][:80])))
                break
            if entry.target == END_TARGET and entry.method == b"GET":
                return entries, True
            entries.append(entry)
        else:
            reason = headers.get(b"x-diff-error")
            if reason:
                try:
                    reason = bytes.fromhex(reason.decode("ascii")).decode("latin-1")
                except ValueError:
                    reason = shown(reason)
            else:
                reason = shown(body.strip()[:100])
            entries.append(Refusal(status, reason))
    return entries, False


class _Conn:
    __slots__ = ("sock", "out", "inp", "done", "shut", "key")


class Replayer:
    """servers: {name: port or [ports]} (several ports: taken in turn)."""

    def __init__(self, servers):
        self.servers = {name: (ports if isinstance(ports, list) else [ports])
                        for name, ports in servers.items()}
        self.turn = 0
        self.sel = selectors.DefaultSelector()

    @property
    def names(self):
        return list(self.servers)

    def run(self, segments):
        """-> {server name: [SegmentResult per segment]}."""
        if not segments:
            return {name: [] for name in self.servers}
        self.turn += 1
        conns = []
        for name, ports in self.servers.items():
            port = ports[self.turn % len(ports)]
            for index, segment in enumerate(segments):
                c = _Conn()
                c.key = (name, index)
                c.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                c.sock.setblocking(False)
                c.sock.connect_ex(("127.0.0.1", port))
                c.out = memoryview(bytes(segment) + END_REQUEST)
                c.inp = bytearray()
                c.done = c.shut = False
                conns.append(c)
                self.sel.register(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        start = time.monotonic()
        deadline = start + REPLAY_TIMEOUT
        open_count = len(conns)
        try:
            while open_count:
                now = time.monotonic()
                if now >= deadline:
                    if any(not c.shut for c in conns if not c.done):
                        for c in conns:
                            if not c.done and not c.shut:
                                c.shut = True
                                try:
                                    c.sock.shutdown(socket.SHUT_WR)
                                except OSError:
                                    pass
                        deadline = now + DRAIN_TIMEOUT
                        continue
                    break
                for key, events in self.sel.select(min(0.5, deadline - now)):
                    c = key.data
                    if events & selectors.EVENT_WRITE and c.out:
                        try:
                            sent = c.sock.send(c.out)
                            c.out = c.out[sent:]
                        except BlockingIOError:
                            pass
                        except OSError:
                            c.out = c.out[:0]
                        if not c.out:
                            self.sel.modify(c.sock, selectors.EVENT_READ, c)
                    if events & selectors.EVENT_READ:
                        try:
                            chunk = c.sock.recv(262144)
                        except BlockingIOError:
                            continue
                        except OSError:
                            chunk = b""
                        if chunk:
                            c.inp += chunk
                        else:
                            c.done = True
                            open_count -= 1
                            self.sel.unregister(c.sock)
                            c.sock.close()
        finally:
            for c in conns:
                if not c.done:
                    self.sel.unregister(c.sock)
                    c.sock.close()
        results = {name: [None] * len(segments) for name in self.servers}
        for c in conns:
            entries, ended = parse_answers(bytes(c.inp))
            results[c.key[0]][c.key[1]] = SegmentResult(entries, ended, not c.done or c.shut, bytes(c.inp))
        return results

    def close(self):
        self.sel.close()


# -- responses ----------------------------------------------------------------------------------

class _NoCloseReader(io.BufferedReader):
    def close(self):  # http.client closes the file at the end of each body
        pass


class _FakeSocket:
    def __init__(self, data):
        self.reader = _NoCloseReader(io.BytesIO(data))

    def makefile(self, *args, **kwargs):
        return self.reader


def python_responses(methods, data):
    """http.client.HTTPResponse over the bytes, as a client that sent methods reads them."""
    sock = _FakeSocket(data)
    out = {"resps": [], "err": "", "rest": 0}
    index = 0
    while sock.reader.peek(1):
        method = methods[index] if index < len(methods) else "GET"
        try:
            while True:
                resp = http.client.HTTPResponse(sock, method=method)
                resp.begin()
                if 100 <= resp.status < 200 and resp.status != 101:
                    if not sock.reader.peek(1):
                        break  # interim, then the close: no final response
                    continue
                break
            if 100 <= resp.status < 200 and resp.status != 101:
                break
            body = resp.read() if resp.status != 101 else b""
        except http.client.RemoteDisconnected:
            break  # http.client skipped a 100 Continue and met the close: no final response
        except http.client.IncompleteRead as e:
            out["err"] = "IncompleteRead after %d bytes" % len(e.partial)
            break
        except (http.client.HTTPException, ValueError, OSError) as e:
            out["err"] = "%s: %s" % (type(e).__name__, str(e)[:100])
            break
        out["resps"].append({"s": resp.status, "n": len(body), "h": sha16(body)})
        index += 1
        if resp.will_close or resp.status == 101:
            break
    out["rest"] = len(sock.reader.read())
    return out


class LineDriver:
    """goparse / nodeparse in "responses" mode: one JSON job a line in, one result a line out."""

    def __init__(self, argv, name, env=None):
        import subprocess
        self.name = name
        self.proc = track(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                                           preexec_fn=die_with_parent))
        self.reader = LineReader(self.proc.stdout)
        self.next_id = 0

    def submit(self, methods, data):
        self.next_id += 1
        job = {"id": self.next_id, "methods": [m.decode("latin-1") if isinstance(m, bytes) else m
                                               for m in methods], "data": bytes(data).hex()}
        self.proc.stdin.write(json.dumps(job).encode() + b"\n")
        self.proc.stdin.flush()
        return self.next_id

    def result(self, job_id, timeout=20.0):
        line = self.reader.line(timeout)
        if not line:
            raise RuntimeError("%s responses driver gave no answer (exit %s)" % (self.name, self.proc.poll()))
        result = json.loads(line)
        if result.get("id") != job_id:
            raise RuntimeError("%s responses driver answered job %s for %s" % (self.name, result.get("id"), job_id))
        return result

    def close(self):
        stop(self.proc)
