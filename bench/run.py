#!/usr/bin/env python3
"""Side-by-side benchmark: fencing-proxy against nginx and HAProxy, same backend, same run.

Starts on 127.0.0.1 a backend (nginx answering 200 to every method, 1 worker), nginx as a
reverse proxy (1 worker, upstream keep-alive), HAProxy (1 thread, http-reuse always) and
fencing-proxy (threads: 1, access_log: false); drives each with wrk (bench/lua/*.lua) in rounds
that interleave the targets; pins wrk to one core and the proxies and the backend to another.
Reports req/s, latency percentiles, CPU µs per request, peak RSS, ratios to nginx (medians of
same-round pairs), syscalls per request (strace -c), memory per idle keep-alive connection, the
disk's append+fdatasync rate and the issue's goals; writes JSON and a Markdown table to
bench/results/. Stops every process it started, by PID, on any exit.

The TLS workloads (--workloads tls) run each target a second time with a TLS listener (one
ECDSA P-256 certificate made at start, the same TLS settings on all three, checked with
`openssl s_client` at start): requests over TLS keep-alive, new connections per second with full
and with resumed handshakes (bench/tls_handshakes.py), memory per idle TLS connection.

The HTTP/2 workloads (--workloads h2) run each target a third time, speaking h2c (prior
knowledge) to h2load and to an h2c backend of their own (nginx with `listen … http2`):
equal-token PUTs and gRPC unary calls, several connections × several concurrent streams, every
status seen by h2load, latency percentiles from its per-request log, and each run checked
against the backend's request count (stub_status) and fencing-proxy's `forwarded`.

  bench/run.sh                       full run of the plain workloads (9 rounds; about 20 minutes)
  bench/run.sh --workloads tls       the TLS workloads (9 rounds; about 16 minutes)
  bench/run.sh --workloads h2        the HTTP/2 workloads (9 rounds; about 8 minutes); `all`: all
  bench/run.sh --smoke               one short round of the plain workloads, a short TLS check and
                                     one second of gRPC per target; exit 1 on any non-2xx or
                                     socket error (for CI; under 90 s)
  bench/run.sh --binary PATH         another fencing-proxy binary (default build/proxy/fencing-proxy)
  bench/run.sh --targets fencing-proxy,nginx --workloads put_equal --rounds 3 --seconds 5

See bench/README.md for what each number means.
"""

import argparse
import atexit
import datetime
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

from disk_probe import append_fdatasync_rate  # bench/, the script's own directory

try:  # Debian's python3-prometheus-client (ensure_packages installs it)
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    text_string_to_metric_families = None

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LUA_DIR = os.path.join(HERE, "lua")
CONFIG_DIR = os.path.join(HERE, "configs")
RESULTS_DIR = os.path.join(HERE, "results")

TARGETS = ("nginx", "haproxy", "fencing-proxy")
# Opt-in targets (--targets): the access log on, and the build before a change (--base-binary).
#   nginx-log               nginx with its default access log (combined format, to a file)
#   fencing-proxy-log       access_log: true, stderr to a file
#   fencing-proxy-log-pipe  access_log: true, stderr to a pipe that `cat` drains on the load CPU
#                           (as a container runtime reads a pod's logs)
#   fencing-proxy-base      the --base-binary build, access log off
EXTRA_TARGETS = ("nginx-log", "fencing-proxy-log", "fencing-proxy-log-pipe", "fencing-proxy-base")
ALL_TARGETS = TARGETS + EXTRA_TARGETS
REFERENCE = "nginx"
PLAIN_WORKLOADS = {
    "get": "GET pass-through, 32 conns",
    "put_equal": "PUT equal token, 32 conns",
    "put_keyed": "PUT equal token, keyed route, 32 conns",
    "raise_serial": "PUT raising 1 fence, 1 conn",
    "raise_fences": "PUT raising 32 fences, 32 conns",
    "put_paced": "PUT equal token, paced, 4 conns",
    "raise_keys": "PUT raising 10,000 keys, 32 conns",
}
# Against each target's TLS listener (a second process of each, started when one is chosen).
TLS_WORKLOADS = {
    "tls_put_equal": "TLS: PUT equal token, keep-alive, 32 conns",
    "tls_handshake": "TLS: connection per GET, full handshake (conns/s)",
    "tls_resume": "TLS: connection per GET, resumed session (conns/s)",
    "tls_idle": "TLS: memory per idle connection",
}
# HTTP/2 with prior knowledge (h2c) from h2load to each target and from each target to one h2c
# backend (a third process of each target, and a backend of their own, started when one is
# chosen).
H2_WORKLOADS = {
    "h2_put_equal": "h2c: PUT equal token, conns × streams",
    "grpc_unary": "gRPC unary call, equal token, conns × streams",
}
WORKLOADS = dict(PLAIN_WORKLOADS, **TLS_WORKLOADS, **H2_WORKLOADS)
WORKLOAD_GROUPS = {"plain": list(PLAIN_WORKLOADS), "tls": list(TLS_WORKLOADS),
                   "h2": list(H2_WORKLOADS),
                   "all": list(PLAIN_WORKLOADS) + list(TLS_WORKLOADS) + list(H2_WORKLOADS)}
# Measured after the rounds, as the plain idle test is: not a timed run of its own.
AFTER_ROUNDS = ("tls_idle",)
# What --smoke adds to the plain workloads when --workloads is not given (about 10 s): the TLS
# listeners start, negotiate the same parameters (full handshakes of s_client and Python), serve
# requests over keep-alive and over new connections that resume a session.
SMOKE_TLS = ("tls_put_equal", "tls_resume")
# And of the HTTP/2 ones (about 5 s): the h2c listeners and backend start, every proxy passes a
# gRPC call and its grpc-status trailer (checked with nghttp at start), one 1-second run each.
SMOKE_H2 = ("grpc_unary",)
# The targets that get an h2c listener (the log variants have none).
H2_TARGETS = ("nginx", "haproxy", "fencing-proxy", "fencing-proxy-base")
H2_CLIENTS = 4            # h2load connections (-c) ...
H2_STREAMS = 8            # ... each with this many concurrent streams (-m): 32 in flight
GRPC_PATH = "/bench.v1.Store/Put"     # route grpc of configs/fencing-proxy-h2.yaml
# The gRPC request: one length-prefixed message (flag 0, 4-byte big-endian length), a protobuf
# {1: "k1", 2: 100 bytes}; the backend's reply {1: "ok"} (configs/nginx-backend-h2.conf).
GRPC_REQUEST_MSG = b"\x0a\x02k1\x12\x64" + b"e" * 100
GRPC_REPLY_MSG = b"\x0a\x02ok"
TLS_CLIENTS = 4           # worker processes of bench/tls_handshakes.py
EQUAL_TOKEN = "1000"      # the eq fence is raised to this once; every equal-token PUT carries it
EQ_PATH = "/eq/1"
KEYED_PATH = "/keyed/k1"  # route keyed (fence_key: path_segment 1): key k1, raised to EQUAL_TOKEN
RAISE_KEYS_PREFIX = "/rkeys"  # route rkeys (keyed): raise_keys spreads its raises over its keys
SERIAL_PATH = "/serial/1"
PACED_CONNS = 4           # the paced equal-token load (alone, and beside the 32-fence raises)
PACED_DELAY_MS = 2        # pause before each request on each paced connection
TOKEN_STRIDE = 10 ** 9    # each raise run gets its own token range: run n starts at (n+1)*stride
PROC_TIMEOUT = 10.0       # seconds for a process to start or stop
CLK_TCK = os.sysconf("SC_CLK_TCK")
PACKAGES = {"nginx": "nginx", "haproxy": "haproxy", "wrk": "wrk", "strace": "strace",
            "taskset": "util-linux", "openssl": "openssl", "h2load": "nghttp2-client",
            "nghttp": "nghttp2-client"}
PARSER_PACKAGE = "python3-prometheus-client"   # /metrics is read with its parser
DEBIAN_PYTHON = "/usr/bin/python3"             # the python that Debian's python3-* packages are for


class BenchError(RuntimeError):
    pass


class Interrupted(BaseException):
    pass


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# Processes: every one started here is recorded and stopped by PID on any exit.

class Supervisor:
    def __init__(self):
        self.procs = []          # [(name, Popen, extra pids to stop after it)]

    def spawn(self, name, argv, out_path, cpu=None, env=None):
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu)] + list(argv)   # taskset execs: the PID stays
        out = open(out_path, "wb")
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
        finally:
            out.close()
        self.procs.append((name, proc, []))
        return proc

    def add_pids(self, proc, pids):
        for _, p, extra in self.procs:
            if p is proc:
                extra.extend(pids)

    def stop(self, proc, sig=signal.SIGTERM, timeout=PROC_TIMEOUT):
        entry = next((e for e in self.procs if e[1] is proc), None)
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    pass
            except ProcessLookupError:
                pass
        if entry:
            for pid in entry[2]:              # e.g. an nginx worker whose master is gone
                if _alive_child_of(pid, None):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            self.procs.remove(entry)
        return proc.returncode

    def stop_all(self):
        for name, proc, _ in list(reversed(self.procs)):
            self.stop(proc)


def _alive_child_of(pid, ppid):
    """True if pid exists (and, if ppid is given, is its child) and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return False
    fields = data[data.rindex(")") + 2:].split()
    return fields[0] != "Z" and (ppid is None or int(fields[1]) == ppid)


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        pass
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _alive_child_of(int(entry), pid):
            out.append(int(entry))
    return out


def cpu_ticks(pid):
    """utime + stime of the whole process (every thread), in clock ticks."""
    with open("/proc/%d/stat" % pid) as f:
        data = f.read()
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])        # fields 14 and 15 of proc(5)


def vm_status(pid):
    """{"VmRSS": kiB, "VmHWM": kiB} from /proc/PID/status."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    return out


# ---------------------------------------------------------------------------------------------
# Set-up helpers

def find_tool(name):
    path = shutil.which(name)
    if path:
        return path
    for d in ("/usr/sbin", "/sbin", "/usr/local/sbin"):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


def wrk_result(sup, proc, out, seconds):
    """Waits for a wrk run (our Lua scripts print one BENCH_RESULT line) -> its result, with
    seconds, rps and socket_errors added."""
    try:
        proc.wait(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        sup.stop(proc, signal.SIGKILL)
        raise BenchError("wrk did not finish (output in %s)" % out)
    sup.stop(proc)
    with open(out, encoding="utf-8", errors="replace") as f:
        text = f.read()
    m = re.search(r"^BENCH_RESULT (\{.*\})$", text, re.M)
    if proc.returncode != 0 or not m:
        raise BenchError("wrk failed (exit %s); output %s:\n%s" % (proc.returncode, out, text[-3000:]))
    r = json.loads(m.group(1))
    r["seconds"] = r["duration_us"] / 1e6
    r["rps"] = r["requests"] / r["seconds"] if r["seconds"] else 0.0
    r["socket_errors"] = sum(v for k, v in r["errors"].items() if k != "status")
    return r


def import_parser():
    global text_string_to_metric_families
    if text_string_to_metric_families is None:
        try:
            from prometheus_client.parser import text_string_to_metric_families
        except ImportError:
            pass
    return text_string_to_metric_families is not None


def debian_python():
    return os.path.realpath(sys.executable) == os.path.realpath(DEBIAN_PYTHON)


def parser_missing():
    return BenchError("reading /metrics needs %s (apt-get install -y %s; scripts/install-deps.sh --with-tests "
                      "installs it)%s" % (PARSER_PACKAGE, PARSER_PACKAGE, "" if debian_python() else
                                          ", imported by Debian's %s: this is %s (bench/run.sh uses %s)"
                                          % (DEBIAN_PYTHON, sys.executable, DEBIAN_PYTHON)))


def ensure_packages(allow_install):
    missing = sorted({pkg for tool, pkg in PACKAGES.items() if not find_tool(tool)})
    if not import_parser():
        missing.append(PARSER_PACKAGE)
    if not missing:
        return
    if missing == [PARSER_PACKAGE] and not debian_python():
        raise parser_missing()   # installing it would not help this python
    if not allow_install:
        raise BenchError("missing Debian packages: %s (drop --no-install, or apt-get install -y %s)"
                         % (", ".join(missing), " ".join(missing)))
    prefix = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            raise BenchError("missing packages %s and not root: apt-get install -y %s"
                             % (missing, " ".join(missing)))
        prefix = ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = prefix + ["apt-get", "install", "-y", "--no-install-recommends"] + missing
    log("installing %s" % " ".join(missing))
    if subprocess.run(install, env=env, timeout=900, stdin=subprocess.DEVNULL).returncode != 0:
        subprocess.run(prefix + ["apt-get", "update"], env=env, timeout=900,
                       stdin=subprocess.DEVNULL, check=True)
        subprocess.run(install, env=env, timeout=900, stdin=subprocess.DEVNULL, check=True)
    still = sorted({pkg for tool, pkg in PACKAGES.items() if not find_tool(tool)})
    if still:
        raise BenchError("still missing after apt-get install: %s" % ", ".join(still))
    if not import_parser():
        raise parser_missing()


def free_ports(n):
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def render(template, out_path, **values):
    with open(os.path.join(CONFIG_DIR, template), encoding="utf-8") as f:
        text = f.read()
    for key, value in values.items():
        text = text.replace("{{%s}}" % key, str(value))
    left = re.findall(r"\{\{[A-Z_]+\}\}", text)
    if left:
        raise BenchError("%s: unfilled placeholders %s" % (template, left))
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)
    return out_path


def _connection(port, timeout, tls):
    if tls is not None:     # an ssl.SSLContext
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=tls)
    return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)


def http_get(port, path, timeout=2.0, tls=None):
    conn = _connection(port, timeout, tls)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def http_put(port, path, token, body=b"x" * 128, timeout=5.0, tls=None):
    conn = _connection(port, timeout, tls)
    try:
        conn.request("PUT", path, body=body, headers={"X-Fencing-Token": str(token)})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def wait_ready(proc, port, path, what, log_path, timeout=PROC_TIMEOUT, tls=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            status, _ = http_get(port, path, timeout=1.0, tls=tls)
            if status == 200:
                return
            last = "HTTP %d" % status
        except OSError as e:
            last = repr(e)
        time.sleep(0.05)
    tail = ""
    try:
        with open(log_path, "rb") as f:
            tail = f.read()[-3000:].decode("utf-8", "replace")
    except OSError:
        pass
    raise BenchError("%s did not become ready on port %d (exit %s, last %s)\n%s"
                     % (what, port, proc.poll(), last, tail))


def supervised():
    """A Supervisor whose processes are stopped at exit, with SIGINT, SIGTERM and SIGHUP turned
    into Interrupted (so a run's finally blocks stop what it started)."""
    sup = Supervisor()
    atexit.register(sup.stop_all)

    def on_signal(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    return sup


def finish_standalone(kind, args, env, started, failure, results, workdir, markdown=None):
    """The end of a standalone benchmark (keys.py, verify.py): the environment's end, the JSON
    (args.json, or bench/results/DATE-KIND.json) and its Markdown beside it, the workdir removed
    unless kept or failed. -> the exit code."""
    env["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    env["elapsed_s"] = round(time.monotonic() - started, 1)
    out = args.json or os.path.join(RESULTS_DIR, "%s-%s.json"
                                    % (env["date"].replace(":", "").replace("-", ""), kind))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(dict({"environment": env, "args": vars(args), "failure": failure}, **results), f, indent=1)
    if markdown:
        with open(out[:-len(".json")] + ".md" if out.endswith(".json") else out + ".md", "w") as f:
            f.write(markdown + "\n")
    log("elapsed %.0f s; load average at end %s; wrote %s"
        % (env["elapsed_s"], env["load_average_end"], os.path.relpath(out)))
    if args.keep_workdir or failure:
        log("workdir kept: %s" % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failure else 0

def start_nginx_backend(sup, workdir, cpu=None):
    """The benchmarks' backend: nginx answering 200 to everything (configs/nginx-backend.conf)
    on a free port, its master and workers registered with sup. -> (process, port)"""
    port = free_ports(1)[0]
    cfg = render("nginx-backend.conf", os.path.join(workdir, "nginx-backend.conf"),
                 WORKDIR=workdir, BACKEND_PORT=port)
    out = os.path.join(workdir, "nginx-backend.out")
    proc = sup.spawn("backend", [find_tool("nginx"), "-p", workdir, "-e",
                                 os.path.join(workdir, "nginx-backend.error.log"), "-c", cfg],
                     out, cpu=cpu)
    wait_ready(proc, port, "/", "backend nginx", out)
    deadline = time.monotonic() + PROC_TIMEOUT
    while not children(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    sup.add_pids(proc, children(proc.pid))
    return proc, port


# ---------------------------------------------------------------------------------------------
# HTTP/2: the h2c backend, one call with nghttp, h2load's results

def grpc_frame(msg):
    """One gRPC length-prefixed message: flag 0 (not compressed), 4-byte big-endian length."""
    return b"\x00" + len(msg).to_bytes(4, "big") + msg


def start_h2_backend(sup, workdir, cpu=None):
    """The h2c backend of the HTTP/2 workloads (configs/nginx-backend-h2.conf) on free ports,
    registered with sup. -> (process, port, stub_status port)"""
    port, status_port = free_ports(2)
    reply = grpc_frame(GRPC_REPLY_MSG).decode("latin-1")
    if any(c in reply for c in '"\\$;{}'):
        raise BenchError("the gRPC reply's bytes cannot be written in an nginx string")
    cfg = render("nginx-backend-h2.conf", os.path.join(workdir, "nginx-backend-h2.conf"),
                 WORKDIR=workdir, BACKEND_PORT=port, STATUS_PORT=status_port, GRPC_REPLY=reply)
    out = os.path.join(workdir, "nginx-backend-h2.out")
    proc = sup.spawn("backend-h2", [find_tool("nginx"), "-p", workdir, "-e",
                                    os.path.join(workdir, "nginx-backend-h2.error.log"), "-c", cfg],
                     out, cpu=cpu)
    wait_ready(proc, status_port, "/", "h2c backend nginx (stub_status)", out)
    wait_ready_h2(proc, port, "h2c backend nginx", out)
    return proc, port, status_port


def backend_requests(status_port):
    """The requests nginx's stub_status has counted (this one included)."""
    status, body = http_get(status_port, "/")
    m = re.search(rb"^\s*(\d+)\s+(\d+)\s+(\d+)\s*$", body, re.M)
    if status != 200 or not m:
        raise BenchError("h2c backend stub_status answered %d %r" % (status, body[:200]))
    return int(m.group(3))


def nghttp_call(port, path, method="GET", headers=(), body_file=None, timeout=5.0):
    """One HTTP/2 request with prior knowledge (`nghttp -v`, the body discarded) -> {"status",
    "headers": [(name, value)], "trailers": [(name, value)] (fields after the first DATA frame),
    "data_bytes", "error"}."""
    argv = [find_tool("nghttp"), "-v", "-n", "-t", "%g" % timeout, "-H", ":method: %s" % method]
    for h in headers:
        argv += ["-H", h]
    if body_file:
        argv += ["-d", body_file]
    argv.append("http://127.0.0.1:%d%s" % (port, path))
    out = {"status": None, "headers": [], "trailers": [], "data_bytes": 0, "error": None}
    try:
        r = subprocess.run(argv, capture_output=True, timeout=timeout + 5, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        out["error"] = "nghttp timed out"
        return out
    text = (r.stdout + r.stderr).decode("utf-8", "replace")
    seen_data = False
    for line in text.splitlines():
        m = re.match(r"^\[\s*[\d.]+\] recv DATA frame <length=(\d+)", line)
        if m:
            seen_data = True
            out["data_bytes"] += int(m.group(1))
            continue
        m = re.match(r"^\[\s*[\d.]+\] recv \(stream_id=\d+\) ([^:\s][^:]*|:[a-z]+): (.*)$", line)
        if m:
            field = (m.group(1), m.group(2).strip())
            if field[0] == ":status":
                out["status"] = int(field[1])
            (out["trailers"] if seen_data else out["headers"]).append(field)
    if r.returncode != 0 or out["status"] is None:
        out["error"] = "nghttp exit %d: %s" % (r.returncode, text[-800:])
    return out


def wait_ready_h2(proc, port, what, log_path, timeout=PROC_TIMEOUT):
    """Until an h2c GET /eq/1 gets a 200 (the listener and its backend both up)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline and proc.poll() is None:
        r = nghttp_call(port, EQ_PATH, timeout=1.0)
        if r["status"] == 200:
            return
        last = r["error"] or "HTTP %s" % r["status"]
        time.sleep(0.1)
    tail = ""
    try:
        with open(log_path, "rb") as f:
            tail = f.read()[-3000:].decode("utf-8", "replace")
    except OSError:
        pass
    raise BenchError("%s did not answer h2c on port %d (exit %s, last %s)\n%s"
                     % (what, port, proc.poll(), last, tail))


def h2load_result(sup, proc, out, log_file, seconds):
    """Waits for an h2load run -> a result shaped as wrk_result's: requests (done), rps,
    latency_us percentiles computed from --log-file (each request's time from its start to the
    end of its response), status counts (h2load sees every response's status)."""
    try:
        proc.wait(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        sup.stop(proc, signal.SIGKILL)
        raise BenchError("h2load did not finish (output in %s)" % out)
    sup.stop(proc)
    with open(out, encoding="utf-8", errors="replace") as f:
        text = f.read()
    fin = re.search(r"^finished in ([\d.]+)(m?s), ([\d.]+) req/s", text, re.M)
    req = re.search(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                    r"(\d+) failed, (\d+) errored, (\d+) timeout", text, re.M)
    codes = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text, re.M)
    if proc.returncode != 0 or not (fin and req and codes):
        raise BenchError("h2load failed (exit %s); output %s:\n%s"
                         % (proc.returncode, out, text[-3000:]))
    latencies, first_bad = [], None
    with open(log_file, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) < 3:
                continue
            status, us = int(parts[1]), int(parts[2])
            if status // 100 == 2:
                latencies.append(us)
            elif first_bad is None:
                first_bad = "status %d" % status if status >= 0 else "failed stream"
    latencies.sort()

    def pct(q):
        if not latencies:
            return 0
        return latencies[min(len(latencies) - 1, max(0, int(-(-q * len(latencies) // 100)) - 1))]
    seconds_run = float(fin.group(1)) / (1000.0 if fin.group(2) == "ms" else 1.0)
    done, succeeded, failed, errored, timeouts = (int(req.group(i)) for i in (3, 4, 5, 6, 7))
    c2, c3, c4, c5 = (int(codes.group(i)) for i in (1, 2, 3, 4))
    return {"requests": done, "succeeded": succeeded, "seconds": seconds_run,
            "rps": float(fin.group(3)),
            "latency_us": {"p50": pct(50), "p90": pct(90), "p99": pct(99), "p99_9": pct(99.9),
                           "max": latencies[-1] if latencies else 0,
                           "mean": round(sum(latencies) / len(latencies), 1) if latencies else 0},
            "errors": {"failed": failed, "errored": errored, "timeout": timeouts, "status": c4 + c5},
            "socket_errors": failed, "status_checked": True, "non2xx": c3 + c4 + c5,
            "first_non2xx": first_bad if (c3 + c4 + c5) else None,
            "logged": len(latencies)}


def version_of(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "unavailable (%s)" % e
    text = (r.stdout + r.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


# ---------------------------------------------------------------------------------------------
# Prometheus text (fencing-proxy's /metrics), read with prometheus_client's parser

def scrape_metrics(admin_port, timeout=5.0):
    """fencing-proxy's /metrics -> {(sample name, sorted (label, value) pairs): value}."""
    if not import_parser():
        raise parser_missing()
    status, body = http_get(admin_port, "/metrics", timeout=timeout)
    if status != 200:
        raise BenchError("fencing-proxy /metrics answered %d" % status)
    try:
        families = list(text_string_to_metric_families(body.decode("utf-8", "replace")))
    except ValueError as e:
        raise BenchError("fencing-proxy /metrics is not Prometheus text: %s" % e)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def fencing_counters(admin_port):
    out = {"syncs": 0.0, "sync_seconds": 0.0, "raises": 0.0, "outcomes": {}}
    for (name, labels), value in scrape_metrics(admin_port).items():
        labels = dict(labels)
        if name == "fencing_proxy_state_sync_seconds_count":
            out["syncs"] += value
        elif name == "fencing_proxy_state_sync_seconds_sum":
            out["sync_seconds"] += value
        elif name == "fencing_proxy_token_raises_total":
            out["raises"] += value
        elif name == "fencing_proxy_requests_total":
            key = labels.get("outcome", "?")
            out["outcomes"][key] = out["outcomes"].get(key, 0.0) + value
    return out


# ---------------------------------------------------------------------------------------------
# TLS: one certificate for every target, a client context that verifies it, and what a target
# negotiates

class TlsFiles:
    """An ECDSA P-256 certificate for 127.0.0.1 and localhost, made with the openssl command
    line; self-signed, so the clients trust it as it is (no chain to check)."""

    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        self.cert = os.path.join(directory, "cert.pem")
        self.key = os.path.join(directory, "key.pem")
        self.cert_and_key = os.path.join(directory, "cert-and-key.pem")   # HAProxy's crt
        argv = [find_tool("openssl"), "req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:P-256", "-nodes", "-keyout", self.key, "-out", self.cert,
                "-days", "7", "-subj", "/CN=localhost",
                "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-addext", "basicConstraints=critical,CA:FALSE",
                "-addext", "keyUsage=critical,digitalSignature",
                "-addext", "extendedKeyUsage=serverAuth"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise BenchError("openssl could not make the certificate: %s" % r.stderr[-1000:])
        with open(self.cert_and_key, "w") as out:
            for path in (self.cert, self.key):
                with open(path) as f:
                    out.write(f.read())

    def client_context(self):
        """Python's default client (OpenSSL's defaults), verifying the certificate and the name."""
        ctx = ssl.create_default_context(cafile=self.cert)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx


def s_client(port, cafile, extra=()):
    """One handshake with `openssl s_client` (a default OpenSSL client) -> what was negotiated."""
    argv = [find_tool("openssl"), "s_client", "-connect", "127.0.0.1:%d" % port, "-servername",
            "localhost", "-alpn", "http/1.1", "-CAfile", cafile, "-verify_return_error"] + list(extra)
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": "openssl s_client timed out"}
    text = r.stdout + r.stderr

    def find(pattern):
        m = re.search(pattern, text, re.M)
        return m.group(1).strip() if m else None
    out = {"protocol": find(r"^(?:New|Reused), (TLSv[\d.]+), Cipher is"),
           "cipher": find(r"^(?:New|Reused), TLSv[\d.]+, Cipher is (\S+)"),
           "group": find(r"^Server Temp Key: ([^,\n]+)"),
           "alpn": find(r"^ALPN protocol: (\S+)") or ("none" if "No ALPN negotiated" in text else None),
           "signature": find(r"^Peer signature type: (\S+)"),
           "verify": find(r"^\s*Verify return code: (.*)$")}
    if r.returncode != 0 or not out["cipher"] or out["cipher"] == "(NONE)":
        out["error"] = "openssl s_client exit %d: %s" % (r.returncode, text[-800:])
    return out


def describe_tls(check):
    """One line of what a target negotiated (the same line for every target, or a problem)."""
    def one(c):
        if c.get("error"):
            return "error"
        return "%s %s %s" % (c.get("protocol"), c.get("cipher"), c.get("group"))
    t13, t12, py = check.get("tls1_3", {}), check.get("tls1_2", {}), check.get("python", {})
    return ("%s, ALPN %s, %s signature, verify %s; forced TLS 1.2: %s; Python's client: %s"
            % (one(t13), t13.get("alpn"), t13.get("signature"), t13.get("verify"), one(t12),
               "error" if py.get("error") else "%s %s, %s" % (
                   py.get("version"), py.get("cipher"),
                   "resumes its session" if py.get("resumed") else "does NOT resume its session")))


def python_resumes(port, ctx):
    """Two connections from one context: a full handshake, then one offering its session ->
    {"version", "cipher", "alpn", "resumed": the second resumed it}."""
    first = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=ctx)
    try:
        first.request("GET", EQ_PATH)
        first.getresponse().read()       # TLS 1.3: the tickets arrive with (before) the answer
        sock = first.sock
        facts = {"version": sock.version(), "cipher": sock.cipher()[0],
                 "alpn": sock.selected_alpn_protocol()}
        session = sock.session
    finally:
        first.close()
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        second = ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session)
        facts["resumed"] = second.session_reused
        second.close()
    finally:
        raw.close()
    return facts


# ---------------------------------------------------------------------------------------------
# The benchmark

class Target:
    def __init__(self, name, port, proc, pid, admin_port=None, tls=False):
        self.name, self.port, self.proc, self.pid, self.admin_port = name, port, proc, pid, admin_port
        self.tls = tls

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ratio(a, b):
    return a / b if a is not None and b else None


class Bench:
    def __init__(self, args, sup, workdir):
        self.args, self.sup, self.workdir = args, sup, workdir
        self.targets = {}
        self.tls_targets = {}     # the same targets with a TLS listener (TLS workloads only)
        self.tls_files = None     # TlsFiles
        self.tls_client = None    # ssl.SSLContext that verifies the certificate
        self.tls_checks = {}      # target -> what s_client and Python's client negotiated
        self.tls_problems = []
        self.h2_targets = {}      # the same targets with an h2c listener and backend (HTTP/2 workloads)
        self.h2_backend = None
        self.h2_backend_port = self.h2_status_port = self.h2_backend_pid = None
        self.h2_checks = {}       # target -> what one call of each HTTP/2 workload got (nghttp)
        self.h2_problems = []
        self.h2_bodies = {}       # workload -> the request body file h2load sends
        self.backend = None
        self.backend_port = None
        self.backend_pid = None
        self.runs = []
        self.fsync = []           # disk probes: {"round", "workload", "syncs_per_s"}
        self.syscalls = {}
        self.idle = []
        self.raise_runs = 0
        self.run_no = 0
        self.load_cpu, self.proxy_cpu = self._cpus()
        os.makedirs(os.path.join(workdir, "runs"))
        self.state_dir = os.path.join(workdir, "state")
        os.makedirs(self.state_dir)

    def _cpus(self):
        allowed = sorted(os.sched_getaffinity(0))
        if self.args.no_pin or len(allowed) < 2:
            if not self.args.no_pin:
                log("warning: %d CPU(s) available, running without pinning" % len(allowed))
            return None, None
        load = self.args.load_cpu if self.args.load_cpu is not None else allowed[0]
        proxy = self.args.proxy_cpu if self.args.proxy_cpu is not None else allowed[1]
        if load == proxy or load not in allowed or proxy not in allowed:
            raise BenchError("--load-cpu %s / --proxy-cpu %s: need two different CPUs of %s"
                             % (load, proxy, allowed))
        os.sched_setaffinity(0, {load})     # this script, wrk and strace share the load core
        return load, proxy

    # -- start-up --------------------------------------------------------------------------

    def needs_plain(self):
        """The HTTP/1.1 targets (and their backend) serve every workload but the HTTP/2 ones."""
        return any(w not in H2_WORKLOADS for w in self.args.workloads)

    def start(self):
        if any(w in H2_WORKLOADS for w in self.args.workloads):
            self.start_h2()
        if not self.needs_plain():
            return
        self.backend, self.backend_port = start_nginx_backend(self.sup, self.workdir, cpu=self.proxy_cpu)
        self.backend_pid = self._nginx_worker(self.backend, "backend nginx")
        for name in ALL_TARGETS:
            if name in self.args.targets:
                self.targets[name] = self.start_target(name)
        if any(w in TLS_WORKLOADS for w in self.args.workloads):
            self.tls_files = TlsFiles(os.path.join(self.workdir, "tls"))
            self.tls_client = self.tls_files.client_context()
            for name in ALL_TARGETS:
                if name in self.args.targets:
                    self.tls_targets[name] = self.start_target(name, tls=True)
        # The equal-token fence (and key k1 of the keyed one) starts at EQUAL_TOKEN: one raise
        # each, before anything is measured.
        for t in list(self.targets.values()) + list(self.tls_targets.values()):
            for path in (EQ_PATH, KEYED_PATH):
                status, body = http_put(t.port, path, EQUAL_TOKEN, tls=self.tls_for(t))
                if status // 100 != 2:
                    raise BenchError("%s: priming PUT %s X-Fencing-Token: %s -> HTTP %d %r"
                                     % (t.name, path, EQUAL_TOKEN, status, body[:300]))
        if self.tls_targets:
            self.check_tls()

    def start_h2(self):
        """The h2c backend, each target's h2c process, both request bodies, each fence primed
        to EQUAL_TOKEN over HTTP/2, and one call of each workload through each target checked."""
        self.h2_backend, self.h2_backend_port, self.h2_status_port = start_h2_backend(
            self.sup, self.workdir, cpu=self.proxy_cpu)
        self.h2_backend_pid = self._nginx_worker(self.h2_backend, "h2c backend nginx")
        for workload, body in (("h2_put_equal", b"e" * 128),
                               ("grpc_unary", grpc_frame(GRPC_REQUEST_MSG))):
            path = os.path.join(self.workdir, "%s.body" % workload)
            with open(path, "wb") as f:
                f.write(body)
            self.h2_bodies[workload] = path
        for name in H2_TARGETS:
            if name in self.args.targets:
                self.h2_targets[name] = self.start_h2_target(name)
        skipped = [n for n in self.args.targets if n not in H2_TARGETS]
        if skipped:
            log("  h2       no h2c listener for %s: the HTTP/2 workloads skip it" % ", ".join(skipped))
        for t in self.h2_targets.values():
            for workload in H2_WORKLOADS:
                r = self.h2_call(t, workload)
                if r["status"] != 200 or (workload == "grpc_unary"
                                          and ("grpc-status", "0") not in r["trailers"]):
                    raise BenchError("%s: priming %s with %s: %s over h2c -> %s"
                                     % (t.name, self.h2_path(workload), "x-fencing-token: "
                                        + EQUAL_TOKEN, workload, r))
        self.check_h2()

    @staticmethod
    def h2_path(workload):
        return GRPC_PATH if workload == "grpc_unary" else EQ_PATH

    @staticmethod
    def h2_headers(workload):
        """The request's fields beside :path; the method is PUT for h2_put_equal, POST (h2load's
        -d) for gRPC."""
        if workload == "grpc_unary":
            return ["content-type: application/grpc", "te: trailers",
                    "x-fencing-token: " + EQUAL_TOKEN]
        return ["content-type: application/octet-stream", "x-fencing-token: " + EQUAL_TOKEN]

    def h2_call(self, t, workload):
        return nghttp_call(t.port, self.h2_path(workload),
                           method="POST" if workload == "grpc_unary" else "PUT",
                           headers=self.h2_headers(workload), body_file=self.h2_bodies[workload])

    def check_h2(self):
        """One call of each HTTP/2 workload straight to the backend and through each target, with
        nghttp: 200, and for gRPC content-type application/grpc, the reply message's bytes and
        grpc-status 0 in the trailers. The targets must agree with the backend."""
        calls = [("backend", self.h2_backend_port)] + [(n, t.port) for n, t in self.h2_targets.items()]
        want = len(grpc_frame(GRPC_REPLY_MSG))
        for name, port in calls:
            check = {}
            for workload in H2_WORKLOADS:
                t = Target(name, port, None, None)
                r = self.h2_call(t, workload)
                fields = dict(r["headers"])
                c = {"status": r["status"], "content_type": fields.get("content-type"),
                     "data_bytes": r["data_bytes"], "trailers": r["trailers"]}
                bad = []
                if r["error"] or r["status"] != 200:
                    bad.append(r["error"] or "status %s" % r["status"])
                if workload == "grpc_unary":
                    if ("grpc-status", "0") not in r["trailers"]:
                        bad.append("no grpc-status: 0 trailer (trailers %s)" % r["trailers"])
                    if c["content_type"] != "application/grpc":
                        bad.append("content-type %s" % c["content_type"])
                    if r["data_bytes"] != want:
                        bad.append("%d bytes of DATA, not the %d-byte reply" % (r["data_bytes"], want))
                if bad:
                    c["error"] = "; ".join(bad)
                    self.h2_problems.append("%s %s: %s" % (name, workload, c["error"]))
                check[workload] = c
            self.h2_checks[name] = check
            g = check.get("grpc_unary", {})
            log("  h2       %-13s PUT %s -> %s; gRPC -> %s, %s, %d data bytes, trailers %s%s"
                % (name, EQ_PATH, check["h2_put_equal"]["status"], g.get("status"),
                   g.get("content_type"), g.get("data_bytes", 0),
                   ", ".join("%s: %s" % kv for kv in g.get("trailers", [])) or "none",
                   "  PROBLEM: " + "; ".join(c["error"] for c in check.values() if c.get("error"))
                   if any(c.get("error") for c in check.values()) else ""))

    def start_h2_target(self, name):
        """A target's h2c process: an h2c listener (prior knowledge) and the h2c backend."""
        w, backend_port = self.workdir, self.h2_backend_port
        port, admin_port = free_ports(2)
        label = name + "-h2"
        out = os.path.join(w, "%s.out" % label)
        if name == "nginx":
            cfg = render("nginx-proxy-h2.conf", os.path.join(w, "%s.conf" % label), WORKDIR=w,
                         PORT=port, BACKEND_PORT=backend_port)
            proc = self.sup.spawn(label, [find_tool("nginx"), "-p", w, "-e", os.path.join(
                w, "%s.error.log" % label), "-c", cfg], out, cpu=self.proxy_cpu)
            wait_ready_h2(proc, port, "nginx h2c proxy", out)
            return Target(name, port, proc, self._nginx_worker(proc, "nginx h2c proxy"))
        if name == "haproxy":
            cfg = render("haproxy-h2.cfg", os.path.join(w, "%s.cfg" % label), PORT=port,
                         BACKEND_PORT=backend_port)
            proc = self.sup.spawn(label, [find_tool("haproxy"), "-db", "-f", cfg], out,
                                  cpu=self.proxy_cpu)
            wait_ready_h2(proc, port, "haproxy h2c", out)
            return Target(name, port, proc, proc.pid)
        cfg_dir = os.path.join(w, "%s-config" % label)     # its own directory, as start_target's
        os.makedirs(cfg_dir, exist_ok=True)
        state_dir = os.path.join(self.state_dir, label)
        os.makedirs(state_dir, exist_ok=True)
        cfg = render("fencing-proxy-h2.yaml", os.path.join(cfg_dir, "fencing-proxy.yaml"),
                     PORT=port, ADMIN_PORT=admin_port, BACKEND_PORT=backend_port,
                     STATE_DIR=state_dir)
        binary = self.args.base_binary if name == "fencing-proxy-base" else self.args.binary
        proc = self.sup.spawn(label, [binary, "--config", cfg], out, cpu=self.proxy_cpu)
        wait_ready(proc, admin_port, "/readyz", "fencing-proxy h2c (admin /readyz)", out)
        wait_ready_h2(proc, port, "fencing-proxy h2c", out)
        return Target(name, port, proc, proc.pid, admin_port=admin_port)

    def tls_for(self, t):
        return self.tls_client if t.tls else None

    def check_tls(self):
        """What each TLS target negotiates with a default OpenSSL client (TLS 1.3, and TLS 1.2
        forced), and whether Python's client resumes a session: all must agree."""
        for name, t in self.tls_targets.items():
            check = {"tls1_3": s_client(t.port, self.tls_files.cert),
                     "tls1_2": s_client(t.port, self.tls_files.cert, ["-tls1_2"])}
            try:
                check["python"] = python_resumes(t.port, self.tls_client)
            except (OSError, ssl.SSLError, http.client.HTTPException) as e:
                check["python"] = {"error": "%s: %s" % (type(e).__name__, e)}
            self.tls_checks[name] = check
            log("  tls      %-13s %s" % (name, describe_tls(check)))
            for k, v in check.items():
                if v.get("error"):
                    self.tls_problems.append("%s: %s" % (k, v["error"]))
            if check["python"].get("resumed") is False:
                self.tls_problems.append("%s does not resume a TLS session" % name)
        keys = {name: describe_tls(c) for name, c in self.tls_checks.items()}
        if len(set(keys.values())) > 1:
            self.tls_problems.append("the targets negotiate different TLS parameters: %s" % keys)

    def start_target(self, name, tls=False):
        """Starts one target on fresh ports (its files are overwritten on a restart); with tls,
        its second process, whose listener speaks TLS (configs/*-tls.*)."""
        w, backend_port = self.workdir, self.backend_port
        port, admin_port = free_ports(2)
        label = name + ("-tls" if tls else "")      # its files in the work directory
        out = os.path.join(w, "%s.out" % label)
        client = self.tls_client if tls else None
        files = self.tls_files
        if name in ("nginx", "nginx-log"):
            if tls:
                cfg = render("nginx-proxy-tls.conf", os.path.join(w, "%s.conf" % label), WORKDIR=w,
                             NAME=label, PORT=port, BACKEND_PORT=backend_port,
                             CERT_FILE=files.cert, KEY_FILE=files.key)
            else:
                cfg = render("nginx-proxy.conf", os.path.join(w, "%s.conf" % label), WORKDIR=w,
                             PORT=port, BACKEND_PORT=backend_port)
            if name == "nginx-log":
                with open(cfg) as f:
                    text = f.read()
                with open(cfg, "w") as f:
                    f.write(text.replace("access_log off;", "access_log %s;"
                                         % os.path.join(w, "%s-access.log" % label)))
            proc = self.sup.spawn(label, [find_tool("nginx"), "-p", w, "-e", os.path.join(
                w, "%s.error.log" % label), "-c", cfg], out, cpu=self.proxy_cpu)
            wait_ready(proc, port, EQ_PATH, "nginx proxy", out, tls=client)
            return Target(name, port, proc, self._nginx_worker(proc, "nginx proxy"), tls=tls)
        if name == "haproxy":
            if tls:
                cfg = render("haproxy-tls.cfg", os.path.join(w, "%s.cfg" % label), PORT=port,
                             BACKEND_PORT=backend_port, CERT_AND_KEY_FILE=files.cert_and_key)
            else:
                cfg = render("haproxy.cfg", os.path.join(w, "%s.cfg" % label), PORT=port,
                             BACKEND_PORT=backend_port)
            proc = self.sup.spawn(label, [find_tool("haproxy"), "-db", "-f", cfg], out,
                                  cpu=self.proxy_cpu)
            wait_ready(proc, port, EQ_PATH, "haproxy", out, tls=client)
            return Target(name, port, proc, proc.pid, tls=tls)
        routes = "\n".join("  - name: f%d\n    prefix: /f%d" % (i, i)
                           for i in range(self.args.fences))
        # Its own directory: fencing-proxy watches the route file's directory for reloads, and
        # the logs and probes written to the work directory would wake that watcher.
        cfg_dir = os.path.join(w, "%s-config" % label)
        os.makedirs(cfg_dir, exist_ok=True)
        state_dir = os.path.join(self.state_dir, label)
        os.makedirs(state_dir, exist_ok=True)
        cfg = render("fencing-proxy.yaml", os.path.join(cfg_dir, "fencing-proxy.yaml"),
                     PORT=port, ADMIN_PORT=admin_port, BACKEND_PORT=backend_port,
                     STATE_DIR=state_dir, FENCE_ROUTES=routes)
        if tls:
            # The same file with configs/fencing-proxy-tls.yaml's `tls` block after `listen`.
            block = render("fencing-proxy-tls.yaml", os.path.join(w, "%s-block.yaml" % label),
                           CERT_FILE=files.cert, KEY_FILE=files.key)
            with open(block) as f:
                tls_yaml = "".join(line for line in f if not line.startswith("#"))
            with open(cfg) as f:
                text = f.read()
            text, n = re.subn(r"(?m)^(listen: .*\n)", lambda m: m.group(1) + tls_yaml, text, count=1)
            if n != 1:
                raise BenchError("configs/fencing-proxy.yaml: no `listen:` line to put `tls` after")
            with open(cfg, "w") as f:
                f.write(text)
        if name.startswith("fencing-proxy-log"):
            with open(cfg) as f:
                text = f.read()
            with open(cfg, "w") as f:
                f.write(text.replace("access_log: false", "access_log: true"))
        if name == "fencing-proxy-log-pipe":
            out = os.path.join(w, "%s.fifo" % label)
            if not os.path.exists(out):
                os.mkfifo(out)
            self.sup.spawn(label + "-drain", ["sh", "-c", 'exec cat "$0" >/dev/null', out],
                           os.path.join(w, "%s-drain.out" % label), cpu=self.load_cpu)
        binary = self.args.base_binary if name == "fencing-proxy-base" else self.args.binary
        proc = self.sup.spawn(label, [binary, "--config", cfg], out, cpu=self.proxy_cpu)
        wait_ready(proc, admin_port, "/readyz", "fencing-proxy (admin /readyz)", out)
        wait_ready(proc, port, EQ_PATH, "fencing-proxy", out, tls=client)
        return Target(name, port, proc, proc.pid, admin_port=admin_port, tls=tls)

    def restart_target(self, name, tls=False):
        group = self.tls_targets if tls else self.targets
        old = group[name]
        code = self.sup.stop(old.proc)
        if code not in (0, -signal.SIGTERM):
            log("warning: %s%s exited with %s when stopped" % (name, " (TLS)" if tls else "", code))
        group[name] = self.start_target(name, tls=tls)
        return group[name]

    def _nginx_worker(self, master, what):
        deadline = time.monotonic() + PROC_TIMEOUT
        while time.monotonic() < deadline:
            kids = children(master.pid)
            if kids:
                self.sup.add_pids(master, kids)
                return kids[0]
            time.sleep(0.05)
        raise BenchError("%s: no worker process under master %d" % (what, master.pid))

    def check_alive(self):
        for name, proc in [("backend", self.backend), ("h2c backend", self.h2_backend)] + [
                (t.name + (" (TLS)" if t.tls else ""), t.proc)
                for t in list(self.targets.values()) + list(self.tls_targets.values())] + [
                (t.name + " (h2c)", t.proc) for t in self.h2_targets.values()]:
            if proc is None:
                continue
            if proc.poll() is not None:
                raise BenchError("%s exited (status %s) during the benchmark; logs in %s"
                                 % (name, proc.returncode, self.workdir))

    def order(self, round_no, group=None):
        group = self.targets if group is None else group
        names = [n for n in ALL_TARGETS if n in group]
        k = round_no % len(names)
        return names[k:] + names[:k]

    # -- wrk -------------------------------------------------------------------------------

    def wrk_start(self, target, script, threads, conns, seconds, script_args=(), env_extra=None,
                  tag=""):
        self.run_no += 1
        out = os.path.join(self.workdir, "runs", "%04d-%s-%s.txt" % (self.run_no, target.name, tag))
        argv = [find_tool("wrk"), "-t", str(threads), "-c", str(conns), "-d", "%gs" % seconds,
                "--latency", "--timeout", "5s", "-s", os.path.join(LUA_DIR, script), target.url]
        if script_args:
            argv += ["--"] + [str(a) for a in script_args]
        env = dict(os.environ)
        if self.args.check_status:
            env["BENCH_CHECK_STATUS"] = "1"
        env.update(env_extra or {})
        # No taskset here: this script is already pinned to the load core, and wrk inherits it.
        proc = self.sup.spawn("wrk", argv, out, env=env)
        return proc, out, seconds

    def handshakes_start(self, target, seconds, resume, tag=""):
        """bench/tls_handshakes.py against a TLS target: a handle for wrk_finish (it prints a
        BENCH_RESULT line as our wrk scripts do)."""
        self.run_no += 1
        out = os.path.join(self.workdir, "runs", "%04d-%s-%s.txt" % (self.run_no, target.name, tag))
        argv = [sys.executable, os.path.join(HERE, "tls_handshakes.py"), "--port", str(target.port),
                "--cafile", self.tls_files.cert, "--path", EQ_PATH, "--seconds", "%g" % seconds,
                "--clients", str(self.args.tls_clients)] + (["--resume"] if resume else [])
        proc = self.sup.spawn("tls_handshakes", argv, out)    # on the load core, as wrk
        return proc, out, seconds

    def h2load_start(self, target, workload, seconds, tag=""):
        """h2load against an h2c target: --h2-clients connections (one thread, on the load core
        as wrk), each with --h2-streams concurrent streams, for `seconds`; every request's status
        and latency in a log file. -> a handle for h2load_finish."""
        self.run_no += 1
        base = os.path.join(self.workdir, "runs", "%04d-%s-%s" % (self.run_no, target.name, tag))
        out, log_file = base + ".txt", base + ".log"
        argv = [find_tool("h2load"), "-t", "1", "-c", str(self.args.h2_clients),
                "-m", str(self.args.h2_streams), "-D", "%dms" % round(seconds * 1000),
                "--log-file", log_file, "-d", self.h2_bodies[workload]]
        if workload != "grpc_unary":
            argv += ["-H", ":method: PUT"]          # -d alone sends POST
        for h in self.h2_headers(workload):
            argv += ["-H", h]
        argv.append("http://127.0.0.1:%d%s" % (target.port, self.h2_path(workload)))
        proc = self.sup.spawn("h2load", argv, out)
        return proc, out, log_file, seconds

    def h2load_finish(self, handle):
        proc, out, log_file, seconds = handle
        r = h2load_result(self.sup, proc, out, log_file, seconds)
        r["output"] = os.path.relpath(out, self.workdir)
        if not self.args.keep_workdir:
            os.unlink(log_file)          # a line per request: tens of MB over a run
        return r

    def wrk_finish(self, handle, stop_marker=False):
        proc, out, seconds = handle
        if stop_marker:     # a fixed request count: SIGINT once the Lua side says it is done
            deadline = time.monotonic() + seconds
            while proc.poll() is None and time.monotonic() < deadline:
                with open(out, "rb") as f:
                    if b"BENCH_STOPPED" in f.read():
                        proc.send_signal(signal.SIGINT)
                        break
                time.sleep(0.05)
        r = wrk_result(self.sup, proc, out, seconds)
        r["output"] = os.path.relpath(out, self.workdir)
        return r

    # -- one measured run ------------------------------------------------------------------

    def measure(self, round_no, workload, t, seconds):
        fp = t.admin_port is not None
        fsync = None
        if fp and workload.startswith("raise"):
            # The disk's rate right before the raises it is compared with: on a shared machine
            # it changes by 20× within minutes (other processes' writes share the journal).
            fsync = append_fdatasync_rate(self.state_dir, self.args.fsync_seconds)
            self.fsync.append({"round": round_no, "workload": workload,
                               "syncs_per_s": round(fsync, 1)})
        h2 = workload in H2_WORKLOADS
        backend_pid = self.h2_backend_pid if h2 else self.backend_pid
        c0 = fencing_counters(t.admin_port) if fp else None
        b0 = backend_requests(self.h2_status_port) if h2 else None
        ticks0, bticks0 = cpu_ticks(t.pid), cpu_ticks(backend_pid)
        side = None
        conns = self.args.connections
        if h2:
            main = self.h2load_start(t, workload, seconds, tag=workload)
        elif workload == "get":
            main = self.wrk_start(t, "get.lua", 1, conns, seconds, [EQ_PATH], tag=workload)
        elif workload == "put_equal":
            main = self.wrk_start(t, "put_equal.lua", 1, conns, seconds, [EQUAL_TOKEN, EQ_PATH],
                                  tag=workload)
        elif workload == "put_keyed":
            main = self.wrk_start(t, "put_equal.lua", 1, conns, seconds,
                                  [EQUAL_TOKEN, KEYED_PATH], tag=workload)
        elif workload == "put_paced":
            main = self.wrk_start(t, "put_equal.lua", 1, PACED_CONNS, seconds,
                                  [EQUAL_TOKEN, EQ_PATH, PACED_DELAY_MS], tag=workload)
        elif workload == "raise_serial":
            self.raise_runs += 1
            main = self.wrk_start(t, "raise.lua", 1, 1, seconds,
                                  [self.raise_runs * TOKEN_STRIDE, SERIAL_PATH], tag=workload)
        elif workload == "raise_fences":
            self.raise_runs += 1
            n = self.args.fences
            main = self.wrk_start(t, "raise.lua", n, n, seconds,
                                  [self.raise_runs * TOKEN_STRIDE], tag=workload)
            side = self.wrk_start(t, "put_equal.lua", 1, PACED_CONNS, seconds,
                                  [EQUAL_TOKEN, EQ_PATH, PACED_DELAY_MS], tag=workload + "-side")
        elif workload == "raise_keys":
            self.raise_runs += 1
            n = self.args.key_conns
            main = self.wrk_start(t, "raise_keys.lua", n, n, seconds,
                                  [self.raise_runs * TOKEN_STRIDE, self.args.keys,
                                   RAISE_KEYS_PREFIX, n], tag=workload)
        elif workload == "tls_put_equal":
            main = self.wrk_start(t, "put_equal.lua", 1, conns, seconds, [EQUAL_TOKEN, EQ_PATH],
                                  tag=workload)
        elif workload in ("tls_handshake", "tls_resume"):
            main = self.handshakes_start(t, seconds, workload == "tls_resume", tag=workload)
        else:
            raise BenchError("unknown workload %s" % workload)
        r = self.h2load_finish(main) if h2 else self.wrk_finish(main)
        s = self.wrk_finish(side) if side else None
        ticks1, bticks1 = cpu_ticks(t.pid), cpu_ticks(backend_pid)
        vm = vm_status(t.pid)
        total = r["requests"] + (s["requests"] if s else 0)
        run = {
            "round": round_no, "workload": workload, "target": t.name,
            "requests": r["requests"], "seconds": round(r["seconds"], 3), "rps": round(r["rps"], 1),
            "latency_us": r["latency_us"], "errors": r["errors"],
            "socket_errors": r["socket_errors"], "status_errors": r["errors"]["status"],
            "status_checked": r["status_checked"], "non2xx": r["non2xx"],
            "first_non2xx": r["first_non2xx"] or None,
            "cpu_us_per_req": round((ticks1 - ticks0) * 1e6 / CLK_TCK / total, 2) if total else None,
            "backend_cpu_us_per_req": (round((bticks1 - bticks0) * 1e6 / CLK_TCK / total, 2)
                                       if total else None),
            "vmhwm_kib": vm.get("VmHWM"), "vmrss_kib": vm.get("VmRSS"), "wrk_output": r["output"],
            "cpu_busy": (round((ticks1 - ticks0) / CLK_TCK / r["seconds"], 3)
                         if r["seconds"] else None),
        }
        if "tls" in r:      # bench/tls_handshakes.py: what the connections negotiated
            run["tls"] = r["tls"]
        if h2:
            # Every 2xx the client got must have been the backend's: the requests stub_status
            # counted during the run (less its own second look) are at least the successes.
            run["succeeded"] = r["succeeded"]
            run["latency_us_mean"] = r["latency_us"]["mean"]
            run["backend_requests"] = backend_requests(self.h2_status_port) - b0 - 1
        if s:
            run["side"] = {k: s[k] for k in ("requests", "latency_us", "errors", "non2xx",
                                             "first_non2xx", "socket_errors")}
            run["side"]["rps"] = round(s["rps"], 1)
        if fp:
            c1 = fencing_counters(t.admin_port)
            syncs, raises = c1["syncs"] - c0["syncs"], c1["raises"] - c0["raises"]
            run["syncs"], run["raises"] = int(syncs), int(raises)
            run["raises_per_s"] = round(raises / r["seconds"], 1) if r["seconds"] else None
            run["syncs_per_raise"] = round(syncs / raises, 4) if raises else None
            if fsync:
                run["fsync_per_s"] = round(fsync, 1)
                run["ratio_to_fsync"] = round(r["rps"] / fsync, 3)
            run["mean_sync_ms"] = (round((c1["sync_seconds"] - c0["sync_seconds"]) * 1000 / syncs, 3)
                                   if syncs else None)
            # The share of the run the state thread spent in write+fdatasync: for serial raises,
            # the raise rate as a fraction of what this disk allowed during this very run.
            run["sync_busy"] = (round((c1["sync_seconds"] - c0["sync_seconds"]) / r["seconds"], 3)
                                if r["seconds"] else None)
            run["outcomes"] = {k: int(v - c0["outcomes"].get(k, 0.0))
                               for k, v in c1["outcomes"].items()
                               if v - c0["outcomes"].get(k, 0.0) > 0}
        run["problems"] = self.problems(run, s)
        if h2 and run["backend_requests"] < run["succeeded"]:
            run["problems"].append("the backend served %d requests, the client got %d successes"
                                   % (run["backend_requests"], run["succeeded"]))
        if h2 and fp and run["outcomes"].get("forwarded", 0) < run["succeeded"]:
            run["problems"].append("fencing-proxy forwarded %d, the client got %d successes"
                                   % (run["outcomes"].get("forwarded", 0), run["succeeded"]))
        self.runs.append(run)
        return run

    @staticmethod
    def problems(run, side):
        out = []
        tls = run.get("tls")
        if tls:
            out += ["TLS client: %s" % e for e in tls.get("setup_errors", [])]
            if run["workload"] == "tls_resume" and tls["resumed"] != run["requests"]:
                out.append("only %d of %d connections resumed their session"
                           % (tls["resumed"], run["requests"]))
            if run["workload"] == "tls_handshake" and tls["resumed"]:
                out.append("%d connections resumed a session (none was offered)" % tls["resumed"])
            if run["socket_errors"] and tls.get("first_error"):
                out.append("first TLS client error: %s" % tls["first_error"])
        for label, r in (("", run), ("side load: ", side)):
            if r is None:
                continue
            if r["requests"] == 0:
                out.append(label + "no request completed")
            if r["socket_errors"]:
                out.append(label + "socket errors %s" % {k: v for k, v in r["errors"].items()
                                                         if v and k != "status"})
            if r["errors"]["status"] or r["non2xx"]:
                out.append(label + "non-2xx: %d (>= 400 counted by wrk: %d); first: %s"
                           % (r["non2xx"], r["errors"]["status"],
                              r["first_non2xx"] or "(not recorded: rerun with --check-status)"))
        odd = {k: v for k, v in run.get("outcomes", {}).items() if k not in ("forwarded", "unfenced")}
        if odd:
            out.append("fencing-proxy outcomes other than forwarded/unfenced: %s" % odd)
        return out

    # -- the disk, syscalls, idle connections ----------------------------------------------

    def count_syscalls(self, t, n_requests):
        """strace -c -f on the target process over about n_requests equal-token PUTs."""
        out = os.path.join(self.workdir, "strace-%s.txt" % t.name)
        err = os.path.join(self.workdir, "strace-%s.err" % t.name)
        errf = open(err, "wb")
        try:
            strace = subprocess.Popen([find_tool("strace"), "-c", "-f", "-o", out, "-p", str(t.pid)],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=errf, start_new_session=True)
        finally:
            errf.close()
        self.sup.procs.append(("strace", strace, []))
        try:
            threads = len(os.listdir("/proc/%d/task" % t.pid))
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and strace.poll() is None:
                with open(err, encoding="utf-8", errors="replace") as f:
                    if f.read().count("attached") >= threads:
                        break
                time.sleep(0.05)
            if strace.poll() is not None:
                with open(err, encoding="utf-8", errors="replace") as f:
                    return {"error": "strace exited %s: %s" % (strace.returncode, f.read()[-500:])}
            time.sleep(0.2)
            h = self.wrk_start(t, "put_equal.lua", 1, self.args.connections, 120,
                               [EQUAL_TOKEN, EQ_PATH],
                               env_extra={"BENCH_STOP_AFTER": str(n_requests)}, tag="strace")
            r = self.wrk_finish(h, stop_marker=True)
            time.sleep(0.2)
        finally:
            self.sup.stop(strace, signal.SIGINT)
        calls, total = {}, None
        with open(out, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 5 and re.match(r"^\d+(\.\d+)?$", parts[0]) and parts[3].isdigit():
                    if parts[-1] == "total":
                        total = int(parts[3])
                    else:
                        calls[parts[-1]] = int(parts[3])
        if total is None or not r["requests"]:
            return {"error": "no strace summary (see %s)" % out}
        top = sorted(calls.items(), key=lambda kv: -kv[1])
        return {"requests": r["requests"], "syscalls": total,
                "per_request": round(total / r["requests"], 2),
                "by_syscall_per_request": {k: round(v / r["requests"], 3) for k, v in top},
                "socket_errors": r["socket_errors"], "non2xx": r["non2xx"] + r["errors"]["status"]}

    def idle_test(self, t, n):
        """n keep-alive connections, each used for one GET (one at a time), then held idle. To a
        TLS target: each a full handshake first (no session is offered)."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < n + 256:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 256), hard))
        time.sleep(0.3)
        before = vm_status(t.pid)["VmRSS"]
        socks, closed = [], 0
        request = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % EQ_PATH).encode()
        deadline = time.monotonic() + 120
        try:
            for _ in range(n):
                if time.monotonic() > deadline:
                    raise BenchError("idle test: opening %d connections took over 120 s" % n)
                s = socket.create_connection(("127.0.0.1", t.port), timeout=5)
                socks.append(s)
                if t.tls:
                    s = socks[-1] = self.tls_client.wrap_socket(s, server_hostname="127.0.0.1")
                s.sendall(request)
                buf = b""
                while b"\r\n\r\n" not in buf:
                    chunk = s.recv(65536)
                    if not chunk:
                        raise BenchError("idle test: %s closed a connection" % t.name)
                    buf += chunk
                head, _, rest = buf.partition(b"\r\n\r\n")
                status = int(head.split(None, 2)[1])
                if status // 100 != 2:
                    raise BenchError("idle test: %s answered %d to GET %s" % (t.name, status, EQ_PATH))
                m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                need = int(m.group(1)) if m else 0
                while len(rest) < need:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
            # Long enough for fencing-proxy's idle sweep (every second) to see every connection
            # idle for a whole period, take its read buffer back, and a period later return the
            # freed memory to the kernel; nginx and HAProxy free theirs at once.
            time.sleep(3.5)
            vm = vm_status(t.pid)
            for s in socks:                      # still open? (a closed one reads b"" at once)
                s.setblocking(False)
                try:
                    if s.recv(1) == b"":
                        closed += 1
                except (BlockingIOError, ssl.SSLWantReadError):
                    pass
                except (ssl.SSLError, OSError):
                    closed += 1
        finally:
            for s in socks:
                s.close()
        return {"target": t.name, "tls": t.tls, "connections": n, "rss_before_kib": before,
                "rss_after_kib": vm["VmRSS"], "closed_by_server": closed,
                "bytes_per_conn": round((vm["VmRSS"] - before) * 1024 / n, 1)}

    # -- the whole run ---------------------------------------------------------------------

    def run(self):
        a = self.args
        timed = [w for w in a.workloads if w not in AFTER_ROUNDS]
        if not a.smoke and a.warmup > 0:
            warm = []
            if any(w in PLAIN_WORKLOADS for w in timed):
                warm += [(t, script, sargs) for t in self.targets.values()
                         for script, sargs in (("get.lua", [EQ_PATH]),
                                               ("put_equal.lua", [EQUAL_TOKEN, EQ_PATH]))]
            if any(w in TLS_WORKLOADS for w in timed):
                warm += [(t, "put_equal.lua", [EQUAL_TOKEN, EQ_PATH]) for t in self.tls_targets.values()]
            for t, script, sargs in warm:
                self.wrk_finish(self.wrk_start(t, script, 1, a.connections, a.warmup, sargs,
                                               tag="warmup"))
            for w in (w for w in timed if w in H2_WORKLOADS):
                for t in self.h2_targets.values():
                    self.h2load_finish(self.h2load_start(t, w, a.warmup, tag="warmup"))
        for rnd in range(a.rounds):
            log("[round %d/%d] load average %.2f" % (rnd + 1, a.rounds, os.getloadavg()[0]))
            for w in timed:
                group = (self.tls_targets if w in TLS_WORKLOADS else
                         self.h2_targets if w in H2_WORKLOADS else self.targets)
                for name in self.order(rnd, group):
                    self.check_alive()
                    t = group[name]
                    r = self.measure(rnd, w, t, a.seconds)
                    extra = ""
                    if r.get("syncs_per_raise") is not None:
                        extra = "  syncs/raise %.3f (%.2f ms each)" % (r["syncs_per_raise"],
                                                                      r["mean_sync_ms"] or 0)
                    if r.get("fsync_per_s"):
                        extra += "  disk %.0f syncs/s: %.2fx" % (r["fsync_per_s"],
                                                                r["ratio_to_fsync"])
                    if "side" in r:
                        extra += "  side p99 %.2f ms" % (r["side"]["latency_us"]["p99"] / 1000)
                    if "tls" in r:
                        extra += "  resumed %d  proxy CPU busy %.0f%%" % (
                            r["tls"]["resumed"], 100 * (r["cpu_busy"] or 0))
                    if "backend_requests" in r:
                        extra += "  proxy CPU busy %.0f%%  backend served %d" % (
                            100 * (r["cpu_busy"] or 0), r["backend_requests"])
                    log("  %-12s %-13s %9.0f req/s  p50 %6.2f  p99 %6.2f  p99.9 %6.2f ms  "
                        "cpu %6.1f us/req%s%s"
                        % (w, name, r["rps"], r["latency_us"]["p50"] / 1000,
                           r["latency_us"]["p99"] / 1000, r["latency_us"]["p99_9"] / 1000,
                           r["cpu_us_per_req"] or 0, extra,
                           ("  PROBLEM: " + "; ".join(r["problems"])) if r["problems"] else ""))
        if not self.targets:        # HTTP/2 workloads only: no HTTP/1.1 targets to look at
            self.check_alive()
            return
        if a.strace_requests > 0:
            for name in self.order(0):
                self.check_alive()
                res = self.count_syscalls(self.targets[name], a.strace_requests)
                self.syscalls[name] = res
                log("  syscalls %-13s %s" % (name, res.get("per_request", res.get("error"))))
        # Memory a process freed stays in its heap and is handed out again: a second idle test
        # on the same process would reuse the first one's memory and measure almost nothing.
        # So each idle test gets a fresh process, warmed up by one second of GETs on 32
        # connections first (pools and lazily made structures exist, as in a sidecar that has
        # served traffic).
        # The TLS targets the same way (tls_idle), with TLS connections.
        kinds = [False] + ([True] if "tls_idle" in a.workloads else [])
        for tls in kinds:
            for i in range(a.idle_rounds):
                for name in self.order(i):
                    self.check_alive()
                    t = self.restart_target(name, tls=tls)
                    self.wrk_finish(self.wrk_start(t, "get.lua", 1, a.connections, 1.0, [EQ_PATH],
                                                   tag="idle-warmup"))
                    res = self.idle_test(t, a.idle_conns)
                    res["round"] = i
                    self.idle.append(res)
                    log("  idle%s %-13s %d conns: %+.0f bytes/conn (RSS %d -> %d KiB)%s"
                        % (" TLS" if tls else "    ", name, res["connections"],
                           res["bytes_per_conn"], res["rss_before_kib"], res["rss_after_kib"],
                           "  %d closed by the server" % res["closed_by_server"]
                           if res["closed_by_server"] else ""))
        self.check_alive()


# ---------------------------------------------------------------------------------------------
# Summary, goals, table

def summarize(bench):
    runs = bench.runs
    fsync_by = {(f["round"], f["workload"]): f["syncs_per_s"] for f in bench.fsync}
    by = {}
    for r in runs:
        by.setdefault((r["workload"], r["target"]), {})[r["round"]] = r
    summary = {}
    for (w, t), rounds in by.items():
        rs = list(rounds.values())
        ref = by.get((w, REFERENCE), {})
        lat = lambda r, k: r["latency_us"][k]      # noqa: E731

        def paired(f):
            return median([ratio(f(rounds[k]), f(ref[k])) for k in rounds if k in ref])
        s = {
            "rounds": len(rs),
            "rps": median([r["rps"] for r in rs]),
            "p50_us": median([lat(r, "p50") for r in rs]),
            "p99_us": median([lat(r, "p99") for r in rs]),
            "p99_9_us": median([lat(r, "p99_9") for r in rs]),
            "cpu_us_per_req": median([r["cpu_us_per_req"] for r in rs]),
            "backend_cpu_us_per_req": median([r["backend_cpu_us_per_req"] for r in rs]),
            "peak_rss_kib": max(r["vmhwm_kib"] or 0 for r in rs),
            "requests": sum(r["requests"] for r in rs),
            "socket_errors": sum(r["socket_errors"] for r in rs),
            "non2xx": sum(max(r["non2xx"], r["status_errors"]) for r in rs),
            "problem_runs": sum(1 for r in rs if r["problems"]),
            "ratio_rps": paired(lambda r: r["rps"]),
            "ratio_cpu": paired(lambda r: r["cpu_us_per_req"]),
            "ratio_p50": paired(lambda r: lat(r, "p50")),
            "ratio_p99": paired(lambda r: lat(r, "p99")),
            "ratio_p99_9": paired(lambda r: lat(r, "p99_9")),
        }
        if w.startswith("raise"):
            s["ratio_to_fsync"] = median([ratio(r["rps"], fsync_by.get((k, w)))
                                          for k, r in rounds.items()])
            if any("syncs" in r for r in rs):
                syncs = sum(r.get("syncs", 0) for r in rs)
                raises = sum(r.get("raises", 0) for r in rs)
                s["syncs"], s["raises"] = syncs, raises
                s["syncs_per_raise"] = round(syncs / raises, 4) if raises else None
                s["raises_per_s"] = median([r.get("raises_per_s") for r in rs])
                s["mean_sync_ms"] = median([r.get("mean_sync_ms") for r in rs])
                s["sync_busy"] = median([r.get("sync_busy") for r in rs])
        if w == "put_keyed":
            # The keyed route against the unkeyed one, same target, same round (adjacent runs):
            # what the key's hash lookup costs. For nginx and HAProxy both are the same request
            # to a different path: their ratio is the noise of the pair.
            unkeyed = by.get(("put_equal", t), {})
            s["vs_unkeyed_rps"] = median([ratio(r["rps"], unkeyed[k]["rps"])
                                          for k, r in rounds.items() if k in unkeyed])
            s["vs_unkeyed_cpu"] = median([ratio(r["cpu_us_per_req"], unkeyed[k]["cpu_us_per_req"])
                                          for k, r in rounds.items() if k in unkeyed])
            s["vs_unkeyed_p99"] = median([ratio(lat(r, "p99"), lat(unkeyed[k], "p99"))
                                          for k, r in rounds.items() if k in unkeyed])
        if w == "tls_put_equal":
            # The same request over TLS ÷ in the clear, same target, same round (with
            # --workloads all): what TLS costs each target per request.
            plain = by.get(("put_equal", t), {})
            s["vs_plain_rps"] = median([ratio(r["rps"], plain[k]["rps"])
                                        for k, r in rounds.items() if k in plain])
            s["vs_plain_cpu"] = median([ratio(r["cpu_us_per_req"], plain[k]["cpu_us_per_req"])
                                        for k, r in rounds.items() if k in plain])
        if w in ("tls_handshake", "tls_resume"):
            s["resumed"] = sum(r["tls"]["resumed"] for r in rs)
            s["cpu_busy"] = median([r.get("cpu_busy") for r in rs])
            for key in ("versions", "ciphers", "alpn"):
                seen = {}
                for r in rs:
                    for name, n in r["tls"][key].items():
                        seen[name] = seen.get(name, 0) + n
                s[key] = seen
        if w == "raise_fences":
            alone = by.get(("put_paced", t), {})
            s["side_p99_us"] = median([r["side"]["latency_us"]["p99"] for r in rs])
            s["side_p99_9_us"] = median([r["side"]["latency_us"]["p99_9"] for r in rs])
            s["side_p99_vs_alone"] = median([ratio(r["side"]["latency_us"]["p99"],
                                                   alone[k]["latency_us"]["p99"])
                                             for k, r in rounds.items() if k in alone])
        summary.setdefault(w, {})[t] = s
    idle, idle_tls = {}, {}
    for t in {i["target"] for i in bench.idle}:
        idle[t] = median([i["bytes_per_conn"] for i in bench.idle
                          if i["target"] == t and not i.get("tls")])
        idle_tls[t] = median([i["bytes_per_conn"] for i in bench.idle
                              if i["target"] == t and i.get("tls")])
    probes = [f["syncs_per_s"] for f in bench.fsync]
    return {"workloads": summary, "fsync_per_s": median(probes),
            "fsync_range": [min(probes), max(probes)] if probes else None,
            "idle_bytes_per_conn": {t: v for t, v in idle.items() if v is not None},
            "idle_tls_bytes_per_conn": {t: v for t, v in idle_tls.items() if v is not None},
            "tls_negotiated": {t: describe_tls(c) for t, c in bench.tls_checks.items()},
            "syscalls_per_request": {t: v.get("per_request") for t, v in bench.syscalls.items()}}


def goals(summary, targets):
    """[(goal, measured, met: True/False/None)] for fencing-proxy, as issue 7 states them.
    met is None when a number is missing (a workload or a target not run)."""
    fp, W = "fencing-proxy", summary["workloads"]
    out = []

    def get(w, key, t=fp):
        return W.get(w, {}).get(t, {}).get(key)

    def fmt(x, f="%.2f"):
        return "n/a" if x is None else f % x

    def at_most(x, bound):
        return None if x is None else x <= bound

    def at_least(x, bound):
        return None if x is None else x >= bound

    def both(*conds):
        return None if any(c is None for c in conds) else all(conds)

    for w, label in (("put_equal", "PUT equal-token throughput, 32 connections"),
                     ("get", "GET pass-through throughput")):
        rr, cr = get(w, "ratio_rps"), get(w, "ratio_cpu")
        out.append(("%s: ≥ 1.0× nginx; CPU µs/request ≤ nginx's" % label,
                    "%s× nginx req/s; CPU %s vs %s µs/req (%s×)"
                    % (fmt(rr), fmt(get(w, "cpu_us_per_req"), "%.1f"),
                       fmt(get(w, "cpu_us_per_req", REFERENCE), "%.1f"), fmt(cr)),
                    both(at_least(rr, 1.0), at_most(cr, 1.0))))
    parts, conds = [], []
    for w in ("put_equal", "get"):
        p99, p999 = get(w, "ratio_p99"), get(w, "ratio_p99_9")
        parts.append("%s: p99 %s×, p99.9 %s× nginx" % (w, fmt(p99), fmt(p999)))
        conds += [at_most(p99, 1.0), at_most(p999, 1.25)]
    out.append(("tail latency at 32 connections (GET and equal-token PUT): p99 ≤ nginx p99; "
                "p99.9 ≤ 1.25× nginx", "; ".join(parts), both(*conds)))
    sc = summary["syscalls_per_request"]
    out.append(("syscalls per proxied request ≤ 5 (equal-token PUT)",
                ", ".join("%s %s" % (t, fmt(sc.get(t))) for t in targets if t in sc) or "n/a",
                at_most(sc.get(fp), 5.0)))
    idle = summary["idle_bytes_per_conn"]
    out.append(("idle keep-alive connection ≤ 2 KiB each",
                ", ".join("%s %s B" % (t, fmt(idle.get(t), "%.0f")) for t in targets if t in idle)
                or "n/a", at_most(idle.get(fp), 2048)))
    f = summary["fsync_per_s"]
    r1, spr1 = get("raise_serial", "ratio_to_fsync"), get("raise_serial", "syncs_per_raise")
    out.append(("serial raises on one fence ≥ 0.8× the disk's single-thread append+fdatasync "
                "rate, exactly one sync per raise",
                "%s raises/s vs %s syncs/s (medians; ratio to the probe just before each run, "
                "median: %s×); %s syncs/raise"
                % (fmt(get("raise_serial", "rps"), "%.0f"), fmt(f, "%.0f"), fmt(r1),
                   fmt(spr1, "%.3f")),
                both(at_least(r1, 0.8), None if spr1 is None else abs(spr1 - 1.0) <= 0.005)))
    r32, spr32 = get("raise_fences", "ratio_to_fsync"), get("raise_fences", "syncs_per_raise")
    side, side_us = get("raise_fences", "side_p99_vs_alone"), get("raise_fences", "side_p99_us")
    out.append(("concurrent raises on 32 fences ≥ 5× the single-thread fdatasync rate, while "
                "equal-token requests on another fence keep their latency (paced side load: p99 "
                "≤ 1.25× its p99 alone)",
                "%s raises/s (ratio to the probe just before each run, median: %s×); %s "
                "syncs/raise; side load p99 %s ms = %s× "
                "alone" % (fmt(get("raise_fences", "rps"), "%.0f"), fmt(r32), fmt(spr32, "%.3f"),
                           fmt(None if side_us is None else side_us / 1000), fmt(side)),
                both(at_least(r32, 5.0), at_most(side, 1.25))))
    ran = [w for w in W if fp in W[w]]
    errs = sum(W[w][fp]["non2xx"] + W[w][fp]["socket_errors"] for w in ran)
    bad_runs = sum(W[w][fp]["problem_runs"] for w in ran)
    out.append(("errors: 0 non-2xx and 0 socket errors in every run",
                "%d non-2xx + socket errors; %d runs with problems" % (errs, bad_runs),
                (errs == 0 and bad_runs == 0) if ran else None))
    return out


def goals_keys(summary):
    """[(goal, measured, met)] for fencing-proxy, as issue 12 (fence keys) states them."""
    fp, W = "fencing-proxy", summary["workloads"]

    def get(w, key, t=fp):
        return W.get(w, {}).get(t, {}).get(key)

    def fmt(x, f="%.3f"):
        return "n/a" if x is None else f % x
    out = []
    rr, cr, pr = get("put_keyed", "vs_unkeyed_rps"), get("put_keyed", "vs_unkeyed_cpu"), \
        get("put_keyed", "vs_unkeyed_p99")
    noise = ", ".join("%s %s×" % (t, fmt(get("put_keyed", "vs_unkeyed_rps", t)))
                      for t in TARGETS if t != fp and get("put_keyed", "vs_unkeyed_rps", t))
    out.append(("equal-token PUT on a keyed route within 3% of the unkeyed route (req/s and CPU "
                "µs/req; 32 connections)",
                "keyed ÷ unkeyed (median of same-round pairs): req/s %s×, CPU µs/req %s×, p99 "
                "%s×%s" % (fmt(rr), fmt(cr), fmt(pr),
                           "; the same pair through %s (noise)" % noise if noise else ""),
                None if rr is None or cr is None else (rr >= 0.97 and cr <= 1.03)))
    rk = get("raise_keys", "ratio_to_fsync")
    out.append(("raises spread over 10,000 keys at 32 connections ≥ 5× the single-thread "
                "fdatasync rate",
                "%s raises/s (ratio to the probe just before each run, median: %s×); %s "
                "syncs/raise" % (fmt(get("raise_keys", "rps"), "%.0f"), fmt(rk, "%.2f"),
                                 fmt(get("raise_keys", "syncs_per_raise"))),
                None if rk is None else rk >= 5.0))
    return out


def goals_h2(summary):
    """[(goal, measured, met)] for fencing-proxy, as issue 26 (HTTP/2 and gRPC) states them:
    at least nginx's requests per second and no more CPU per call."""
    fp, W = "fencing-proxy", summary["workloads"]

    def get(w, key, t=fp):
        return W.get(w, {}).get(t, {}).get(key)

    def fmt(x, f="%.2f"):
        return "n/a" if x is None else f % x
    out = []
    for w in H2_WORKLOADS:
        rr, cr = get(w, "ratio_rps"), get(w, "ratio_cpu")
        out.append(("%s: ≥ 1.0× nginx req/s; CPU µs/request ≤ nginx's" % WORKLOADS[w],
                    "%s× nginx req/s; CPU %s vs %s µs/req (%s×); p99 %s× nginx"
                    % (fmt(rr), fmt(get(w, "cpu_us_per_req"), "%.1f"),
                       fmt(get(w, "cpu_us_per_req", REFERENCE), "%.1f"), fmt(cr),
                       fmt(get(w, "ratio_p99"))),
                    None if rr is None or cr is None else (rr >= 1.0 and cr <= 1.0)))
    return out


def table(summary, targets, workloads):
    W = summary["workloads"]

    def ms(us):
        return "—" if us is None else "%.2f" % (us / 1000)

    def num(x, f):
        return "—" if x is None else f % x
    lines = ["| workload | target | req/s | req/s × nginx | p50 ms | p99 ms | p99.9 ms | "
             "p99 × nginx | CPU µs/req | CPU × nginx | peak RSS MiB | errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for w in workloads:
        if w in AFTER_ROUNDS:
            continue
        for t in targets:
            s = W.get(w, {}).get(t)
            if not s:
                continue
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                WORKLOADS[w], t, num(s["rps"], "%.0f"), num(s["ratio_rps"], "%.2f"),
                ms(s["p50_us"]), ms(s["p99_us"]), ms(s["p99_9_us"]), num(s["ratio_p99"], "%.2f"),
                num(s["cpu_us_per_req"], "%.1f"), num(s["ratio_cpu"], "%.2f"),
                num(s["peak_rss_kib"] / 1024 if s["peak_rss_kib"] else None, "%.1f"),
                s["non2xx"] + s["socket_errors"]))
    extra = []
    if summary["fsync_per_s"]:
        extra.append("- disk, one thread append+fdatasync on the state file's directory, right "
                     "before each fencing-proxy raise run: median %.0f/s (%.0f–%.0f/s)"
                     % (summary["fsync_per_s"], summary["fsync_range"][0],
                        summary["fsync_range"][1]))
    for w, what in (("raise_serial", "serial raises"), ("raise_fences", "raises on 32 fences"),
                    ("raise_keys", "raises over many keys of one fence")):
        s = W.get(w, {}).get("fencing-proxy")
        if s and s.get("syncs_per_raise") is not None:
            extra.append("- fencing-proxy %s: %.0f raises/s = %.2f× the fdatasync rate (median "
                         "of per-run ratios); %.3f fdatasyncs per raise (%d syncs / %d raises); "
                         "one write+sync took %.2f ms on average; the state thread was in "
                         "write+sync %.0f%% of the run (median)"
                         % (what, s["raises_per_s"] or 0, s["ratio_to_fsync"] or 0,
                            s["syncs_per_raise"], s["syncs"], s["raises"], s["mean_sync_ms"] or 0,
                            100 * (s["sync_busy"] or 0)))
    s = W.get("put_keyed", {})
    if s:
        extra.append("- equal-token PUT, keyed route ÷ unkeyed route (same target, same round, "
                     "median): " + ", ".join(
                         "%s req/s %s×, CPU %s×" % (t, num(s[t].get("vs_unkeyed_rps"), "%.3f"),
                                                     num(s[t].get("vs_unkeyed_cpu"), "%.3f"))
                         for t in targets if t in s))
    s = W.get("raise_fences", {})
    if s:
        extra.append("- paced equal-token load (%d conns, %d ms pause) beside the 32-fence raises, "
                     "p99 ms (× the same load alone): %s" % (PACED_CONNS, PACED_DELAY_MS, ", ".join(
                         "%s %s (%s×)" % (t, ms(s[t]["side_p99_us"]), num(s[t]["side_p99_vs_alone"],
                                                                         "%.2f"))
                         for t in targets if t in s)))
    sc = summary["syscalls_per_request"]
    if sc:
        extra.append("- syscalls per proxied request (strace -c, equal-token PUT): " + ", ".join(
            "%s %s" % (t, num(sc.get(t), "%.2f")) for t in targets if t in sc))
    idle, idle_tls = summary["idle_bytes_per_conn"], summary.get("idle_tls_bytes_per_conn") or {}
    if idle:
        extra.append("- memory per idle keep-alive connection (ΔRSS / N): " + ", ".join(
            "%s %s B" % (t, num(idle.get(t), "%.0f")) for t in targets if t in idle))
    if idle_tls:
        extra.append("- memory per idle TLS keep-alive connection (ΔRSS / N, a full handshake "
                     "and one GET each): " + ", ".join(
                         "%s %s B (plain %s B)" % (t, num(idle_tls.get(t), "%.0f"),
                                                   num(idle.get(t), "%.0f"))
                         for t in targets if t in idle_tls))
    for w, what in (("tls_handshake", "full handshakes"), ("tls_resume", "resumed sessions")):
        s = W.get(w, {})
        if s:
            # The clients' side of a handshake costs more CPU than the server's: they, on the
            # load core, set the rate, so the proxy's CPU per connection is the figure to compare.
            extra.append("- TLS connection per GET, %s: the proxy's core busy (median) %s; "
                         "connections/s one proxy core would make at its CPU µs/conn: %s; "
                         "resumed %s" % (what, ", ".join(
                             "%s %s%%" % (t, num(None if s[t]["cpu_busy"] is None
                                                 else 100 * s[t]["cpu_busy"], "%.0f"))
                             for t in targets if t in s), ", ".join(
                             "%s %s" % (t, num(1e6 / s[t]["cpu_us_per_req"]
                                               if s[t]["cpu_us_per_req"] else None, "%.0f"))
                             for t in targets if t in s), ", ".join(
                             "%s %d of %d" % (t, s[t]["resumed"], s[t]["requests"])
                             for t in targets if t in s)))
    s = W.get("tls_put_equal", {})
    if any(s[t].get("vs_plain_rps") is not None for t in s):
        extra.append("- equal-token PUT over TLS ÷ in the clear (same target, same round, "
                     "median): " + ", ".join(
                         "%s req/s %s×, CPU %s×" % (t, num(s[t].get("vs_plain_rps"), "%.3f"),
                                                     num(s[t].get("vs_plain_cpu"), "%.3f"))
                         for t in targets if t in s))
    neg = summary.get("tls_negotiated") or {}
    if neg:
        same = len(set(neg.values())) == 1
        extra.append("- TLS negotiated (openssl s_client, once per target at start)%s" % (
            ", the same on every target: " + next(iter(neg.values())) if same else
            ", NOT the same on every target: " + "; ".join(
                "%s: %s" % (t, neg[t]) for t in targets if t in neg)))
    return "\n".join(lines), "\n".join(extra)


def goals_table(gs):
    lines = ["| goal | measured (fencing-proxy) | |", "|---|---|---|"]
    for goal, measured, met in gs:
        lines.append("| %s | %s | %s |" % (goal, measured,
                                           "n/a" if met is None else ("met" if met else "NOT met")))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--binary", "--proxy-binary", dest="binary",
                   default=os.path.join(REPO, "build", "proxy", "fencing-proxy"),
                   help="the fencing-proxy binary (default: build/proxy/fencing-proxy)")
    p.add_argument("--smoke", action="store_true",
                   help="one short round of the plain workloads and of %s (unless --workloads "
                   "is given); exit 1 on any non-2xx/socket error" % ", ".join(SMOKE_TLS + SMOKE_H2))
    p.add_argument("--rounds", type=int, help="rounds per workload (default 9; smoke 1)")
    p.add_argument("--seconds", type=float, help="seconds per run (default 8; smoke 1)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per target")
    p.add_argument("--targets", default=",".join(TARGETS), help="comma list of " + ", ".join(ALL_TARGETS))
    p.add_argument("--base-binary", help="the build before a change, run as target fencing-proxy-base")
    p.add_argument("--workloads",
                   help="comma list of groups (plain, tls, h2, all) and workloads (%s); default plain"
                   % ", ".join(WORKLOADS))
    p.add_argument("--tls-clients", type=int, default=TLS_CLIENTS,
                   help="client processes of tls_handshake and tls_resume (default %d)" % TLS_CLIENTS)
    p.add_argument("--h2-clients", type=int, default=H2_CLIENTS,
                   help="h2load connections of the HTTP/2 workloads (default %d)" % H2_CLIENTS)
    p.add_argument("--h2-streams", type=int, default=H2_STREAMS,
                   help="concurrent streams per h2load connection (default %d)" % H2_STREAMS)
    p.add_argument("--connections", type=int, default=32, help="connections for get/put_equal")
    p.add_argument("--fences", type=int, default=32, help="fences (and connections) for raise_fences")
    p.add_argument("--keys", type=int, default=10000, help="keys of the one fence raise_keys raises")
    p.add_argument("--key-conns", type=int, default=32, help="connections (and wrk threads) for raise_keys")
    p.add_argument("--idle-conns", type=int, help="idle keep-alive connections (default 1000; smoke 200)")
    p.add_argument("--idle-rounds", type=int, help="idle tests per target (default 3; smoke 1)")
    p.add_argument("--strace-requests", type=int,
                   help="requests counted under strace per target, 0 = skip (default 20000; smoke 2000)")
    p.add_argument("--fsync-seconds", type=float,
                   help="disk probe before each fencing-proxy raise run (default 2; smoke 0.5)")
    p.add_argument("--check-status", action="store_true",
                   help="count every non-2xx in wrk (a Lua response() per request; on in --smoke)")
    p.add_argument("--load-cpu", type=int, help="CPU for wrk (default: the first allowed)")
    p.add_argument("--proxy-cpu", type=int, help="CPU for the proxies and the backend (default: the second)")
    p.add_argument("--no-pin", action="store_true", help="no taskset pinning")
    p.add_argument("--no-install", action="store_true", help="never apt-get install")
    p.add_argument("--json", help="results file (default bench/results/<UTC time>[-smoke].json)")
    p.add_argument("--keep-workdir", action="store_true", help="keep configs, logs and wrk output")
    a = p.parse_args(argv)
    smoke = a.smoke
    a.rounds = a.rounds if a.rounds is not None else (1 if smoke else 9)
    a.seconds = a.seconds if a.seconds is not None else (1.0 if smoke else 8.0)
    a.idle_conns = a.idle_conns if a.idle_conns is not None else (200 if smoke else 1000)
    a.idle_rounds = a.idle_rounds if a.idle_rounds is not None else (1 if smoke else 3)
    a.strace_requests = (a.strace_requests if a.strace_requests is not None
                         else (2000 if smoke else 20000))
    a.fsync_seconds = a.fsync_seconds if a.fsync_seconds is not None else (0.5 if smoke else 2.0)
    a.check_status = a.check_status or smoke
    a.targets = [t.strip() for t in a.targets.split(",") if t.strip()]
    for t in a.targets:
        if t not in ALL_TARGETS:
            p.error("unknown target %r" % t)
    if a.workloads is None:
        names = list(PLAIN_WORKLOADS) + (list(SMOKE_TLS) + list(SMOKE_H2) if smoke else [])
    else:
        names = []
        for w in (w.strip() for w in a.workloads.split(",")):
            if w in WORKLOAD_GROUPS:
                names += WORKLOAD_GROUPS[w]
            elif w in WORKLOADS:
                names.append(w)
            elif w:
                p.error("unknown workload %r (groups: %s)" % (w, ", ".join(WORKLOAD_GROUPS)))
    a.workloads = list(dict.fromkeys(names))        # in order, each once
    if "raise_fences" in a.workloads and "put_paced" not in a.workloads:
        a.workloads.append("put_paced")     # the side load's baseline
    if "put_keyed" in a.workloads and "put_equal" not in a.workloads:
        a.workloads.insert(a.workloads.index("put_keyed"), "put_equal")   # its baseline
    if a.rounds < 1 or a.seconds <= 0 or a.connections < 1 or a.fences < 1 or a.idle_conns < 1:
        p.error("rounds, seconds, connections, fences and idle-conns must be positive")
    if not a.workloads:
        p.error("no workload chosen")
    if a.tls_clients < 1:
        p.error("--tls-clients must be positive")
    if a.h2_clients < 1 or a.h2_streams < 1:
        p.error("--h2-clients and --h2-streams must be positive")
    if a.key_conns < 1 or a.keys < a.key_conns:
        p.error("--key-conns must be positive and --keys at least --key-conns")
    a.binary = os.path.abspath(a.binary)
    return a


def main(argv):
    args = parse_args(argv)
    started = time.monotonic()
    for w in H2_WORKLOADS:          # the table's label says how many
        WORKLOADS[w] = WORKLOADS[w].replace("conns × streams", "%d conns × %d streams"
                                            % (args.h2_clients, args.h2_streams))
    sup = supervised()

    if "fencing-proxy" in args.targets and not os.access(args.binary, os.X_OK):
        raise BenchError("fencing-proxy binary not found at %s (build it, or pass --binary)"
                         % args.binary)
    if "fencing-proxy-base" in args.targets and not (args.base_binary and os.access(args.base_binary, os.X_OK)):
        raise BenchError("target fencing-proxy-base needs --base-binary (an executable)")
    ensure_packages(not args.no_install)
    workdir = tempfile.mkdtemp(prefix="fp-bench-")
    os.chmod(workdir, 0o755)            # nginx workers run as nobody when started as root
    env_info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "nproc": os.cpu_count(), "cpu_model": cpu_model(),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "versions": {
            "nginx": version_of([find_tool("nginx"), "-v"]),
            "haproxy": version_of([find_tool("haproxy"), "-v"]),
            "wrk": version_of([find_tool("wrk"), "-v"]),
            "strace": version_of([find_tool("strace"), "-V"]),
            "openssl": version_of([find_tool("openssl"), "version"]),
            "h2load": version_of([find_tool("h2load"), "--version"]),
            "fencing-proxy": (version_of([args.binary, "--version"])
                              if "fencing-proxy" in args.targets else None),
        },
        "binary": args.binary,
    }
    bench = Bench(args, sup, workdir)
    env_info["pinning"] = {"wrk": bench.load_cpu, "proxies_and_backend": bench.proxy_cpu}
    timed = [w for w in args.workloads if w not in AFTER_ROUNDS]
    n_runs = len(timed) * len(args.targets) * args.rounds
    idle_kinds = 2 if "tls_idle" in args.workloads else 1
    log("fencing-proxy bench: %s; %d rounds × %d workloads × %d targets × %gs (about %.0f min); "
        "load average %s; workdir %s"
        % (env_info["versions"]["fencing-proxy"], args.rounds, len(timed),
           len(args.targets), args.seconds,
           (n_runs * (args.seconds + 0.6) + 2 * args.rounds * args.fsync_seconds
            + idle_kinds * args.idle_rounds * len(args.targets) * 7) / 60 + 1,
           env_info["load_average_start"], workdir))
    failure = None
    try:
        bench.start()
        bench.run()
    except (BenchError, Interrupted, OSError, subprocess.SubprocessError) as e:
        failure = "%s: %s" % (type(e).__name__, e)
        log("ERROR " + failure)
    finally:
        sup.stop_all()
    env_info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    env_info["elapsed_s"] = round(time.monotonic() - started, 1)

    targets = [t for t in ALL_TARGETS if t in args.targets]
    summary = summarize(bench)
    gs = goals(summary, targets) if "fencing-proxy" in targets else []
    gk = goals_keys(summary) if "fencing-proxy" in targets else []
    gh = goals_h2(summary) if "fencing-proxy" in targets and any(
        w in H2_WORKLOADS for w in args.workloads) else []
    main_table, extra = table(summary, targets, args.workloads)
    gtable = goals_table(gs)
    gktable = goals_table(gk)
    ghtable = goals_table(gh)
    problems = [dict(round=r["round"], workload=r["workload"], target=r["target"],
                     problems=r["problems"]) for r in bench.runs if r["problems"]]
    problems += [{"workload": "tls check", "target": "-", "problems": [p]} for p in bench.tls_problems]
    problems += [{"workload": "h2 check", "target": "-", "problems": [p]} for p in bench.h2_problems]
    for t, v in bench.syscalls.items():
        if v.get("socket_errors") or v.get("non2xx"):
            problems.append({"workload": "strace put_equal", "target": t,
                             "problems": ["socket errors %s, non-2xx %s" % (v["socket_errors"],
                                                                            v["non2xx"])]})

    log("\n## Results (%s; %d round(s), %gs per run; medians; ratios are medians of same-round "
        "pairs)\n" % (env_info["date"], args.rounds, args.seconds))
    log(main_table + "\n")
    log(extra + "\n")
    if gs:
        log("## Goals (issue 7)\n\n" + gtable + "\n")
    if gk:
        log("## Goals (issue 12: fence keys)\n\n" + gktable + "\n")
    if gh:
        log("## Goals (issue 26: HTTP/2 and gRPC)\n\n" + ghtable + "\n")
    if problems:
        log("## Problems")
        for p in problems:
            log("- %s %s round %s: %s" % (p["workload"], p["target"], p.get("round", "-"),
                                          "; ".join(p["problems"])))
    log("elapsed %.0f s; load average at start %s, at end %s"
        % (env_info["elapsed_s"], env_info["load_average_start"], env_info["load_average_end"]))

    out = args.json or os.path.join(RESULTS_DIR, "%s%s.json" % (
        env_info["date"].replace(":", "").replace("-", ""), "-smoke" if args.smoke else ""))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    doc = {"environment": env_info, "args": vars(args), "failure": failure, "summary": summary,
           "goals": [{"goal": g, "measured": m, "met": met} for g, m, met in gs],
           "goals_keys": [{"goal": g, "measured": m, "met": met} for g, m, met in gk],
           "goals_h2": [{"goal": g, "measured": m, "met": met} for g, m, met in gh],
           "problems": problems, "fsync_rounds": bench.fsync, "syscalls": bench.syscalls,
           "idle": bench.idle, "tls_checks": bench.tls_checks, "h2_checks": bench.h2_checks,
           "runs": bench.runs,
           "markdown": main_table + "\n\n" + extra + "\n\n" + gtable + "\n\n" + gktable
           + ("\n\n" + ghtable if gh else "")}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.splitext(out)[0] + ".md", "w", encoding="utf-8") as f:
        f.write(doc["markdown"] + "\n")
    log("wrote %s (and .md)" % os.path.relpath(out))
    if args.keep_workdir or failure:
        log("workdir kept: %s" % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)

    missing = [(w, t) for w in args.workloads for t in targets
               if w not in AFTER_ROUNDS and t not in summary["workloads"].get(w, {})
               and (w not in H2_WORKLOADS or t in H2_TARGETS)]
    if "tls_idle" in args.workloads and args.idle_rounds > 0:
        missing += [("tls_idle", t) for t in targets
                    if t not in summary["idle_tls_bytes_per_conn"]]
    if failure or problems or missing:
        if missing and not failure:
            log("FAIL: no result for %s" % missing)
        log("FAIL" if args.smoke else "finished with problems (see above)")
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print("bench: %s" % e, file=sys.stderr)
        sys.exit(2)
