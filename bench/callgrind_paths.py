#!/usr/bin/env python3
"""Instructions per equal-token PUT on each kind of route and setup, by callgrind (issue 15, P3 and P8).

The wall clock of this 2-vCPU machine spreads ±15% per round, which cannot resolve "within 3%".
Instruction counts can. Each setup is one fencing-proxy process under
`valgrind --tool=callgrind --instr-atstart=no` (threads: 1) in front of the bench backend (nginx,
`return 200`); each route of it is primed (one raise to its token), warmed up, then measured
like bench/callgrind_keys.py: instrumentation on, counters zeroed, REQUESTS equal-token PUTs on 4
keep-alive connections, a dump, instrumentation off. The count is every thread's (the access
log's writer thread included), divided by REQUESTS; the least of the rounds is kept.

  setup       routes                          what differs
  file        plain, keyed, verified          the state file; verified asks a local etcd on raises
  etcd_store  plain, keyed                    the shared fence store on the same etcd
  log_file    plain                           access_log: true, stderr to a file
  log_pipe    plain                           access_log: true, stderr to a pipe a reader drains
                                              (as a container runtime reads a pod's logs)

Ratios printed against `file/plain`. Needs valgrind, nginx and etcd (the integration tests' own
lockservices.py starts it).

  python3 bench/callgrind_paths.py [--binary build/proxy/fencing-proxy] [--requests 2000] [--rounds 2]
"""

import json
import os
import shutil
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import (BenchError, find_tool, free_ports, http_put, log,  # noqa: E402
                 start_nginx_backend, REPO)
from callgrind_keys import (callgrind_arguments, callgrind_start, counted_dump, parse_dump, send,  # noqa: E402
                            wait_ready_under_valgrind)
from verify import EtcdHolders, LOCK_PREFIX  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import lockservices  # noqa: E402

TOKEN = 1000
ROUTE_PATHS = {"plain": "/eq/1", "keyed": "/keyed/k1", "verified": "/verified/k1"}
SETUPS = {
    "file": ("plain", "keyed", "verified"),
    "etcd_store": ("plain", "keyed"),
    "log_file": ("plain",),
    "log_pipe": ("plain",),
}


def config(setup, port, admin, backend, workdir, etcd_url):
    lines = ['listen: "127.0.0.1:%d"' % port, 'admin_listen: "127.0.0.1:%d"' % admin,
             'backend: "http://127.0.0.1:%d"' % backend, "threads: 1",
             "access_log: %s" % ("true" if setup.startswith("log_") else "false")]
    if setup == "etcd_store":
        lines.append('fence_store: {etcd: {endpoints: ["%s"], prefix: "/fp-callgrind"}}' % etcd_url)
    else:
        lines.append('state_file: "%s"' % os.path.join(workdir, "fences-%s.log" % setup))
    if "verified" in SETUPS[setup]:
        lines.append('lock_services:\n  etcd: {etcd: {endpoints: ["%s"], timeout: 5s}}' % etcd_url)
    lines.append("routes:")
    lines += ["  - name: eq", "    prefix: /eq"]
    if "keyed" in SETUPS[setup]:
        lines += ["  - name: keyed", "    prefix: /keyed", "    fence_key: {path_segment: 1}"]
    if "verified" in SETUPS[setup]:
        lines += ["  - name: verified", "    prefix: /verified", "    fence_key: {path_segment: 1}",
                  '    verify: {service: etcd, lock: "%s/{key}"}' % LOCK_PREFIX]
    return "\n".join(lines) + "\n"


class Drain(threading.Thread):
    """Reads a FIFO to its end, as a container runtime reads a pod's stderr."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.bytes = path, 0

    def run(self):
        with open(self.path, "rb", buffering=0) as f:
            while True:
                chunk = f.read(1 << 16)
                if not chunk:
                    return
                self.bytes += len(chunk)


def measure(setup, a, sup, w, backend_port, etcd, holders):  # noqa: C901 (one sequence)
    port, admin = free_ports(2)
    cfg_path = os.path.join(w, "%s.yaml" % setup)
    with open(cfg_path, "w") as f:
        f.write(config(setup, port, admin, backend_port, w, etcd.url))
    out = os.path.join(w, "%s.out" % setup)
    drain = None
    if setup == "log_pipe":
        out = os.path.join(w, "%s.fifo" % setup)
        os.mkfifo(out)
        drain = Drain(out)
        drain.start()
    prefix = os.path.join(w, "callgrind.%s" % setup)
    proxy = sup.spawn("fencing-proxy-" + setup, [
        find_tool("valgrind"), "--tool=callgrind", "--instr-atstart=no",
        "--callgrind-out-file=%s.%%p" % prefix, a.binary, "--config", cfg_path], out)
    wait_ready_under_valgrind(proxy, admin, out if setup != "log_pipe" else cfg_path)
    results = {}
    try:
        tokens = {}
        for route in SETUPS[setup]:
            path = ROUTE_PATHS[route]
            tokens[route] = holders.next("k1") if route == "verified" else TOKEN
            status, body = http_put(port, path, tokens[route], timeout=30)
            if status != 200:
                raise BenchError("%s: priming %s -> %d %r" % (setup, path, status, body[:200]))
            send(port, path, a.warmup, token=tokens[route])
        for rnd in range(a.rounds):
            for route in SETUPS[setup]:
                # the access lines of these requests are written at the next sweep tick (<= 1 s):
                # settle counts the log thread's share too
                dump = counted_dump(proxy.pid, prefix, "%s-%s-%d" % (setup, route, rnd),
                                    lambda: send(port, ROUTE_PATHS[route], a.requests, token=tokens[route]),
                                    settle=1.5 if setup.startswith("log_") else 0)
                total, allocs, frees = parse_dump(dump)
                if a.keep_dumps:
                    os.makedirs(a.keep_dumps, exist_ok=True)
                    shutil.copy(dump, os.path.join(a.keep_dumps, "callgrind.%s-%s-%d" % (setup, route, rnd)))
                ipr = total / a.requests
                apr = sum(allocs.values()) / a.requests
                log("round %d %-10s %-8s %8.0f instructions/request, %.3f allocations/request"
                    % (rnd, setup, route, ipr, apr))
                best = results.get(route)
                if best is None or ipr < best["instructions_per_request"]:
                    results[route] = {"instructions_per_request": round(ipr, 1),
                                      "allocations_per_request": round(apr, 3)}
    finally:
        sup.stop(proxy)
        if drain:
            drain.join(10)
    return results


def main(argv):
    a = callgrind_arguments(__doc__.splitlines()[0], requests=2000, rounds=2, warmup=1000,
                            setups=SETUPS).parse_args(argv)
    setups, sup, w = callgrind_start("fp-callgrind-paths-", a, SETUPS)
    etcd = holders = None
    try:
        _, backend_port = start_nginx_backend(sup, w)
        etcd = lockservices.EtcdServer()
        holders = EtcdHolders(etcd)
        results = {s: measure(s, a, sup, w, backend_port, etcd, holders) for s in setups}
        base = results.get("file", {}).get("plain", {}).get("instructions_per_request")
        summary = {}
        for s, routes in results.items():
            for route, r in routes.items():
                row = dict(r)
                if base:
                    row["over_file_plain"] = round(r["instructions_per_request"] / base, 4)
                summary["%s/%s" % (s, route)] = row
        log(json.dumps(summary, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"summary": summary, "requests": a.requests, "rounds": a.rounds,
                           "binary": os.path.abspath(a.binary)}, f, indent=1)
        return 0
    finally:
        if holders:
            holders.close()
        sup.stop_all()
        if etcd:
            etcd.stop()
        shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print("callgrind paths bench: %s" % e, file=sys.stderr)
        sys.exit(2)
