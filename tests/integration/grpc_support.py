"""gRPC and plain HTTP/2 for the end-to-end tests of the proxy's HTTP/2 side (test_grpc.py).

GrpcBackend: a real gRPC server (Debian's python3-grpcio) on a free 127.0.0.1 port, insecure
(h2c) or over TLS, serving the generic service orders.v1.OrderStore with raw bytes (no protobuf,
no generated code):

    Put     unary             answers b"put:" + request; a request b"fail" is answered NOT_FOUND
    Upload  client streaming  answers b"uploaded:N" after the client half-closes its N messages
    Watch   server streaming  answers b"watch:0:" + request, then (after the hold point)
                              b"watch:1", b"watch:2"; a request b"flood:N" is answered with N
                              messages of 64 KiB as fast as gRPC takes them (`sent` counts them)
    Chat    bidi streaming    answers b"echo:" + each message

Every call sends initial metadata (x-backend: orders-store) and trailing metadata
(x-backend-trailer: <method>-done). The backend RECORDS every call it receives, with its
metadata, each message and when it came, when the call ended and how (ok, or cancelled: the
stream was reset or the deadline passed): calls() returns copies, so a test can assert that a
refused call never reached it. hold(method) makes the method's next calls stop at their hold
point (Put before answering, Watch after its first message) until release(): a call held open.

Client side: channels to the proxy (insecure_channel: h2c with prior knowledge, as every gRPC
client speaks to a plain port; secure_channel: h2 over TLS, chosen by ALPN) and calls that
return a Result (code, details, initial and trailing metadata, response) whatever the outcome.
Every call carries x-test-call: TAG, the name the backend's records are searched by, and the
token as metadata x-fencing-token when one is given. Feed is a client stream the test writes
message by message.

nghttp(): one plain HTTP/2 request with the nghttp command line (nghttp2-client), prior knowledge
on http:// URLs; it returns the response's status, header and trailer fields, body and the frames
it came in, so a test sees what a gRPC library hides (the HTTP status, a trailers-only answer).

Missing packages: missing() says what is absent (python3-grpcio, nghttp2-client) and the test
module skips with that message, unless FP_REQUIRE_LOCK_SERVICES=1 (scripts/test.sh sets it for
every test package, as for the lock services) makes it a failure. grpc is a C extension that
Debian builds for /usr/bin/python3: under another interpreter of the same major.minor version it
is found through lockservices.import_debian.

Every wait is bounded: calls have deadlines (CALL_TIMEOUT), a held call waits at most HOLD_LIMIT,
a Feed ends itself after HOLD_LIMIT without a message, nghttp runs under a timeout.
"""

import copy
import os
import queue
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import urllib.parse
from concurrent import futures

from harness import IO_TIMEOUT, HarnessError, wait_for
from lockservices import import_debian

grpc = import_debian("grpc")

SERVICE = "orders.v1.OrderStore"
PUT, UPLOAD, WATCH, CHAT = ("/%s/%s" % (SERVICE, m) for m in ("Put", "Upload", "Watch", "Chat"))
TOKEN_KEY = "x-fencing-token"  # the route file's token_header, lower-cased: gRPC metadata keys are
TAG_KEY = "x-test-call"
CALL_TIMEOUT = 10.0  # the deadline of a call unless a test gives another
HOLD_LIMIT = 30.0    # a held call, or a Feed without a new message, gives up after this long
FLOOD_MESSAGE = b"f" * 65536
CLOSE_GRACE = 0.3    # how long the backend watches a client stream that ended for a reset
NGHTTP = shutil.which("nghttp")


def missing():
    """What the gRPC tests need and this machine lacks (a sentence), or None. Raises HarnessError
    instead when FP_REQUIRE_LOCK_SERVICES is set: a missing test package must fail CI."""
    lacking = []
    if grpc is None:
        lacking.append("python3-grpcio (import grpc)")
    if NGHTTP is None:
        lacking.append("nghttp2-client (the nghttp command)")
    if not lacking:
        return None
    reason = ("missing: %s; scripts/install-deps.sh --with-tests installs them"
              % ", ".join(lacking))
    if os.environ.get("FP_REQUIRE_LOCK_SERVICES", "") not in ("", "0"):
        raise HarnessError("FP_REQUIRE_LOCK_SERVICES is set but " + reason)
    return reason


# ---------------------------------------------------------------------------------------------
# The recording backend

class RecordedCall:
    """One call as the backend received it. Times are time.monotonic()."""

    def __init__(self, method, metadata):
        self.method = method                      # "Put", "Upload", "Watch" or "Chat"
        self.metadata = [(m.key, m.value) for m in metadata]
        self.messages = []                        # [(time received, bytes)]
        self.start = time.monotonic()
        self.end = None                           # when it ended (answered, or cancelled)
        self.outcome = None                       # None while open, then "ok" or "cancelled"
        self.held = False                         # it reached its hold point while held
        self.sent = 0                             # flood messages handed to gRPC so far

    def get(self, key):
        """The values of a metadata key, in order."""
        return [v for k, v in self.metadata if k == key]

    @property
    def token(self):
        values = self.get(TOKEN_KEY)
        return values[0] if len(values) == 1 else values or None

    @property
    def tag(self):
        values = self.get(TAG_KEY)
        return values[0] if values else None

    def __repr__(self):
        return "RecordedCall(%s, tag=%r, token=%r, %d messages, outcome=%r)" % (
            self.method, self.tag, self.token, len(self.messages), self.outcome)


class GrpcBackend:
    """The recording gRPC server (see the module docstring). tls: (cert path, key path) to serve
    h2 over TLS instead of h2c; with client_ca (a CA file), a client certificate signed by it is
    required."""

    def __init__(self, tls=None, workers=32, client_ca=None):
        self._lock = threading.Lock()
        self._calls = []
        self._gates = {}
        handlers = {
            "Put": grpc.unary_unary_rpc_method_handler(self._put),
            "Upload": grpc.stream_unary_rpc_method_handler(self._upload),
            "Watch": grpc.unary_stream_rpc_method_handler(self._watch),
            "Chat": grpc.stream_stream_rpc_method_handler(self._chat),
        }
        service = grpc.method_handlers_generic_handler(SERVICE, handlers)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers),
                                  handlers=[service], options=[("grpc.so_reuseport", 0)])
        if tls:
            with open(tls[0], "rb") as f:
                chain = f.read()
            with open(tls[1], "rb") as f:
                key = f.read()
            roots = None
            if client_ca:
                with open(client_ca, "rb") as f:
                    roots = f.read()
            self.port = self.server.add_secure_port(
                "127.0.0.1:0", grpc.ssl_server_credentials([(key, chain)], root_certificates=roots,
                                                           require_client_auth=bool(client_ca)))
        else:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        if not self.port:
            raise HarnessError("the gRPC backend could not bind a port on 127.0.0.1")
        self.scheme = "https" if tls else "http"
        self.server.start()

    @property
    def url(self):
        """The proxy's `backend:` for it."""
        return "%s://127.0.0.1:%d" % (self.scheme, self.port)

    def stop(self):
        self.release()
        self.server.stop(grace=0).wait(10.0)

    # -- what it received --

    def calls(self, method=None, tag=None):
        """Copies of the calls received so far, in arrival order; optionally only one method
        ("Put") or one client's call (its x-test-call tag)."""
        with self._lock:
            return [copy.deepcopy(c) for c in self._calls
                    if (method is None or c.method == method) and (tag is None or c.tag == tag)]

    def call(self, tag):
        """The one call with this tag (HarnessError when there is none or several)."""
        found = self.calls(tag=tag)
        if len(found) != 1:
            raise HarnessError("the backend received %d calls tagged %r: %r"
                               % (len(found), tag, self.calls()))
        return found[0]

    def wait_call(self, tag, timeout=IO_TIMEOUT, messages=0, held=False, ended=False,
                  client=None):
        """Waits until the call tagged `tag` has arrived with at least `messages` messages (and has
        reached its hold point, or has ended, when asked); returns a copy of it. client: the
        client's side of that call (a future): if it ends first, the wait stops there, with what
        the client got (HarnessError)."""
        def ready():
            found = self.calls(tag=tag)
            c = found[-1] if found else None
            if c is not None and (len(c.messages) >= messages and (c.held or not held)
                                  and (c.outcome is not None or not ended)):
                return c
            if client is not None and client.done():
                raise HarnessError("call %r ended at the client before the backend had what the "
                                   "test waits for: %r; the backend has %r"
                                   % (tag, finish(client, 1.0), c))
            return None
        what = "the backend to receive call %r%s" % (tag, " with %d messages" % messages
                                                     if messages else "")
        return wait_for(ready, timeout, 0.01, what + (" held" if held else "")
                        + (" ended" if ended else ""))

    # -- holding calls open --

    def hold(self, method):
        """The next calls of `method` stop at their hold point until release() (or HOLD_LIMIT,
        or until the call is cancelled). Returns the gate (a threading.Event)."""
        gate = threading.Event()
        with self._lock:
            self._gates[method] = gate
        return gate

    def release(self, method=None):
        with self._lock:
            gates = [g for m, g in self._gates.items() if method in (None, m)]
            for m in [m for m in self._gates if method in (None, m)]:
                del self._gates[m]
        for gate in gates:
            gate.set()

    # -- the service --

    def _begin(self, method, context):
        call = RecordedCall(method, context.invocation_metadata())
        with self._lock:
            self._calls.append(call)
        context.add_callback(lambda: self._finish(call, "cancelled"))  # runs when the RPC ends
        return call

    def _finish(self, call, outcome, at=None):
        with self._lock:
            if call.outcome is None:
                call.end, call.outcome = at or time.monotonic(), outcome

    def _stream_ended(self, call, context):
        """After a client stream's last message: "ok" when the client half-closed it, "cancelled"
        when it was reset. A reset can end the iteration as a half-close does, the cancellation
        following a moment later, so the call is watched for CLOSE_GRACE first."""
        ended = time.monotonic()
        while context.is_active() and time.monotonic() < ended + CLOSE_GRACE:
            time.sleep(0.01)
        self._finish(call, "ok" if context.is_active() else "cancelled", ended)

    def _message(self, call, message):
        with self._lock:
            call.messages.append((time.monotonic(), message))

    def _hold(self, call, context):
        with self._lock:
            gate = self._gates.get(call.method)
            if gate is not None:
                call.held = True
        if gate is None:
            return
        deadline = time.monotonic() + HOLD_LIMIT
        while not gate.wait(0.02):
            if not context.is_active() or time.monotonic() > deadline:
                return

    def _answer_metadata(self, call, context):
        context.send_initial_metadata((("x-backend", "orders-store"),))
        context.set_trailing_metadata((("x-backend-trailer", call.method.lower() + "-done"),))

    def _put(self, request, context):
        call = self._begin("Put", context)
        self._message(call, request)
        self._hold(call, context)
        self._answer_metadata(call, context)
        if request == b"fail":
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details("no such order")
            self._finish(call, "ok")
            return b""
        self._finish(call, "ok")
        return b"put:" + request

    def _upload(self, request_iterator, context):
        call = self._begin("Upload", context)
        self._answer_metadata(call, context)
        try:
            for message in request_iterator:
                self._message(call, message)
        except Exception:  # the stream was reset, or its deadline passed
            self._finish(call, "cancelled")
            raise
        self._stream_ended(call, context)
        return b"uploaded:%d" % len(call.messages)

    def _watch(self, request, context):
        call = self._begin("Watch", context)
        self._message(call, request)
        self._answer_metadata(call, context)
        if request.startswith(b"flood:"):
            for _ in range(int(request[6:])):
                with self._lock:
                    call.sent += 1
                yield FLOOD_MESSAGE
            self._finish(call, "ok")
            return
        yield b"watch:0:" + request
        self._hold(call, context)
        yield b"watch:1"
        yield b"watch:2"
        self._finish(call, "ok")

    def _chat(self, request_iterator, context):
        call = self._begin("Chat", context)
        self._answer_metadata(call, context)
        try:
            for message in request_iterator:
                self._message(call, message)
                yield b"echo:" + message
        except Exception:
            self._finish(call, "cancelled")
            raise
        self._stream_ended(call, context)


# ---------------------------------------------------------------------------------------------
# Clients

# Each channel gets its own connections (no subchannel shared with another channel of the same
# target), no retries (a call is sent once, or the test sees why not), no HTTP proxy from the
# environment.
CHANNEL_OPTIONS = [("grpc.use_local_subchannel_pool", 1), ("grpc.enable_retries", 0),
                   ("grpc.enable_http_proxy", 0)]


def insecure_channel(port):
    """A channel to 127.0.0.1:port speaking h2c with prior knowledge (no TLS, no Upgrade)."""
    return grpc.insecure_channel("127.0.0.1:%d" % port, options=CHANNEL_OPTIONS)


def secure_channel(port, ca_file, cert=None, server_name="localhost"):
    """A channel to 127.0.0.1:port over TLS (ALPN h2), trusting ca_file, presenting `cert` (a
    (crt path, key path) pair) when given; the server's certificate is checked for server_name."""
    def read(path):
        with open(path, "rb") as f:
            return f.read()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(ca_file),
        private_key=read(cert[1]) if cert else None,
        certificate_chain=read(cert[0]) if cert else None)
    return grpc.secure_channel("127.0.0.1:%d" % port, credentials,
                               options=CHANNEL_OPTIONS + [("grpc.ssl_target_name_override",
                                                           server_name)])


class Result:
    """How a call ended: code (grpc.StatusCode), details (the grpc-message, decoded), initial and
    trailing metadata as lists of (key, value), and the response (a unary one's bytes; a
    server stream's list of messages; None when the call failed)."""

    def __init__(self, code, details, initial, trailing, response):
        self.code, self.details, self.response = code, details, response
        self.initial = [(m.key, m.value) for m in (initial or ())]
        self.trailing = [(m.key, m.value) for m in (trailing or ())]

    def trailer(self, key):
        values = [v for k, v in self.trailing if k == key]
        return values[0] if len(values) == 1 else values or None

    def header(self, key):
        values = [v for k, v in self.initial if k == key]
        return values[0] if len(values) == 1 else values or None

    def __repr__(self):
        return "Result(%s, details=%r, trailing=%r, response=%r)" % (
            self.code, self.details, self.trailing, self.response)


def call_metadata(token=None, tag=None, metadata=()):
    """The metadata of a call: the token (str() of it; a list or tuple sends each value as its own
    field), the tag, then `metadata`."""
    md = []
    if token is not None:
        for value in (token if isinstance(token, (list, tuple)) else [token]):
            md.append((TOKEN_KEY, str(value)))
    if tag is not None:
        md.append((TAG_KEY, tag))
    return md + list(metadata)


def _from_call(call, response):
    return Result(call.code(), call.details(), call.initial_metadata(), call.trailing_metadata(),
                  response)


def unary(channel, request, token=None, tag=None, metadata=(), method=PUT, timeout=CALL_TIMEOUT):
    """One unary call -> Result (never raises for a gRPC status)."""
    try:
        response, call = channel.unary_unary(method).with_call(
            request, metadata=call_metadata(token, tag, metadata), timeout=timeout)
    except grpc.RpcError as e:
        return _from_call(e, None)
    return _from_call(call, response)


def start_unary(channel, request, token=None, tag=None, metadata=(), method=PUT,
                timeout=CALL_TIMEOUT):
    """A unary call left running: a future (done(), and finish() for its Result)."""
    return channel.unary_unary(method).future(
        request, metadata=call_metadata(token, tag, metadata), timeout=timeout)


def start_upload(channel, feed, token=None, tag=None, metadata=(), timeout=CALL_TIMEOUT):
    """A client-streaming Upload sending what the test puts into `feed`: a future."""
    return channel.stream_unary(UPLOAD).future(
        iter(feed), metadata=call_metadata(token, tag, metadata), timeout=timeout)


def finish(future, timeout=CALL_TIMEOUT + 5):
    """The Result of a call started with start_unary or start_upload, once it ends (HarnessError
    if it has not within `timeout`)."""
    try:
        response = future.result(timeout=timeout)
    except grpc.FutureTimeoutError:
        raise HarnessError("the call did not end within %.1fs" % timeout) from None
    except grpc.FutureCancelledError:
        return _from_call(future, None)
    except grpc.RpcError as e:
        return _from_call(e, None)
    return _from_call(future, response)


def watch(channel, request, token=None, tag=None, metadata=(), timeout=CALL_TIMEOUT):
    """A server-streaming Watch: the response iterator (next() for each message, and a Result
    from stream_result() once it is exhausted)."""
    return channel.unary_stream(WATCH)(request, metadata=call_metadata(token, tag, metadata),
                                       timeout=timeout)


def chat(channel, feed, token=None, tag=None, metadata=(), timeout=CALL_TIMEOUT):
    """A bidi Chat sending what the test puts into `feed`: the response iterator."""
    return channel.stream_stream(CHAT)(iter(feed), metadata=call_metadata(token, tag, metadata),
                                       timeout=timeout)


def next_message(stream):
    """The next message of a response stream, or the Result it ended with (a test then asserts
    on what it got)."""
    try:
        return next(stream)
    except StopIteration:
        return _from_call(stream, None)
    except grpc.RpcError as e:
        return _from_call(e, None)


def stream_result(stream):
    """Reads a response stream to its end -> Result with response = the messages read."""
    messages = []
    try:
        for message in stream:
            messages.append(message)
    except grpc.RpcError as e:
        result = _from_call(e, None)
        result.response = messages
        return result
    return _from_call(stream, messages)


_END = object()


class Feed:
    """The messages of a client stream, sent as the test puts them; close() half-closes the
    stream. `sent` lists (time handed to gRPC, message). Without a message for HOLD_LIMIT the
    stream ends by itself, so a forgotten Feed cannot hang a test."""

    def __init__(self):
        self._queue = queue.Queue()
        self.sent = []

    def put(self, message):
        self._queue.put(message)

    def close(self):
        self._queue.put(_END)

    def __iter__(self):
        while True:
            try:
                message = self._queue.get(timeout=HOLD_LIMIT)
            except queue.Empty:
                return
            if message is _END:
                return
            self.sent.append((time.monotonic(), message))
            yield message


# ---------------------------------------------------------------------------------------------
# Plain HTTP/2 with the nghttp command line

def grpc_frame(message):
    """A gRPC length-prefixed message (not compressed), as it travels in DATA frames."""
    return b"\x00" + struct.pack(">I", len(message)) + message


class H2Response:
    """What nghttp received on stream 1: status (int), headers and trailers as lists of (name,
    value) with lower-case names, body (bytes), header_frames (the flags of each HEADERS frame
    received), data_frames (how many DATA frames), reset (the RST_STREAM error code, or None),
    and output (nghttp's verbose log, for failure messages)."""

    def __init__(self):
        self.status, self.headers, self.trailers, self.body = None, [], [], b""
        self.header_frames, self.data_frames, self.reset, self.output = [], 0, None, ""

    def header(self, name):
        values = [v for n, v in self.headers if n == name.lower()]
        return values[0] if len(values) == 1 else values or None

    def trailer(self, name):
        values = [v for n, v in self.trailers if n == name.lower()]
        return values[0] if len(values) == 1 else values or None

    @property
    def trailers_only(self):
        """One HEADERS frame that ends the stream, and no DATA: gRPC's Trailers-Only answer."""
        return (len(self.header_frames) == 1 and bool(self.header_frames[0] & 0x1)
                and self.data_frames == 0)

    def __repr__(self):
        return "H2Response(%s, headers=%r, trailers=%r, body=%r)" % (
            self.status, self.headers, self.trailers, self.body[:300])


_NGHTTP_LINE = re.compile(
    rb"(?:\[\s*\d+\.\d+\] )?(?:"
    rb"recv \(stream_id=(?P<hs>\d+)\) (?P<name>:?[^:\s]+): (?P<value>[^\n]*)\n"
    rb"|(?P<dir>send|recv) (?P<type>[A-Z_]+) frame <length=(?P<len>\d+),"
    rb" flags=0x(?P<flags>[0-9a-f]+), stream_id=(?P<sid>\d+)>\n(?P<more>(?: {10}[^\n]*\n)*)"
    rb"|\[ERROR\] (?P<error>[^\n]*)\n)")


def nghttp(url, method="GET", headers=(), body=None, timeout=IO_TIMEOUT, args=()):
    """One HTTP/2 request with nghttp (prior knowledge on http://, ALPN h2 on https://) ->
    H2Response. HarnessError, quoting nghttp, when no response came."""
    command = [NGHTTP, "-v", "--no-dep", "-t", "%dms" % int(timeout * 1000), *args,
               "-H", ":method: " + method]
    for name, value in headers:
        command += ["-H", "%s: %s" % (name, value)]
    body_file = None
    try:
        if body is not None:
            fd, body_file = tempfile.mkstemp(prefix="fp-h2-body-")
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            command += ["-d", body_file]
        try:
            run = subprocess.run(command + [url], capture_output=True, timeout=timeout + 5,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise HarnessError("nghttp %s %s did not end within %.0fs" % (method, url, timeout + 5))
    finally:
        if body_file:
            os.unlink(body_file)
    out = run.stdout
    response = H2Response()
    response.output = out.decode("latin-1")[-4000:] + run.stderr.decode("latin-1")[-1000:]
    errors = []
    block = []
    for m in _NGHTTP_LINE.finditer(out):
        if m.group("error") is not None:
            errors.append(m.group("error").decode("latin-1"))
        elif m.group("hs") is not None:
            if m.group("hs") == b"1":
                block.append((m.group("name").decode("latin-1").lower(),
                              m.group("value").decode("latin-1")))
        elif m.group("dir") == b"recv" and m.group("sid") == b"1":
            kind, length, flags = m.group("type"), int(m.group("len")), int(m.group("flags"), 16)
            if kind == b"HEADERS":
                response.header_frames.append(flags)
                fields = dict(block)
                if response.status is None and ":status" in fields:
                    response.status = int(fields[":status"])
                    response.headers = [(n, v) for n, v in block if n != ":status"]
                else:
                    response.trailers += block
                block = []
            elif kind == b"DATA":
                if flags & 0x8:
                    raise HarnessError("a padded DATA frame: this parser cannot read its body")
                response.data_frames += 1
                # nghttp prints a DATA frame's payload just before the line that describes it
                response.body += out[m.start() - length:m.start()] if length else b""
            elif kind == b"RST_STREAM":
                code = re.search(rb"error_code=(\w+)", m.group("more"))
                response.reset = code.group(1).decode() if code else "?"
    if response.status is None:
        raise HarnessError("nghttp %s %s: no HTTP/2 response (%s); nghttp's log ends:\n%s"
                           % (method, url, "; ".join(errors) or "exit %d" % run.returncode,
                              response.output[-1500:]))
    return response


def grpc_message(value):
    """A grpc-message field as sent (percent-encoded, gRPC's spec) -> the text."""
    return urllib.parse.unquote(value or "")
