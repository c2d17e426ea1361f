"""Response cases: hostile and odd backend answers, played by the lane's backend. Standard library
only.

Each case is two client connections. The first sends the case's request (GET or HEAD
/resp/KEY, which plays the script KEY) and, pipelined behind it, a probe GET; the second, 60 ms
later, another probe GET. A probe's answer names the probe ("probe KEY"), so a client that gets
another request's answer (a poisoned pooled connection, issue 23) is seen by the answer-identity
check even where every parser agrees on the bytes.
"""

import random

from streams import Case, Conn

OK = b"HTTP/1.1 200 OK\r\n"


def _r(head, body=b""):
    return [("send", head + body)]


RESPONSES = [
    # framing fields
    ("Content-Length 002", _r(OK + b"Content-Length: 002\r\n\r\n", b"ok")),
    ("Content-Length '2, 2'", _r(OK + b"Content-Length: 2, 2\r\n\r\n", b"ok")),
    ("Content-Length '2,2'", _r(OK + b"Content-Length: 2,2\r\n\r\n", b"ok")),
    ("Content-Length twice, equal", _r(OK + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("Content-Length 2 and 02", _r(OK + b"Content-Length: 2\r\nContent-Length: 02\r\n\r\n", b"ok")),
    ("Content-Length twice, different", _r(OK + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n", b"okk")),
    ("Content-Length +2", _r(OK + b"Content-Length: +2\r\n\r\n", b"ok")),
    ("Content-Length with OWS", _r(OK + b"Content-Length: \t 2 \t\r\n\r\n", b"ok")),
    ("Content-Length -1", _r(OK + b"Content-Length: -1\r\n\r\n", b"ok")),
    ("Content-Length 0x2", _r(OK + b"Content-Length: 0x2\r\n\r\n", b"ok")),
    ("Content-Length 0 with a body", _r(OK + b"Content-Length: 0\r\n\r\n", b"stray")),
    ("more bytes than Content-Length", _r(OK + b"Content-Length: 2\r\n\r\n", b"okEXTRA")),
    ("Content-Length and chunked", _r(OK + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", b"2\r\nok\r\n0\r\n\r\n")),
    ("chunked and Content-Length", _r(OK + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", b"2\r\nok\r\n0\r\n\r\n")),
    ("chunked", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"2\r\nok\r\n0\r\n\r\n")),
    ("Chunked (case)", _r(OK + b"Transfer-Encoding: Chunked\r\n\r\n", b"2\r\nok\r\n0\r\n\r\n")),
    ("chunked twice", _r(OK + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", b"2\r\nok\r\n0\r\n\r\n")),
    ("gzip, chunked", _r(OK + b"Transfer-Encoding: gzip, chunked\r\n\r\n", b"2\r\nok\r\n0\r\n\r\n")),
    ("chunked, gzip (close-delimited)", _r(OK + b"Transfer-Encoding: chunked, gzip\r\n\r\n", b"2\r\nok\r\n0\r\n\r\n")),
    ("identity", _r(OK + b"Transfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("chunk extensions", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b'2;a=b;c="d;e"\r\nok\r\n0;last\r\n\r\n')),
    ("trailers", _r(OK + b"Transfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n", b"2\r\nok\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n")),
    ("framing fields in trailers", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"2\r\nok\r\n0\r\nContent-Length: 9\r\nTransfer-Encoding: gzip\r\n\r\n")),
    ("chunk size leading zeros", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"002\r\nok\r\n0000\r\n\r\n")),
    ("chunk size upper-case hex", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"A\r\n0123456789\r\n0\r\n\r\n")),
    ("chunk size with whitespace", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"2 \r\nok\r\n0\r\n\r\n")),
    ("chunk size 0x2", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"0x2\r\nok\r\n0\r\n\r\n")),
    ("chunk data without CRLF", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"2\r\nokXX0\r\n\r\n")),
    ("chunked with bare LF", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"2\nok\n0\n\n")),
    ("chunked without the last CRLF", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"2\r\nok\r\n0\r\n")),
    ("many small chunks", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"".join(b"1\r\n%c\r\n" % (65 + i % 26) for i in range(300)) + b"0\r\n\r\n")),
    # status lines
    ("status line without reason", _r(b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("status line with an empty reason", _r(b"HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("status 099", _r(b"HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("status 999", _r(b"HTTP/1.1 999 High\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("status 2000", _r(b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("status line double space", _r(b"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("HTTP/1.0 response, keep-alive", _r(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("HTTP/1.0 response, close", _r(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", b"ok") + [("close",)]),
    ("HTTP/2 status line", _r(b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("lower-case http/1.1", _r(b"http/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("reason with obs-text", _r(b"HTTP/1.1 200 \xc3\xa9t\xe9\r\nContent-Length: 2\r\n\r\n", b"ok")),
    # fields
    ("obs-fold", _r(OK + b"X-A: a\r\n b\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("obs-fold of Content-Length", _r(OK + b"Content-Length:\r\n 2\r\n\r\n", b"ok")),
    ("space before colon", _r(OK + b"Content-Length : 2\r\n\r\n", b"ok")),
    ("bare LF head", _r(b"HTTP/1.1 200 OK\nContent-Length: 2\n\n", b"ok")),
    ("bare CR in a value", _r(OK + b"X-A: a\rb\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("NUL in a value", _r(OK + b"X-A: a\x00b\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("obs-text in a value", _r(OK + b"X-A: \x80\xff\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("empty field name", _r(OK + b": x\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("Connection: close, then more", _r(OK + b"Connection: close\r\nContent-Length: 2\r\n\r\n", b"okHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")),
    ("Connection: close and a close", _r(OK + b"Connection: close\r\nContent-Length: 2\r\n\r\n", b"ok") + [("close",)]),
    ("Connection names Content-Length", _r(OK + b"Connection: Content-Length\r\nContent-Length: 2\r\n\r\n", b"ok")),
    ("Connection: keep-alive, Upgrade", _r(OK + b"Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\n", b"ok")),
    # bodies where none may be
    ("204 with a body", _r(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", b"hello")),
    ("204 with Content-Length 0", _r(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")),
    ("204 chunked", _r(b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n", b"0\r\n\r\n")),
    ("304 with a body", _r(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", b"hello")),
    ("304 with a length, no body", _r(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n")),
    ("HEAD: a body after the head", _r(OK + b"Content-Length: 5\r\n\r\n", b"hello"), b"HEAD"),
    ("HEAD: chunked head only", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n"), b"HEAD"),
    ("HEAD: a length, no body", _r(OK + b"Content-Length: 5\r\n\r\n"), b"HEAD"),
    ("100 Continue, then 200", _r(b"HTTP/1.1 100 Continue\r\n\r\n" + OK + b"Content-Length: 2\r\n\r\n", b"ok")),
    ("103 Early Hints, then 200", _r(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK + b"Content-Length: 2\r\n\r\n", b"ok")),
    ("100 with a length and a body", _r(b"HTTP/1.1 100 Continue\r\nContent-Length: 3\r\n\r\nabc" + OK + b"Content-Length: 2\r\n\r\n", b"ok")),
    ("101 nobody asked for", _r(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n", b"raw bytes")),
    ("two responses in one write", _r(OK + b"Content-Length: 2\r\n\r\nok" + OK + b"Content-Length: 6\r\n\r\n", b"SECOND")),
    # lengths by the close, and short bodies
    ("no length, close", _r(OK + b"Connection: close\r\n\r\n", b"until the close") + [("close",)]),
    ("no length, keep-alive, close", _r(OK + b"\r\n", b"until the close") + [("close",)]),
    ("body shorter than Content-Length, close", _r(OK + b"Content-Length: 10\r\n\r\n", b"short") + [("close",)]),
    ("chunked cut off, close", _r(OK + b"Transfer-Encoding: chunked\r\n\r\n", b"5\r\nhel") + [("close",)]),
    ("close before any answer", [("close",)]),
    ("head cut off, close", _r(b"HTTP/1.1 200 OK\r\nContent-Le") + [("close",)]),
    # timing: stray bytes 30 ms after the response, while the connection waits in the pool (the
    # pipelined probe is answered at once, before them; the second connection's probe comes later)
    ("stray response 30 ms later", _r(OK + b"Content-Length: 2\r\n\r\n", b"ok") + [
        ("stray", 0.03, OK + b"Content-Length: 6\r\nX-Poison: 1\r\n\r\nPOISON")]),
    ("stray CRLF 30 ms later", _r(OK + b"Content-Length: 2\r\n\r\n", b"ok") + [("stray", 0.03, b"\r\n")]),
    ("stray body after a 204, 30 ms later", _r(b"HTTP/1.1 204 No Content\r\n\r\n") + [("stray", 0.03, b"hello")]),
    ("stray 101 30 ms later", _r(OK + b"Content-Length: 2\r\n\r\n", b"ok") + [
        ("stray", 0.03, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")]),
    ("stray response 30 ms later, twice", _r(OK + b"Content-Length: 2\r\n\r\n", b"ok") + [
        ("stray", 0.03, OK + b"Content-Length: 2\r\n\r\nP1"), ("stray", 0.04, OK + b"Content-Length: 2\r\n\r\nP2")]),
    ("body in two writes", [("send", OK + b"Content-Length: 10\r\n\r\nhello"), ("sleep", 0.02), ("send", b"world")]),
    ("head in two writes", [("send", b"HTTP/1.1 200 OK\r\nContent-"), ("sleep", 0.02), ("send", b"Length: 2\r\n\r\nok")]),
    ("chunks in several writes", [("send", OK + b"Transfer-Encoding: chunked\r\n\r\n3\r\nab"), ("sleep", 0.01),
                                  ("send", b"c\r\n"), ("sleep", 0.01), ("send", b"0\r\n\r\n")]),
]


class ResponseCases:
    def __init__(self, prefix):
        self.prefix, self.n = prefix, 0

    def key(self):
        self.n += 1
        return b"%s-%d" % (self.prefix, self.n)

    def case(self, name, actions, method=b"GET"):
        key, p1, p2 = self.key(), self.key(), self.key()
        scripts = {key: actions}
        probes = {}
        for p in (p1, p2):
            body = b"probe " + p
            scripts[p] = [("send", OK + b"Content-Length: %d\r\n\r\n" % len(body) + body)]
            probes[b"/resp/" + p] = body
        first = (method + b" /resp/" + key + b" HTTP/1.1\r\nHost: t\r\n\r\n"
                 + b"GET /resp/" + p1 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
        second = b"GET /resp/" + p2 + b" HTTP/1.1\r\nHost: t\r\n\r\n"
        return Case("response %s" % name,
                    [Conn([(0, first)], {b"/resp/" + p1: probes[b"/resp/" + p1]}),
                     Conn([(0.06, second)], {b"/resp/" + p2: probes[b"/resp/" + p2]})],
                    scripts, kind="response")

    def fixed(self):
        return [self.case(name, actions, *rest) for name, actions, *rest in RESPONSES]

    def mutated(self, rng, number):
        """A random response with odd but (mostly) valid spellings."""
        status = rng.choice([200, 200, 200, 201, 204, 206, 304, 404, 500])
        method = b"HEAD" if rng.random() < 0.15 else b"GET"
        body = bytes(rng.randrange(32, 127) for _ in range(rng.choice([0, 1, 2, 10, 100, 1000, 3000])))
        if status in (204, 304):
            body = b""
        fields = [b"X-Case: %d" % number]
        odd = []
        chunked = body and rng.random() < 0.4
        if chunked:
            fields.append(rng.choice([b"Transfer-Encoding: chunked"] * 4 + [b"Transfer-Encoding: Chunked"]))
            payload = bytearray()
            pos = 0
            while pos < len(body):
                n = min(len(body) - pos, rng.choice([1, 5, 64, 1000]))
                size = b"%x" % n
                if rng.random() < 0.2:
                    size = rng.choice([b"0" + size, size.upper(), size + b";x=1"])
                    odd.append("chunk %r" % size)
                payload += size + b"\r\n" + body[pos:pos + n] + b"\r\n"
                pos += n
            payload += b"0\r\n" + (b"X-T: 1\r\n" if rng.random() < 0.2 else b"") + b"\r\n"
            payload = bytes(payload)
        else:
            length = b"%d" % len(body)
            if rng.random() < 0.2:
                length = rng.choice([b"0" + length, b" " + length + b" ", length + b", " + length])
                odd.append("length %r" % length)
            fields.append(b"Content-Length: " + length)
            payload = body
        if rng.random() < 0.1:
            fields.append(b"Connection: close")
        reason = rng.choice([b" OK", b" OK", b" ", b""])
        head = b"HTTP/1.1 %d%s\r\n" % (status, reason) + b"".join(f + b"\r\n" for f in fields) + b"\r\n"
        actions = [("send", head + (b"" if status in (204, 304) else payload))]
        if rng.random() < 0.2 and len(actions[0][1]) > 2:
            data = actions[0][1]
            cut = rng.randrange(1, len(data))
            actions = [("send", data[:cut]), ("sleep", 0.005), ("send", data[cut:])]
        name = "mutated %d: %d %s%s" % (number, status, "chunked" if chunked else "length",
                                          (" " + ", ".join(odd)) if odd else "")
        return self.case(name, actions, method)


def response_cases(prefix):
    return ResponseCases(prefix).fixed()


def mutated_responses(prefix, seed, count):
    rc = ResponseCases(prefix)
    rng = random.Random(seed)
    return [rc.mutated(rng, i) for i in range(count)]
