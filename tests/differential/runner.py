"""A worker of the differential oracle: one lane (proxy, backend, client), the replays, the
comparisons, and what it found. Standard library only.

Each client connection (a *unit*) is played, the backend's bytes since the last barrier taken,
and the segments replayed to every request parser at once while the proxy's access lines are
still on their way (the proxy writes them within a second). A unit is compared once a line of a
later unit has appeared (one I/O thread: its lines are then all in), or at the end, after the
proxy is stopped (its log is flushed at exit).
"""

import collections
import os
import re
import time

from common import shown
from compare import request_disagreements, response_disagreements
from lane import Backend, LogTail, Proxy, as_bytes, run_client
from replay import LineDriver, Replayer, python_responses
from strict import strict_requests, strict_responses

HERE = os.path.dirname(os.path.abspath(__file__))
KEEP_DETAILS = 300    # failures kept with their bytes (the rest: source and texts only) ...
KEEP_PER_CLASS = 5    # ... but always the first few of every class of disagreement
BATCH = 32            # units compared together (their response jobs pipelined to Go and Node)


class Unit:
    __slots__ = ("case", "index", "conn", "ip", "serial", "received", "closed", "segments",
                 "req_results", "strict", "elapsed")


def merge(diffs):
    """The same finding by several parsers, as one line naming them all."""
    merged = collections.OrderedDict()
    for kind, parser, text in diffs:
        merged.setdefault((kind, text), []).append(parser)
    return [(kind, ", ".join(parsers), text) for (kind, text), parsers in merged.items()]


class Failure:
    def __init__(self, unit, lines, diffs, resp_results, keep):
        diffs = merge(diffs)
        self.source = unit.case.source
        self.connection = "%d of %d" % (unit.index + 1, len(unit.case.conns))
        self.diffs = diffs
        self.kinds = sorted({k for k, _, _ in diffs})
        if keep:
            self.parts = unit.conn.parts
            self.segments = [d for _, d in unit.segments]
            self.received = unit.received
            self.lines = [_line_summary(l) for l in lines]
            self.responses = {p: r for p, r in resp_results.items()}
        else:
            self.parts = self.segments = self.received = self.lines = self.responses = None

    def report(self, full=True):
        out = ["DISAGREEMENT in %s (client connection %s): %s" % (self.source, self.connection,
                                                                   ", ".join(self.kinds))]
        for kind, parser, text in self.diffs:
            out.append("  - [%s] %s: %s" % (kind, parser, text))
        if full and self.parts is not None:
            for i, (delay, data) in enumerate(self.parts):
                out.append("  client sent%s: b'%s'" % (" after %.0f ms" % (delay * 1000) if delay else "",
                                                       shown(data, 3000)))
            out.append("  proxy decided: %s" % ("; ".join(self.lines) or "(no access line)"))
            for i, seg in enumerate(self.segments):
                out.append("  upstream segment %d: b'%s'" % (i + 1, shown(seg, 3000)))
            out.append("  client received: b'%s'" % shown(self.received, 3000))
            if any(k in self.kinds for k in ("response", "stray", "identity", "parsers", "count")):
                for p, r in self.responses.items():
                    out.append("  %s read: %s err=%r rest=%d" % (
                        p, ["%d/%d" % (x["s"], x["n"]) for x in r["resps"]], r.get("err", ""), r.get("rest", 0)))
        return "\n".join(out)


def _line_summary(line):
    return "%s %s -> %s %s%s%s attempts=%s in=%s out=%s" % (
        line.get("method", "-"), line.get("path", "-"), line.get("status"), line.get("decision"),
        " token=%s" % line["token"] if "token" in line else "",
        " upstream=%s" % line["upstream_status"] if "upstream_status" in line else "",
        line.get("upstream_attempts"), line.get("bytes_in"), line.get("bytes_out"))


def signature(kind, parser, text):
    """A disagreement's class: its text with numbers, quoted bytes, methods and paths folded."""
    text = re.sub(r"b?'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\b[A-Za-z-]+ (/|http://|\*)\S*", "M PATH", text)
    text = re.sub(r"\d+", "N", text)
    return "[%s] %s: %s" % (kind, parser, text[:160])


class Lane:
    def __init__(self, binary, workdir, ports, goparse, worker, verbose=False):
        self.worker, self.verbose = worker, verbose
        self.backend = Backend()
        self.proxy = Proxy(binary, workdir, self.backend.url)
        self.proxy.start()
        self.log = LogTail(self.proxy.stderr_path)
        self.replayer = Replayer(ports)
        self.go = LineDriver([goparse, "responses"], "go")
        self.node = LineDriver(["node", os.path.join(HERE, "parsers", "nodeparse.js"), "responses"], "node")
        self.pending = collections.deque()
        self.lines = collections.defaultdict(list)
        self.serial_of = {}
        self.serial = 0
        self.ip_counter = 256
        self.latest_seen = -1
        self.stats = collections.Counter()
        self.per_parser = collections.Counter()
        self.signatures = collections.Counter()
        self.failures = []
        self.notes = []
        self.limits = collections.Counter()
        self.limit_examples = {}
        self.owner = {}
        self._setup()

    def _ip(self):
        """A client address no other connection of this run used: 127.(16w+16..).x.y."""
        self.ip_counter += 1
        while self.ip_counter & 0xFF in (0, 255):
            self.ip_counter += 1
        value = (127 << 24) | ((self.worker + 1) << 20) | (self.ip_counter & 0xFFFFF)
        return "%d.%d.%d.%d" % (value >> 24, (value >> 16) & 255, (value >> 8) & 255, value & 255)

    def _setup(self):
        seed = b"".join(b"PUT /%s/seed HTTP/1.1\r\nHost: t\r\nX-Fencing-Token: 10\r\nContent-Length: 0\r\n\r\n" % r
                        for r in (b"orders", b"fenced", b"hostile"))
        received, _ = run_client(self.proxy.port, "127.0.0.1", [(0, seed)])
        if received.count(b"HTTP/1.1 200") != 3:
            raise RuntimeError("the proxy did not take the seed writes: %r" % received[:500])
        self.backend.take()

    # -- playing --

    def run_case(self, case):
        for key, actions in case.scripts.items():
            self.backend.script(key, actions)
            self.owner[key] = case.source
        for index, conn in enumerate(case.conns):
            self.serial += 1
            u = Unit()
            u.case, u.index, u.conn, u.serial = case, index, conn, self.serial
            u.ip = self._ip()
            self.serial_of[u.ip] = u.serial
            start = time.monotonic()
            u.received, u.closed = run_client(self.proxy.port, u.ip, conn.parts)
            u.elapsed = time.monotonic() - start
            if self.proxy.proc.poll() is not None:
                raise RuntimeError("fencing-proxy exited %s while playing %s (client connection %d); "
                                   "its stderr: %s" % (self.proxy.proc.returncode, case.source, index + 1,
                                                       self.proxy.stderr_tail()))
            u.segments = self.backend.take()
            data = [d for _, d in u.segments]
            u.req_results = self.replayer.run(data)
            u.strict = [strict_requests(d) for d in data]
            if not u.closed:
                self.notes.append("%s: the proxy had not closed the connection %.1f s after the client's "
                                  "last byte" % (case.source, u.elapsed))
            self.pending.append(u)
        self.resolve()

    # -- comparing --

    def resolve(self, final=False):
        for entry in self.log.poll():
            ip = entry.get("client")
            serial = self.serial_of.get(ip)
            if serial is None:
                continue
            self.lines[ip].append(entry)
            self.latest_seen = max(self.latest_seen, serial)
        ready = []
        while self.pending and (final or self.pending[0].serial < self.latest_seen):
            ready.append(self.pending.popleft())
        for i in range(0, len(ready), BATCH):
            self._compare(ready[i:i + BATCH])

    def _compare(self, units):
        jobs = []
        for u in units:
            lines = self.lines.pop(u.ip, [])
            del self.serial_of[u.ip]
            methods = [as_bytes(l.get("method")) or b"GET" for l in lines if l.get("status", 0) >= 100]
            jobs.append((u, lines, methods, self.go.submit(methods, u.received),
                         self.node.submit(methods, u.received)))
        for u, lines, methods, go_id, node_id in jobs:
            resp = {"python": python_responses([m.decode("latin-1") for m in methods], u.received),
                    "node": self.node.result(node_id), "go": self.go.result(go_id),
                    "strict": strict_responses(methods, u.received)}
            limits = []
            diffs = request_disagreements(lines, u.segments, u.req_results, u.strict, limits)
            for server, (limit, method) in limits:
                self.limits[(server, limit)] += 1
                examples = self.limit_examples.setdefault("%s: %s" % (server, limit), [])
                if len(examples) < 8 and method not in examples:
                    examples.append(method)
            diffs += response_disagreements(lines, resp, u.conn.probes, u.closed, u.received, self.owner.get)
            self._count(u, lines, resp, diffs)

    def _count(self, u, lines, resp, diffs):
        forwarded = sum(max(0, l.get("upstream_attempts", 0)) for l in lines)
        self.stats["units"] += 1
        self.stats["forwarded"] += forwarded
        self.stats["requests_logged"] += len(lines)
        self.stats["responses"] += sum(1 for l in lines if l.get("status", 0) >= 100)
        self.stats["client_bytes"] += len(u.conn.data)
        for server, results in u.req_results.items():
            self.per_parser["request " + server] += sum(len(r.entries) for r in results)
        self.per_parser["request strict"] += sum(len(v) for v, _, _ in u.strict)
        for p, r in resp.items():
            self.per_parser["response " + p] += len(r["resps"])
        if self.verbose:
            print("\n%s (client connection %d of %d): %d disagreements\n  client sent: b'%s'\n  proxy decided: %s%s"
                  "\n  client received: b'%s'" % (
                      u.case.source, u.index + 1, len(u.case.conns), len(diffs), shown(u.conn.data, 2000),
                      "; ".join(_line_summary(l) for l in lines),
                      "".join("\n  upstream segment %d: b'%s'" % (i + 1, shown(d, 2000))
                              for i, (_, d) in enumerate(u.segments)),
                      shown(u.received, 2000)), flush=True)
        if diffs:
            self.stats["failed"] += 1
            classes = [signature(*d) for d in merge(diffs)]
            keep = len(self.failures) < KEEP_DETAILS or any(self.signatures[c] < KEEP_PER_CLASS for c in classes)
            for c in classes:
                self.signatures[c] += 1
            self.failures.append(Failure(u, lines, diffs, resp, keep))
        else:
            self.stats["passed"] += 1

    def finish(self):
        code = self.proxy.terminate()
        self.resolve(final=True)
        self.go.close()
        self.node.close()
        self.replayer.close()
        self.backend.close()
        if code not in (0, None):
            self.notes.append("fencing-proxy exited %s at SIGTERM" % code)
