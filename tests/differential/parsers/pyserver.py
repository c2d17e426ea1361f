"""The Python view of the differential oracle (tests/differential/README.md): http.server.

    python3 pyserver.py      listens on 127.0.0.1 port 0, prints "PORT <n>", stops when stdin closes

BaseHTTPRequestHandler reads the request line and the header block (http.client.parse_headers,
i.e. the email package); the body is framed here the way a handler built on http.server has to
do it itself, and the way most such handlers do: Transfer-Encoding chunked (the last coding)
first, chunk sizes read with int(size, 16) after the extension is cut off, trailers skipped;
otherwise int(Content-Length) (Python's int: it takes "+5", " 5", "0300", "1_0"); otherwise no
body. Every request it reads is answered 200 with an X-Diff-View header (method, target, token
values, body length and hash); a body it cannot frame is answered 400 with the reason and closed.
Python standard library only.
"""

import hashlib
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

END_TARGET = "/__diff_end__"


def hexs(text):
    return text.encode("latin-1", "replace").hex()


def view(method, target, tokens, n, digest):
    tok = ",".join(hexs(t.strip(" \t")) for t in tokens)
    return "%s %s %d:%s %d %s" % (hexs(method), hexs(target), len(tokens), tok, n, digest[:16])


class BodyError(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, *args):
        pass

    def handle_one_request(self):
        # BaseHTTPRequestHandler.handle_one_request, with one handler for every method
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return
            self.handle_any()
            self.wfile.flush()
        except TimeoutError:
            self.close_connection = True

    def read_body(self, sha):
        te = self.headers.get_all("Transfer-Encoding") or []
        codings = [c.strip().lower() for v in te for c in v.split(",") if c.strip()]
        if codings and codings[-1] == "chunked":
            n = 0
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise BodyError("eof in chunk size")
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise BodyError("chunk size %r" % line[:40]) from None
                if size < 0:
                    raise BodyError("negative chunk size")
                if size == 0:
                    while True:
                        trailer = self.rfile.readline(65537)
                        if not trailer:
                            raise BodyError("eof in trailers")
                        if trailer in (b"\r\n", b"\n"):
                            return n
                data = self.rfile.read(size)
                if len(data) < size:
                    raise BodyError("eof in chunk data")
                sha.update(data)
                n += size
                self.rfile.readline(65537)  # the CRLF after the data
        length = self.headers.get("Content-Length")
        if length is None:
            return 0
        try:
            length = int(length)
        except ValueError:
            raise BodyError("content-length %r" % length) from None
        if length < 0:
            raise BodyError("negative content-length")
        data = self.rfile.read(length)
        if len(data) < length:
            raise BodyError("eof in body")
        sha.update(data)
        return length

    def handle_any(self):
        sha = hashlib.sha1()
        try:
            n = self.read_body(sha)
        except BodyError as e:
            self.close_connection = True
            self.send_response_only(400)
            self.send_header("X-Diff-Error", hexs("body: %s" % e))
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            self.end_headers()
            return
        tokens = self.headers.get_all("X-Fencing-Token") or []
        self.send_response_only(200)
        self.send_header("X-Diff-View", view(self.command, self.path, tokens, n, sha.hexdigest()))
        self.send_header("Content-Length", "0")
        if self.path == END_TARGET:
            self.close_connection = True
            self.send_header("Connection", "close")
        self.end_headers()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def main():
    server = Server(("127.0.0.1", 0), Handler)
    print("PORT %d" % server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()  # the harness holds our stdin: its end is ours
    server.server_close()


if __name__ == "__main__":
    main()
