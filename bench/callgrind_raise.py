#!/usr/bin/env python3
"""Instructions and allocations per serial raise by callgrind: the state file, the etcd fence store.

A raise is a PUT whose token is above the fence's max: it is made durable (the state file's
append and fdatasync on the writer thread, or the shared store's etcd transactions) before the
request is forwarded. Each setup is one fencing-proxy process under
`valgrind --tool=callgrind --instr-atstart=no` (threads: 1, access_log: false) in front of the
bench backend (nginx, `return 200`), with one plain route, `serial`:

  setup       fences kept in
  file        state_file (a fresh file per process)
  etcd_store  fence_store: {etcd: ...} on a local single-member etcd, one proxy (one member)

After WARMUP serial raises, per round: instrumentation on and counters zeroed
(callgrind_control -i on, -z), REQUESTS serial raises over one keep-alive connection (each PUT
carries the previous token + 1, 128-byte body, sent after the previous response), a dump
(callgrind_control -d), instrumentation off; then the same for REQUESTS equal-token PUTs (the
last token again) over one keep-alive connection, the reference the raise is read against.
Per request: the dump's total instructions (Ir, every thread: the worker, the state writer or
the store's and the etcd client's threads, the sweeper) / REQUESTS, and the calls into the
allocator (as bench/callgrind_keys.py counts them). The least of the rounds is kept.

What a raise's count includes beyond its own work: with the state file, a compaction of the log
when it passes the 64 KiB floor (after a few thousand raises of one fence; about 3k instructions per
raise over a round of 1,000; at the defaults it falls in the third round, which the least of the
rounds leaves out: every round is in the output and the JSON); with the etcd store, the
member's lease keep-alive (every member_ttl / 3) and the watch's events for our own commits.

  python3 bench/callgrind_raise.py [--binary build/proxy/fencing-proxy] [--setups file,etcd_store]
                                   [--requests 1000] [--rounds 3] [--keep-dumps DIR]

Needs valgrind, nginx, and etcd for etcd_store (started as tests/integration/lockservices.py
starts it: Debian's /usr/bin/etcd on free ports, a temporary data directory). See bench/README.md.
"""

import http.client
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import BenchError, find_tool, free_ports, log, start_nginx_backend, REPO  # noqa: E402
# (importing callgrind_keys also sets TCMALLOC_TRANSFER_NUM_OBJ, so the proxy does not re-exec)
from callgrind_keys import (callgrind_arguments, callgrind_start, counted_dump, parse_dump,  # noqa: E402
                            wait_ready_under_valgrind)

sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import lockservices  # noqa: E402

PATH = "/serial/1"
BODY = b"r" * 128
FIRST_TOKEN = 1000
SETUPS = ("file", "etcd_store")


def config(setup, port, admin, backend, workdir, etcd_url):
    lines = ['listen: "127.0.0.1:%d"' % port, 'admin_listen: "127.0.0.1:%d"' % admin,
             'backend: "http://127.0.0.1:%d"' % backend, "threads: 1", "access_log: false"]
    if setup == "etcd_store":
        lines.append('fence_store: {etcd: {endpoints: ["%s"], prefix: "/fp-callgrind-raise-%d"}}'
                     % (etcd_url, os.getpid()))
    else:
        lines.append('state_file: "%s"' % os.path.join(workdir, "fences-%s.log" % setup))
    lines += ["routes:", "  - name: serial", "    prefix: /serial"]
    return "\n".join(lines) + "\n"


class Client:
    """One keep-alive connection; every PUT must get 200."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def put(self, token):
        self.conn.request("PUT", PATH, body=BODY, headers={"X-Fencing-Token": str(token)})
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise BenchError("PUT %s X-Fencing-Token: %d -> HTTP %d %r"
                             % (PATH, token, r.status, body[:300]))

    def close(self):
        self.conn.close()


def measure(setup, a, sup, w, backend_port, etcd_url):
    port, admin = free_ports(2)
    cfg_path = os.path.join(w, "%s.yaml" % setup)
    with open(cfg_path, "w") as f:
        f.write(config(setup, port, admin, backend_port, w, etcd_url))
    out = os.path.join(w, "%s.out" % setup)
    prefix = os.path.join(w, "callgrind.%s" % setup)
    proxy = sup.spawn("fencing-proxy-" + setup, [
        find_tool("valgrind"), "--tool=callgrind", "--instr-atstart=no",
        "--callgrind-out-file=%s.%%p" % prefix, a.binary, "--config", cfg_path], out)
    wait_ready_under_valgrind(proxy, admin, out)
    token = [FIRST_TOKEN]
    client = Client(port)

    def raises(n):
        for _ in range(n):
            token[0] += 1
            client.put(token[0])

    def equals(n):
        for _ in range(n):
            client.put(token[0])

    results = {"raise": [], "equal": []}
    try:
        raises(a.warmup)
        equals(a.warmup)
        for rnd in range(a.rounds):
            for kind, action in (("raise", raises), ("equal", equals)):
                dump = counted_dump(proxy.pid, prefix, "%s-%s-%d" % (setup, kind, rnd),
                                    lambda: action(a.requests))
                total, allocs, frees = parse_dump(dump)
                if a.keep_dumps:
                    os.makedirs(a.keep_dumps, exist_ok=True)
                    shutil.copy(dump, os.path.join(a.keep_dumps, "callgrind.%s-%s-%d" % (setup, kind, rnd)))
                r = {"round": rnd, "instructions_per_request": round(total / a.requests, 1),
                     "allocations_per_request": round(sum(allocs.values()) / a.requests, 3),
                     "frees_per_request": round(sum(frees.values()) / a.requests, 3)}
                results[kind].append(r)
                log("round %d %-10s %-5s %8.0f instructions/request, %.3f allocations, %.3f frees"
                    % (rnd, setup, kind, r["instructions_per_request"], r["allocations_per_request"],
                       r["frees_per_request"]))
    finally:
        client.close()
        sup.stop(proxy)
    summary = {}
    for kind, rs in results.items():
        summary[kind] = {k: min(r[k] for r in rs)
                         for k in ("instructions_per_request", "allocations_per_request")}
    summary["raise_over_equal"] = round(summary["raise"]["instructions_per_request"] /
                                        summary["equal"]["instructions_per_request"], 4)
    return summary, results


def main(argv):
    a = callgrind_arguments(__doc__.splitlines()[0], requests=1000, rounds=3, warmup=200, setups=SETUPS,
                            requests_help="raises (and equal PUTs) per round").parse_args(argv)
    setups, sup, w = callgrind_start("fp-callgrind-raise-", a, SETUPS)
    etcd = None
    try:
        _, backend_port = start_nginx_backend(sup, w)
        if "etcd_store" in setups:
            etcd = lockservices.EtcdServer()
        summary, rounds = {}, {}
        for s in setups:
            summary[s], rounds[s] = measure(s, a, sup, w, backend_port, etcd.url if etcd else None)
        log(json.dumps(summary, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"summary": summary, "rounds": rounds, "requests": a.requests,
                           "binary": os.path.abspath(a.binary)}, f, indent=1)
        return 0
    finally:
        sup.stop_all()
        if etcd:
            etcd.stop()
        shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print("callgrind raise bench: %s" % e, file=sys.stderr)
        sys.exit(2)
