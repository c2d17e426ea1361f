"""Backend-side integrity (issue 23) against the real fencing-proxy binary, with scripted backends.

What the proxy sends is framed by fields it writes itself, toward the backend and toward the
client, never by the peer's bytes; a backend connection that said more than its response (any
byte beyond the end of a response, or any byte while idle in the pool, a 101 nobody asked for) is
closed and never given to another request; a response the proxy makes itself to a HEAD has no
body. Each test pins one observation of the issue:

  1  a client's `Content-Length: 0300` reached the backend as written: a backend that reads a
     leading 0 as octal (192) took the rest of the body as a second request, a stale write;
  2  response queue poisoning: stray bytes after a complete response, arriving in a later segment
     (30 ms later), sat in the pooled connection and became the next request's answer (or made
     an idempotent request run twice), and the order guarantee broke;
  3  the proxy's own 502/404/428/409/400 to a HEAD carried a body;
  6  (backend side) a status line without a reason phrase was 502; `Content-Length: 2, 2` from
     the backend was relayed as written.

The backend is raw_backend.RawBackend: "scripted" (a function gives each request's answer as
pieces sent with delays; every request records when the backend had it whole, what it sent and
when it was done) or "answer" with octal_lengths (the lenient parser of observation 1).

The proxy runs one worker (one upstream pool) with timeouts of 5 s and more: its sweep runs
every second (a quarter of the shortest of idle, header_read and request, at most 1 s), and
before the fix an idle pooled connection was watched for bytes only from the first sweep after a
whole sweep period of idleness, so bytes that arrive 30 ms after a response sat unnoticed for
1-2 s. The follow-up requests here come within a few hundred milliseconds.

Fence `fenced` (prefix /fenced, PUT/POST/PATCH/DELETE) is seeded offline to max_token 1000.
Python standard library only; 127.0.0.1 only; every wait is bounded.
"""

import os
import socket
import threading
import time
import unittest

from harness import (HarnessError, ProxyTestCase, ResponseReader, free_port, read_until_closed,
                     wait_for, write_state_file)

IO = 5.0              # seconds for one exchange
LATE = 0.03           # stray bytes follow the response this much later (a later TCP segment)
SLOW = 1.0            # the slow token-1000 write of the order scenario (2 s in the issue's own)
ROUTES = [{"name": "fenced", "prefix": "/fenced"}]
POISON = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nX-Poison: 1\r\n\r\nPOISON"
OK2 = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def config(**extra):
    """One worker, unmatched paths forwarded, fence `fenced`; sweep period 1 s (see above)."""
    cfg = {"threads": 1, "unmatched": "pass", "routes": ROUTES,
           "timeouts": {"connect": "1s", "request": "5s", "idle": "10s", "header_read": "5s",
                        "shutdown": "2s"}}
    cfg.update(extra)
    return cfg


def echo(request):
    """A 200 naming the request it answers (X-Echo and body: "METHOD target")."""
    text = ("%s %s" % (request.method, request.target)).encode("latin-1")
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Echo: %s\r\n\r\n" % (len(text), text)
    return head if request.method == "HEAD" else head + text


def request_bytes(method, target, token=None, body=b"", close=True, lines=()):
    head = [b"%s %s HTTP/1.1" % (method.encode(), target.encode()), b"Host: t"]
    if close:
        head.append(b"Connection: close")
    if token is not None:
        head.append(b"X-Fencing-Token: %d" % token)
    if body or method in ("PUT", "POST", "PATCH"):
        head.append(b"Content-Length: %d" % len(body))
    head.extend(lines)
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def exchange(port, method, target, token=None, body=b"", timeout=IO):
    """One request on a new client connection -> (status, headers, body): the first response,
    interim or not (so a relayed 101 is seen as such)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request_bytes(method, target, token, body))
        return ResponseReader(sock, timeout).read(head_request=method == "HEAD")


def raw_response(port, data, timeout=IO):
    """Sends data on a new connection, reads until the proxy closes -> (head text, the bytes
    after the head, closed). The head is everything up to the first empty line."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        got, closed = read_until_closed(sock, timeout)
    head, sep, rest = got.partition(b"\r\n\r\n")
    if not sep:
        raise HarnessError("no complete response head: %r" % got[:300])
    return head.decode("latin-1"), rest, closed


def header_values(head_text, name):
    """The values of every field called name (any case) in a raw head."""
    out = []
    for line in head_text.split("\r\n")[1:]:
        field, _, value = line.partition(":")
        if field.strip().lower() == name.lower():
            out.append(value.strip(" \t"))
    return out


class Variant:
    """A backend misbehaviour: the request that triggers it, the pieces the backend sends (the
    stray ones LATE seconds after a complete response), and the status its own client gets
    after the fix."""

    def __init__(self, method, target, pieces, status):
        self.method, self.target, self.pieces, self.status = method, target, pieces, status


VARIANTS = {
    # The reproduction: a second, unsolicited response 30 ms after a complete one.
    "second_response": Variant("GET", "/evil/late", [(0, OK2), (LATE, POISON)], 200),
    # Responses that cannot have a body, followed by one (here a whole response's bytes).
    "body_after_204": Variant("GET", "/evil/204", [(0, b"HTTP/1.1 204 No Content\r\n\r\n"),
                                                   (LATE, POISON)], 204),
    "body_after_304": Variant("GET", "/evil/304", [(0, b"HTTP/1.1 304 Not Modified\r\n"
                                                      b"ETag: \"v1\"\r\n\r\n"),
                                                   (LATE, POISON)], 304),
    # A HEAD response whose body (as long as its Content-Length says) is sent anyway.
    "body_after_head": Variant("HEAD", "/evil/head",
                               [(0, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(POISON)),
                                (LATE, POISON)], 200),
    # More bytes than the Content-Length announced.
    "beyond_content_length": Variant("GET", "/evil/surplus",
                                     [(0, OK2), (LATE, b"surplus bytes past the Content-Length")],
                                     200),
    # A stray empty line.
    "stray_crlf": Variant("GET", "/evil/crlf", [(0, OK2), (LATE, b"\r\n")], 200),
    # A 101 for a request that asked no Upgrade, then the "other protocol": 502 after the fix.
    "unrequested_101": Variant("GET", "/evil/101",
                               [(0, b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                                    b"Upgrade: websocket\r\n\r\n"),
                                (LATE, POISON)], 502),
}

# The order scenario of the issue, each on a new client connection once the stray bytes are in:
# a token-1000 write the backend takes SLOW seconds over, a GET, and a raise to 1001.
SCENARIO = (("slow", "PUT", "/fenced/slow", 1000, b"slow write"),
            ("get", "GET", "/plain/get", None, b""),
            ("raise", "PUT", "/fenced/raise", 1001, b"raise"))


class BackendIntegrityTest(ProxyTestCase):

    def start(self, script="scripted", proxy_config=None, **backend_options):
        """A raw backend and a one-worker proxy in front of it, fence `fenced` at 1000."""
        backend = self.start_raw_backend(script, **backend_options)
        state = os.path.join(self.workdir, "fences-%d.log" % backend.port)
        write_state_file(state, {"fenced": 1000})
        proxy = self.start_proxy(proxy_config or config(), backend, state_file=state,
                                 name="proxy-%d" % backend.port)
        return backend, proxy

    @staticmethod
    def requests_to(backend, method, target):
        return [r for r in backend.requests() if r.method == method and r.target == target]

    # -- 1. canonical framing toward the backend --------------------------------------------------

    SMUGGLED = (b"PUT /fenced/smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Fencing-Token: 1\r\n"
                b"X: " + b"p" * 33 + b"\r\n\r\n")
    OCTAL_PUT = (b"PUT /fenced/a HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Fencing-Token: 1000\r\n"
                 b"Content-Length: 0300\r\n\r\n" + b"f" * 192 + SMUGGLED)

    def send_octal_put(self):
        self.assertEqual(len(self.OCTAL_PUT.partition(b"\r\n\r\n")[2]), 300,
                         "premise: the body is 300 bytes, of which 300 octal (192) is the start")
        backend, proxy = self.start("answer", octal_lengths=True)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=IO) as sock:
            sock.sendall(self.OCTAL_PUT)
            status, _, _ = ResponseReader(sock, IO).read()
        self.assertEqual(status, 200, "the token-1000 PUT with its 300-byte body is forwarded")
        backend.quiet(period=0.2)
        return backend

    def test_leading_zero_content_length_reaches_the_backend_as_plain_decimal(self):
        """Observation 1, the bytes: the client's `Content-Length: 0300` (300 bytes, as the proxy
        reads it) reaches the backend as exactly one `Content-Length: 300` that the proxy wrote,
        never the client's spelling."""
        backend = self.send_octal_put()
        data = backend.connections()[0]
        head = data.partition(b"\r\n\r\n")[0].decode("latin-1")
        self.assertTrue(head.startswith("PUT /fenced/a HTTP/1.1\r\n"), head)
        self.assertEqual(header_values(head, "Content-Length"), ["300"],
                         "the forwarded head must frame the body with one Content-Length in plain "
                         "decimal written by the proxy; it has:\n%s" % head)
        self.assertEqual(header_values(head, "Transfer-Encoding"), [], head)

    def test_octal_reading_backend_applies_no_smuggled_stale_write(self):
        """Observation 1, the effect: a backend that reads a Content-Length with a leading 0 as
        octal (OpenLiteSpeed before 1.7.18) sees one request, PUT /fenced/a with its 300-byte
        body; the `PUT /fenced/smuggled` with the stale token 1 hidden in that body is never
        applied."""
        backend = self.send_octal_put()
        applied = backend.requests()
        self.assertEqual([(r.method, r.target) for r in applied
                          if r.target == "/fenced/smuggled"], [],
                         "a stale token-1 write reached the backend as a request of its own: %r"
                         % applied)
        self.assertEqual([(r.method, r.target, len(r.body)) for r in applied],
                         [("PUT", "/fenced/a", 300)],
                         "the lenient backend sees exactly the one request the proxy read")

    # -- 2. response queue poisoning ---------------------------------------------------------------

    def responder(self, variant, slow):
        def respond(request):
            if request.method == variant.method and request.target == variant.target:
                return list(variant.pieces)
            if request.target == "/fenced/slow":
                return [(slow, echo(request))]
            return [(0, echo(request))]
        return respond

    def poisoned_pool(self, name, slow=SLOW):
        """Observation 2 for VARIANTS[name]: the misbehaving exchange, then (once the backend has
        sent its stray bytes) the order scenario on new client connections. Fails with every
        violation found: a client given another's answer, a request run twice, the raise
        reaching the backend while the token-1000 write still runs there, the misbehaving
        backend connection given to another request, the wrong answer to the misbehaving
        request itself."""
        variant = VARIANTS[name]
        backend, proxy = self.start("scripted", respond=self.responder(variant, slow))
        problems = []

        evil_answer = exchange(proxy.port, variant.method, variant.target)
        # Done: every piece sent, or the proxy had closed the connection when the stray bytes
        # were due (a send then fails): nothing was left to poison the pool with.
        evil = wait_for(lambda: [r for r in self.requests_to(backend, variant.method,
                                                             variant.target) if r.done.is_set()],
                        timeout=IO, what="the backend to send its stray bytes")[0]
        self.assertTrue(evil.sent, "premise: the backend sent its response: %r" % evil)
        # Sent over loopback is arrived: the stray bytes are in the proxy's socket. The pause
        # only gives a proxy that watches its idle connections the moment to see them.
        time.sleep(0.05)
        stray_at = evil.sent[-1][0]

        status, headers, body = evil_answer
        if status != variant.status:
            problems.append("the %s %s itself was answered %d (expected %d) %r %r"
                            % (variant.method, variant.target, status, variant.status,
                               headers, body[:200]))
        elif status == 502 and not headers.get("content-type", "").startswith(
                "application/problem+json"):
            problems.append("the 502 for the unrequested 101 is not problem+json: %r" % headers)

        results = {}

        def run(key, method, target, token, payload):
            try:
                results[key] = exchange(proxy.port, method, target, token, payload,
                                        timeout=slow + IO)
            except Exception as e:  # reported below as that client's answer
                results[key] = e

        threads = []
        for key, method, target, token, payload in SCENARIO:
            thread = threading.Thread(target=run, args=(key, method, target, token, payload),
                                      daemon=True)
            thread.start()
            threads.append(thread)
            if key == "slow":  # the slow write is running at the backend before the others
                wait_for(lambda: self.requests_to(backend, "PUT", "/fenced/slow"), timeout=IO,
                         what="the token-1000 write to reach the backend")
        for thread in threads:
            thread.join(slow + 2 * IO)

        def settled():
            return all(r.done.is_set() for _, m, t, _, _ in SCENARIO
                       for r in self.requests_to(backend, m, t))
        try:
            wait_for(settled, timeout=slow + IO, what="the backend to finish every request")
        except HarnessError as e:
            problems.append(str(e))
        backend.quiet(period=0.2)

        for key, method, target, _, _ in SCENARIO:
            got = results.get(key, "no answer")
            want = "%s %s" % (method, target)
            if not isinstance(got, tuple):
                problems.append("%s: the client got no answer: %r" % (want, got))
                continue
            status, headers, body = got
            if status != 200 or headers.get("x-echo") != want or "x-poison" in headers \
                    or body != want.encode():
                problems.append("%s: the client got another answer: %d X-Echo=%r X-Poison=%r "
                                "body=%r" % (want, status, headers.get("x-echo"),
                                             headers.get("x-poison"), body[:60]))
            runs = self.requests_to(backend, method, target)
            if len(runs) != 1:
                problems.append("%s: the backend executed it %d times (connections %r)"
                                % (want, len(runs), [r.connection for r in runs]))

        slows = self.requests_to(backend, "PUT", "/fenced/slow")
        raises = self.requests_to(backend, "PUT", "/fenced/raise")
        if slows and raises and all(r.ended for r in slows):
            # A write has ended at the backend when its answer starts to go out (the time taken
            # before that send; a run whose answer could not be sent ended when it tried).
            slow_end = max(r.sent[-1][0] if r.sent else r.ended for r in slows)
            raise_start = min(r.started for r in raises)
            if raise_start < slow_end:
                problems.append("order: the token-1001 raise reached the backend %.2fs after the "
                                "stray bytes, while the token-1000 write ran there until %.2fs"
                                % (raise_start - stray_at, slow_end - stray_at))

        reused = [r for r in backend.requests() if r.connection == evil.connection and r is not evil]
        if reused:
            problems.append("the backend connection that sent stray bytes was given to %r"
                            % reused)
        if problems:
            self.fail("after %s (%s %s), a connection that said too much must be closed, never "
                      "reused:\n  %s" % (name, variant.method, variant.target, "\n  ".join(problems)))

    def test_poisoned_pool_second_response_30ms_later(self):
        """Observation 2, the issue's reproduction: `GET /evil/late` answered `ok`, and 30 ms later
        a second response (X-Poison, POISON) nobody asked for. Then PUT /fenced/slow token 1000
        (2 s at the backend), a GET, and a raise to 1001, each on a new client connection: each
        client gets its own answer, each request runs once, the raise reaches the backend only
        after the token-1000 write has ended there."""
        self.poisoned_pool("second_response", slow=2.0)

    def test_poisoned_pool_body_after_204(self):
        """Observation 2: a 204 No Content followed (30 ms later) by body bytes: the response
        ended at its head, and what follows condemns the connection."""
        self.poisoned_pool("body_after_204")

    def test_poisoned_pool_body_after_304(self):
        """Observation 2: a 304 Not Modified followed (30 ms later) by body bytes."""
        self.poisoned_pool("body_after_304")

    def test_poisoned_pool_body_after_head_response(self):
        """Observation 2: the response to a HEAD, then (30 ms later) the body its Content-Length
        describes, which a HEAD response must not have."""
        self.poisoned_pool("body_after_head")

    def test_poisoned_pool_bytes_beyond_content_length(self):
        """Observation 2: more bytes than the response's Content-Length, the surplus 30 ms later
        (before the fix the next PUT read them as its answer, failed to parse them, and was
        resent: the backend ran it twice)."""
        self.poisoned_pool("beyond_content_length")

    def test_poisoned_pool_stray_crlf(self):
        """Observation 2: a stray `\\r\\n` 30 ms after a complete response (the issue: the next PUT
        went into the connection, its answer could not be read, the proxy resent it and the
        backend executed it twice)."""
        self.poisoned_pool("stray_crlf")

    def test_poisoned_pool_unrequested_101(self):
        """Observation 2: `101 Switching Protocols` to a request that asked for no Upgrade, then
        bytes of the "other protocol": the client gets 502 (problem+json), and the backend
        connection is closed, never given to another request."""
        self.poisoned_pool("unrequested_101")

    # -- 3. HEAD answered by the proxy itself -----------------------------------------------------

    def assertHeadWithoutBody(self, port, data, status, what):
        head, rest, closed = raw_response(port, data)
        self.assertTrue(head.startswith("HTTP/1.1 %d " % status), "%s: %r" % (what, head))
        self.assertTrue(closed, "%s: the proxy closes after Connection: close" % what)
        self.assertEqual(rest, b"", "%s: the proxy's own %d to a HEAD must have no body; after "
                         "its head came %r" % (what, status, rest[:300]))

    def test_head_answered_by_the_proxy_itself_has_no_body(self):
        """Observation 3: every response the proxy makes itself to a HEAD ends at its head: the
        502 (backend down), 404 (unmatched: reject), 428 (no token on a route fencing HEAD), 409
        (stale token) and 400 (ambiguous path); read as raw bytes until the proxy closes."""
        backend, proxy = self.start("answer", proxy_config=config(
            unmatched="reject",
            routes=[{"name": "fenced", "prefix": "/fenced",
                     "methods": ["HEAD", "PUT", "POST", "PATCH", "DELETE"]}]))
        down = self.start_proxy(config(), "http://127.0.0.1:%d" % free_port(), name="down")
        cases = [
            ("502, backend down", down.port, request_bytes("HEAD", "/anything"), 502),
            ("404, unmatched: reject", proxy.port, request_bytes("HEAD", "/nowhere"), 404),
            ("428, no token", proxy.port, request_bytes("HEAD", "/fenced/h"), 428),
            ("409, stale token", proxy.port, request_bytes("HEAD", "/fenced/h", token=5), 409),
            ("400, ambiguous path", proxy.port, request_bytes("HEAD", "/fenced%2fh"), 400),
        ]
        for what, port, data, status in cases:
            with self.subTest(case=what):
                self.assertHeadWithoutBody(port, data, status, what)
        backend.quiet(period=0.1)
        self.assertEqual(backend.received(), b"", "none of these reached the backend")

    def test_response_after_the_proxy_s_own_502_to_a_head_on_one_connection_is_intact(self):
        """Observation 3, as a client sees it: on one keep-alive connection, a HEAD the proxy
        answers 502 (backend down), then a GET: the bytes after the HEAD's response head are
        the GET's response, not the 502's problem+json body."""
        proxy = self.start_proxy(config(), "http://127.0.0.1:%d" % free_port(), name="down")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=IO) as sock:
            sock.sendall(request_bytes("HEAD", "/first", close=False))
            reader = ResponseReader(sock, IO)
            status, _, _ = reader.read(head_request=True)
            self.assertEqual(status, 502)
            sock.sendall(request_bytes("GET", "/second", close=False))
            deadline = time.monotonic() + IO
            while b"\r\n\r\n" not in reader.buf and time.monotonic() < deadline:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reader.buf += chunk
            self.assertTrue(reader.buf.startswith(b"HTTP/1.1 502 "),
                            "after the HEAD's 502 head the next bytes must be the GET's response; "
                            "they are %r" % reader.buf[:300])
            status, headers, body = reader.read()
            self.assertProblem((status, headers, body), 502, "the GET's own 502")

    # -- 6. the backend's status line and framing toward the client --------------------------------

    def test_status_line_without_reason_phrase_is_relayed(self):
        """Observation 6: `HTTP/1.1 200\\r\\n` (no SP, no reason phrase: RFC 9112 §4 allows an
        empty reason and recipients should accept the missing SP) is relayed as a 200 with its
        body, as nginx does, not answered 502."""
        backend, proxy = self.start("scripted", respond=lambda r: [
            (0, b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok")])
        status, headers, body = exchange(proxy.port, "GET", "/no-reason")
        self.assertEqual((status, body), (200, b"ok"),
                         "the backend's 200 without a reason phrase: %r" % ((status, headers, body),))

    def test_backend_content_length_reaches_the_client_as_one_plain_decimal(self):
        """Observation 6 (and the canonical framing toward the client): a backend's
        `Content-Length: 2, 2` (one length, written as a list) or `Content-Length: 002` reaches
        the client as exactly one `Content-Length: 2`, written by the proxy."""
        for spelling in (b"2, 2", b"002"):
            with self.subTest(content_length=spelling.decode()):
                answer = b"HTTP/1.1 200 OK\r\nContent-Length: " + spelling + b"\r\n\r\nok"
                backend, proxy = self.start("scripted", respond=lambda r, a=answer: [(0, a)])
                head, rest, _ = raw_response(proxy.port, request_bytes("GET", "/length"))
                self.assertTrue(head.startswith("HTTP/1.1 200 "), head)
                self.assertEqual(header_values(head, "Content-Length"), ["2"],
                                 "the client must get one Content-Length in plain decimal for the "
                                 "backend's %r:\n%s" % (spelling, head))
                self.assertEqual(rest, b"ok")

    def test_token_reaches_the_backend_as_the_proxy_parsed_it(self):
        """The token the fence decided on is the one the backend sees: `X-Fencing-Token: 01000`
        (1000 to the proxy; 512 to a reader of leading zeros as octal) goes on as one `1000`; a chunked
        body held whole goes on with its length."""
        backend, proxy = self.start("answer")
        data = (b"PUT /fenced/t HTTP/1.1\r\nHost: t\r\nConnection: close\r\nx-fencing-token: 01000\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n03\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nT: 1\r\n\r\n")
        head, rest, _ = raw_response(proxy.port, data)
        self.assertTrue(head.startswith("HTTP/1.1 200 "), head)
        backend.quiet(period=0.2)
        forwarded = backend.connections()[0]
        up_head, _, body = forwarded.partition(b"\r\n\r\n")
        up_head = up_head.decode("latin-1")
        self.assertEqual(header_values(up_head, "X-Fencing-Token"), ["1000"], up_head)
        self.assertEqual(header_values(up_head, "Content-Length"), ["5"], up_head)
        self.assertEqual(header_values(up_head, "Transfer-Encoding"), [], up_head)
        self.assertEqual(body, b"abcde", "the body, de-chunked, and nothing after it")

    def test_204_reaches_the_client_without_a_content_length(self):
        """A 204 has no Content-Length (RFC 9110 8.6): the backend's is not relayed."""
        answer = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nX-A: 1\r\n\r\n"
        backend, proxy = self.start("scripted", respond=lambda r: [(0, answer)])
        head, rest, _ = raw_response(proxy.port, request_bytes("GET", "/nothing"))
        self.assertTrue(head.startswith("HTTP/1.1 204 "), head)
        self.assertEqual(header_values(head, "Content-Length"), [], head)
        self.assertEqual(header_values(head, "X-A"), ["1"], head)
        self.assertEqual(rest, b"")


if __name__ == "__main__":
    unittest.main()
