"""What the differential oracle sends: client streams (requests) and scripted backend answers
(responses). Standard library only.

A Case is one or more client connections, played one after another, each a list of (pause
before, bytes) parts; response cases also register backend scripts (GET /resp/KEY plays the
script KEY) and name the body each probe request must get back (answer identity).

Sources, in the order a run plays them:
  pinned     tests/differential/pinned/requests/* (raw client streams: disagreements found once,
             kept so every run replays them)
  corpus     tests/fuzz/corpus: fuzz_request_head and fuzz_exchange (client streams; an
             fuzz_exchange first byte with the high bit set splits the rest with a 20 ms pause),
             fuzz_head_parser (its first byte is a limit selector; the rest is a request head, or a
             response, then played by the backend), fuzz_path_route / fuzz_fence_key (targets) and
             fuzz_token (token values), each put into a PUT
  hostile    tests/integration/test_hostile.py's CASES
  smuggle    Content-Length / Transfer-Encoding / chunk-size / request-line / field spellings
  response   hostile and odd backend responses (responses.py)
  mutator    seeded random pipelined keep-alive streams with odd spellings and byte mutations
Every fixed request stream is followed by a plain GET on the same connection, so a message whose
end the parsers read differently shows in what follows it.
"""

import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))
CORPUS = os.path.join(SOURCE_DIR, "tests", "fuzz", "corpus")
PINNED = os.path.join(HERE, "pinned", "requests")

FENCE_TOKEN = 10   # the fences "orders", "fenced" and "hostile" are raised to this before anything is sent


class Conn:
    __slots__ = ("parts", "probes")

    def __init__(self, parts, probes=None):
        self.parts = parts            # [(pause before in seconds, bytes)]
        self.probes = probes or {}    # target bytes -> the body the backend answers it with

    @property
    def data(self):
        return b"".join(p for _, p in self.parts)


class Case:
    __slots__ = ("source", "conns", "scripts", "kind")

    def __init__(self, source, conns, scripts=None, kind="request"):
        self.source, self.conns, self.scripts, self.kind = source, conns, scripts or {}, kind


def after(n):
    return b"GET /notes/after-%d HTTP/1.1\r\nHost: t\r\n\r\n" % n


def request_case(source, data, number, split=None):
    data = data + after(number)
    if split is None:
        return Case(source, [Conn([(0, data)])])
    return Case(source, [Conn([(0, data[:split]), (0.02, data[split:])])])


def put_with(target=b"/orders/1", token=b"10", body=b"hi"):
    head = b"PUT " + target + b" HTTP/1.1\r\nHost: t\r\n"
    if token is not None:
        head += b"X-Fencing-Token: " + token + b"\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


# -- pinned and corpus ----------------------------------------------------------------------

def _files(directory):
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if os.path.isfile(os.path.join(directory, n)) and not n.startswith("."))


def pinned_cases():
    out = []
    for i, path in enumerate(_files(PINNED)):
        if path.endswith(".md"):
            continue
        with open(path, "rb") as f:
            out.append(request_case("pinned %s" % os.path.relpath(path, SOURCE_DIR), f.read(), 9000 + i))
    return out


def corpus_cases(response_case):
    out = []
    n = 0

    def rel(path):
        return os.path.relpath(path, SOURCE_DIR)

    for path in _files(os.path.join(CORPUS, "fuzz_request_head")):
        n += 1
        out.append(request_case("corpus %s" % rel(path), open(path, "rb").read(), n))
    for path in _files(os.path.join(CORPUS, "fuzz_exchange")):
        n += 1
        data = open(path, "rb").read()
        if not data:
            continue
        first, rest = data[0], data[1:]
        split = (len(rest) * (first & 0x7F)) // 128 if first & 0x80 else None
        out.append(request_case("corpus %s" % rel(path), rest, n, split))
    for path in _files(os.path.join(CORPUS, "fuzz_head_parser")):
        n += 1
        data = open(path, "rb").read()[1:]
        if data.startswith(b"HTTP/"):
            out.append(response_case("corpus %s" % rel(path), [("send", data)]))
        else:
            out.append(request_case("corpus %s" % rel(path), data, n))
    for name in ("fuzz_path_route", "fuzz_fence_key"):
        for path in _files(os.path.join(CORPUS, name)):
            n += 1
            data = open(path, "rb").read()
            if name == "fuzz_fence_key":
                data = data[2:]
            target = data.split(b"\n")[0]
            out.append(request_case("corpus %s (as a PUT target)" % rel(path), put_with(target=target), n))
    for path in _files(os.path.join(CORPUS, "fuzz_token")):
        n += 1
        token = open(path, "rb").read().split(b"\n")[0]
        out.append(request_case("corpus %s (as a token)" % rel(path), put_with(token=token), n))
    return out


# -- test_hostile.py -------------------------------------------------------------------------

def hostile_cases():
    sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))
    try:
        import test_hostile
    finally:
        sys.path.pop(0)
    # on a fence of their own (/hostile, raised to 10 like test_hostile's /orders)
    return [request_case("hostile %s" % case.name, case.data.replace(b"/orders", b"/hostile"), 1000 + i)
            for i, case in enumerate(test_hostile.CASES)]


# -- smuggling payloads -----------------------------------------------------------------------

# On the fence "fenced" (raised to 10): a smuggled request carries the stale token 1.
SMUGGLED = (b"PUT /fenced/smuggled HTTP/1.1\r\nHost: t\r\nX-Fencing-Token: 1\r\n"
            b"Content-Length: 0\r\n\r\n")


def _put(fields, body, target=b"/fenced/s", line=None, token=b"X-Fencing-Token: 10"):
    line = line or b"PUT " + target + b" HTTP/1.1"
    lines = [line, b"Host: t"] + ([token] if token else []) + list(fields)
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def smuggle_cases():
    cases = []

    def add(name, data):
        cases.append(request_case("smuggle %s" % name, data, 2000 + len(cases)))

    # issue 23's reproducer: 0300 is 300 in decimal, 192 in octal
    tail = b"PUT /fenced/smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Fencing-Token: 1\r\nX: " + b"p" * 33 + b"\r\n\r\n"
    add("issue 23: Content-Length 0300", _put([b"Content-Length: 0300"], b"f" * 192 + tail))
    for value in (b"05", b"005", b"0005", b"00000000000000000005", b"+5", b"-5", b" 5", b"5 ", b"\t5",
                  b"5\t", b"5,5", b"5, 5", b"5 ,5", b"5,", b",5", b"0x5", b"5.0", b"5e0", b"05 ",
                  b"\xd9\xa5", b"5\x00", b"0", b"00", b"1_0", b"99999999999999999999",
                  b"18446744073709551621"):
        add("Content-Length %r" % value, _put([b"Content-Length: " + value], b"hello" + SMUGGLED))
    for fields in ([b"Content-Length: 5", b"Content-Length: 05"], [b"Content-Length: 5", b"content-length: 5"],
                   [b"Content-Length: 5", b"Content-Length : 5"], [b"Content-Length:5"],
                   [b"Content-Length:\t5\t"], [b"CONTENT-LENGTH: 5"], [b"Content-Length: 5", b" 0"],
                   [b"Content_Length: 0", b"Content-Length: 5"], [b"Content-Length\t: 5"]):
        add("fields %r" % fields, _put(fields, b"hello" + SMUGGLED))
    chunked = b"5\r\nhello\r\n0\r\n\r\n"
    for value in (b"chunked", b"Chunked", b"CHUNKED", b" chunked", b"chunked ", b"\tchunked",
                  b"chunked\t", b"chunked, chunked", b"identity, chunked", b"chunked;q=1",
                  b"\x0bchunked", b"chunk", b"cHuNkEd", b'"chunked"', b"gzip, chunked", b"chunked,",
                  b",chunked", b"x-chunked"):
        add("Transfer-Encoding %r" % value, _put([b"Transfer-Encoding: " + value], chunked + SMUGGLED))
    for fields in ([b"Transfer-Encoding : chunked"], [b"Transfer_Encoding: chunked", b"Content-Length: 5"],
                   [b"Transfer-Encoding:\tchunked"], [b"transfer-encoding: chunked"],
                   [b"Transfer-Encoding:", b" chunked"], [b"X: y", b" Transfer-Encoding: chunked"],
                   [b"Transfer-Encoding: chunked", b"Transfer-Encoding: identity"]):
        add("fields %r" % fields, _put(fields, chunked + SMUGGLED))
    te = [b"Transfer-Encoding: chunked"]
    for body in (b"05\r\nhello\r\n0\r\n\r\n", b"005\r\nhello\r\n000\r\n\r\n", b"0000000000000005\r\nhello\r\n0\r\n\r\n",
                 b"00000000000000000000005\r\nhello\r\n0\r\n\r\n",
                 b"5 \r\nhello\r\n0\r\n\r\n", b"5\t\r\nhello\r\n0\r\n\r\n", b" 5\r\nhello\r\n0\r\n\r\n",
                 b"5;ext\r\nhello\r\n0\r\n\r\n", b"5;ext=val\r\nhello\r\n0;last\r\n\r\n",
                 b'5;ext="a;b"\r\nhello\r\n0\r\n\r\n', b'5;ext="a\r\nb"\r\nhello\r\n0\r\n\r\n',
                 b"5 ;ext\r\nhello\r\n0\r\n\r\n", b"5;\r\nhello\r\n0\r\n\r\n", b"0x5\r\nhello\r\n0\r\n\r\n",
                 b"+5\r\nhello\r\n0\r\n\r\n", b"-5\r\nhello\r\n0\r\n\r\n",
                 b"A\r\n0123456789\r\n0\r\n\r\n", b"a\r\n0123456789\r\n0\r\n\r\n", b"0A\r\n0123456789\r\n0\r\n\r\n",
                 b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", b"5\r\nhello\r\n0\r\nContent-Length: 50\r\n\r\n",
                 b"5\r\nhello\r\n0\r\nTransfer-Encoding: chunked\r\n\r\n",
                 b"5\r\nhello\r\n0\r\nX-Fencing-Token: 1\r\n\r\n", b"5\r\nhello\r\n0\r\nHost: evil\r\n\r\n",
                 b"5\r\nhello\r\n0\r\nX: a\r\n b\r\n\r\n",
                 b"5\nhello\n0\n\n", b"5\r\nhello\n0\r\n\r\n", b"5\r\nhello\r\n0\n\n", b"5\r\nhelloXX0\r\n\r\n",
                 b"5\r\nhello\r\n0\r\n\r\n\r\n", b"ffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
                 b"5\r\nhello\r\n0\r\n", b"5\r\nhello\r\n\r\n0\r\n\r\n", b"5\rhello\r\n0\r\n\r\n",
                 b"5\r\nhello\r\n1\r\n\n\r\n0\r\n\r\n"):
        add("chunked body %r" % body, _put(te, body + SMUGGLED))
    for line in (b"PUT  /orders/s HTTP/1.1", b"PUT /orders/s  HTTP/1.1", b"PUT\t/orders/s HTTP/1.1",
                 b"PUT /orders/s HTTP/1.1 ", b"PUT /orders/s http/1.1", b"PUT /orders/s HTTP/1.10",
                 b"PUT /orders/s HTTP/01.1", b"PUT /orders/s HTTP/1.0", b"PUT http://t/orders/s HTTP/1.1",
                 b"PUT HTTP://T/orders/s HTTP/1.1", b"PUT /orders/s?x=1 HTTP/1.1", b"PUT /orders/s#f HTTP/1.1",
                 b"put /orders/s HTTP/1.1", b"PUT /orders/s HTTP/1.1\x00", b"PUT /orders/s\tHTTP/1.1",
                 b" PUT /orders/s HTTP/1.1", b"PUT /orders/%73 HTTP/1.1", b"PUT /orders/s%3Bx HTTP/1.1",
                 b"PUT /orders/s;x HTTP/1.1", b"PUT /orders/\xff HTTP/1.1", b"TRACE /notes/t HTTP/1.1",
                 b"PUT * HTTP/1.1", b"OPTIONS * HTTP/1.1"):
        add("request line %r" % line, _put([b"Content-Length: 5"], b"hello" + SMUGGLED,
                                           line=line.replace(b"/orders/", b"/fenced/")))
    add("empty line first", b"\r\n" + _put([b"Content-Length: 5"], b"hello"))
    for token in (b"X-Fencing-Token: 010", b"X-Fencing-Token: 0010", b"X-Fencing-Token:10",
                  b"X-Fencing-Token: 10 ", b"X-Fencing-Token:\t10\t", b"x-fencing-token: 10",
                  b"X-FENCING-TOKEN: 10", b"X-Fencing-Token : 10", b"X_Fencing_Token: 1",
                  b"X-Fencing-Token: 10\r\nX_Fencing_Token: 1", b"X-Fencing-Token: 10\r\n 1",
                  b"X-Fencing-Token: 1\r\nX-Fencing-Token: 10", b"X-Fencing-Token: 00000000000000000010",
                  b"X-Fencing-Token: 18446744073709551615", b"X-Fencing-Token: 10\r\nX-Fencing-Token: 10"):
        # on the observe route: a token that raises its fence changes no other case
        add("token %r" % token, _put([b"Content-Length: 5"], b"hello", target=b"/observe/s", token=token))
    for fields in ([b"Host: t", b"Content-Length: 5"], [b"Expect: 100-continue", b"Content-Length: 5"],
                   [b"Expect: 100-Continue", b"Content-Length: 5"], [b"Expect: foo", b"Content-Length: 5"],
                   [b"Connection: close", b"Content-Length: 5"], [b"Connection: keep-alive, TE", b"TE: trailers", b"Content-Length: 5"],
                   [b"Connection: X-A", b"X-A: 1", b"Content-Length: 5"], [b"Upgrade: h2c", b"Content-Length: 5"],
                   [b"Keep-Alive: timeout=5", b"Content-Length: 5"], [b"Proxy-Connection: close", b"Content-Length: 5"],
                   [b"X-A: a\x7fb", b"Content-Length: 5"], [b"X-A: \x80\xff", b"Content-Length: 5"],
                   [b"X-A:", b"Content-Length: 5"], [b"X-A: " + b"a" * 9000, b"Content-Length: 5"],
                   [b"Trailer: X-T", b"Content-Length: 5"], [b"X-A: a\rb", b"Content-Length: 5"],
                   [b"X@A: 1", b"Content-Length: 5"], [b"X A: 1", b"Content-Length: 5"], [b": 1", b"Content-Length: 5"]):
        add("fields %r" % fields, _put(fields, b"hello" + SMUGGLED, token=b"X-Fencing-Token: 10"))
    # HTTP/1.0 keep-alive, and a body on methods without one
    add("HTTP/1.0 keep-alive", _put([b"Connection: keep-alive", b"Content-Length: 5"], b"hello",
                                    line=b"PUT /fenced/s HTTP/1.0"))
    add("GET with a body", b"GET /notes/g HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
    add("HEAD with a body", b"HEAD /notes/h HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
    add("GET chunked", b"GET /notes/g HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    add("DELETE with a body", _put([b"Content-Length: 5"], b"hello", line=b"DELETE /fenced/s HTTP/1.1"))
    add("observe route, stale token with a chunked body",
        _put(te, b"5\r\nhello\r\n0\r\n\r\n", target=b"/observe/s", token=b"X-Fencing-Token: 1"))
    return cases


# -- the mutator -----------------------------------------------------------------------------

METHODS = [b"GET"] * 5 + [b"PUT"] * 5 + [b"POST"] * 4 + [b"PATCH", b"DELETE", b"HEAD", b"OPTIONS"]
FENCED = {b"PUT", b"POST", b"PATCH", b"DELETE"}
INTERESTING = b" \t\r\n:;,0=x\x00\x0b\x7f\xff-+\"/"


class MutatorState:
    def __init__(self, seed, token):
        self.rng = random.Random(seed)
        self.token = token


def _body(rng):
    size = rng.choice([0, 0, 1, 2, 5, 16, 17, 100, 255, 256, 1000, rng.randrange(5000)])
    return bytes(rng.randrange(32, 127) for _ in range(min(size, 64))) * (size // 64 + 1) if size else b""


def _chunks(rng, body, odd):
    out = bytearray()
    pos = 0
    while pos < len(body):
        n = min(len(body) - pos, rng.choice([1, 3, 7, 16, 100, 1000, 4096]))
        size = b"%x" % n
        if odd and rng.random() < 0.3:
            size = rng.choice([b"0" * rng.randrange(1, 4) + size, size.upper(), size + b";ext=" + b"%d" % n,
                               size + b';q="x;y"', size + b";e"])
        out += size + b"\r\n" + body[pos:pos + n] + b"\r\n"
        pos += n
    last = b"0"
    if odd and rng.random() < 0.3:
        last = rng.choice([b"00", b"000", b"0;ext=1"])
    out += last + b"\r\n"
    if odd and rng.random() < 0.3:
        out += rng.choice([b"X-Trailer: 1\r\n", b"X-Checksum: abc\r\nX-More: 2\r\n"])
    return bytes(out + b"\r\n")


def mutated_message(st, index, odd):
    """One request of a mutator stream; odd: spell something unusually (still meant valid)."""
    rng = st.rng
    method = rng.choice(METHODS)
    route = rng.choice([b"/m", b"/m", b"/observe", b"/notes", b"/plain"])
    target = b"%s/%d" % (route, rng.randrange(10000))
    if rng.random() < 0.1:
        target += b"?q=%d&r=x" % rng.randrange(100)
    version = b"HTTP/1.1"
    fields = [[b"Host", b"t"]]
    if route == b"/m" and method in FENCED:
        if rng.random() < 0.02:
            st.token += 1
        fields.append([b"X-Fencing-Token", b"%d" % st.token])
    elif route == b"/observe" and rng.random() < 0.7:
        fields.append([b"X-Fencing-Token", b"%d" % rng.choice([1, st.token, st.token + 5])])
    for i in range(rng.choice([0, 0, 1, 2, 5])):
        fields.append([b"X-H%d" % i, b"v%d" % rng.randrange(1000)])
    body = _body(rng) if (method in (b"PUT", b"POST", b"PATCH") or rng.random() < 0.05) else b""
    chunked = bool(body) and rng.random() < 0.3
    if chunked:
        fields.append([b"Transfer-Encoding", b"chunked"])
        payload = _chunks(rng, body, odd)
    else:
        if body or method in (b"PUT", b"POST", b"PATCH") or rng.random() < 0.1:
            fields.append([b"Content-Length", b"%d" % len(body)])
        payload = body
    if odd:
        what = rng.randrange(14)
        if what == 0:
            for f in fields:
                if f[0] == b"Content-Length":
                    f[1] = b"0" * rng.randrange(1, 4) + f[1]
        elif what == 1:
            for f in fields:
                if f[0] == b"Content-Length":
                    f[1] = rng.choice([b" ", b"\t", b"  "]) + f[1] + rng.choice([b"", b" ", b"\t"])
        elif what == 2:
            for f in fields:
                if f[0] == b"Transfer-Encoding":
                    f[1] = rng.choice([b"Chunked", b"CHUNKED", b"chunked ", b" chunked"])
        elif what == 3:
            f = rng.choice(fields)
            f[0] = rng.choice([f[0].lower(), f[0].upper()])
        elif what == 4:
            for f in fields:
                if f[0] == b"X-Fencing-Token":
                    f[1] = rng.choice([b"0", b"00", b""]) + f[1] + rng.choice([b"", b" ", b"\t"])
        elif what == 5:
            version = b"HTTP/1.0"
            fields.append([b"Connection", b"keep-alive"])
        elif what == 6:
            target = b"http://t" + target
        elif what == 7:
            fields.append([b"Expect", b"100-continue"])
        elif what == 8:
            fields.append([b"X_Under_Score", b"1"])
        elif what == 9:
            for f in fields:
                if f[0] == b"Content-Length":
                    fields.append([b"Content-Length", f[1]])
                    break
        elif what == 10:
            f = rng.choice(fields)
            f[1] = f[1] + b"\r\n " + b"folded"
        elif what == 11:
            fields.append([b"X-Odd", rng.choice([b"\x80\xfe", b"a\x7fb", b"", b"   "])])
        elif what == 12:
            fields.append([b"Connection", rng.choice([b"keep-alive", b"X-H0", b"TE", b"Upgrade"])])
        elif what == 13:
            method = rng.choice([b"PROPFIND", b"TRACE", b"M-SEARCH", b"LOCK", b"PURGE"])
    head = method + b" " + target + b" " + version + b"\r\n"
    head += b"".join(n + b": " + v + b"\r\n" for n, v in fields)
    return head + b"\r\n" + payload


def mutated_case(st, stream_number, worker):
    """A pipelined keep-alive stream of 1-40 requests; about one stream in three spells some of
    its requests oddly, one in twelve has a random byte mutation."""
    rng = st.rng
    count = rng.choice([1, 2, 5, 10, 20, 30, 40])
    odd_rate = rng.choice([0.0, 0.0, 0.05, 0.2])
    messages = [mutated_message(st, i, rng.random() < odd_rate) for i in range(count)]
    data = b"".join(messages)
    how = "clean" if odd_rate == 0 else "odd %.2f" % odd_rate
    if rng.random() < 0.08 and data:
        # never inside a token's digits: a mutation that raised the fence "mut" would make every
        # later fenced request of the worker stale (the streams would still be checked, but
        # fewer requests forwarded)
        pos = rng.randrange(len(data))
        for m in re.finditer(rb"(?i)x-fencing-token:[ \t]*[0-9]+", data):
            if m.start() <= pos < m.end():
                pos = m.start()
        op = rng.randrange(5)
        if op == 0:
            data = data[:pos] + data[pos + 1:]
        elif op == 1:
            data = data[:pos] + bytes([rng.choice(INTERESTING)]) + data[pos:]
        elif op == 2:
            data = data[:pos] + bytes([rng.choice(INTERESTING)]) + data[pos + 1:]
        elif op == 3:
            n = rng.randrange(1, 40)
            data = data[:pos] + data[pos:pos + n] + data[pos:]
        else:
            data = data[:pos]
        how += ", byte mutation %d at %d" % (op, pos)
    parts = [(0, data)]
    if rng.random() < 0.05 and len(data) > 2:
        split = rng.randrange(1, len(data))
        parts = [(0, data[:split]), (0.01, data[split:])]
        how += ", split at %d" % split
    return Case("mutator worker %d stream %d (%s, %d requests)" % (worker, stream_number, how, count),
                [Conn(parts)]), count
