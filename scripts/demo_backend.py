#!/usr/bin/env python3
"""Demo "legacy resource" for fencing-proxy: a key-value store over HTTP/1.1.

It stands in for the resource the proxy protects: a service that accepts writes and cannot check
fencing tokens itself. It only remembers bodies by path and records what it applied, so that
tests (and demos) can see which writes arrived, in which order, and whether any overlapped.

  PUT/POST/PATCH PATH   store the body (Content-Length or chunked)     -> "stored N bytes at PATH"
  DELETE PATH           remove it                                      -> 200, or 404 if absent
  GET/HEAD PATH         the stored body                                -> 200, or 404 if absent
  GET /_log             the records so far (application/x-ndjson)
  POST /_reset          clear the store and the log

Every request it applies (all but /_log and /_reset) appends one JSON line to --log:
  {"seq", "method", "path", "token", "body_bytes", "status", "start", "end"}
where start/end are time.monotonic() seconds (one clock for all processes on the host). The line
is written and flushed before the response is sent, so a client that has its response can read
the record, and a request that starts after another's response has start >= that record's end.

Request headers for tests: X-Demo-Delay-Ms: N sleeps N ms before applying (holds a write in
flight); X-Demo-Status: NNN answers with that status (the request is still applied);
X-Demo-Chunked: 1 sends the response body chunked instead of with a Content-Length;
X-Demo-Trickle-Ms: N sends the response head at once, then its body one byte every N ms (a
backend that never finishes, for timeout tests).
Response headers: X-Demo-Seen-Token and X-Demo-Seen-Forwarded-For echo what arrived.
"""

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Backend(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, log_path, verbose, token_header):
        super().__init__(address, Handler)
        self.store = {}
        self.records = []
        self.lock = threading.Lock()
        self.log_file = open(log_path, "a", encoding="utf-8") if log_path else None
        self.verbose = verbose
        self.token_header = token_header

    def record(self, entry):
        with self.lock:
            entry = {"seq": len(self.records) + 1, **entry}
            line = json.dumps(entry)
            self.records.append(line)
            if self.log_file:
                self.log_file.write(line + "\n")
                self.log_file.flush()
            if self.verbose:
                print(line, flush=True)

    def reset(self):
        with self.lock:
            self.store.clear()
            self.records.clear()
            if self.log_file:
                self.log_file.truncate(0)
                self.log_file.seek(0)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "demo-backend/1"
    disable_nagle_algorithm = True  # head and body are two writes: no 40 ms delayed-ACK stalls

    def log_message(self, format, *args):  # the JSON log replaces the access log
        pass

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # CRLF after the chunk
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def reply(self, status, body=b"", content_type="text/plain", head=False):
        token = self.headers.get(self.server.token_header)
        forwarded_for = self.headers.get("X-Forwarded-For")
        chunked = self.headers.get("X-Demo-Chunked") == "1"  # answer with a chunked body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(body)))
        if token is not None:
            self.send_header("X-Demo-Seen-Token", token)
        if forwarded_for is not None:
            self.send_header("X-Demo-Seen-Forwarded-For", forwarded_for)
        self.end_headers()
        if head:
            return
        trickle_ms = int(self.headers.get("X-Demo-Trickle-Ms") or 0)
        if trickle_ms > 0 and not chunked:
            self.wfile.flush()
            try:
                for byte in body:
                    time.sleep(trickle_ms / 1000.0)
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
            except OSError:
                pass  # the proxy cut the exchange off
            return
        if chunked:
            for i in range(0, len(body), 1000):  # several chunks
                part = body[i:i + 1000]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.wfile.write(body)

    def handle_any(self):
        start = time.monotonic()
        body = self.read_body()
        server, method, path = self.server, self.command, self.path
        if method == "GET" and path == "/_log":
            with server.lock:
                text = "".join(line + "\n" for line in server.records)
            return self.reply(200, text.encode(), "application/x-ndjson")
        if method == "POST" and path == "/_reset":
            server.reset()
            return self.reply(200, b"reset\n")
        delay_ms = int(self.headers.get("X-Demo-Delay-Ms") or 0)
        if delay_ms > 0:
            time.sleep(delay_ms / 1000.0)
        with server.lock:
            if method in ("PUT", "POST", "PATCH"):
                server.store[path] = body
                status, answer = 200, b"stored %d bytes at %s\n" % (len(body), path.encode())
            elif method == "DELETE":
                found = server.store.pop(path, None) is not None
                status, answer = (200, b"deleted\n") if found else (404, b"not found\n")
            else:
                stored = server.store.get(path)
                status, answer = (200, stored) if stored is not None else (404, b"not found\n")
        if self.headers.get("X-Demo-Trickle-Ms"):
            answer = b"t" * 100000
        status = int(self.headers.get("X-Demo-Status") or status)
        server.record({
            "method": method, "path": path, "token": self.headers.get(server.token_header),
            "body_bytes": len(body), "status": status, "start": start, "end": time.monotonic()})
        self.reply(status, answer, head=(method == "HEAD"))

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = handle_any


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8081",
                        help="HOST:PORT (default %(default)s)")
    parser.add_argument("--log", help="append one JSON line per applied request to this file")
    parser.add_argument("--verbose", action="store_true", help="print the JSON lines to stdout too")
    parser.add_argument("--token-header", default="X-Fencing-Token")
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    server = Backend((host, int(port)), args.log, args.verbose, args.token_header)

    def stop(signum, frame):
        raise SystemExit(0)  # unwinds serve_forever in the main thread

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("demo backend listening on %s:%d" % server.server_address[:2], flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
