#!/usr/bin/env python3
"""Raise throughput: how fast fencing-proxy makes new max_tokens durable.

Measures, on the disk that holds the state file:
  baseline   one thread appending an 80-byte record and fdatasync'ing it, in a loop
  1 fence    one client raising one fence (token n+1 after n), so every write is a raise
  N fences   N clients, each raising its own fence at once (group commit shares the syncs)
and reports raises/s and fdatasyncs per raise (from fencing_proxy_state_sync_seconds_count and
fencing_proxy_token_raises_total). Uses the demo backend and the integration-test harness.

  python3 bench/raise_rate.py [--seconds 5] [--fences 16] [--json out.json]
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
from disk_probe import append_fdatasync_rate  # noqa: E402


def sync_and_raise_counts(proxy):
    samples = proxy.metrics()
    syncs = harness.metric(samples, "fencing_proxy_state_sync_seconds_count") or 0.0
    raises = sum(v for (name, _labels), v in samples.items() if name == "fencing_proxy_token_raises_total")
    return syncs, raises


def raise_loop(proxy, fence_path, seconds, counter, errors, lock, first_token, raise_each):
    conn = proxy.connect()
    token, done, deadline = first_token - 1, 0, time.monotonic() + seconds
    if not raise_each:
        token += 1
    try:
        while time.monotonic() < deadline:
            token += 1 if raise_each else 0
            status = proxy.request("PUT", fence_path, token, b"r", conn=conn)[0]
            if status != 200:
                errors.append("%s token %d: HTTP %d" % (fence_path, token, status))
                return
            done += 1
    finally:
        conn.close()
        with lock:
            counter[0] += done


def measure(proxy, fences, seconds, first_token, raise_each=True):
    """raise_each: every write raises (token n+1 after n); else all writes carry one token."""
    syncs0, raises0 = sync_and_raise_counts(proxy)
    counter, errors, lock = [0], [], threading.Lock()
    threads = [threading.Thread(target=raise_loop,
                                args=(proxy, "/f%d/x" % i, seconds, counter, errors, lock, first_token,
                                      raise_each))
               for i in range(fences)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    syncs1, raises1 = sync_and_raise_counts(proxy)
    raises = raises1 - raises0
    return {"fences": fences, "writes": counter[0], "writes_per_s": round(counter[0] / elapsed, 1),
            "raises": int(raises), "raises_per_s": round(raises / elapsed, 1),
            "syncs": int(syncs1 - syncs0),
            "syncs_per_raise": round((syncs1 - syncs0) / raises, 3) if raises else None,
            "errors": errors[:5]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--fences", type=int, default=16)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="fp-raise-bench-")
    backend = harness.Backend()
    routes = [{"name": "f%d" % i, "prefix": "/f%d" % i} for i in range(max(args.fences, 1))]
    proxy = harness.Proxy({"routes": routes}, backend=backend, workdir=workdir)
    try:
        results = {
            "baseline_sync_per_s": round(append_fdatasync_rate(workdir, args.seconds), 1),
            # The same client loop without raises: the HTTP round trip alone, for comparison.
            "equal_tokens_one_client": measure(proxy, 1, args.seconds, 1, raise_each=False),
            "one_fence": measure(proxy, 1, args.seconds, 10_000_000),
            "many_fences": measure(proxy, args.fences, args.seconds, 20_000_000),
        }
    finally:
        proxy.terminate()
        backend.stop()
    base = results["baseline_sync_per_s"]
    for key in ("one_fence", "many_fences"):
        r = results[key]
        r["ratio_to_baseline"] = round(r["raises_per_s"] / base, 2) if base else None
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0 if not any(r["errors"] for r in results.values() if isinstance(r, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
