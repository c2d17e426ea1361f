"""The comparisons of the differential oracle. Standard library only.

For one client connection (a *unit*), given

  - the proxy's decisions: its access lines for the connection, in order;
  - what the backend received, per upstream connection (segments), and what every request
    parser read of each segment (request views), plus the strict view of the same bytes;
  - what the client received, and what every response parser read of it,

disagreements() lists every way a parser's reading differs from the proxy's decision or from
another parser's:

  request side   the requests forwarded (upstream_attempts >= 1) must be exactly the requests each
                 parser read, in order: same count (a parser reading one more is a smuggled
                 request), method, target (absolute-form sent on as origin-form), the token
                 (exactly the decimal the proxy decided, when it decided one), body length
                 (bytes_in), and every parser the same body hash; no parser may refuse one or
                 frame a segment's last request differently (miss the end sentinel);
  response side  each parser must read exactly one final response per access line that has a
                 status, with that status, and the body length the proxy relayed (bytes_out)
                 where it relayed the backend's answer; no parse error except a body cut off
                 where every parser sees it cut at the same place; no byte after the last response;
                 all parsers the same (status, length, hash) list;
  identity       a probe request the proxy relayed an answer for must get the probe's own body;
  strict         no problem reported by the strict views (strict.py).
"""

import re

from common import Refusal, View, shown, sha16
from lane import as_bytes


# What a parser cannot read by design rather than reads differently: a request method outside
# its vocabulary. llhttp knows a fixed list (Node's http.METHODS, set at start from the Node that
# runs), nginx takes upper-case letters, "_" and "-" only, and answers TRACE itself with 405.
# Such a refusal ends that parser's comparison for the connection (it closes after it); it is
# counted and listed as a parser limit, not as a disagreement.
NODE_METHODS = set()
NGINX_METHOD = re.compile(rb"[A-Z_-]+")


def parser_limit(server, entry, exp):
    """(what the parser cannot read, the method) when the refusal is one by design, else None."""
    if not isinstance(entry, Refusal):
        return None
    if server == "node" and "HPE_INVALID_METHOD" in entry.reason and exp.method not in NODE_METHODS:
        return "a method llhttp does not know (not in http.METHODS)", exp.method
    if server == "nginx" and entry.status == 400 and not NGINX_METHOD.fullmatch(exp.method):
        return "a method nginx does not take (only A-Z, _ and -)", exp.method
    if server == "nginx" and entry.status == 405 and exp.method in (b"TRACE", b"TRACK"):
        return "a method nginx answers itself (405)", exp.method
    return None


def forwarded_target(path):
    """The target the proxy sends on for the target the client sent (absolute-form becomes
    origin-form)."""
    lower = path[:8].lower()
    if lower.startswith(b"http://") or lower.startswith(b"https://"):
        rest = path.split(b"//", 1)[1]
        cut = min([i for i in (rest.find(b"/"), rest.find(b"?")) if i >= 0] or [len(rest)])
        rest = rest[cut:]
        return rest if rest.startswith(b"/") else b"/" + rest
    return path


class Expected:
    __slots__ = ("method", "target", "token", "length", "line")

    def __init__(self, line):
        self.line = line
        self.method = as_bytes(line.get("method"))
        self.target = forwarded_target(as_bytes(line.get("path")))
        self.token = line.get("token")
        self.length = line.get("bytes_in", 0)

    def show(self):
        return "%s %s token=%s body=%d (%s)" % (shown(self.method), shown(self.target), self.token,
                                                self.length, self.line.get("decision"))


def _entry_problem(server, entry, exp):
    if isinstance(entry, Refusal):
        return "refused it: %s" % entry.show()
    diffs = []
    if entry.method != exp.method:
        diffs.append("method %s" % shown(entry.method))
    if entry.target != exp.target:
        diffs.append("target %s" % shown(entry.target))
    if exp.token is not None:
        want = (b"%d" % exp.token,)
        if tuple(t.strip(b" \t") for t in entry.tokens) != want:
            diffs.append("token %s where the proxy decided %d" % (
                "[" + ",".join(shown(t) for t in entry.tokens) + "]", exp.token))
    if entry.length != exp.length:
        diffs.append("body %d bytes where the proxy forwarded %d" % (entry.length, exp.length))
    return ", ".join(diffs) or None


def request_disagreements(lines, segments, req_results, strict_results, limits=None):
    """-> [(kind, parser, text)]; parser limits met are appended to limits."""
    resent = [l for l in lines if l.get("upstream_attempts", 0) > 1]
    if resent:
        # A resend may or may not have reached the backend before: the reading that matches
        # decides. Read twice and not a safe method: the at-most-once promise is broken.
        every = _request_disagreements(lines, req_results, strict_results, limits, copies=True)
        once = _request_disagreements(lines, req_results, strict_results, [], copies=False)
        if not [d for d in every if d[0] != "strict"]:
            unsafe = [l for l in resent if l.get("method") not in ("GET", "HEAD", "OPTIONS")]
            return every + [("resend", "all", "the backend read %s %s %d times (upstream_attempts %d): "
                             "a request sent again after it had reached the backend"
                             % (l.get("method"), l.get("path"), l["upstream_attempts"], l["upstream_attempts"]))
                            for l in unsafe]
        if not [d for d in once if d[0] != "strict"]:
            return once
        return every
    return _request_disagreements(lines, req_results, strict_results, limits, copies=True)


def _request_disagreements(lines, req_results, strict_results, limits, copies):
    out = []
    expected = []
    for line in lines:
        for _ in range(max(0, line.get("upstream_attempts", 0)) if copies else min(1, line.get("upstream_attempts", 0))):
            expected.append(Expected(line))
    seqs = {}
    for server, results in req_results.items():
        seq = []
        cut = None
        for index, result in enumerate(results):
            start = len(seq)
            seq.extend(result.entries)
            for i in range(start, len(seq)):
                limit = parser_limit(server, seq[i], expected[i]) if i < len(expected) else None
                if limit:
                    cut = i
                    if limits is not None:
                        limits.append((server, limit))
                    break
            if cut is not None:
                break
            if not result.ended and not any(isinstance(e, Refusal) for e in result.entries):
                how = "timed out" if result.timed_out else "closed"
                out.append(("boundary", server, "upstream segment %d: the server %s before the end "
                            "sentinel: it framed the last request differently (answers: %s)"
                            % (index + 1, how, shown(result.raw[-300:], 400))))
        seqs[server] = seq[:cut] if cut is not None else seq
        if cut is not None:
            seqs[server] = (seqs[server], cut)
    strict_seq = []
    for index, (views, problems, stopped) in enumerate(strict_results):
        strict_seq.extend(views)
        for p in problems:
            out.append(("strict", "strict", "upstream segment %d: %s" % (index + 1, p)))
        if stopped:
            out.append(("strict", "strict", "upstream segment %d: cannot be read on: %s" % (index + 1, stopped)))
    seqs["strict"] = strict_seq
    for server in list(seqs):
        seq = seqs[server]
        want = expected
        if isinstance(seq, tuple):  # a parser limit: compared up to it
            seq, cut = seq
            seqs[server] = seq
            want = expected[:cut]
        for i in range(max(len(seq), len(want))):
            if i >= len(seq):
                out.append(("count", server, "read %d requests, the proxy forwarded %d; first missing: #%d %s"
                            % (len(seq), len(want), i + 1, want[i].show())))
                break
            if i >= len(want):
                out.append(("count", server, "read %d requests, the proxy forwarded %d; first extra: #%d %s"
                            % (len(seq), len(want), i + 1, seq[i].show())))
                break
            problem = _entry_problem(server, seq[i], want[i])
            if problem:
                out.append(("request", server, "request #%d: the proxy forwarded %s; read %s"
                            % (i + 1, want[i].show(), problem)))
                break
    # every parser the same, body hashes included
    names = [n for n in seqs if n != "strict" or not any(k == "strict" for k, _, _ in out)]
    longest = max((len(seqs[n]) for n in names), default=0)
    for i in range(longest):
        column = {n: (seqs[n][i] if i < len(seqs[n]) else None) for n in names}
        views = {n: e for n, e in column.items() if isinstance(e, View)}
        if len(set(views.values())) > 1:
            out.append(("parsers", "all", "request #%d read differently: %s" % (
                i + 1, "; ".join("%s: %s" % (n, e.show()) for n, e in views.items()))))
            break
    return out


def _whose(received, path, owner):
    """Which requests' answers the client got instead (probe bodies name their key)."""
    own = path.rsplit(b"/", 1)[-1]
    keys = [k for k in re.findall(rb"probe (w[0-9]+-[a-z]+-[0-9]+)", received) if k != own]
    if not keys:
        return ""
    return "; the client got the answer of %s" % ", ".join(
        "%s%s" % (k.decode(), " (%s)" % owner(k) if owner and owner(k) else "") for k in keys)


def _error_class(parser, err):
    if not err:
        return None
    text = err.lower()
    if ("incomplete" in text or "unexpected eof" in text or "eof_state" in text
            or "invalid eof" in text):
        return "cut"
    return "invalid"


def response_disagreements(lines, resp_results, probes, closed, received=b"", owner=None):
    """-> [(kind, parser, text)]. owner(key) names the case a probe key belongs to."""
    out = []
    answered = [l for l in lines if l.get("status", 0) >= 100]
    methods = [as_bytes(l.get("method")) or b"GET" for l in answered]
    classes = {}
    for parser, r in resp_results.items():
        resps, err, rest = r["resps"], r.get("err", ""), r.get("rest", 0)
        cls = _error_class(parser, err)
        classes[parser] = (cls, len(resps))
        for p in r.get("problems", ()):
            out.append(("strict", parser, "client bytes: %s" % p))
        if cls == "invalid":
            out.append(("response", parser, "cannot read what the proxy sent after %d responses: %s"
                        % (len(resps), err)))
        if rest:
            out.append(("stray", parser, "%d bytes after the last response it read" % rest))
        cut = 1 if cls == "cut" else 0
        if len(resps) + cut != len(answered) and not (cls == "invalid"):
            out.append(("count", parser, "read %d responses%s, the proxy answered %d requests (statuses %s)"
                        % (len(resps), " and a cut-off one" if cut else "", len(answered),
                           [l.get("status") for l in answered])))
        for i, (resp, line) in enumerate(zip(resps, answered)):
            problems = []
            if resp["s"] != line.get("status"):
                problems.append("status %d where the proxy logged %d" % (resp["s"], line.get("status")))
            relayed = line.get("upstream_status") == line.get("status") and line.get("upstream_status")
            if methods[i] == b"HEAD" and resp["n"]:
                problems.append("a %d-byte body to HEAD" % resp["n"])
            elif relayed and resp["n"] != line.get("bytes_out", 0) and line.get("upstream_status", 0) >= 200:
                problems.append("body %d bytes where the proxy relayed %d" % (resp["n"], line.get("bytes_out", 0)))
            path = as_bytes(line.get("path"))
            if path in probes and relayed and line.get("status") == 200:
                if resp["h"] != sha16(probes[path]):
                    problems.append("probe %s answered with another body (%d bytes) than its own %r%s"
                                    % (shown(path), resp["n"], probes[path], _whose(received, path, owner)))
            if problems:
                out.append(("response" if "probe" not in problems[-1] else "identity", parser,
                            "response #%d (%s %s): %s" % (i + 1, shown(methods[i]), shown(path), "; ".join(problems))))
                break
        if cls == "cut" and closed is False:
            out.append(("response", parser, "a response cut off on a connection the proxy kept open"))
    # a probe that reached the backend is answered 200 by it: the client must get that answer
    for line in answered:
        path = as_bytes(line.get("path"))
        if path in probes and line.get("upstream_attempts", 0) >= 1 and (
                line.get("status") != 200 or line.get("upstream_status") != 200):
            out.append(("identity", "all", "probe %s reached the backend, which answers it 200 with %r, "
                        "but the client got %s (upstream_status %s)" % (
                            shown(path), probes[path], line.get("status"), line.get("upstream_status"))))
    # every parser the same
    keyed = {p: ([(x["s"], x["n"], x["h"]) for x in r["resps"]], classes[p][0] is not None)
             for p, r in resp_results.items()}
    if len(set(repr(v) for v in keyed.values())) > 1:
        out.append(("parsers", "all", "responses read differently: %s" % "; ".join(
            "%s: %s%s" % (p, ["%d/%d/%s" % x for x in v[0]], " +error" if v[1] else "")
            for p, v in keyed.items())))
    return out
