#!/usr/bin/env python3
"""Instructions and allocations per equal-token PUT, keyed route against unkeyed, by callgrind.

fencing-proxy runs under `valgrind --tool=callgrind --instr-atstart=no` (threads: 1) in front of
the bench backend (nginx, `return 200`). Routes `eq` (unkeyed) and `keyed` (fence_key
path_segment 1) are raised to one token; after a warm-up of both, for each round and each route:
instrumentation on and counters zeroed (callgrind_control -i on, -z), REQUESTS PUTs with that
token (128-byte body) on 4 keep-alive connections (one client thread each), a dump
(callgrind_control -d), instrumentation off. Per request: the dump's total instructions (Ir, all
threads) / REQUESTS, and the calls into the allocator's entry points (malloc, calloc, realloc,
operator new and tcmalloc's tc_* names; free and delete separately), from the dump's call counts.
The key k1 stays in use throughout (its Fence is never folded back: one request per connection
at least every few milliseconds), which is the hot path the issue's "one hash lookup more, no
allocation" is about.

  python3 bench/callgrind_keys.py [--binary build/proxy/fencing-proxy] [--requests 2000] [--rounds 2]
"""

import argparse
import atexit
import glob
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# Without it, the proxy re-executes itself to set it (ApplyAllocatorSettings in
# proxy/common/memory.h), and valgrind does not follow an exec: the process measured would be
# valgrind's, not the proxy's. callgrind_paths.py imports this module, so it holds there too.
os.environ.setdefault("TCMALLOC_TRANSFER_NUM_OBJ", "4")
from run import (BenchError, Supervisor, children, find_tool, free_ports, http_get,  # noqa: E402
                 http_put, log, render, REPO)

TOKEN = 1000
ROUTES = {"unkeyed": "/eq/1", "keyed": "/keyed/k1"}
CONNS = 4
ALLOC = re.compile(r"^(malloc|calloc|realloc|aligned_alloc|posix_memalign|memalign|valloc|"
                   r"tc_malloc\w*|tc_calloc|tc_realloc|tc_new\w*|tc_newarray\w*|tc_memalign|"
                   r"tc_posix_memalign|operator new(\[\])?\(.*)$")
FREE = re.compile(r"^(free|cfree|tc_free\w*|tc_delete\w*|tc_deletearray\w*|"
                  r"operator delete(\[\])?\(.*)$")

CONFIG = """listen: "127.0.0.1:{port}"
admin_listen: "127.0.0.1:{admin}"
backend: "http://127.0.0.1:{backend}"
state_file: "{state}"
threads: 1
access_log: false
routes:
  - name: eq
    prefix: /eq
  - name: keyed
    prefix: /keyed
    fence_key: {{path_segment: 1}}
"""


def send(port, path, n_total, conns=CONNS, token=TOKEN):
    """n_total equal-token PUTs on `conns` keep-alive connections (a thread each)."""
    errors = []

    def worker(n):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            for _ in range(n):
                c.request("PUT", path, body=b"e" * 128, headers={"X-Fencing-Token": str(token)})
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    errors.append("%s -> %d" % (path, r.status))
                    return
        finally:
            c.close()
    per = [n_total // conns + (1 if i < n_total % conns else 0) for i in range(conns)]
    ts = [threading.Thread(target=worker, args=(k,)) for k in per]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise BenchError("PUT failed: %s" % errors[0])


def callgrind_ctl(pid, *args):
    r = subprocess.run([find_tool("callgrind_control")] + list(args) + [str(pid)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise BenchError("callgrind_control %s: %s" % (args, r.stderr or r.stdout))


def wait_ready_under_valgrind(proc, admin_port, out_path, timeout=120):
    """Waits for /readyz of a proxy started under valgrind (slow to start)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if http_get(admin_port, "/readyz", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise BenchError("the proxy under valgrind did not start: %s"
                             % open(out_path, errors="replace").read()[-2000:])
        time.sleep(0.2)


def counted_dump(pid, out_prefix, tag, action, settle=0.0):
    """Runs action() with instrumentation on and the counters zeroed, waits settle seconds (work
    that lands later, such as a log thread's), dumps, turns instrumentation off; returns the
    dump's path."""
    callgrind_ctl(pid, "-i", "on")
    callgrind_ctl(pid, "-z")
    action()
    if settle:
        time.sleep(settle)
    before = set(glob.glob(out_prefix + ".*"))
    callgrind_ctl(pid, "-d", tag)
    callgrind_ctl(pid, "-i", "off")
    for _ in range(100):
        new = set(glob.glob(out_prefix + ".*")) - before
        if new:
            time.sleep(0.3)      # the dump is written by the tool thread; let it finish
            return sorted(new)[-1]
        time.sleep(0.1)
    raise BenchError("no callgrind dump for %s" % tag)


def parse_dump(path):
    """(total Ir, {allocator function: calls}, {free function: calls}) of one callgrind dump."""
    names = {}                   # "(id)" -> name, callgrind's name compression
    total = None
    allocs, frees = {}, {}
    cfn = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
            elif line.startswith("cfn="):
                m = re.match(r"cfn=(\(\d+\))(?: (.*))?$", line.rstrip("\n"))
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2)
                    cfn = names.get(m.group(1))
            elif line.startswith("fn="):
                m = re.match(r"fn=(\(\d+\))(?: (.*))?$", line.rstrip("\n"))
                if m and m.group(2):
                    names[m.group(1)] = m.group(2)
                cfn = None
            elif line.startswith("calls=") and cfn:
                n = int(line.split("=", 1)[1].split()[0])
                if ALLOC.match(cfn):
                    allocs[cfn] = allocs.get(cfn, 0) + n
                elif FREE.match(cfn):
                    frees[cfn] = frees.get(cfn, 0) + n
                cfn = None
    return total, allocs, frees


def callgrind_arguments(description, requests, rounds, warmup, setups=None, requests_help=None):
    """The command line the callgrind benches share: --binary, --requests, --rounds, --warmup,
    --json, --keep-dumps, and --setups when the bench has several."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--binary", default=os.path.join(REPO, "build", "proxy", "fencing-proxy"))
    p.add_argument("--requests", type=int, default=requests, help=requests_help)
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--warmup", type=int, default=warmup)
    if setups:
        p.add_argument("--setups", default=",".join(setups), help="comma-separated: " + ",".join(setups))
    p.add_argument("--json")
    p.add_argument("--keep-dumps", help="copy the callgrind dumps to this directory")
    return p


def callgrind_start(prefix, a=None, setups=None):
    """Checks the tools (and a.setups against setups), starts a Supervisor that stops its
    processes at exit, makes a work directory -> (chosen setups, supervisor, work directory)."""
    for tool in ("valgrind", "callgrind_control", "nginx"):
        if not find_tool(tool):
            raise BenchError("%s not installed" % tool)
    chosen = []
    if setups:
        chosen = [s for s in a.setups.split(",") if s]
        for s in chosen:
            if s not in setups:
                raise BenchError("unknown setup %r" % s)
    sup = Supervisor()
    atexit.register(sup.stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    w = tempfile.mkdtemp(prefix=prefix)
    os.chmod(w, 0o755)
    return chosen, sup, w


def main(argv):
    a = callgrind_arguments(__doc__.splitlines()[0], requests=2000, rounds=2, warmup=1000).parse_args(argv)
    _, sup, w = callgrind_start("fp-callgrind-")
    try:
        backend_port, port, admin = free_ports(3)
        cfg = render("nginx-backend.conf", os.path.join(w, "nginx-backend.conf"), WORKDIR=w,
                     BACKEND_PORT=backend_port)
        nginx = sup.spawn("backend", [find_tool("nginx"), "-p", w, "-e",
                                      os.path.join(w, "nginx-backend.error.log"), "-c", cfg],
                          os.path.join(w, "backend.out"))
        time.sleep(0.5)
        sup.add_pids(nginx, children(nginx.pid))
        cfg_dir = os.path.join(w, "cfg")
        os.makedirs(cfg_dir)
        cfg_path = os.path.join(cfg_dir, "fencing-proxy.yaml")
        with open(cfg_path, "w") as f:
            f.write(CONFIG.format(port=port, admin=admin, backend=backend_port,
                                  state=os.path.join(w, "fences.log")))
        out_prefix = os.path.join(w, "callgrind.out")
        proxy = sup.spawn("fencing-proxy", [
            find_tool("valgrind"), "--tool=callgrind", "--instr-atstart=no",
            "--callgrind-out-file=%s.%%p" % out_prefix, a.binary, "--config", cfg_path],
            os.path.join(w, "proxy.out"))
        wait_ready_under_valgrind(proxy, admin, os.path.join(w, "proxy.out"))
        pid = str(proxy.pid)
        for path in ROUTES.values():
            status, body = http_put(port, path, TOKEN, timeout=30)
            if status != 200:
                raise BenchError("priming %s -> %d %r" % (path, status, body[:200]))
        for path in ROUTES.values():
            send(port, path, a.warmup)
        results = {name: [] for name in ROUTES}
        for rnd in range(a.rounds):
            for name, path in ROUTES.items():
                dump = counted_dump(pid, out_prefix, "%s-%d" % (name, rnd),
                                    lambda: send(port, path, a.requests))
                total, allocs, frees = parse_dump(dump)
                if a.keep_dumps:
                    os.makedirs(a.keep_dumps, exist_ok=True)
                    shutil.copy(dump, os.path.join(a.keep_dumps, "callgrind.%s-%d" % (name, rnd)))
                r = {"round": rnd, "instructions_per_request": round(total / a.requests, 1),
                     "allocations_per_request": round(sum(allocs.values()) / a.requests, 3),
                     "frees_per_request": round(sum(frees.values()) / a.requests, 3),
                     "allocators": allocs, "frees": frees}
                results[name].append(r)
                log("round %d %-8s %8.0f instructions/request, %.3f allocations, %.3f frees per "
                    "request %s" % (rnd, name, r["instructions_per_request"],
                                    r["allocations_per_request"], r["frees_per_request"], allocs))
        summary = {}
        for name, rs in results.items():
            summary[name] = {
                "instructions_per_request": min(r["instructions_per_request"] for r in rs),
                "allocations_per_request": min(r["allocations_per_request"] for r in rs)}
        d = summary["keyed"]["instructions_per_request"] - summary["unkeyed"]["instructions_per_request"]
        summary["keyed_minus_unkeyed_instructions"] = round(d, 1)
        summary["keyed_over_unkeyed"] = round(summary["keyed"]["instructions_per_request"] /
                                              summary["unkeyed"]["instructions_per_request"], 4)
        summary["keyed_minus_unkeyed_allocations"] = round(
            summary["keyed"]["allocations_per_request"] - summary["unkeyed"]["allocations_per_request"], 3)
        log(json.dumps(summary, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"summary": summary, "rounds": results, "requests": a.requests,
                           "binary": os.path.abspath(a.binary)}, f, indent=1)
        return 0
    finally:
        sup.stop_all()
        shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print("callgrind bench: %s" % e, file=sys.stderr)
        sys.exit(2)
