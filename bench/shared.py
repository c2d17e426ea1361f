#!/usr/bin/env python3
"""Shared fences (issue 14): what keeping the fences in etcd costs a raise and an equal token.

On 127.0.0.1: one etcd (Debian's /usr/bin/etcd, started as tests/integration/lockservices.py
starts it: a free port, a temporary data directory), the bench backend (nginx, `return 200`),
and fencing-proxy processes (threads: 1, access_log: false) with two plain routes:

  /raise/1   the fence the hand-overs raise
  /eq/1      the fence the equal-token load writes (raised once to 1000 before it is measured)

Two measurements, in rounds:

  raise latency   N proxies (1 and 3, --members) with one fence_store prefix (a fresh prefix per
                  round and N), in front of the one backend. HANDOVERS serial hand-overs: each
                  PUT carries the previous token + 1 and goes to the next proxy, round-robin
                  (with 3 members every raise meets the other two, which must drain and
                  acknowledge it). Client-side time from the request's first byte to the
                  response's last, over one keep-alive connection per proxy; the raiser's own
                  view from fencing_proxy_fence_store_seconds{op="raise"} (scraped before and
                  after; mean exact, p50/p99 from its buckets).
  throughput      PUTs with the equal token through one proxy, wrk as bench/run.py drives it
                  (bench/lua/put_equal.lua, 32 connections, 1 wrk thread): one proxy with the
                  etcd store (its own prefix, 1 member) against one with the file store
                  (state_file), the two interleaved, alternating which goes first. The goal:
                  the etcd store within 3% of the file store (the median of the per-round
                  ratios >= 0.97): equal tokens never touch etcd.

After each hand-over run every proxy of the prefix must show the last token as the fence's
max_token (/fences/raise): the fence is one. Every process it starts is stopped by PID on any
exit.

  python3 bench/shared.py                                 300 hand-overs, 5 s wrk, 3 rounds
  python3 bench/shared.py --handovers 30 --seconds 2 --rounds 1     a check of the script
  python3 bench/shared.py --members 3 --skip-throughput

Each round starts its proxies afresh (etcd and the backend stay); the report gives the median
over rounds of each figure, with every round's. Needs a fencing-proxy built with shared fences.
See bench/README.md.
"""

import argparse
import datetime
import hashlib
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import (BenchError, Interrupted, finish_standalone, find_tool, supervised, free_ports,  # noqa: E402
                 start_nginx_backend, http_get, http_put, log, version_of, LUA_DIR, REPO, EQUAL_TOKEN, EQ_PATH)
from verify import scrape, metric, histogram_delta, bucket_quantile, summary_ms  # noqa: E402

# etcd is started by the integration tests' own code.
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import lockservices  # noqa: E402

RAISE_PATH = "/raise/1"
BODY = b"v" * 128
PREFIX_ROOT = "/fencing-proxy-bench"
READY_TIMEOUT = 30.0     # a proxy registers in etcd and loads its prefix before /readyz is 200
SYNC_TIMEOUT = 10.0      # every member sees the last commit on its watch within this


# ---------------------------------------------------------------------------------------------
# Proxies

def proxy_config(path, port, admin_port, backend_port, store, member_ttl):
    """store: ("etcd", endpoint URL, prefix) or ("file", state file path)."""
    lines = ["# fencing-proxy for bench/shared.py (written by it)",
             'listen: "127.0.0.1:%d"' % port,
             'admin_listen: "127.0.0.1:%d"' % admin_port,
             'backend: "http://127.0.0.1:%d"' % backend_port,
             "threads: 1",
             "access_log: false"]
    if store[0] == "etcd":
        lines += ["fence_store:",
                  '  etcd: {endpoints: ["%s"], prefix: "%s", member_ttl: %s}' % (store[1], store[2], member_ttl)]
    else:
        lines.append('state_file: "%s"' % store[1])
    lines += ["routes:",
              "  - name: raise", "    prefix: /raise",
              "  - name: eq", "    prefix: /eq"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


class Proxy:
    def __init__(self, name, proc, port, admin_port, log_path):
        self.name, self.proc, self.port, self.admin_port, self.log_path = name, proc, port, admin_port, log_path
        self.conn = None

    def put(self, path, token):
        """One PUT on this proxy's keep-alive connection -> seconds; anything but 200 is an error."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        t0 = time.perf_counter()
        self.conn.request("PUT", path, body=BODY, headers={"X-Fencing-Token": str(token)})
        resp = self.conn.getresponse()
        body = resp.read()
        took = time.perf_counter() - t0
        if resp.status != 200:
            raise BenchError("%s: PUT %s X-Fencing-Token: %d -> HTTP %d %r"
                             % (self.name, path, token, resp.status, body[:300]))
        return took

    def fence(self, name):
        status, body = http_get(self.admin_port, "/fences/" + name, timeout=5.0)
        if status != 200:
            raise BenchError("%s: /fences/%s answered %d" % (self.name, name, status))
        return json.loads(body)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class SharedBench:
    def __init__(self, args, sup, workdir):
        self.args, self.sup, self.w = args, sup, workdir
        self.etcd = None
        self.started = 0
        self.load_cpu, self.proxy_cpu = self._cpus()

    def _cpus(self):
        """As bench/run.py: this script and wrk on one core, the proxies and the backend on
        another (etcd is not pinned: it serves the raises, not the equal-token load)."""
        allowed = sorted(os.sched_getaffinity(0))
        if self.args.no_pin or len(allowed) < 2:
            if not self.args.no_pin:
                log("warning: %d CPU(s) available, running without pinning" % len(allowed))
            return None, None
        os.sched_setaffinity(0, {allowed[0]})
        return allowed[0], allowed[1]

    def start_shared(self):
        self.etcd = lockservices.EtcdServer()
        self.backend, self.backend_port = start_nginx_backend(self.sup, self.w, cpu=self.proxy_cpu)

    def start_proxy(self, tag, store):
        self.started += 1
        port, admin_port = free_ports(2)
        # The route file in a directory of its own: fencing-proxy watches that directory for
        # reloads, and its log and state file beside it would wake the watcher.
        run_dir = os.path.join(self.w, "proxy-%03d-%s" % (self.started, tag))
        cfg_dir = os.path.join(run_dir, "config")
        os.makedirs(cfg_dir)
        if store[0] == "file":
            store = ("file", os.path.join(run_dir, "fences.log"))
        cfg = proxy_config(os.path.join(cfg_dir, "fencing-proxy.yaml"), port, admin_port, self.backend_port,
                           store, self.args.member_ttl)
        check = subprocess.run([self.args.binary, "--check", "--config", cfg], capture_output=True,
                               text=True, timeout=30, stdin=subprocess.DEVNULL)
        if check.returncode != 0:
            raise BenchError("this binary rejects the config (--check; built before shared fences?): %s"
                             % (check.stdout + check.stderr).strip()[-2000:])
        log_path = os.path.join(run_dir, "fencing-proxy.out")
        proc = self.sup.spawn("fencing-proxy", [self.args.binary, "--config", cfg], log_path, cpu=self.proxy_cpu)
        proxy = Proxy("%s#%d" % (tag, self.started), proc, port, admin_port, log_path)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if http_get(admin_port, "/readyz", timeout=2.0)[0] == 200:
                    return proxy
            except OSError:
                pass
            time.sleep(0.02)
        raise BenchError("%s not ready (exit %s):\n%s" % (proxy.name, proc.poll(), tail(log_path)))

    def stop_proxy(self, proxy):
        proxy.close()
        code = self.sup.stop(proxy.proc, timeout=30)
        if code not in (0, -signal.SIGTERM):
            raise BenchError("%s exited with %s when stopped (log %s)" % (proxy.name, code, proxy.log_path))

    def wait_members(self, proxies, n):
        """Every proxy's watch sees all n members (so that every raise meets all of them)."""
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            seen = [metric(scrape(p.admin_port), "fencing_proxy_fence_store_members") for p in proxies]
            if all(s == n for s in seen):
                return
            if time.monotonic() > deadline:
                raise BenchError("fence_store_members %s, expected %d on every proxy" % (seen, n))
            time.sleep(0.05)

    # -- raise latency ---------------------------------------------------------------------

    def raise_run(self, round_no, n):
        a = self.args
        prefix = "%s/r%d-n%d-%d" % (PREFIX_ROOT, round_no, n, os.getpid())
        proxies = []
        try:
            for i in range(n):
                proxies.append(self.start_proxy("raise-n%d" % n, ("etcd", self.etcd.url, prefix)))
            self.wait_members(proxies, n)
            before = [scrape(p.admin_port) for p in proxies]
            token, samples = 0, []
            t_start = time.monotonic()
            for i in range(a.warmup + a.handovers):
                if i == a.warmup:
                    before = [scrape(p.admin_port) for p in proxies]
                    t_start = time.monotonic()
                token += 1
                took = proxies[i % n].put(RAISE_PATH, token)
                if i >= a.warmup:
                    samples.append(took)
            elapsed = time.monotonic() - t_start
            after = [scrape(p.admin_port) for p in proxies]
            self.check_one_fence(proxies, "raise", token)
            return self.summarize_raises(round_no, n, samples, before, after, elapsed)
        finally:
            for p in proxies:
                if p.proc.poll() is None:
                    self.stop_proxy(p)

    def check_one_fence(self, proxies, fence, token):
        deadline = time.monotonic() + SYNC_TIMEOUT
        while True:
            seen = [p.fence(fence).get("max_token") for p in proxies]
            if all(s == token for s in seen):
                return
            if time.monotonic() > deadline:
                raise BenchError("fence %s: max_token %s on the proxies of one prefix, the last raise was %d"
                                 % (fence, seen, token))
            time.sleep(0.05)

    def summarize_raises(self, round_no, n, samples, before, after, elapsed):
        count = total = 0.0
        merged = {}
        for b, aft in zip(before, after):
            c, s, buckets = histogram_delta(b, aft, "fencing_proxy_fence_store_seconds", op="raise")
            count += c
            total += s
            for ub, cum in buckets:
                merged[ub] = merged.get(ub, 0.0) + cum
        buckets = sorted(merged.items())
        out = {"round": round_no, "members": n, "seconds": round(elapsed, 1), "client_ms": summary_ms(samples),
               "raises_per_s": round(len(samples) / elapsed, 1) if elapsed else None}
        if count:
            out["fence_store_raise"] = {
                "n": int(count), "mean_ms": round(total / count * 1e3, 3),
                "p50_ms_from_buckets": round(bucket_quantile(0.5, buckets) * 1e3, 3),
                "p99_ms_from_buckets": round(bucket_quantile(0.99, buckets) * 1e3, 3)}
        return out

    # -- equal-token throughput ------------------------------------------------------------

    def start_throughput_targets(self):
        prefix = "%s/eq-%d" % (PREFIX_ROOT, os.getpid())
        self.targets = {"etcd": self.start_proxy("eq-etcd", ("etcd", self.etcd.url, prefix)),
                        "file": self.start_proxy("eq-file", ("file", None))}
        self.wait_members([self.targets["etcd"]], 1)
        for name, t in self.targets.items():
            status, body = http_put(t.port, EQ_PATH, EQUAL_TOKEN)
            if status // 100 != 2:
                raise BenchError("%s: priming PUT %s X-Fencing-Token: %s -> HTTP %d %r"
                                 % (name, EQ_PATH, EQUAL_TOKEN, status, body[:300]))

    def wrk(self, target, seconds, tag):
        """One wrk run of put_equal.lua against target, as bench/run.py runs it -> its result."""
        out = os.path.join(self.w, "wrk-%s.txt" % tag)
        argv = [find_tool("wrk"), "-t", "1", "-c", str(self.args.connections), "-d", "%gs" % seconds,
                "--latency", "--timeout", "5s", "-s", os.path.join(LUA_DIR, "put_equal.lua"),
                "http://127.0.0.1:%d" % target.port, "--", EQUAL_TOKEN, EQ_PATH]
        env = dict(os.environ, BENCH_CHECK_STATUS="1")   # every non-2xx is counted
        proc = self.sup.spawn("wrk", argv, out, env=env)  # inherits this script's core
        try:
            proc.wait(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            self.sup.stop(proc, signal.SIGKILL)
            raise BenchError("wrk did not finish (output in %s)" % out)
        self.sup.stop(proc)
        with open(out, encoding="utf-8", errors="replace") as f:
            text = f.read()
        m = re.search(r"^BENCH_RESULT (\{.*\})$", text, re.M)
        if proc.returncode != 0 or not m:
            raise BenchError("wrk failed (exit %s); output %s:\n%s" % (proc.returncode, out, text[-3000:]))
        r = json.loads(m.group(1))
        seconds_run = r["duration_us"] / 1e6
        bad = r["non2xx"] + sum(v for k, v in r["errors"].items() if k != "status")
        if bad:
            raise BenchError("%s: %d non-2xx or socket errors under wrk; first: %s"
                             % (target.name, bad, r["first_non2xx"]))
        return {"rps": round(r["requests"] / seconds_run, 1) if seconds_run else 0.0,
                "p50_us": r["latency_us"]["p50"], "p99_us": r["latency_us"]["p99"], "requests": r["requests"]}

    def throughput_round(self, round_no):
        order = ["etcd", "file"] if round_no % 2 else ["file", "etcd"]
        out = {"round": round_no, "order": order}
        for name in order:
            if self.args.warmup_seconds > 0:
                self.wrk(self.targets[name], self.args.warmup_seconds, "r%d-%s-warmup" % (round_no, name))
            out[name] = self.wrk(self.targets[name], self.args.seconds, "r%d-%s" % (round_no, name))
        out["etcd_over_file"] = round(out["etcd"]["rps"] / out["file"]["rps"], 4) if out["file"]["rps"] else None
        return out


def tail(path):
    try:
        with open(path, "rb") as f:
            return f.read()[-3000:].decode("utf-8", "replace")
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# Report

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(raises, rounds, args):
    s = {"raise": {}, "throughput": None}
    for n in args.members:
        rs = [r for r in raises if r["members"] == n]
        if not rs:
            continue
        fsr = [r["fence_store_raise"] for r in rs if "fence_store_raise" in r]
        s["raise"][str(n)] = {
            "rounds": len(rs),
            "client_p50_ms": med([r["client_ms"]["p50"] for r in rs]),
            "client_p99_ms": med([r["client_ms"]["p99"] for r in rs]),
            "client_max_ms": max(r["client_ms"]["max"] for r in rs),
            "raises_per_s": med([r["raises_per_s"] for r in rs]),
            "store_p50_ms": med([f["p50_ms_from_buckets"] for f in fsr]),
            "store_p99_ms": med([f["p99_ms_from_buckets"] for f in fsr]),
        }
    if rounds:
        ratio = med([r["etcd_over_file"] for r in rounds])
        s["throughput"] = {"rounds": len(rounds),
                           "etcd_rps": med([r["etcd"]["rps"] for r in rounds]),
                           "file_rps": med([r["file"]["rps"] for r in rounds]),
                           "etcd_over_file_median": ratio,
                           "goal_within_3pct": ratio is not None and ratio >= 0.97}
    return s


def markdown(s, raises, rounds, args):
    f = lambda x: "–" if x is None else "%.2f" % x  # noqa: E731
    lines = []
    if s["raise"]:
        lines += ["| raise (serial hand-overs, round-robin) | members | client p50 ms | client p99 ms | max ms |"
                  " raises/s | `fence_store_seconds{op=\"raise\"}` p50 / p99 ms (buckets) |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for n, r in s["raise"].items():
            lines.append("| median of %d round(s), %d hand-overs each | %s | %s | %s | %s | %s | %s / %s |"
                         % (r["rounds"], args.handovers, n, f(r["client_p50_ms"]), f(r["client_p99_ms"]),
                            f(r["client_max_ms"]), f(r["raises_per_s"]), f(r["store_p50_ms"]), f(r["store_p99_ms"])))
        lines += ["", "| round | members | client p50 / p99 ms |", "|---:|---:|---:|"]
        for r in raises:
            lines.append("| %d | %d | %s / %s |" % (r["round"], r["members"], f(r["client_ms"]["p50"]),
                                                   f(r["client_ms"]["p99"])))
    if s["throughput"]:
        t = s["throughput"]
        lines += ["", "| PUT equal token, %d conns, one proxy | etcd store req/s | file store req/s | etcd / file |"
                  % args.connections, "|---|---:|---:|---:|",
                  "| median of %d round(s), %g s each | %.0f | %.0f | %.3f (goal >= 0.97: %s) |"
                  % (t["rounds"], args.seconds, t["etcd_rps"], t["file_rps"], t["etcd_over_file_median"],
                     "met" if t["goal_within_3pct"] else "NOT met"),
                  "", "| round | first | etcd req/s | file req/s | etcd / file | etcd p99 µs | file p99 µs |",
                  "|---:|---|---:|---:|---:|---:|---:|"]
        for r in rounds:
            lines.append("| %d | %s | %.0f | %.0f | %.3f | %d | %d |"
                         % (r["round"], r["order"][0], r["etcd"]["rps"], r["file"]["rps"], r["etcd_over_file"],
                            r["etcd"]["p99_us"], r["file"]["p99_us"]))
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--binary", default=os.path.join(REPO, "build", "proxy", "fencing-proxy"))
    p.add_argument("--members", default="1,3", help="proxies sharing the prefix in the raise runs (default 1,3)")
    p.add_argument("--handovers", type=int, default=300, help="timed hand-overs per raise run (default 300)")
    p.add_argument("--warmup", type=int, default=20, help="hand-overs before timing (default 20)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every measurement (default 3)")
    p.add_argument("--seconds", type=float, default=5.0, help="wrk duration per throughput run (default 5)")
    p.add_argument("--warmup-seconds", type=float, default=1.0, help="untimed wrk run before each (default 1)")
    p.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    p.add_argument("--member-ttl", default="10s", help="fence_store member_ttl (default 10s)")
    p.add_argument("--skip-raises", action="store_true", help="only the throughput comparison")
    p.add_argument("--skip-throughput", action="store_true", help="only the raise latency")
    p.add_argument("--no-pin", action="store_true", help="do not pin wrk and the proxies to CPUs")
    p.add_argument("--json", help="results file (default bench/results/<UTC time>-shared.json)")
    p.add_argument("--keep-workdir", action="store_true")
    a = p.parse_args(argv)
    try:
        a.members = [int(x) for x in a.members.split(",") if x]
    except ValueError:
        p.error("--members: numbers, comma-separated (1,3)")
    if not a.members or any(n < 1 for n in a.members):
        p.error("--members: at least one count, each at least 1")
    if a.handovers < 1 or a.rounds < 1 or a.warmup < 0 or a.seconds <= 0 or a.connections < 1:
        p.error("--handovers, --rounds and --connections must be at least 1, --seconds above 0, --warmup at least 0")
    if a.skip_raises and a.skip_throughput:
        p.error("--skip-raises and --skip-throughput leave nothing to measure")
    if not re.fullmatch(r"\d+s", a.member_ttl):
        p.error("--member-ttl: whole seconds, e.g. 10s")
    a.binary = os.path.abspath(a.binary)
    return a


def main(argv):
    args = parse_args(argv)
    if not os.access(args.binary, os.X_OK):
        raise BenchError("fencing-proxy binary not found at %s" % args.binary)
    missing = [what for what, ok in (("nginx (bench/run.sh installs it)", find_tool("nginx")),
                                     ("wrk", args.skip_throughput or find_tool("wrk")),
                                     ("taskset (util-linux)", args.no_pin or find_tool("taskset")),
                                     ("etcd (Debian package etcd-server)", lockservices.ETCD)) if not ok]
    if missing:
        raise BenchError("missing: " + ", ".join(missing))
    sup = supervised()
    workdir = tempfile.mkdtemp(prefix="fp-shared-")
    os.chmod(workdir, 0o755)
    started = time.monotonic()
    with open(args.binary, "rb") as f:
        binary_sha256 = hashlib.sha256(f.read()).hexdigest()
    env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "binary": args.binary, "binary_sha256": binary_sha256,
           "load_average_start": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    log("fencing-proxy shared-fences bench: members %s, %d hand-overs, %d round(s), wrk %g s x %d conns; "
        "load average %s" % (",".join(map(str, args.members)), args.handovers, args.rounds, args.seconds,
                             args.connections, env["load_average_start"]))
    bench = SharedBench(args, sup, workdir)
    raises, rounds, failure, report, summary = [], [], None, None, None
    try:
        bench.start_shared()
        env["etcd"] = version_of([lockservices.ETCD, "--version"])
        env["pinning"] = {"wrk": bench.load_cpu, "proxies_and_backend": bench.proxy_cpu}
        if not args.skip_throughput:
            bench.start_throughput_targets()
        for rnd in range(1, args.rounds + 1):
            if not args.skip_raises:
                # Alternate the member counts' order too, so that drift hits them alike.
                for n in (args.members if rnd % 2 else list(reversed(args.members))):
                    r = bench.raise_run(rnd, n)
                    raises.append(r)
                    log("round %d, %d member(s): raise p50 %.2f p99 %.2f ms (%.0f raises/s)"
                        % (rnd, n, r["client_ms"]["p50"], r["client_ms"]["p99"], r["raises_per_s"] or 0))
            if not args.skip_throughput:
                t = bench.throughput_round(rnd)
                rounds.append(t)
                log("round %d, equal tokens: etcd store %.0f req/s, file store %.0f req/s (%.3f)"
                    % (rnd, t["etcd"]["rps"], t["file"]["rps"], t["etcd_over_file"]))
        summary = summarize(raises, rounds, args)
        report = markdown(summary, raises, rounds, args)
        log("\n%s\n" % report)
    except (BenchError, Interrupted, OSError, subprocess.SubprocessError, KeyError, ValueError,
            lockservices.LockServiceError) as e:
        failure = "%s: %s" % (type(e).__name__, e)
        log("ERROR " + failure)
    finally:
        for t in getattr(bench, "targets", {}).values():
            t.close()
        sup.stop_all()
        if bench.etcd is not None:
            bench.etcd.stop()
    results = {"raise_runs": raises, "throughput_rounds": rounds, "summary": summary, "markdown": report}
    return finish_standalone("shared", args, env, started, failure, results, workdir, markdown=report)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print("shared bench: %s" % e, file=sys.stderr)
        sys.exit(2)
