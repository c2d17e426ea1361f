#!/usr/bin/env python3
"""TLS connections per second, each a handshake, one request and a close: the client of
bench/run.py's tls_handshake and tls_resume workloads.

CLIENTS worker processes (Python's ssl, i.e. OpenSSL) connect to 127.0.0.1:PORT in a loop for
SECONDS, each connection in turn: TCP connect, TLS handshake (OpenSSL's client defaults: TLS 1.3,
an X25519 key share; ALPN http/1.1; the server's certificate verified against --cafile and its
name), `GET PATH` with `Connection: close`, the whole response read to the server's close,
the socket closed. Timed per connection, from the connect to the end of the response.

  --resume   every connection resumes a session (a ticket) from the worker's previous
             connection; each worker makes one full handshake before the timed window to get
             the first one. Without it, no session is offered: every handshake is a full one.

Prints one line `BENCH_RESULT {json}` with the fields bench/lua/report.lua prints for wrk
(requests, duration_us, errors, non2xx, first_non2xx, latency_us with p50/p99/p99_9) and a
`tls` object: how many connections resumed, and the protocol versions, cipher suites and ALPN
protocols seen. Exit 0 when it ran (errors are in the result), 2 on bad arguments.

  python3 bench/tls_handshakes.py --port 8443 --cafile cert.pem --seconds 5 --clients 4 [--resume]
"""

import argparse
import json
import multiprocessing
import os
import signal
import socket
import ssl
import sys
import time


def client_context(cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class Failure(Exception):
    def __init__(self, kind, what):
        super().__init__(what)
        self.kind = kind        # connect, read, write, timeout


def one_connection(ctx, host, port, server_name, request, session, timeout):
    """-> (status, first line, the SSLSocket's facts) or raises Failure."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except socket.timeout as e:
        raise Failure("timeout", "connect: %s" % e)
    except OSError as e:
        raise Failure("connect", "connect: %s" % e)
    try:
        try:
            s = ctx.wrap_socket(sock, server_hostname=server_name, session=session)
        except socket.timeout as e:
            raise Failure("timeout", "handshake: %s" % e)
        except (ssl.SSLError, OSError) as e:
            raise Failure("connect", "handshake: %s" % e)
        sock = s
        try:
            s.sendall(request)
        except socket.timeout as e:
            raise Failure("timeout", "write: %s" % e)
        except (ssl.SSLError, OSError) as e:
            raise Failure("write", "write: %s" % e)
        data = bytearray()
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except socket.timeout as e:
            raise Failure("timeout", "read: %s" % e)
        except (ssl.SSLError, OSError) as e:
            raise Failure("read", "read: %s" % e)
        head, sep, body = bytes(data).partition(b"\r\n\r\n")
        if not sep:
            raise Failure("read", "closed before a complete response head (%d bytes)" % len(data))
        lines = head.split(b"\r\n")
        try:
            status = int(lines[0].split(None, 2)[1])
        except (IndexError, ValueError):
            raise Failure("read", "not an HTTP response: %r" % lines[0][:100])
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length" and len(body) < int(value.strip()):
                raise Failure("read", "response body cut short: %d of %s bytes" % (len(body), value.strip()))
        facts = (s.session_reused, s.version(), s.cipher()[0], s.selected_alpn_protocol())
        new_session = s.session
        return status, lines[0].decode("latin-1"), facts, new_session
    finally:
        sock.close()


def worker(index, args, start_at, out):
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent stops the run
    ctx = client_context(args.cafile)
    request = ("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
               % (args.path, args.server_name)).encode()
    res = {"latencies": [], "errors": {"connect": 0, "read": 0, "write": 0, "timeout": 0, "status": 0},
           "non2xx": 0, "first_non2xx": "", "first_error": "", "resumed": 0, "versions": {}, "ciphers": {},
           "alpn": {}, "end": None, "setup_error": ""}
    session = None
    if args.resume:
        try:
            _, _, _, session = one_connection(ctx, args.host, args.port, args.server_name, request, None,
                                              args.timeout)
        except Failure as e:
            res["setup_error"] = "the first (full) handshake failed: %s" % e
    while time.monotonic() < start_at:
        time.sleep(min(0.01, max(0.0, start_at - time.monotonic())))
    deadline = start_at + args.seconds
    lat = res["latencies"]
    while not res["setup_error"] and time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            status, line, facts, new_session = one_connection(
                ctx, args.host, args.port, args.server_name, request, session, args.timeout)
        except Failure as e:
            res["errors"][e.kind] += 1
            if not res["first_error"]:
                res["first_error"] = str(e)
            continue
        lat.append(time.monotonic() - t0)
        if status < 200 or status > 299:
            res["non2xx"] += 1
            if status >= 400:
                res["errors"]["status"] += 1
            if not res["first_non2xx"]:
                res["first_non2xx"] = "GET %s -> %s" % (args.path, line)
        reused, version, cipher, alpn = facts
        res["resumed"] += 1 if reused else 0
        for key, value in (("versions", version), ("ciphers", cipher), ("alpn", alpn or "none")):
            res[key][value] = res[key].get(value, 0) + 1
        if args.resume:
            session = new_session       # the newest ticket, as a client keeps it
    res["end"] = time.monotonic()
    out.put((index, res))


def percentile(sorted_xs, p):
    if not sorted_xs:
        return 0
    k = min(len(sorted_xs) - 1, max(0, int(round(p / 100.0 * len(sorted_xs) + 0.5)) - 1))
    return sorted_xs[k]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--server-name", default="127.0.0.1",
                   help="the name checked against the certificate (and the Host header)")
    p.add_argument("--cafile", required=True, help="PEM that verifies the server's certificate")
    p.add_argument("--path", default="/eq/1")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--clients", type=int, default=4, help="worker processes, one connection at a time each")
    p.add_argument("--resume", action="store_true", help="resume sessions (tickets)")
    p.add_argument("--timeout", type=float, default=5.0, help="per socket operation")
    args = p.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0:
        p.error("--clients and --seconds must be positive")

    mp = multiprocessing.get_context("fork")
    out = mp.Queue()
    # Workers start together, once every process exists and has made its first connection.
    start_at = time.monotonic() + 0.2 + 0.02 * args.clients
    procs = [mp.Process(target=worker, args=(i, args, start_at, out), daemon=True) for i in range(args.clients)]

    def on_term(signum, _frame):
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    for proc in procs:
        proc.start()
    results = []
    wait_until = start_at + args.seconds + args.timeout * 3 + 10
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=max(0.1, wait_until - time.monotonic())))
        except Exception:     # queue.Empty: a worker is stuck or died
            break
    for proc in procs:
        proc.join(timeout=1)
        if proc.is_alive():
            proc.terminate()
    lat = sorted(x for _, r in results for x in r["latencies"])
    errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    tls = {"resumed": 0, "versions": {}, "ciphers": {}, "alpn": {}}
    non2xx, first_non2xx, first_error, setup = 0, "", "", []
    for _, r in sorted(results, key=lambda ir: ir[0]):
        for k, v in r["errors"].items():
            errors[k] += v
        non2xx += r["non2xx"]
        first_non2xx = first_non2xx or r["first_non2xx"]
        first_error = first_error or r["first_error"]
        tls["resumed"] += r["resumed"]
        for key in ("versions", "ciphers", "alpn"):
            for name, n in r[key].items():
                tls[key][name] = tls[key].get(name, 0) + n
        if r["setup_error"]:
            setup.append(r["setup_error"])
    if len(results) < len(procs):
        setup.append("%d of %d workers reported nothing" % (len(procs) - len(results), len(procs)))
        errors["timeout"] += len(procs) - len(results)
    ends = [r["end"] for _, r in results if r["end"]]
    duration = (max(ends) - start_at) if ends else args.seconds
    us = [x * 1e6 for x in lat]
    result = {
        "requests": len(lat), "duration_us": int(duration * 1e6), "bytes": 0, "errors": errors,
        "status_checked": True, "non2xx": non2xx, "first_non2xx": first_non2xx,
        "latency_us": {
            "min": int(us[0]) if us else 0, "mean": round(sum(us) / len(us), 1) if us else 0,
            "max": int(us[-1]) if us else 0, "p50": int(percentile(us, 50)), "p75": int(percentile(us, 75)),
            "p90": int(percentile(us, 90)), "p99": int(percentile(us, 99)),
            "p99_9": int(percentile(us, 99.9)), "p99_99": int(percentile(us, 99.99))},
        "tls": dict(tls, clients=args.clients, resume=args.resume, first_error=first_error,
                    setup_errors=setup),
    }
    print("BENCH_RESULT " + json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
