"""The strict views: what a message on the wire must look like when the proxy frames it itself
(issue 23, "canonical framing"). Standard library only.

strict_requests(data) reads the bytes one upstream connection received; strict_responses(methods,
data) the bytes one client received. Both read on wherever the meaning is still unambiguous and
return, beside the messages they read, every *problem*: a spelling some HTTP/1.1 reader could
frame or read differently from the proxy, for instance

  - Content-Length other than one plain decimal (`0300`, `+5`, `2, 2`, twice);
  - Transfer-Encoding other than exactly one `chunked`, or beside a Content-Length;
  - a chunk size with leading zeros or whitespace, a chunk extension, framing fields in trailers;
  - obs-fold, a bare CR or LF, a field name that is no token, a control byte in a value;
  - a request line or status line that is not exactly three parts (`HTTP/1.1 200` lacks the
    SP before the empty reason);
  - no Host header, or two;
  - a body on a response that cannot have one (HEAD, 1xx, 204, 304), a keep-alive response
    without a length, bytes after a response that closes, or after the last response.

An octal reader of `Content-Length: 0300` (OpenLiteSpeed before 1.7.18, issue 23) or a reader of
chunk extensions is not needed among the parsers: the strict view reports the spelling itself.
"""

import re

from common import TOKEN_HEADER, View, sha16

TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
CANONICAL_LENGTH = re.compile(rb"0|[1-9][0-9]{0,18}")
CANONICAL_CHUNK = re.compile(rb"0|[1-9a-fA-F][0-9a-fA-F]{0,15}")
LENIENT_CHUNK = re.compile(rb"[0-9a-fA-F]{1,16}")
FRAMING = {b"content-length", b"transfer-encoding", b"host", b"connection", b"trailer", b"te",
           b"upgrade", TOKEN_HEADER, b"expect", b"keep-alive"}


class _Stop(Exception):
    """The framing cannot be read on."""


def _bad_value_byte(value):
    return any((c < 0x20 and c != 0x09) or c == 0x7F for c in value)


def _fields(lines, problems, where):
    fields = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            problems.append("%s: obs-fold line %r" % (where, line[:60]))
            continue
        name, sep, value = line.partition(b":")
        if not sep or not name or any(c not in TCHAR for c in name):
            problems.append("%s: field line is not name:value with a token name: %r" % (where, line[:60]))
            continue
        value = value.strip(b" \t")
        if _bad_value_byte(value):
            problems.append("%s: control byte in the value of %r" % (where, name))
        fields.append((name.lower(), value))
    return fields


def _head(data, pos, problems, where):
    """The head at pos -> (lines, end of head). A bare CR or LF is a problem; the head is then
    cut at CRLF only, as the strictest reader would."""
    end = data.find(b"\r\n\r\n", pos)
    if end < 0:
        raise _Stop("incomplete head")
    head = data[pos:end]
    lines = head.split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        problems.append("%s: bare CR or LF in the head" % where)
    return lines, end + 4


def _chunked(data, pos, problems, where):
    """A chunked body at pos -> (body, end)."""
    body = bytearray()
    while True:
        line_end = data.find(b"\r\n", pos)
        if line_end < 0:
            raise _Stop("incomplete chunk size line")
        line = data[pos:line_end]
        size_text, semi, _ = line.partition(b";")
        if semi:
            problems.append("%s: chunk extension %r" % (where, line[:40]))
        if not CANONICAL_CHUNK.fullmatch(size_text):
            problems.append("%s: chunk size spelled %r" % (where, size_text[:40]))
        stripped = size_text.strip(b" \t")
        if not LENIENT_CHUNK.fullmatch(stripped):
            raise _Stop("chunk size %r" % line[:40])
        size = int(stripped, 16)
        pos = line_end + 2
        if size == 0:
            trailers = []
            while True:
                line_end = data.find(b"\r\n", pos)
                if line_end < 0:
                    raise _Stop("incomplete trailers")
                line = data[pos:line_end]
                pos = line_end + 2
                if not line:
                    break
                trailers.append(line)
            for name, _ in _fields(trailers, problems, where + " trailer"):
                if name in FRAMING:
                    problems.append("%s: %r in the trailers" % (where, name))
            return bytes(body), pos
        if len(data) < pos + size + 2:
            raise _Stop("incomplete chunk data")
        body += data[pos:pos + size]
        pos += size
        if data[pos:pos + 2] != b"\r\n":
            problems.append("%s: chunk data not followed by CRLF" % where)
            raise _Stop("chunk data longer than its size")
        pos += 2


def _length(fields, problems, where):
    """-> ("length", n) / ("chunked", None) / ("none", None) from the framing fields."""
    lengths = [v for n, v in fields if n == b"content-length"]
    codings = [v for n, v in fields if n == b"transfer-encoding"]
    if lengths and codings:
        problems.append("%s: Content-Length %r beside Transfer-Encoding %r" % (where, lengths, codings))
    if codings:
        if len(codings) != 1 or codings[0] != b"chunked":
            problems.append("%s: Transfer-Encoding spelled %r" % (where, codings))
        last = b",".join(codings).split(b",")[-1].strip(b" \t").lower()
        if last != b"chunked":
            raise _Stop("transfer-encoding %r" % codings)
        return "chunked", None
    if lengths:
        if len(lengths) != 1:
            problems.append("%s: Content-Length sent %d times %r" % (where, len(lengths), lengths))
        if not CANONICAL_LENGTH.fullmatch(lengths[0]):
            problems.append("%s: Content-Length spelled %r" % (where, lengths[0]))
        values = {v.strip(b" \t") for v in b",".join(lengths).split(b",")}
        if len(values) != 1 or not next(iter(values)).isdigit():
            raise _Stop("content-length %r" % lengths)
        return "length", int(next(iter(values)))
    return "none", None


def strict_requests(data):
    """The requests in data -> (views, problems, stopped): problems are strings, stopped says
    why reading ended early ("" when every byte was read)."""
    views, problems = [], []
    pos = 0
    try:
        while pos < len(data):
            where = "request %d" % (len(views) + 1)
            lines, pos = _head(data, pos, problems, where)
            parts = lines[0].split(b" ")
            if (len(parts) != 3 or not parts[0] or any(c not in TCHAR for c in parts[0])
                    or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0")
                    or not parts[1] or any(c <= 0x20 or c >= 0x7F for c in parts[1])):
                problems.append("%s: request line %r" % (where, lines[0][:80]))
                if len(parts) < 2:
                    raise _Stop("request line")
            method, target = parts[0], parts[1]
            fields = _fields(lines[1:], problems, where)
            hosts = [v for n, v in fields if n == b"host"]
            if len(hosts) != 1:
                problems.append("%s: %d Host fields" % (where, len(hosts)))
            tokens = [v for n, v in fields if n == TOKEN_HEADER]  # compared with the decision
            kind, length = _length(fields, problems, where)
            if kind == "chunked":
                body, pos = _chunked(data, pos, problems, where)
            elif kind == "length":
                if len(data) < pos + length:
                    raise _Stop("incomplete body")
                body, pos = data[pos:pos + length], pos + length
            else:
                body = b""
            views.append(View(method, target, tokens, len(body), sha16(body)))
    except _Stop as e:
        return views, problems, str(e)
    return views, problems, ""


def strict_responses(methods, data):
    """The responses in data to a client that sent `methods` (past the last: GET) -> dict like
    the other response parsers' ({"resps": [{"s", "n", "h"}], "err", "rest"}) plus "problems".
    Interim responses (1xx but 101) are skipped."""
    resps, problems = [], []
    pos = 0
    err = ""
    try:
        while pos < len(data):
            index = len(resps)
            where = "response %d" % (index + 1)
            method = methods[index] if index < len(methods) else b"GET"
            lines, pos = _head(data, pos, problems, where)
            parts = lines[0].split(b" ", 2)
            if (len(parts) != 3 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0")
                    or not re.fullmatch(rb"[1-9][0-9][0-9]", parts[1]) or _bad_value_byte(parts[2])):
                problems.append("%s: status line %r" % (where, lines[0][:80]))
                if len(parts) < 2 or not re.fullmatch(rb"[0-9]{3}", parts[1]):
                    raise _Stop("status line %r" % lines[0][:80])
            status = int(parts[1])
            fields = _fields(lines[1:], problems, where)
            interim = 100 <= status < 200 and status != 101
            no_body = 100 <= status < 200 or status in (204, 304) or method == b"HEAD"
            options = [c.strip(b" \t") for c in b",".join(v for n, v in fields if n == b"connection").lower().split(b",")]
            closes = b"close" in options or (parts[0] == b"HTTP/1.0" and b"keep-alive" not in options)
            kind, length = _length(fields, problems, where)
            if no_body:
                if kind == "chunked" or (status == 204 or 100 <= status < 200) and kind == "length":
                    problems.append("%s: framing fields on a %d to %s (%s)" % (
                        where, status, method.decode("latin-1"), ", ".join(
                            "%s: %s" % (n.decode("latin-1"), v.decode("latin-1")) for n, v in fields
                            if n in (b"content-length", b"transfer-encoding"))))
                body = b""
            elif kind == "chunked":
                body, pos = _chunked(data, pos, problems, where)
            elif kind == "length":
                if len(data) < pos + length:
                    raise _Stop("incomplete body")
                body, pos = data[pos:pos + length], pos + length
            else:
                if not closes:
                    problems.append("%s: a keep-alive response without Content-Length or chunked" % where)
                body, pos = data[pos:], len(data)
                closes = True
            if interim:
                continue
            resps.append({"s": status, "n": len(body), "h": sha16(body)})
            if closes or status == 101:
                break
    except _Stop as e:
        err = str(e)
    rest = len(data) - pos if not err else 0
    if rest:
        problems.append("%d bytes after the last response: %r" % (rest, data[pos:pos + 60]))
    return {"resps": resps, "err": err, "rest": rest, "problems": problems}
