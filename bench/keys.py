#!/usr/bin/env python3
"""A million fence keys through the real binary: load time, RSS per key, restart, compaction.

On 127.0.0.1: the bench backend (nginx, `return 200`, no recording) and fencing-proxy with a
keyed route (`keys`, fence_key path_segment 1) and two unkeyed ones for side clients.

  (a) load: KEYS new keys of 16 bytes, each raised once over HTTP (wrk, bench/lua/load_keys.lua,
      many connections: group commit), until fencing_proxy_fence_keys says KEYS; the compactions
      the growing log made on the way are counted
  (b) RSS per key: VmRSS with KEYS idle keys (after the sweep folded every Fence back) minus
      VmRSS of a fresh process with an empty state, / KEYS; for the process that loaded them and
      for a process restarted on the file
  (c) restart: process start to /readyz 200 with the KEYS-key state file (several times,
      median), and the file's size
  (d) compaction at KEYS keys: the log is made due for compaction (its records appended to it
      again, so it is 5x its live snapshot: what repeated raises of every key would leave), the
      proxy restarted on it, and a raise starts the compaction. Two side clients, each its own
      process with one keep-alive connection, record every request's latency: equal-token PUTs
      on route side (admissions, no disk) and serial raises on route sideraise (each waits for
      the state writer: the hand-over stall shows there). Compared with the same clients on the
      same keys without a compaction. RSS after the compaction (at once and after --idle-seconds)
      against the same keys in the restarted process; the writer's own longest hand-over
      (fencing_proxy_state_compaction_stall_seconds, where the binary exports it).
  (e) forgetting burst: a process restarted with forget_idle_keys_after (--forget-after), so
      every key falls idle at the same instant; --forget-keep keys are kept in use; the serial
      raises on sideraise time the burst. RSS after it, against a process restarted on the
      file that is left (the same keys, fresh).

  --check fails the run (exit 1) when a stall exceeds its bound or RSS after a compaction or a
  forgetting burst exceeds --max-rss-ratio x the same keys in a freshly restarted process.
  --save-state FILE keeps the loaded file; --state-from FILE skips (a) and starts from it.

  python3 bench/keys.py                       1,000,000 keys (a few minutes)
  python3 bench/keys.py --keys 20000 --quick  a short check of the script itself

Every process it starts is stopped by PID on any exit. See bench/README.md.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import (BenchError, Interrupted, finish_standalone, find_tool, supervised, free_ports, start_nginx_backend,  # noqa: E402
                 http_get, http_put, log, render, scrape_metrics, vm_status, LUA_DIR, REPO,
                 PROC_TIMEOUT)

SIDE_TOKEN = 1000
HEADER_BYTES = 16        # the state file's header (proxy/state/FORMAT.md)
BLOAT_COPIES = 4         # the log's records appended this many times more: 5x the snapshot


# ---------------------------------------------------------------------------------------------
# Side client: its own process (no GIL shared with the poller), one keep-alive connection,
# every request timed: [send time (CLOCK_MONOTONIC, shared by processes), latency s, status].

def side_client(argv):
    import http.client
    mode, port, path, token, seconds, out = argv[0], int(argv[1]), argv[2], int(argv[3]), \
        float(argv[4]), argv[5]
    stop_file = out + ".stop"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = b"s" * 128
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not os.path.exists(stop_file):
        if mode == "raise":
            token += 1
        t0 = time.monotonic()
        conn.request("PUT", path, body=body, headers={"X-Fencing-Token": str(token)})
        resp = conn.getresponse()
        resp.read()
        samples.append((t0, time.monotonic() - t0, resp.status))
    conn.close()
    with open(out, "w") as f:
        json.dump({"mode": mode, "last_token": token, "samples": samples}, f)
    return 0


# ---------------------------------------------------------------------------------------------

def metrics(admin_port):
    return scrape_metrics(admin_port, timeout=10.0)


def metric(samples, name, **labels):
    want = tuple(sorted(labels.items()))
    return samples.get((name, want), 0.0)


def fences(admin_port):
    status, body = http_get(admin_port, "/fences", timeout=10.0)
    if status != 200:
        raise BenchError("/fences answered %d" % status)
    return json.loads(body)["fences"]


def sync_slow(m0, m1):
    """The state writer's own account between two scrapes: write+fdatasyncs by duration
    (fencing_proxy_state_sync_seconds), {"syncs": n, "over_25ms": n, "slowest_le_s": bound}."""
    def buckets(m):
        out = {}
        for (name, labels), v in m.items():
            if name == "fencing_proxy_state_sync_seconds_bucket":
                le = dict(labels)["le"]
                out[float("inf") if le in ("+Inf", "inf") else float(le)] = v
        return out
    b0, b1 = buckets(m0), buckets(m1)
    delta = {le: b1[le] - b0.get(le, 0) for le in b1}
    total = delta.get(float("inf"), 0)
    slowest = None
    prev = 0
    for le in sorted(delta):
        if delta[le] > prev:
            slowest = le
        prev = delta[le]
    seconds = 0.0
    for (name, labels), v in m1.items():
        if name == "fencing_proxy_state_sync_seconds_sum":
            seconds = v - m0.get((name, labels), 0.0)
    return {"syncs": int(total), "over_25ms": int(total - delta.get(0.025, 0)),
            "mean_ms": round(seconds / total * 1000, 3) if total else None,
            "slowest_le_s": slowest if slowest != float("inf") else "+Inf"}


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100.0 * len(xs)))]


def latency_summary(samples, t_from=None, t_to=None):
    lat = [s[1] for s in samples if (t_from is None or s[0] >= t_from) and
           (t_to is None or s[0] <= t_to)]
    bad = sum(1 for s in samples if s[2] // 100 != 2)
    if not lat:
        return {"requests": 0, "non2xx": bad}
    return {"requests": len(lat), "non2xx": bad,
            "p50_ms": round(pct(lat, 50) * 1000, 3), "p99_ms": round(pct(lat, 99) * 1000, 3),
            "p999_ms": round(pct(lat, 99.9) * 1000, 3), "max_ms": round(max(lat) * 1000, 3)}


class KeysBench:
    def __init__(self, args, sup, workdir):
        self.args, self.sup, self.w = args, sup, workdir
        self.state_file = os.path.join(workdir, "state", "fences.log")
        os.makedirs(os.path.dirname(self.state_file))
        self.cfg_dir = os.path.join(workdir, "fencing-proxy-config")
        os.makedirs(self.cfg_dir)
        self.proxy = None
        self.port = self.admin_port = None
        self.results = {}
        self.n_proxy = 0

    # -- processes ---------------------------------------------------------------------------

    def start_backend(self):
        self.backend, self.backend_port = start_nginx_backend(self.sup, self.w)

    def start_proxy(self, forget_after=None):
        """Starts fencing-proxy on the state file; returns seconds from spawn to /readyz 200.
        forget_after (a duration like "10s"): the keys route forgets idle keys."""
        self.port, self.admin_port = free_ports(2)
        extra = ""
        if forget_after:
            extra = "    token_order: global\n    forget_idle_keys_after: %s\n" % forget_after
        cfg = render("fencing-proxy-keys.yaml", os.path.join(self.cfg_dir, "fencing-proxy.yaml"),
                     PORT=self.port, ADMIN_PORT=self.admin_port, BACKEND_PORT=self.backend_port,
                     STATE_FILE=self.state_file, THREADS=self.args.proxy_threads,
                     MAX_KEYS=max(1000000, 2 * self.args.keys), KEYS_EXTRA=extra)
        self.n_proxy += 1
        self.log_path = os.path.join(self.w, "fencing-proxy-%d.out" % self.n_proxy)
        t0 = time.monotonic()
        self.proxy = self.sup.spawn("fencing-proxy", [self.args.binary, "--config", cfg],
                                    self.log_path)
        deadline = t0 + self.args.ready_timeout
        while time.monotonic() < deadline:
            if self.proxy.poll() is not None:
                break
            try:
                if http_get(self.admin_port, "/readyz", timeout=2.0)[0] == 200:
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.005)
        with open(self.log_path, "rb") as f:
            tail = f.read()[-3000:].decode("utf-8", "replace")
        raise BenchError("fencing-proxy not ready after %.0f s (exit %s):\n%s"
                         % (time.monotonic() - t0, self.proxy.poll(), tail))

    def stop_proxy(self):
        code = self.sup.stop(self.proxy, timeout=60)
        if code not in (0, -signal.SIGTERM):
            raise BenchError("fencing-proxy exited with %s when stopped (log %s)" % (code, self.log_path))
        self.proxy = None

    def check_alive(self):
        if self.proxy is not None and self.proxy.poll() is not None:
            raise BenchError("fencing-proxy exited (%s); log %s" % (self.proxy.returncode, self.log_path))

    def wait_idle(self, keys, timeout=60.0):
        """Until the sweep has folded every key's Fence back (active_keys 0) and the keys are
        all there; then one more second for the allocator. Returns the seconds waited."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            f = fences(self.admin_port)["keys"]
            if f["keys"] == keys and f["active_keys"] == 0:
                time.sleep(1.0)
                return time.monotonic() - t0
            time.sleep(0.2)
        raise BenchError("keys not idle after %.0f s: %s" % (timeout, fences(self.admin_port)["keys"]))

    def warm(self):
        """A little traffic on the side routes, so that the baseline process has served requests
        (pools, buffers) like the loaded one."""
        status, body = http_put(self.port, "/side/x", SIDE_TOKEN)
        if status // 100 != 2:
            raise BenchError("priming PUT /side/x -> %d %r" % (status, body[:200]))
        for _ in range(200):
            http_put(self.port, "/side/x", SIDE_TOKEN)

    def rss_kib(self):
        return vm_status(self.proxy.pid)["VmRSS"]

    # -- (a) load ----------------------------------------------------------------------------

    def load(self):
        a = self.args
        m0 = metrics(self.admin_port)
        out = os.path.join(self.w, "wrk-load.txt")
        argv = [find_tool("wrk"), "-t", str(a.wrk_threads), "-c", str(a.conns), "-d", "3600s",
                "--timeout", "30s", "-s", os.path.join(LUA_DIR, "load_keys.lua"),
                "http://127.0.0.1:%d" % self.port, "--", str(a.keys), "/keys", str(a.wrk_threads)]
        t0 = time.monotonic()
        wrk = self.sup.spawn("wrk", argv, out)
        last_log, keys = t0, 0
        try:
            while True:
                self.check_alive()
                if wrk.poll() is not None:
                    raise BenchError("wrk exited early (%s): %s" % (wrk.returncode, open(out).read()[-2000:]))
                m = metrics(self.admin_port)
                keys = metric(m, "fencing_proxy_fence_keys", fence="keys")
                raises = metric(m, "fencing_proxy_token_raises_total", fence="keys")
                if keys >= a.keys and raises - metric(m0, "fencing_proxy_token_raises_total",
                                                      fence="keys") >= a.keys:
                    break
                now = time.monotonic()
                if now - t0 > a.load_timeout:
                    raise BenchError("load: %d of %d keys after %.0f s" % (keys, a.keys, now - t0))
                if now - last_log >= 10:
                    log("  load: %d keys after %.0f s (%.0f keys/s)" % (keys, now - t0, keys / (now - t0)))
                    last_log = now
                time.sleep(0.1)
            took = time.monotonic() - t0
        finally:
            if wrk.poll() is None:
                wrk.send_signal(signal.SIGINT)
            try:
                wrk.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            self.sup.stop(wrk, signal.SIGKILL)
        text = open(out, encoding="utf-8", errors="replace").read()
        res = None
        for line in text.splitlines():
            if line.startswith("BENCH_RESULT "):
                res = json.loads(line[len("BENCH_RESULT "):])
        m1 = metrics(self.admin_port)
        d = lambda name, **l: metric(m1, name, **l) - metric(m0, name, **l)  # noqa: E731
        syncs = d("fencing_proxy_state_sync_seconds_count")
        out = {
            "keys": int(keys), "seconds": round(took, 2), "keys_per_s": round(keys / took, 0),
            "connections": a.conns, "wrk_threads": a.wrk_threads,
            "fdatasyncs": int(syncs), "keys_per_fdatasync": round(keys / syncs, 1) if syncs else None,
            "compactions": int(d("fencing_proxy_state_compactions_total", result="success")),
            "compactions_failed": int(d("fencing_proxy_state_compactions_total", result="failure")),
            "non2xx": res["non2xx"] if res else None,
            "socket_errors": (sum(v for k, v in res["errors"].items() if k != "status")
                              if res else None),
            "outcomes": {dict(k[1]).get("outcome"): v for k, v in m1.items()
                         if k[0] == "fencing_proxy_requests_total" and v and
                         dict(k[1]).get("route") == "keys"},
        }
        if res and res["non2xx"]:
            raise BenchError("load: %d non-2xx responses, first: %s" % (res["non2xx"], res["first_non2xx"]))
        return out

    # -- (d) side clients --------------------------------------------------------------------

    def side_start(self, mode, path, token, seconds, tag):
        out = os.path.join(self.w, "side-%s-%s.json" % (tag, mode))
        proc = self.sup.spawn("side-" + mode, [sys.executable, os.path.abspath(__file__),
                                               "--side-client", mode, str(self.port), path,
                                               str(token), str(seconds), out],
                              out + ".log")
        return proc, out

    def side_finish(self, handle, timeout=120):
        proc, out = handle
        open(out + ".stop", "w").close()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BenchError("side client did not stop (%s)" % out)
        self.sup.stop(proc)
        if proc.returncode != 0:
            raise BenchError("side client failed: %s" % open(out + ".log").read()[-2000:])
        with open(out) as f:
            return json.load(f)

    def side_baseline(self, seconds, raise_token):
        eq = self.side_start("equal", "/side/x", SIDE_TOKEN, seconds + 60, "baseline")
        rs = self.side_start("raise", "/sideraise/x", raise_token, seconds + 60, "baseline")
        time.sleep(seconds)
        e, r = self.side_finish(eq), self.side_finish(rs)
        c = metrics(self.admin_port)
        if metric(c, "fencing_proxy_state_compactions_total", result="success") > 0:
            log("  note: a compaction ran during the baseline")
        return {"equal": latency_summary(e["samples"]), "raise": latency_summary(r["samples"]),
                "last_raise_token": r["last_token"]}

    def compaction(self, raise_token):
        a = self.args
        m0 = metrics(self.admin_port)
        done0 = metric(m0, "fencing_proxy_state_compactions_total", result="success")
        eq = self.side_start("equal", "/side/x", SIDE_TOKEN, a.compaction_timeout + 60, "compaction")
        time.sleep(a.side_seconds)                 # the equal-token client alone, no compaction
        t_trigger = time.monotonic()
        rs = self.side_start("raise", "/sideraise/x", raise_token, a.compaction_timeout + 60,
                             "compaction")      # its first raise's batch starts the compaction
        t_done = None
        while time.monotonic() - t_trigger < a.compaction_timeout:
            self.check_alive()
            c = metrics(self.admin_port)
            if metric(c, "fencing_proxy_state_compactions_total", result="failure") > \
                    metric(m0, "fencing_proxy_state_compactions_total", result="failure"):
                raise BenchError("the compaction failed (log %s)" % self.log_path)
            if metric(c, "fencing_proxy_state_compactions_total", result="success") > done0:
                t_done = time.monotonic()
                break
            time.sleep(0.01)
        if t_done is None:
            raise BenchError("no compaction within %.0f s of the first raise" % a.compaction_timeout)
        time.sleep(1.0)                            # the hand-over's aftermath, then stop
        e, r = self.side_finish(eq), self.side_finish(rs)
        rss_at_once = self.rss_kib()
        hwm = vm_status(self.proxy.pid).get("VmHWM")  # the start-up's replay or the compaction
        time.sleep(a.idle_seconds)
        rss_idle = self.rss_kib()
        m1 = metrics(self.admin_port)
        stall = m1.get(("fencing_proxy_state_compaction_stall_seconds", ()))
        first_raise = min(s[0] for s in r["samples"]) if r["samples"] else t_trigger
        during_e = latency_summary(e["samples"], first_raise, t_done)
        during_r = latency_summary(r["samples"], first_raise, t_done)
        alone_e = latency_summary(e["samples"], None, t_trigger)
        # the proxy's own account: its log line "state file compacted" (sizes)
        compacted = []
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if "state file compacted" in line:
                    compacted.append(json.loads(line))
        return {"seconds_first_raise_to_done": round(t_done - first_raise, 3),
                "poll_interval_s": 0.01,
                "equal_during": during_e, "equal_alone_same_process": alone_e,
                "raise_during": during_r,
                "equal_whole_run": latency_summary(e["samples"]),
                "raise_whole_run": latency_summary(r["samples"]),
                "proxy_log": compacted[-1] if compacted else None,
                "file_bytes_after": os.path.getsize(self.state_file),
                "handover_stall_ms": round(stall * 1000, 3) if stall is not None else None,
                "syncs": sync_slow(m0, m1),
                "rss_after_kib": rss_at_once, "rss_after_idle_kib": rss_idle, "vm_hwm_kib": hwm,
                "idle_seconds": a.idle_seconds,
                "process": self.process_memory(m1)}

    def process_memory(self, m):
        """The proxy's own view of its memory, where the binary exports it."""
        out = {}
        for name in ("fencing_proxy_process_resident_memory_bytes", "fencing_proxy_allocator_bytes"):
            for (n, labels), v in m.items():
                if n == name:
                    out[n + "".join("{%s=%s}" % kv for kv in labels)] = int(v)
        return out

    # -- (e) forgetting burst ----------------------------------------------------------------

    def forgetting(self, raise_token):
        """A restart with forget_idle_keys_after: every key's idle time starts together. keep
        keys stay in use (equal-token PUTs, token 1, in a loop), the rest fall idle at once."""
        import threading
        import http.client
        a = self.args
        n_forget = a.keys - a.forget_keep
        rs = None
        stop = threading.Event()

        def keeper(port):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            while not stop.is_set():
                for i in range(a.forget_keep):
                    if stop.is_set():
                        break
                    conn.request("PUT", "/keys/k%015d" % i, body=b"k", headers={"X-Fencing-Token": "1"})
                    resp = conn.getresponse()
                    resp.read()
                    if resp.status // 100 != 2:
                        raise BenchError("keeper: PUT key %d -> %d" % (i, resp.status))
            conn.close()

        R = {"forget_after": a.forget_after, "keys": a.keys, "kept": a.forget_keep}
        R["restart_s"] = round(self.start_proxy(a.forget_after), 3)
        t_start = time.monotonic()
        keep = threading.Thread(target=keeper, args=(self.port,), daemon=True)
        keep.start()
        rs = self.side_start("raise", "/sideraise/x", raise_token, a.forget_timeout + 120, "forget")
        m0 = metrics(self.admin_port)
        f0 = metric(m0, "fencing_proxy_fence_keys_forgotten_total", fence="keys")
        rss_peak = self.rss_kib()
        t_first = t_done = None
        while time.monotonic() - t_start < a.forget_timeout:
            self.check_alive()
            c = metrics(self.admin_port)
            forgotten = metric(c, "fencing_proxy_fence_keys_forgotten_total", fence="keys") - f0
            if forgotten > 0 and t_first is None:
                t_first = time.monotonic()
            if forgotten >= n_forget:
                t_done = time.monotonic()
                break
            rss_peak = max(rss_peak, self.rss_kib())
            time.sleep(0.05)
        if t_done is None:
            stop.set()
            raise BenchError("forgetting: %d of %d keys forgotten after %.0f s"
                             % (forgotten, n_forget, a.forget_timeout))
        keys_left = int(metric(c, "fencing_proxy_fence_keys", fence="keys"))
        time.sleep(1.0)
        r = self.side_finish(rs)
        hwm = vm_status(self.proxy.pid).get("VmHWM")
        rss_at_once = self.rss_kib()
        time.sleep(a.idle_seconds)               # the kept keys still in use meanwhile
        rss_idle = self.rss_kib()
        m1 = metrics(self.admin_port)
        stop.set()
        keep.join(timeout=30)
        R.update({
            "seconds_restart_to_first_forget": round(t_first - t_start, 3) if t_first else None,
            "seconds_first_to_last_forget": round(t_done - (t_first or t_done), 3),
            "raise_during": latency_summary(r["samples"], t_first or t_done, t_done + 0.5),
            "raise_whole_run": latency_summary(r["samples"]),
            "keys_left": keys_left,
            "keys_left_after_idle": int(metric(m1, "fencing_proxy_fence_keys", fence="keys")),
            "syncs": sync_slow(m0, m1),
            "rss_peak_polled_kib": rss_peak, "vm_hwm_kib": hwm,
            "rss_after_kib": rss_at_once, "rss_after_idle_kib": rss_idle,
            "process": self.process_memory(m1),
        })
        self.stop_proxy()
        R["file_bytes_after"] = os.path.getsize(self.state_file)
        # The same keys in a fresh process: the reference for RSS after the burst.
        R["restart_after_s"] = round(self.start_proxy(), 3)
        R["keys_restarted"] = int(metric(metrics(self.admin_port), "fencing_proxy_fence_keys", fence="keys"))
        self.warm()
        time.sleep(a.idle_seconds)
        R["rss_restarted_same_keys_kib"] = self.rss_kib()
        self.stop_proxy()
        return R

    def check(self):
        """--check: the bounds the issue sets; returns the list of failures."""
        a, R = self.args, self.results
        fails = []
        # On a shared machine the serial raises' max without any compaction is itself tens of
        # ms: the bound is --max-stall-ms or twice that max of the same run, whichever is larger.
        base_max = R.get("side_baseline", {}).get("raise", {}).get("max_ms", 0)
        bound = max(a.max_stall_ms, 2 * base_max)
        R["check_stall_bound_ms"] = bound
        c = R.get("compaction")
        if c:
            if c.get("handover_stall_ms") is not None and c["handover_stall_ms"] > a.max_handover_ms:
                fails.append("compaction hand-over (the writer's own) %.3f ms > %.3f ms"
                             % (c["handover_stall_ms"], a.max_handover_ms))
            rd = c["raise_during"]
            if rd.get("max_ms", 0) > bound:
                fails.append("serial raise max during the compaction %.1f ms > %.1f ms"
                             % (rd["max_ms"], bound))
            ref = R["rss_restarted_due_kib"]
            if c["rss_after_idle_kib"] > a.max_rss_ratio * ref:
                fails.append("RSS after the compaction %d KiB > %.2f x %d KiB (the same keys restarted)"
                             % (c["rss_after_idle_kib"], a.max_rss_ratio, ref))
        f = R.get("forgetting")
        if f:
            rd = f["raise_during"]
            if rd.get("max_ms", 0) > bound:
                fails.append("serial raise max during the forgetting burst %.1f ms > %.1f ms"
                             % (rd["max_ms"], bound))
            ref = f["rss_restarted_same_keys_kib"]
            if f["rss_after_idle_kib"] > a.max_rss_ratio * ref:
                fails.append("RSS after forgetting %d KiB > %.2f x %d KiB (the same keys restarted)"
                             % (f["rss_after_idle_kib"], a.max_rss_ratio, ref))
        return fails

    def bloat(self):
        """Appends the log's records to it BLOAT_COPIES more times (the proxy stopped): replay is
        a fold of maxima, so the state is the same, but the file is now well over the compaction
        threshold (4x its live snapshot), as repeated raises of every key would leave it."""
        size = os.path.getsize(self.state_file)
        with open(self.state_file, "rb") as f:
            f.seek(HEADER_BYTES)
            records = f.read()
        with open(self.state_file, "ab") as f:
            for _ in range(BLOAT_COPIES):
                f.write(records)
            f.flush()
            os.fsync(f.fileno())
        return size, os.path.getsize(self.state_file)

    # -- the run -----------------------------------------------------------------------------

    def run(self):
        a, R = self.args, self.results
        self.start_backend()
        # Baseline: a fresh process, empty state, warmed up, idle.
        R["start_empty_s"] = round(self.start_proxy(), 3)
        self.warm()
        time.sleep(3.0)
        R["rss_empty_kib"] = self.rss_kib()
        log("empty state: ready in %.3f s, VmRSS %d KiB" % (R["start_empty_s"], R["rss_empty_kib"]))

        if a.state_from:
            self.stop_proxy()
            shutil.copyfile(a.state_from, self.state_file)
            log("(a) skipped: the state file copied from %s" % a.state_from)
        else:
            log("(a) loading %d keys over %d connections" % (a.keys, a.conns))
            R["load"] = self.load()
            log("  %d keys in %.1f s (%.0f keys/s; %d fdatasyncs, %.1f keys each; %d compactions on the way)"
                % (R["load"]["keys"], R["load"]["seconds"], R["load"]["keys_per_s"],
                   R["load"]["fdatasyncs"], R["load"]["keys_per_fdatasync"] or 0, R["load"]["compactions"]))

            R["fold_wait_s"] = round(self.wait_idle(a.keys), 1)
            rss = self.rss_kib()
            R["rss_loaded_kib"] = rss
            R["vm_hwm_loaded_kib"] = vm_status(self.proxy.pid).get("VmHWM")
            R["bytes_per_key_loaded_process"] = round((rss - R["rss_empty_kib"]) * 1024 / a.keys, 1)
            log("(b) loaded process, keys idle: VmRSS %d KiB (peak %s KiB): %.1f bytes/key"
                % (rss, R["vm_hwm_loaded_kib"], R["bytes_per_key_loaded_process"]))
            self.stop_proxy()
            if a.save_state:
                shutil.copyfile(self.state_file, a.save_state)
        R["state_file_bytes"] = os.path.getsize(self.state_file)

        log("(c) restarts with the %d-key state file (%.1f MB)" % (a.keys, R["state_file_bytes"] / 1e6))
        times = []
        for i in range(a.restarts):
            times.append(self.start_proxy())
            n = metric(metrics(self.admin_port), "fencing_proxy_fence_keys", fence="keys")
            if n != a.keys:
                raise BenchError("after restart: %d keys, expected %d" % (n, a.keys))
            log("  restart %d: ready in %.3f s" % (i + 1, times[-1]))
            if i < a.restarts - 1:
                self.stop_proxy()
        R["restart_s"] = [round(t, 3) for t in times]
        R["restart_median_s"] = round(statistics.median(times), 3)
        self.warm()
        self.wait_idle(a.keys)
        time.sleep(2.0)
        rss = self.rss_kib()
        R["rss_restarted_kib"] = rss
        R["bytes_per_key_restarted"] = round((rss - R["rss_empty_kib"]) * 1024 / a.keys, 1)
        log("(b) restarted process, keys idle: VmRSS %d KiB: %.1f bytes/key"
            % (rss, R["bytes_per_key_restarted"]))

        log("(d) side clients without a compaction (%g s)" % a.side_seconds)
        base = self.side_baseline(a.side_seconds, 10 ** 9)
        R["side_baseline"] = base
        log("  equal-token PUT: %s\n  serial raise:    %s" % (base["equal"], base["raise"]))
        self.stop_proxy()
        before, after = self.bloat()
        R["bloat"] = {"file_bytes_before": before, "file_bytes_after": after, "copies": BLOAT_COPIES}
        log("  log made due: %.1f MB -> %.1f MB (records appended %d more times)"
            % (before / 1e6, after / 1e6, BLOAT_COPIES))
        R["restart_due_log_s"] = round(self.start_proxy(), 3)
        log("  restart on the %.0f MB log: ready in %.3f s" % (after / 1e6, R["restart_due_log_s"]))
        self.wait_idle(a.keys)
        self.warm()
        time.sleep(2.0)
        R["rss_restarted_due_kib"] = self.rss_kib()
        R["vm_hwm_restarted_due_kib"] = vm_status(self.proxy.pid).get("VmHWM")
        R["compaction"] = self.compaction(base["last_raise_token"] + 10)
        c = R["compaction"]
        log("  compaction: %.3f s from the first raise to compactions_total+1 (log %s)\n"
            "  equal-token PUT during: %s\n  equal-token PUT before it, same process: %s\n"
            "  serial raise during: %s"
            % (c["seconds_first_raise_to_done"], c["proxy_log"], c["equal_during"],
               c["equal_alone_same_process"], c["raise_during"]))
        log("  hand-over (the writer's own): %s ms; VmRSS restarted %d KiB, after the compaction %d KiB, "
            "%g s later %d KiB; %s" % (c["handover_stall_ms"], R["rss_restarted_due_kib"], c["rss_after_kib"],
                                      c["idle_seconds"], c["rss_after_idle_kib"], c["process"]))
        self.stop_proxy()
        if a.forget_after:
            log("(e) forgetting burst: restart with forget_idle_keys_after %s, %d keys kept in use"
                % (a.forget_after, a.forget_keep))
            R["forgetting"] = f = self.forgetting(c["raise_whole_run"].get("requests", 0) +
                                                  base["last_raise_token"] + 1000000)
            log("  %d keys forgotten in %.3f s (first %.3f s after the restart); serial raise during: %s\n"
                "  VmRSS peak %s KiB (HWM %s), after %d KiB, %g s later %d KiB; the same %d keys "
                "restarted: %d KiB; %s"
                % (a.keys - a.forget_keep, f["seconds_first_to_last_forget"],
                   f["seconds_restart_to_first_forget"] or 0, f["raise_during"], f["rss_peak_polled_kib"],
                   f["vm_hwm_kib"], f["rss_after_kib"], a.idle_seconds, f["rss_after_idle_kib"],
                   f["keys_left"], f["rss_restarted_same_keys_kib"], f["process"]))
        if a.check:
            R["check_failures"] = fails = self.check()
            for line in fails:
                log("CHECK FAILED: " + line)
            if fails:
                raise BenchError("--check: %d bound(s) exceeded" % len(fails))
            log("--check: every bound held")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:]))
    p.add_argument("--binary", default=os.path.join(REPO, "build", "proxy", "fencing-proxy"))
    p.add_argument("--keys", type=int, default=1000000, help="keys to load (default 1,000,000)")
    p.add_argument("--conns", type=int, default=256, help="load connections (default 256)")
    p.add_argument("--wrk-threads", type=int, default=2, help="wrk threads for the load (default 2)")
    p.add_argument("--proxy-threads", type=int, default=1, help="fencing-proxy threads (default 1)")
    p.add_argument("--restarts", type=int, default=3, help="timed restarts (default 3)")
    p.add_argument("--side-seconds", type=float, default=5.0,
                   help="side clients without a compaction (default 5 s)")
    p.add_argument("--ready-timeout", type=float, default=120.0)
    p.add_argument("--load-timeout", type=float, default=900.0)
    p.add_argument("--compaction-timeout", type=float, default=120.0)
    p.add_argument("--idle-seconds", type=float, default=10.0,
                   help="idle time before RSS is read again after a compaction or forgetting (default 10 s)")
    p.add_argument("--forget-after", default="10s",
                   help="(e): forget_idle_keys_after of the restarted process (default 10s; '' skips (e))")
    p.add_argument("--forget-keep", type=int, default=1000, help="(e): keys kept in use (default 1000)")
    p.add_argument("--forget-timeout", type=float, default=300.0)
    p.add_argument("--state-from", help="skip (a): start from a copy of this state file (KEYS keys)")
    p.add_argument("--save-state", help="keep a copy of the loaded state file here")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when a bound below is exceeded (the stalls, RSS after compaction and forgetting)")
    p.add_argument("--max-stall-ms", type=float, default=25.0,
                   help="--check: longest serial raise on another fence during the compaction or the "
                        "forgetting burst (default 25 ms, or twice the longest without either in the "
                        "same run if that is more)")
    p.add_argument("--max-handover-ms", type=float, default=10.0,
                   help="--check: the writer's own longest compaction hand-over (default 10 ms: two "
                        "syncs and a rename; the close of the replaced log alone took 44 ms)")
    p.add_argument("--max-rss-ratio", type=float, default=1.2,
                   help="--check: RSS after a compaction or a forgetting burst over the same keys restarted "
                        "(default 1.2)")
    p.add_argument("--quick", action="store_true", help="1 restart, 2 s of side clients")
    p.add_argument("--json", help="results file (default bench/results/<UTC time>-keys.json)")
    p.add_argument("--keep-workdir", action="store_true")
    a = p.parse_args(argv)
    if a.quick:
        a.restarts, a.side_seconds, a.idle_seconds = 1, 2.0, 3.0
    if a.forget_keep >= a.keys:
        p.error("--forget-keep must be below --keys")
    if a.keys < a.wrk_threads or a.conns < a.wrk_threads or a.restarts < 1:
        p.error("--keys and --conns must be at least --wrk-threads; --restarts at least 1")
    a.binary = os.path.abspath(a.binary)
    return a


def main(argv):
    if argv[:1] == ["--side-client"]:
        return side_client(argv[1:])
    args = parse_args(argv)
    if not os.access(args.binary, os.X_OK):
        raise BenchError("fencing-proxy binary not found at %s" % args.binary)
    for tool in ("nginx", "wrk"):
        if not find_tool(tool):
            raise BenchError("%s not installed (bench/run.sh installs it)" % tool)
    sup = supervised()
    workdir = tempfile.mkdtemp(prefix="fp-keys-")
    os.chmod(workdir, 0o755)
    started = time.monotonic()
    env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "binary": args.binary, "load_average_start": [round(x, 2) for x in os.getloadavg()]}
    log("fencing-proxy keys bench: %d keys; load average %s; workdir %s"
        % (args.keys, env["load_average_start"], workdir))
    bench = KeysBench(args, sup, workdir)
    failure = None
    try:
        bench.run()
    except (BenchError, Interrupted, OSError, subprocess.SubprocessError, KeyError, ValueError) as e:
        failure = "%s: %s" % (type(e).__name__, e)
        log("ERROR " + failure)
    finally:
        sup.stop_all()
    return finish_standalone("keys", args, env, started, failure, {"results": bench.results}, workdir)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print("keys bench: %s" % e, file=sys.stderr)
        sys.exit(2)
