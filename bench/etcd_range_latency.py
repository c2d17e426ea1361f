#!/usr/bin/env python3
"""The holder's range (issue 13) against one local etcd, three ways: fencing-proxy's EtcdClient
over etcd's JSON gateway, python3-etcd3 over gRPC, and Python's http.client (keep-alive) over the
same gateway. The two Python clients show how much of the difference is the server's (the
gateway's JSON translation) and how much is the client's.

    bench/etcd_range_latency.py [--calls 1000] [--test-binary build/tests/etcd_client_test]

One request at a time (latency, not throughput); prints one JSON line per client and a Markdown
table. The range is the one EtcdLockService sends: linearizable, [L/, prefix_end(L/)), sorted by
create revision ascending, limit 1, keys only.
"""

import argparse
import base64
import http.client
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import lockservices  # noqa: E402

LOCK = "/locks/bench"


def b64(s):
    return base64.b64encode(s.encode()).decode()


def percentiles(micros):
    micros = sorted(micros)
    at = lambda q: micros[min(len(micros) - 1, int(q * len(micros)))]  # noqa: E731
    return round(at(0.50)), round(at(0.99))


def measure(call, n):
    for _ in range(50):
        call()
    micros = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        micros.append((time.perf_counter() - start) * 1e6)
    return percentiles(micros)


def grpc_range(server, n):
    etcd3 = lockservices.import_debian("etcd3")
    client = server.client()
    prefix = LOCK + "/"

    def call():
        kvs = list(client.get_prefix(prefix, sort_order="ascend", sort_target="create", keys_only=True, limit=1))
        assert kvs, "no holder"
    try:
        return measure(call, n)
    finally:
        client.close()
    del etcd3


def http_range(server, n):
    host, _, port = server.endpoint.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    prefix = LOCK + "/"
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": b64(prefix), "range_end": b64(end), "limit": "1", "sort_order": "ASCEND",
                       "sort_target": "CREATE", "keys_only": True})

    def call():
        conn.request("POST", "/v3/kv/range", body, {"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
        assert answer.get("kvs"), answer
    try:
        return measure(call, n)
    finally:
        conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--test-binary", default=os.path.join(HERE, "..", "build", "tests", "etcd_client_test"))
    args = parser.parse_args()
    missing = lockservices.missing_etcd()
    if missing:
        sys.exit(missing)
    server = lockservices.EtcdServer()
    try:
        server.etcdctl("put", LOCK + "/holder", "h")
        rows = []
        out = subprocess.run(
            [args.test_binary, "--gtest_also_run_disabled_tests", "--gtest_filter=EtcdTest.DISABLED_HolderRangeLatency"],
            env=dict(os.environ, FP_ETCD_ENDPOINT="http://" + server.endpoint, FP_BENCH_CALLS=str(args.calls)),
            capture_output=True, text=True, check=True).stdout
        line = next(l for l in out.splitlines() if l.startswith("{"))
        ours = json.loads(line)
        rows.append((ours["client"], ours["p50_us"], ours["p99_us"]))
        p50, p99 = grpc_range(server, args.calls)
        rows.append(("python3-etcd3 (gRPC)", p50, p99))
        p50, p99 = http_range(server, args.calls)
        rows.append(("Python http.client keep-alive (JSON gateway)", p50, p99))
        for name, p50, p99 in rows:
            print(json.dumps({"client": name, "calls": args.calls, "p50_us": p50, "p99_us": p99}))
        print("\n| client | p50 µs | p99 µs |\n|---|---|---|")
        for name, p50, p99 in rows:
            print("| %s | %d | %d |" % (name, p50, p99))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
