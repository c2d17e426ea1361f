#!/usr/bin/env python3
"""Verified raises (issue 13): what asking etcd or ZooKeeper costs a raise.

On 127.0.0.1: one etcd and one ZooKeeper (Debian's, started as tests/integration/lockservices.py
starts them), the bench backend (nginx, `return 200`) and fencing-proxy with three keyed routes
(fence_key: path_segment 1), each its own fence:

  /plain  no verification
  /etcd   verify: {service: etcd, lock: "/locks/bench/{key}"}
  /zk     verify: {service: zk,   lock: "/locks/bench/{key}"}

For each of HANDOVERS hand-overs, route after route (so that drift hits all three alike):

  1. a new holder of the key's lock, untimed. etcd: the previous holder's key under
     /locks/bench/K/ is deleted and a new one put; its create revision is the token (the holder
     is the key with the lowest create revision, the concurrency.Mutex recipe). ZooKeeper: the
     previous child of /locks/bench/K is deleted and an EPHEMERAL|SEQUENCE child
     "<uuid>__lock__" created (kazoo's Lock names); its czxid is the token. /plain: token + 1.
  2. one PUT with that token (a raise: verified on /etcd and /zk, then made durable), timed.
  3. one PUT with the same token (an equal token: never verified, no disk), timed.

Client-side times are from the request's first byte to the response's last, over one keep-alive
connection per route (http.client). The verification step alone comes from the proxy's own
histogram fencing_proxy_lock_service_seconds{service} (scraped from /metrics before and after:
the mean exactly, p50/p99 interpolated within its buckets), and as the difference of the
medians of the verified and the plain raise.

  python3 bench/verify.py                                 500 hand-overs per route, 3 runs
  python3 bench/verify.py --handovers 50 --runs 1         a check of the script
  python3 bench/verify.py --routes plain                  without lock services (older binaries)

Each run starts every process afresh; the report is the median run (by the verified raises'
p50). Every process it starts is stopped by PID on any exit. See bench/README.md.
"""

import argparse
import datetime
import hashlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import (BenchError, Interrupted, finish_standalone, find_tool, supervised, free_ports, start_nginx_backend,  # noqa: E402
                 http_get, log, scrape_metrics, REPO, PROC_TIMEOUT)

# The lock services are started by the integration tests' own code.
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import lockservices  # noqa: E402

ROUTES = ("plain", "etcd", "zk")
LOCK_PREFIX = "/locks/bench"
BODY = b"v" * 128
SERVICE_TIMEOUT = "1s"


# ---------------------------------------------------------------------------------------------
# Numbers

def pct(xs, q):
    """The q-th percentile of xs, nearest rank (as keys.py)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100.0 * len(xs)))]


def summary_ms(seconds):
    return {"n": len(seconds),
            "p50": round(pct(seconds, 50) * 1e3, 3), "p90": round(pct(seconds, 90) * 1e3, 3),
            "p99": round(pct(seconds, 99) * 1e3, 3), "max": round(max(seconds) * 1e3, 3),
            "mean": round(statistics.fmean(seconds) * 1e3, 3)}


def scrape(admin_port):
    return scrape_metrics(admin_port, timeout=10.0)


def metric(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def histogram_delta(before, after, name, **labels):
    """(count, sum, [(upper bound, cumulative count)]) of a histogram between two scrapes."""
    buckets = {}
    for (n, lab), value in after.items():
        d = dict(lab)
        if n != name + "_bucket" or any(d.get(k) != v for k, v in labels.items()):
            continue
        le = d["le"]
        buckets[float("inf") if le == "+Inf" else float(le)] = value - before.get((n, lab), 0.0)
    count = metric(after, name + "_count", **labels) - metric(before, name + "_count", **labels)
    total = metric(after, name + "_sum", **labels) - metric(before, name + "_sum", **labels)
    return count, total, sorted(buckets.items())


def bucket_quantile(q, buckets):
    """Prometheus' histogram_quantile: linear within the bucket that holds the q-th observation.
    Only as good as the buckets (here 0.1, 0.25, 0.5, 1, 2.5, 5, 10 ms ...)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, cumulative in buckets:
        if cumulative >= rank:
            if upper == float("inf"):
                return lower                      # above the last finite bound: say that bound
            inside = cumulative - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = upper, cumulative
    return lower


# ---------------------------------------------------------------------------------------------
# Lock holders: make the next holder of a key's lock, return its token

class PlainHolders:
    def __init__(self):
        self.token = {}

    def next(self, key):
        self.token[key] = self.token.get(key, 0) + 1
        return self.token[key]

    def close(self):
        pass


class EtcdHolders:
    """The holder of lock L is the key under L/ with the lowest create revision; one holder key
    per lock at a time (the previous one deleted first), so the new key is the holder."""

    def __init__(self, server):
        self.client = server.client()
        self.current = {}

    def next(self, key):
        prefix = "%s/%s/" % (LOCK_PREFIX, key)
        if key in self.current:
            self.client.delete(self.current[key])
        name = prefix + uuid.uuid4().hex[:16]
        response = self.client.put(name, b"")
        # a fresh key: its create revision is the revision of the put that created it
        self.current[key] = name
        token = response.header.revision
        value, meta = self.client.get(name)
        if meta is None or meta.create_revision != token:
            raise BenchError("etcd: %s has create revision %s, put said %d"
                             % (name, meta and meta.create_revision, token))
        return token

    def close(self):
        self.client.close()


class ZooKeeperHolders:
    """The holder of lock L is the lowest sequential child of L; the previous holder's znode is
    deleted before the next is created, so the new one is the only (lowest) child."""

    def __init__(self, server):
        self.zk = server.client()
        self.current = {}

    def next(self, key):
        parent = "%s/%s" % (LOCK_PREFIX, key)
        if key in self.current:
            self.zk.delete(self.current[key])
        path = self.zk.create(parent + "/" + uuid.uuid4().hex + "__lock__", b"",
                              ephemeral=True, sequence=True, makepath=True)
        self.current[key] = path
        return self.zk.exists(path).czxid

    def close(self):
        self.zk.stop()
        self.zk.close()


# ---------------------------------------------------------------------------------------------

def proxy_config(path, port, admin_port, backend_port, state_file, routes, etcd, zk):
    lines = ["# fencing-proxy for bench/verify.py (written by it)",
             'listen: "127.0.0.1:%d"' % port,
             'admin_listen: "127.0.0.1:%d"' % admin_port,
             'backend: "http://127.0.0.1:%d"' % backend_port,
             'state_file: "%s"' % state_file,
             "threads: 1",
             "access_log: false"]
    if etcd or zk:
        lines.append("lock_services:")
        if etcd:
            lines.append('  etcd: {etcd: {endpoints: ["%s"], timeout: %s}}' % (etcd.url, SERVICE_TIMEOUT))
        if zk:
            lines.append('  zk: {zookeeper: {hosts: "%s", timeout: %s}}' % (zk.hosts, SERVICE_TIMEOUT))
    lines.append("routes:")
    for r in routes:
        lines += ["  - name: %s" % r, "    prefix: /%s" % r, "    fence_key: {path_segment: 1}"]
        if r != "plain":
            lines.append('    verify: {service: %s, lock: "%s/{key}"}' % (r, LOCK_PREFIX))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


class VerifyBench:
    def __init__(self, args, sup, workdir):
        self.args, self.sup, self.w = args, sup, workdir
        self.servers = []

    def start_backend(self):
        self.backend, self.backend_port = start_nginx_backend(self.sup, self.w)

    def start_proxy(self, run_dir, etcd, zk):
        self.port, self.admin_port = free_ports(2)
        state_dir = os.path.join(run_dir, "state")
        os.makedirs(state_dir)
        cfg = proxy_config(os.path.join(run_dir, "fencing-proxy.yaml"), self.port, self.admin_port,
                           self.backend_port, os.path.join(state_dir, "fences.log"),
                           self.args.routes, etcd, zk)
        check = subprocess.run([self.args.binary, "--check", "--config", cfg], capture_output=True,
                               text=True, timeout=30, stdin=subprocess.DEVNULL)
        if check.returncode != 0:
            raise BenchError("this binary rejects the config (--check): %s"
                             % (check.stdout + check.stderr).strip()[-2000:])
        with open(self.args.binary, "rb") as f:     # each run starts the file anew: say which
            self.binary_sha256 = hashlib.sha256(f.read()).hexdigest()
        self.log_path = os.path.join(run_dir, "fencing-proxy.out")
        self.proxy = self.sup.spawn("fencing-proxy", [self.args.binary, "--config", cfg], self.log_path)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proxy.poll() is None:
            try:
                if http_get(self.admin_port, "/readyz", timeout=2.0)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        with open(self.log_path, "rb") as f:
            tail = f.read()[-3000:].decode("utf-8", "replace")
        raise BenchError("fencing-proxy not ready (exit %s):\n%s" % (self.proxy.poll(), tail))

    def stop_proxy(self):
        code = self.sup.stop(self.proxy, timeout=30)
        if code not in (0, -signal.SIGTERM):
            raise BenchError("fencing-proxy exited with %s when stopped (log %s)" % (code, self.log_path))

    def run_once(self, n):
        a = self.args
        run_dir = os.path.join(self.w, "run-%d" % n)
        os.makedirs(run_dir)
        etcd = zk = None
        holders = {}
        conns = {}
        try:
            if "etcd" in a.routes:
                etcd = lockservices.EtcdServer()
                self.servers.append(etcd)
                holders["etcd"] = EtcdHolders(etcd)
            if "zk" in a.routes:
                zk = lockservices.ZooKeeperServer()
                self.servers.append(zk)
                holders["zk"] = ZooKeeperHolders(zk)
            if "plain" in a.routes:
                holders["plain"] = PlainHolders()
            self.start_proxy(run_dir, etcd, zk)
            conns = {r: http.client.HTTPConnection("127.0.0.1", self.port, timeout=30) for r in a.routes}
            keys = ["k%d" % i for i in range(a.keys)]

            def put(route, key, token):
                conn = conns[route]
                t0 = time.perf_counter()
                conn.request("PUT", "/%s/%s" % (route, key), body=BODY,
                             headers={"X-Fencing-Token": str(token)})
                resp = conn.getresponse()
                body = resp.read()
                took = time.perf_counter() - t0
                if resp.status != 200:
                    raise BenchError("PUT /%s/%s token %d -> %d %r"
                                     % (route, key, token, resp.status, body[:300]))
                return took

            samples = {r: {"raise": [], "equal": []} for r in a.routes}
            before = None
            for i in range(a.warmup + a.handovers):
                if i == a.warmup:
                    before = scrape(self.admin_port)
                    t_start = time.monotonic()
                key = keys[i % len(keys)]
                for route in a.routes:
                    token = holders[route].next(key)
                    raised = put(route, key, token)
                    equal = put(route, key, token)
                    if i >= a.warmup:
                        samples[route]["raise"].append(raised)
                        samples[route]["equal"].append(equal)
            elapsed = time.monotonic() - t_start
            after = scrape(self.admin_port)
            return self.summarize(n, samples, before, after, elapsed)
        finally:
            for c in conns.values():
                c.close()
            if getattr(self, "proxy", None) is not None and self.proxy.poll() is None:
                self.stop_proxy()
            for h in holders.values():
                try:
                    h.close()
                except Exception:  # a client of a server that is going away anyway
                    pass
            while self.servers:
                self.servers.pop().stop()

    def summarize(self, n, samples, before, after, elapsed):
        a = self.args
        out = {"run": n, "seconds": round(elapsed, 1), "binary_sha256": self.binary_sha256,
               "client_ms": {}, "verification": {}}
        for route, s in samples.items():
            out["client_ms"][route] = {"raise": summary_ms(s["raise"]), "equal": summary_ms(s["equal"])}
        for route in a.routes:
            raises = metric(after, "fencing_proxy_token_raises_total", fence=route) - \
                metric(before, "fencing_proxy_token_raises_total", fence=route)
            if raises != a.handovers:
                raise BenchError("fence %s: %d raises counted, %d sent" % (route, raises, a.handovers))
            if route == "plain":
                continue
            results = {res: metric(after, "fencing_proxy_lock_service_requests_total", service=route, result=res)
                       - metric(before, "fencing_proxy_lock_service_requests_total", service=route, result=res)
                       for res in ("verified", "rejected", "unavailable")}
            # one verification per raise, none for the equal tokens
            if results != {"verified": a.handovers, "rejected": 0, "unavailable": 0}:
                raise BenchError("service %s: lock service requests %s, expected %d verified"
                                 % (route, results, a.handovers))
            count, total, buckets = histogram_delta(before, after, "fencing_proxy_lock_service_seconds",
                                                    service=route)
            if count != a.handovers:
                raise BenchError("service %s: lock_service_seconds counted %d, expected %d"
                                 % (route, count, a.handovers))
            v = {"n": int(count), "mean_ms": round(total / count * 1e3, 3),
                 "p50_ms_from_buckets": round(bucket_quantile(0.5, buckets) * 1e3, 3),
                 "p99_ms_from_buckets": round(bucket_quantile(0.99, buckets) * 1e3, 3),
                 "buckets": [[ub if ub != float("inf") else "+Inf", int(c)] for ub, c in buckets]}
            if "plain" in samples:
                v["raise_p50_minus_plain_ms"] = round(
                    out["client_ms"][route]["raise"]["p50"] - out["client_ms"]["plain"]["raise"]["p50"], 3)
            out["verification"][route] = v
        return out


# ---------------------------------------------------------------------------------------------
# Report

def median_run(runs):
    """The run in the middle by its verified raises' p50 (their sum; /plain's without them)."""
    def score(r):
        verified = [r["client_ms"][x]["raise"]["p50"] for x in ("etcd", "zk") if x in r["client_ms"]]
        return sum(verified) if verified else r["client_ms"]["plain"]["raise"]["p50"]
    ordered = sorted(runs, key=score)
    return ordered[(len(ordered) - 1) // 2]


def markdown(run, runs, args):
    f = lambda x: "%.2f" % x  # noqa: E731
    lines = ["| request | route | p50 ms | p90 ms | p99 ms | max ms |", "|---|---|---:|---:|---:|---:|"]
    for kind, label in (("raise", "raise (new holder's token)"), ("equal", "equal token")):
        for route in args.routes:
            s = run["client_ms"][route][kind]
            lines.append("| %s | `/%s` | %s | %s | %s | %s |"
                         % (label, route, f(s["p50"]), f(s["p90"]), f(s["p99"]), f(s["max"])))
    if run["verification"]:
        lines += ["", "| verification step | mean ms | p50 ms (buckets) | p99 ms (buckets) |"
                  " raise p50 − `/plain` raise p50, ms |", "|---|---:|---:|---:|---:|"]
        for route, v in run["verification"].items():
            lines.append("| %s (`lock_service_seconds`) | %s | %s | %s | %s |"
                         % (route, f(v["mean_ms"]), f(v["p50_ms_from_buckets"]), f(v["p99_ms_from_buckets"]),
                            f(v["raise_p50_minus_plain_ms"]) if "raise_p50_minus_plain_ms" in v else "–"))
    if len(runs) > 1:
        cols = [(r, k) for k in ("raise",) for r in args.routes]
        lines += ["", "| run | " + " | ".join("`/%s` %s p50 / p99 ms" % (r, k) for r, k in cols) + " |",
                  "|---|" + "---:|" * len(cols)]
        for r in runs:
            mark = " (reported)" if r is run else ""
            lines.append("| %d%s | " % (r["run"], mark) + " | ".join(
                "%s / %s" % (f(r["client_ms"][x][k]["p50"]), f(r["client_ms"][x][k]["p99"])) for x, k in cols)
                + " |")
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--binary", default=os.path.join(REPO, "build", "proxy", "fencing-proxy"))
    p.add_argument("--handovers", type=int, default=500, help="hand-overs per route and run (default 500)")
    p.add_argument("--keys", type=int, default=1, help="distinct keys, round-robin (default 1)")
    p.add_argument("--runs", type=int, default=3, help="runs, each with fresh processes (default 3)")
    p.add_argument("--warmup", type=int, default=20, help="hand-overs per route before timing (default 20)")
    p.add_argument("--routes", default=",".join(ROUTES), help="a subset of plain,etcd,zk (default all)")
    p.add_argument("--json", help="results file (default bench/results/<UTC time>-verify.json)")
    p.add_argument("--keep-workdir", action="store_true")
    a = p.parse_args(argv)
    a.routes = [r for r in a.routes.split(",") if r]
    if not a.routes or any(r not in ROUTES for r in a.routes) or len(set(a.routes)) != len(a.routes):
        p.error("--routes: a subset of %s" % ",".join(ROUTES))
    if a.handovers < 1 or a.keys < 1 or a.runs < 1 or a.warmup < 0:
        p.error("--handovers, --keys and --runs must be at least 1, --warmup at least 0")
    a.binary = os.path.abspath(a.binary)
    return a


def main(argv):
    args = parse_args(argv)
    if not os.access(args.binary, os.X_OK):
        raise BenchError("fencing-proxy binary not found at %s" % args.binary)
    if not find_tool("nginx"):
        raise BenchError("nginx not installed (bench/run.sh installs it)")
    missing = [m for m in ((lockservices.missing_etcd() if "etcd" in args.routes else None),
                           (lockservices.missing_zookeeper() if "zk" in args.routes else None)) if m]
    if missing:
        raise BenchError("; ".join(missing))
    sup = supervised()
    workdir = tempfile.mkdtemp(prefix="fp-verify-")
    os.chmod(workdir, 0o755)
    started = time.monotonic()
    env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "binary": args.binary, "load_average_start": [round(x, 2) for x in os.getloadavg()],
           "cpus": os.cpu_count()}
    log("fencing-proxy verified-raises bench: routes %s, %d hand-overs x %d runs, %d key(s); "
        "load average %s" % (",".join(args.routes), args.handovers, args.runs, args.keys,
                             env["load_average_start"]))
    bench = VerifyBench(args, sup, workdir)
    runs, failure, report = [], None, None
    try:
        bench.start_backend()
        for n in range(1, args.runs + 1):
            r = bench.run_once(n)
            runs.append(r)
            log("run %d (%.0f s): " % (n, r["seconds"]) + "; ".join(
                "/%s raise p50 %.2f p99 %.2f ms, equal p50 %.2f ms"
                % (x, s["raise"]["p50"], s["raise"]["p99"], s["equal"]["p50"])
                for x, s in r["client_ms"].items()))
        chosen = median_run(runs)
        report = markdown(chosen, runs, args)
        log("\nrun %d of %d (the median run), %d hand-overs per route:\n\n%s\n"
            % (chosen["run"], len(runs), args.handovers, report))
    except (BenchError, Interrupted, OSError, subprocess.SubprocessError, KeyError, ValueError,
            lockservices.LockServiceError) as e:
        failure = "%s: %s" % (type(e).__name__, e)
        log("ERROR " + failure)
    finally:
        for s in bench.servers:
            s.stop()
        sup.stop_all()
    results = {"runs": runs, "median_run": median_run(runs)["run"] if runs else None, "markdown": report}
    return finish_standalone("verify", args, env, started, failure, results, workdir, markdown=report)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print("verify bench: %s" % e, file=sys.stderr)
        sys.exit(2)
