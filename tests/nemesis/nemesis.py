#!/usr/bin/env python3
"""Nemesis run: shared fences on a real 3-member etcd cluster, under faults (tests/nemesis/README.md).

    nemesis.py --minutes M --seed S --binary PATH [--control]   one run (real, or the control)
    nemesis.py --short --binary PATH                             the negative control (30 s), then
                                                                 a 90 s real run (ctest nemesis.short)
    nemesis.py --with-control --minutes M ...                    the same with M minutes (scripts/nemesis.sh)

Exit status: 0 when the run passed (real: no violation; control: violations found), 1 when it
did not, 2 on a set-up error, 77 (ctest: skipped) when etcd, etcdctl or python3-etcd3 is missing
and FP_REQUIRE_LOCK_SERVICES is not set.
"""

import argparse
import base64
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))
INTEGRATION = os.path.join(SOURCE_DIR, "tests", "integration")


def _parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=1.5, help="length of the faulted run")
    p.add_argument("--seed", type=int, default=None,
                   help="fault schedule and client seed (default: $FP_NEMESIS_SEED or the time)")
    p.add_argument("--binary", default=os.environ.get("FP_BINARY") or
                   os.path.join(SOURCE_DIR, "build", "proxy", "fencing-proxy"))
    p.add_argument("--control", action="store_true",
                   help="the negative control: three proxies with their own state files (no "
                        "fence_store); passes when the checker finds violations")
    p.add_argument("--with-control", action="store_true",
                   help="the control (--control-minutes) first, then the real run (--minutes); "
                        "passes when the control finds violations and the real run none")
    p.add_argument("--short", action="store_true",
                   help="the ctest run nemesis.short: --with-control, --minutes 1.5 unless given")
    p.add_argument("--control-minutes", type=float, default=0.5)
    p.add_argument("--clients", type=int, default=4, help="client threads (lock holders)")
    p.add_argument("--out", default=None, help="directory for logs and results (default: a new "
                   "temp dir, kept)")
    p.add_argument("--results", default=None, help="also copy results.md here")
    p.add_argument("--analyze", metavar="RUN_DIR", default=None,
                   help="check a finished run again from its directory (OUT/real or "
                        "OUT/control) and rewrite its results; starts nothing")
    return p.parse_args(argv)


ARGS = _parse_args(sys.argv[1:])
os.environ["FP_BINARY"] = os.path.abspath(ARGS.binary)
sys.path.insert(0, INTEGRATION)
sys.path.insert(0, HERE)

import harness  # noqa: E402
from harness import Backend, Proxy, find_fence, http_request, sigstop_and_wait  # noqa: E402
from cluster import EtcdCluster  # noqa: E402
import checker  # noqa: E402

MEMBER_TTL = 3          # seconds: fence_store member_ttl
REQUEST_TIMEOUT = 5     # seconds: timeouts.request
ETCD_CALL_TIMEOUT = "1s"
NAMES = ("A", "B", "C")
LOCKS = ("orders", "k1", "k2")
RECOVERY_TIMEOUT = 30.0

PROXY_KINDS = ["proxy_pause_short", "proxy_pause_long", "proxy_kill"]
RELAY_KINDS = ["link_blackhole", "link_reset", "link_hold_watch",
               "proxy_cut_blackhole", "proxy_cut_reset", "proxy_cut_hold_watch"]
ETCD_KINDS = ["etcd_kill", "etcd_kill_leader", "etcd_pause_follower", "etcd_pause_leader",
              "etcd_pause_quorum", "etcd_pause_all"]


def log(msg):
    sys.stdout.write("[%8.2f] %s\n" % (time.monotonic() % 100000, msg))
    sys.stdout.flush()


def _fault_duration(kind, rng):
    ranges = {
        "proxy_pause_short": (0.3, 1.5),
        "proxy_pause_long": (MEMBER_TTL + 0.5, MEMBER_TTL + 2.5),
        "proxy_kill": (0.2, 2.0),
        "link_blackhole": (1.0, 5.0), "link_reset": (0.5, 3.0), "link_hold_watch": (1.0, 5.0),
        "proxy_cut_blackhole": (1.0, 6.0), "proxy_cut_reset": (0.5, 3.0),
        "proxy_cut_hold_watch": (2.0, 6.0),
        "etcd_kill": (1.0, 5.0), "etcd_kill_leader": (1.0, 4.0),
        "etcd_pause_follower": (1.0, 5.0), "etcd_pause_leader": (1.0, 5.0),
        "etcd_pause_quorum": (0.5, 2.5), "etcd_pause_all": (0.5, 2.5),
    }
    lo, hi = ranges[kind]
    return rng.uniform(lo, hi)


class Run:
    def __init__(self, control, minutes, seed, outdir, clients):
        self.control = control
        self.minutes = minutes
        self.seed = seed
        self.outdir = outdir
        self.clients = clients
        self.tag = "ctl" if control else "real"
        self.prefix = "/fp-nemesis/%s-%d-%d" % (self.tag, seed, os.getpid())
        self.lock_prefix = "/fp-nemesis-locks/%s-%d-%d" % (self.tag, seed, os.getpid())
        self.cluster = self.backend = None
        self.relays = {}      # (proxy name, member index) -> EtcdRelay
        self.proxies = {}     # name -> harness.Proxy
        self.paused = set()   # proxy names under SIGSTOP
        self.faults = []      # {"kind", "target", "start", "end", "recovered"}
        self.pauses = []      # {"proxy", "start", "end"}
        self.max_seen = []    # (t, source, fence, token, etcd mod_revision or None)
        self.max_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.notes = []
        self.worker = None
        self.watch_proc = None

    # ------------------------------------------------------------------ set-up

    def proxy_config(self):
        return {
            "threads": 1,
            "timeouts": {"connect": "1s", "request": "%ds" % REQUEST_TIMEOUT, "idle": "10s",
                         "header_read": "5s", "shutdown": "5s"},
            "routes": [
                {"name": "orders", "prefix": "/orders"},
                {"name": "objects", "prefix": "/objects", "fence_key": {"path_segment": 1},
                 "token_order": "global"},
            ],
        }

    def start(self):
        shutil.rmtree(self.outdir, ignore_errors=True)  # a run's directory is its own
        os.makedirs(self.outdir, exist_ok=True)
        t0 = time.monotonic()
        self.cluster = EtcdCluster(os.path.join(self.outdir, "etcd"))
        log("%s: etcd cluster of 3 up in %.1fs: %s" % (self.tag, time.monotonic() - t0,
                                                       ", ".join(self.cluster.endpoints)))
        self.backend = Backend(self.outdir)
        if not self.control:
            from etcd_relay import EtcdRelay
            for name in NAMES:
                for m in self.cluster.members:
                    self.relays[(name, m.index)] = EtcdRelay("127.0.0.1", m.client_port)
        for name in NAMES:
            workdir = os.path.join(self.outdir, "proxy-" + name)
            os.makedirs(workdir, exist_ok=True)
            store = None
            if not self.control:
                store = {"etcd": {
                    "endpoints": [self.relays[(name, m.index)].url for m in self.cluster.members],
                    "prefix": self.prefix, "member_ttl": "%ds" % MEMBER_TTL,
                    "timeout": ETCD_CALL_TIMEOUT}}
            proxy = Proxy(self.proxy_config(), self.backend, workdir=workdir, start=False,
                          fence_store=store)
            proxy.name = name
            self.proxies[name] = proxy
        for proxy in self.proxies.values():
            proxy.start()
        if not self.control:
            harness.wait_for(lambda: all(self.store_ok(p) for p in self.proxies.values()), 20,
                             0.1, "every proxy registered, seeing 3 members, gate open")
        log("%s: backend and proxies up (%s)" % (self.tag, ", ".join(
            "%s :%d" % (n, p.port) for n, p in self.proxies.items())))

    def stop(self):
        self.stop_event.set()
        if self.worker is not None and self.worker.poll() is None:
            self.worker.kill()
        if self.watch_proc is not None:
            harness._stop_process(self.watch_proc, signal.SIGKILL)
        for p in self.proxies.values():
            if p.running():
                try:
                    os.kill(p.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
            p.kill9()
            p._close_stderr()
        for r in self.relays.values():
            r.close()
        if self.backend is not None:
            harness._stop_process(self.backend.proc)
            self.backend._out.close()
        if self.cluster is not None:
            self.cluster.stop(remove=True)

    # ------------------------------------------------------------------ observation

    def fences_doc(self, proxy, timeout=1.0):
        status, _, body = http_request(proxy.admin_port, "GET", "/fences", timeout=timeout)
        if status != 200:
            return None
        return json.loads(body)

    def store_ok(self, proxy):
        if not proxy.running() or proxy.name in self.paused:
            return False
        try:
            doc = self.fences_doc(proxy)
        except (OSError, ValueError):
            return False
        if doc is None:
            return False
        if self.control:
            return True
        store = doc.get("fence_store") or {}
        return bool(store.get("gate_open")) and store.get("members") == 3

    def proxy_maxima(self, proxy, timeout=1.0):
        """{fence: max} as this proxy's /fences says (keys through /fences/objects?key=)."""
        out = {}
        doc = self.fences_doc(proxy, timeout)
        entry = find_fence(doc, "orders") or {}
        out["orders"] = entry.get("max_token") or 0
        for key in LOCKS[1:]:
            status, _, body = http_request(proxy.admin_port, "GET",
                                           "/fences/objects?key=%s" % key, timeout=timeout)
            out["objects/" + key] = (json.loads(body).get("max_token") or 0) if status == 200 else 0
        return out

    def poll_proxy(self, name):
        proxy = self.proxies[name]
        while not self.stop_event.is_set():
            if proxy.running() and name not in self.paused:
                try:
                    maxima = self.proxy_maxima(proxy)
                    t = time.monotonic()
                    with self.max_lock:
                        for fence, token in maxima.items():
                            self.max_seen.append((t, "proxy " + name, fence, token, None))
                except (OSError, ValueError, harness.HarnessError):
                    pass
            self.stop_event.wait(0.4)

    def watch_etcd_max(self):
        """`etcdctl watch --prefix P/max/` on every member: each committed max as it comes."""
        rev = None
        while not self.stop_event.is_set():
            args = [self.cluster_etcdctl(), "--endpoints", ",".join(self.cluster.endpoints),
                    "watch", "--prefix", self.prefix + "/max/", "-w", "json"]
            if rev:
                args += ["--rev", str(rev)]
            self.watch_proc = subprocess.Popen(args, env=self.cluster.ctl_env(),
                                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                               stdin=subprocess.DEVNULL, text=True,
                                               start_new_session=True)
            harness._live.add(self.watch_proc)
            for line in self.watch_proc.stdout:
                t = time.monotonic()
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                for event in doc.get("Events") or []:
                    kv = event.get("kv") or {}
                    key = base64.b64decode(kv.get("key", "")).decode()
                    value = base64.b64decode(kv.get("value", "") or "").decode()
                    fence = key[len(self.prefix + "/max/"):]
                    rev = max(rev or 0, int(kv.get("mod_revision", 0)) + 1)
                    if value.strip().isdigit():
                        with self.max_lock:
                            self.max_seen.append((t, "etcd watch", fence, int(value),
                                                  int(kv.get("mod_revision", 0))))
            self.watch_proc.wait()
            self.stop_event.wait(0.5)

    @staticmethod
    def cluster_etcdctl():
        from cluster import ETCDCTL
        return ETCDCTL

    def etcd_maxima(self):
        kvs = self.cluster.get_prefix(self.prefix + "/max/")
        if kvs is None:
            return None
        return {k[len(self.prefix + "/max/"):]: int(v) for k, v in kvs.items() if v.isdigit()}

    # ------------------------------------------------------------------ faults

    def recovered(self):
        if not self.cluster.all_healthy():
            return False
        return all(self.store_ok(p) for p in self.proxies.values())

    def wait_recovered(self, fault):
        t0 = time.monotonic()
        while time.monotonic() - t0 < RECOVERY_TIMEOUT:
            if self.recovered():
                fault["recovered"] = time.monotonic()
                return True
            time.sleep(0.1)
        fault["recovered"] = None
        what = []
        for m in self.cluster.members:
            if not m.healthy():
                what.append("etcd %s unhealthy" % m.name)
        for p in self.proxies.values():
            if not self.store_ok(p):
                try:
                    doc = (self.fences_doc(p) or {}).get("fence_store")
                except (OSError, ValueError):
                    doc = "no answer"
                what.append("proxy %s: %s" % (p.name, doc))
        note = "%s (%s) not recovered %.0fs after it healed: %s" % (
            fault["kind"], fault["target"], RECOVERY_TIMEOUT, "; ".join(what))
        self.notes.append(note)
        log("  " + note)
        return False

    def pause_proxy(self, name):
        self.paused.add(name)
        start = time.monotonic()
        sigstop_and_wait(self.proxies[name].proc.pid)
        return start

    def resume_proxy(self, name, start):
        os.kill(self.proxies[name].proc.pid, signal.SIGCONT)
        end = time.monotonic()
        self.paused.discard(name)
        self.pauses.append({"proxy": name, "start": start, "end": end})

    def restart_proxy(self, name):
        proxy = self.proxies[name]
        for attempt in range(5):
            try:
                proxy.start()
                return
            except harness.HarnessError as e:
                log("  proxy %s did not start (try %d): %s" % (name, attempt + 1,
                                                                str(e).splitlines()[0]))
                time.sleep(1.0)
        self.notes.append("proxy %s did not start again after kill -9" % name)

    def set_links(self, links, mode, existing_only=False):
        for link in links:
            self.relays[link].set_mode(mode, existing_only=existing_only)

    def inject(self, kind, rng):
        """Applies one fault, holds it for its duration, heals it. -> the fault record."""
        duration = _fault_duration(kind, rng)
        fault = {"kind": kind, "target": "", "duration": duration}
        members = self.cluster.members
        if kind.startswith("proxy_pause") or kind == "proxy_kill":
            name = rng.choice(NAMES)
            fault["target"] = name
            if kind == "proxy_kill":
                fault["start"] = time.monotonic()
                self.proxies[name].kill9()
                time.sleep(duration)
                fault["end"] = time.monotonic()
                self.restart_proxy(name)
            else:
                fault["start"] = self.pause_proxy(name)
                time.sleep(max(0.0, fault["start"] + duration - time.monotonic()))
                self.resume_proxy(name, fault["start"])
                fault["end"] = time.monotonic()
        elif kind.startswith("link_") or kind.startswith("proxy_cut_"):
            name = rng.choice(NAMES)
            mode = kind.split("_", 2)[-1] if kind.startswith("proxy_cut_") else kind[5:]
            existing_only = mode == "hold_watch" and rng.random() < 0.5
            if kind.startswith("link_"):
                m = rng.randrange(len(members))
                links = [(name, m)]
                fault["target"] = "%s->m%d" % (name, m)
            else:
                links = [(name, m.index) for m in members]
                fault["target"] = "%s->all" % name
            if existing_only:
                fault["target"] += " (existing only)"
            fault["start"] = time.monotonic()
            self.set_links(links, mode, existing_only)
            time.sleep(duration)
            self.set_links(links, "pass")
            fault["end"] = time.monotonic()
        elif kind in ("etcd_kill", "etcd_kill_leader"):
            i = self.cluster.leader() if kind == "etcd_kill_leader" else None
            if i is None:
                i = rng.randrange(len(members))
                if kind == "etcd_kill_leader":
                    fault["target"] = "(no leader found) "
            fault["target"] += "m%d" % i
            fault["start"] = time.monotonic()
            self.cluster.kill(i)
            time.sleep(duration)
            self.cluster.restart(i)
            fault["end"] = time.monotonic()
        elif kind in ("etcd_pause_follower", "etcd_pause_leader"):
            leader = self.cluster.leader()
            if kind == "etcd_pause_leader":
                targets = [leader] if leader is not None else [rng.randrange(len(members))]
            else:
                followers = [m.index for m in members if m.index != leader]
                targets = [rng.choice(followers)]
            fault["target"] = "m%d%s" % (targets[0], " (leader)" if targets[0] == leader else "")
            fault["start"] = time.monotonic()
            for i in targets:
                self.cluster.pause(i)
            time.sleep(max(0.0, fault["start"] + duration - time.monotonic()))
            for i in targets:
                self.cluster.resume(i)
            fault["end"] = time.monotonic()
        elif kind in ("etcd_pause_quorum", "etcd_pause_all"):
            count = 2 if kind == "etcd_pause_quorum" else len(members)
            targets = rng.sample(range(len(members)), count)
            fault["target"] = ",".join("m%d" % i for i in sorted(targets))
            fault["start"] = time.monotonic()
            for i in targets:
                self.cluster.pause(i)
            time.sleep(max(0.0, fault["start"] + duration - time.monotonic()))
            for i in targets:
                self.cluster.resume(i)
            fault["end"] = time.monotonic()
        else:
            raise ValueError(kind)
        return fault

    def heal_all(self):
        for name in NAMES:
            if name in self.paused:
                self.resume_proxy(name, time.monotonic())
            if not self.proxies[name].running():
                self.restart_proxy(name)
        for r in self.relays.values():
            r.set_mode("pass")
        for m in self.cluster.members:
            if m.paused:
                self.cluster.resume(m.index)
            if not m.running():
                self.cluster.restart(m.index)

    def nemesis(self, until, rng):
        kinds = PROXY_KINDS + ETCD_KINDS + ([] if self.control else RELAY_KINDS)
        order = []
        while not self.stop_event.is_set() and time.monotonic() < until:
            if not order:
                order = kinds[:]
                rng.shuffle(order)
            kind = order.pop()
            try:
                fault = self.inject(kind, rng)
            except Exception as e:  # a fault that could not be applied: heal, note, go on
                self.notes.append("fault %s failed: %r" % (kind, e))
                log("  fault %s failed: %s" % (kind, traceback.format_exc()))
                self.heal_all()
                continue
            self.faults.append(fault)
            self.wait_recovered(fault)
            rec = fault["recovered"]
            log("  %-22s %-24s %.1fs, recovered %s" % (
                kind, fault["target"], fault["end"] - fault["start"],
                "%.1fs after it healed" % (rec - fault["end"]) if rec else "NOT"))
            # A quiet moment before the next fault (part of the schedule, as a duration).
            time.sleep(rng.uniform(0.5, 2.0))

    # ------------------------------------------------------------------ the run

    def execute(self):
        rng = random.Random(self.seed)
        outcomes_path = os.path.join(self.outdir, "clients.jsonl")
        warmup = 4.0
        run_start = time.monotonic()
        deadline = run_start + warmup + self.minutes * 60
        pollers = [threading.Thread(target=self.poll_proxy, args=(n,), daemon=True)
                   for n in NAMES]
        if not self.control:
            pollers.append(threading.Thread(target=self.watch_etcd_max, daemon=True))
        for t in pollers:
            t.start()
        self.worker = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "client_worker.py"),
             "--etcd", ",".join(self.cluster.endpoints),
             "--proxies", ",".join("%s=%d" % (n, p.port) for n, p in self.proxies.items()),
             "--locks", ",".join(LOCKS), "--lock-prefix", self.lock_prefix,
             "--threads", str(self.clients), "--seed", str(self.seed),
             "--deadline", repr(deadline), "--tag", self.tag, "--out", outcomes_path],
            stdin=subprocess.DEVNULL, stdout=open(os.path.join(self.outdir, "clients.out"), "wb"),
            stderr=subprocess.STDOUT, start_new_session=True)
        harness._live.add(self.worker)
        log("%s: %d clients writing; nemesis for %.1f min (seed %d)" % (
            self.tag, self.clients, self.minutes, self.seed))
        self.stop_event.wait(warmup)
        self.nemesis(deadline - 6.0, rng)
        self.heal_all()
        try:
            self.worker.wait(timeout=max(1.0, deadline - time.monotonic()) + 45)
        except subprocess.TimeoutExpired:
            self.notes.append("the client process did not finish within 45s of the deadline")
            self.worker.kill()
            self.worker.wait()
        harness._live.discard(self.worker)
        run_end = time.monotonic()
        final_fault = {"kind": "final", "target": "", "end": run_end}
        self.wait_recovered(final_fault)
        final = self.final_maxima()
        self.stop_event.set()
        with self.max_lock:
            max_seen = list(self.max_seen)
        with open(os.path.join(self.outdir, "max-observations.jsonl"), "w") as f:
            for obs in max_seen:
                f.write(json.dumps(obs) + "\n")
        store_status = {}
        if not self.control:
            for name, p in self.proxies.items():
                try:
                    store_status[name] = (self.fences_doc(p) or {}).get("fence_store")
                except (OSError, ValueError):
                    store_status[name] = "no answer"
        with open(os.path.join(self.outdir, "run.json"), "w", encoding="utf-8") as f:
            json.dump({"control": self.control, "seed": self.seed, "minutes": self.minutes,
                       "clients": self.clients, "binary": os.environ["FP_BINARY"],
                       "faults": self.faults, "pauses": self.pauses, "notes": self.notes,
                       "final": final, "store_status": store_status, "run_start": run_start,
                       "run_end": run_end, "backend_log": self.backend.log_path}, f, indent=1)
        return analyze(self.outdir)

    def final_maxima(self):
        """Each proxy's /fences (and etcd's max keys, real run), once they agree or after 15s."""
        deadline = time.monotonic() + 15
        while True:
            final = {}
            for name, p in self.proxies.items():
                try:
                    final["proxy " + name] = self.proxy_maxima(p, timeout=2.0)
                except (OSError, ValueError):
                    final["proxy " + name] = None
            if not self.control:
                try:
                    final["etcd"] = self.etcd_maxima()
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    final["etcd"] = None
            values = list(final.values())
            agree = all(v is not None for v in values) and (
                self.control or all(v == values[0] for v in values))
            if agree or time.monotonic() > deadline:
                if not agree:
                    self.notes.append("the maxima at the end did not agree within 15s: %s"
                                      % json.dumps(final, sort_keys=True))
                return {k: (v or {}) for k, v in final.items()}
            time.sleep(0.2)

    def report(self, records, outcomes, grants, lock_errors, violations, excused, stats, table,
               final, store_status, seconds, outages):
        by_status = {}
        for o in outcomes:
            key = "%s %s" % (o["kind"], o["status"] if o["status"] is not None else "no-answer")
            if o["status"] and o["ptype"]:
                key += " " + o["ptype"]
            by_status[key] = by_status.get(key, 0) + 1
        kinds_count = {}
        for v in violations:
            kinds_count[v["kind"]] = kinds_count.get(v["kind"], 0) + 1
        excused_count = {}
        for v in excused:
            excused_count[v["kind"]] = excused_count.get(v["kind"], 0) + 1
        fault_counts = {}
        for f in self.faults:
            fault_counts[f["kind"]] = fault_counts.get(f["kind"], 0) + 1
        passed = bool(violations) if self.control else not violations
        title = "negative control (own state files)" if self.control else "shared fences on etcd"
        lines = [
            "# Nemesis run: %s" % title, "",
            "- seed %d, %.1f min of faults, %.0f s in all, %d client threads, binary %s" % (
                self.seed, self.minutes, seconds, self.clients, os.environ["FP_BINARY"]),
            "- result: **%s** (%s)" % ("PASS" if passed else "FAIL", (
                "the checker found %d violations, as it must without shared fences"
                % len(violations) if self.control and violations else
                "the checker found no violation: it is blind" if self.control else
                "no violation" if not violations else "%d violations" % len(violations))),
            "- lock grants %d, lock errors %d, client attempts %d, backend records %d (%s)" % (
                grants, lock_errors, len(outcomes), stats["records"],
                ", ".join("%s %d" % kv for kv in stats["fences"].items())),
            "- max observations %d; acknowledged maxima %s" % (
                stats["max_observations"], json.dumps(stats["acked_max"], sort_keys=True)),
            "", "## Violations", "",
        ]
        if kinds_count:
            lines.append("| kind | count |")
            lines.append("|---|---|")
            for k, n in sorted(kinds_count.items()):
                lines.append("| %s | %d |" % (k, n))
            lines.append("")
            shown = {}
            for v in violations:
                shown[v["kind"]] = shown.get(v["kind"], 0) + 1
                if shown[v["kind"]] <= 10:
                    lines.append("- %s: %s" % (v["kind"], v["detail"]))
        else:
            lines.append("none")
        if excused:
            lines += ["", "Excused, the known limits (stale, overlap: a proxy paused for longer "
                      "than member_ttl between send and forward; refused_max: answered once the "
                      "token was the max, 503 for a membership not renewed in time or 409 once "
                      "a newer holder's raise stood): %s"
                      % json.dumps(excused_count)]
            for v in excused[:10]:
                lines.append("- %s: %s" % (v["kind"], v["detail"]))
        if getattr(self, "findings", None):
            lines += ["", "## Contract deviations (not safety violations; not failing the run)",
                      ""]
            for what, examples in sorted(self.findings.items()):
                lines.append("- %s: %d, e.g. %s" % (what, len(examples), examples[0]))
        lines += ["", "## Client answers", "", "| kind status | count |", "|---|---|"]
        for k, n in sorted(by_status.items()):
            lines.append("| %s | %d |" % (k, n))
        lines += ["", "## Longest raise outages", "",
                  "Per fence: from a holder's raise answered 503 to the next raise answered 200 "
                  "(the faults that began in between). The longest %d:" % len(outages), "",
                  "| fence | from (s into run) | lasted (s) | raise 503s | faults meanwhile |",
                  "|---|---|---|---|---|"]
        t_first = self.faults[0]["start"] if self.faults else 0
        for o in outages:
            lines.append("| %s | %.1f | %.1f | %d | %s |" % (
                o["fence"], o["start"] - t_first, o["seconds"], o["refused"],
                ", ".join(o["faults"][:6]) + (" ..." if len(o["faults"]) > 6 else "")))
        lines += ["", "## Faults", "", "counts: %s" % json.dumps(fault_counts, sort_keys=True), "",
                  "## Availability per fault kind", "",
                  "Seconds from the fault's start to the end of the last 503 answered to a "
                  "holder's raise (first write of a new token) or equal-token write sent in the "
                  "fault's window (until the next fault began); 0 when none was refused. "
                  "p50 / max over the faults of that kind.", "",
                  checker.availability_markdown(table), "",
                  "## Schedule", "",
                  "| start (s into run) | kind | target | held (s) | recovered after heal (s) |",
                  "|---|---|---|---|---|"]
        t0 = self.faults[0]["start"] if self.faults else 0
        for f in self.faults:
            rec = f.get("recovered")
            lines.append("| %.1f | %s | %s | %.1f | %s |" % (
                f["start"] - t0, f["kind"], f["target"], f["end"] - f["start"],
                "%.1f" % (rec - f["end"]) if rec else "not within %.0f" % RECOVERY_TIMEOUT))
        lines += ["", "## Maxima at the end", "", "```", json.dumps(final, indent=1,
                                                                      sort_keys=True), "```"]
        if store_status:
            lines += ["", "## fence_store status at the end", "", "```",
                      json.dumps(store_status, indent=1, sort_keys=True), "```"]
        if self.notes:
            lines += ["", "## Notes", ""] + ["- " + n for n in self.notes]
        text = "\n".join(lines) + "\n"
        path = os.path.join(self.outdir, "results.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        with open(os.path.join(self.outdir, "results.json"), "w", encoding="utf-8") as f:
            json.dump({"passed": passed, "control": self.control, "seed": self.seed,
                       "violations": violations, "excused": excused, "faults": self.faults,
                       "availability": table, "answers": by_status,
                       "findings": getattr(self, "findings", {}), "final": final,
                       "notes": self.notes, "outages": outages}, f, indent=1,
                      sort_keys=True)
        print(text)
        log("%s: results in %s" % (self.tag, path))
        return passed, path


def analyze(outdir):
    """Checks a finished run from what it left in outdir (run.json, clients.jsonl, the backend's
    log, max-observations.jsonl) and writes results.md / results.json there. -> (passed, path)"""
    with open(os.path.join(outdir, "run.json"), encoding="utf-8") as f:
        meta = json.load(f)
    run = Run(meta["control"], meta["minutes"], meta["seed"], outdir, meta["clients"])
    run.faults, run.pauses, run.notes = meta["faults"], meta["pauses"], meta["notes"]
    os.environ.setdefault("FP_BINARY", meta["binary"])
    backend_log = meta["backend_log"]
    if not os.path.exists(backend_log):  # the directory was moved
        backend_log = os.path.join(outdir, os.path.basename(backend_log))
    with open(backend_log, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    outcomes, grants, lock_errors = [], 0, 0
    with open(os.path.join(outdir, "clients.jsonl"), encoding="utf-8") as f:
        for line in f:
            e = json.loads(line)
            if e["ev"] == "write":
                outcomes.append(e)
            elif e["ev"] == "grant":
                grants += 1
            elif e["ev"] == "lock_error":
                lock_errors += 1
    with open(os.path.join(outdir, "max-observations.jsonl"), encoding="utf-8") as f:
        max_seen = [tuple(json.loads(line)) for line in f if line.strip()]
    final, run_end = meta["final"], meta["run_end"]
    for source, maxima in final.items():
        for fence, token in maxima.items():
            max_seen.append((run_end + 60, source + " (end)", fence, token, None))
    violations, excused, stats = checker.check(records, outcomes, max_seen, final, run.pauses,
                                               MEMBER_TTL)
    table = checker.availability(run.faults, outcomes, run_end)
    run.findings = checker.findings(outcomes, shared=not run.control)
    outages = checker.outages(outcomes, run.faults)
    return run.report(records, outcomes, grants, lock_errors, violations, excused, stats, table,
                      final, meta["store_status"], run_end - meta["run_start"], outages)


def run_one(control, minutes, seed, outdir, clients):
    run = Run(control, minutes, seed, outdir, clients)
    try:
        run.start()
        return run.execute()
    finally:
        run.stop()


def main():
    seed = ARGS.seed if ARGS.seed is not None else int(os.environ.get("FP_NEMESIS_SEED") or
                                                       time.time())
    if ARGS.analyze:
        return 0 if analyze(ARGS.analyze)[0] else 1
    outdir = ARGS.out or tempfile.mkdtemp(prefix="fp-nemesis-%d-" % seed)
    os.makedirs(outdir, exist_ok=True)
    try:
        harness.check_binary()
    except harness.HarnessError as e:
        print("nemesis: %s" % e)
        return 2
    from cluster import ETCD, ETCDCTL
    import lockservices
    if not (os.path.exists(ETCD) and os.path.exists(ETCDCTL)) or \
            lockservices.import_debian("etcd3") is None:
        print("nemesis: etcd, etcdctl and python3-etcd3 are needed (apt-get install etcd-server "
              "etcd-client python3-etcd3)")
        # ctest counts 77 as skipped; FP_REQUIRE_LOCK_SERVICES=1 (scripts/test.sh) fails instead.
        return 2 if os.environ.get("FP_REQUIRE_LOCK_SERVICES", "") not in ("", "0") else 77
    print("nemesis: seed %d (rerun with --seed %d), output in %s" % (seed, seed, outdir))
    results = []
    try:
        if ARGS.short or ARGS.with_control:
            ok_control, path_c = run_one(True, ARGS.control_minutes, seed,
                                         os.path.join(outdir, "control"), ARGS.clients)
            results.append(path_c)
            ok_real, path_r = run_one(False, ARGS.minutes, seed, os.path.join(outdir, "real"),
                                      ARGS.clients)
            results.append(path_r)
            ok = ok_control and ok_real
            print("nemesis: control %s, real run %s" % (
                "found violations (the checker sees them)" if ok_control else
                "FOUND NO VIOLATION (the checker is blind)",
                "passed" if ok_real else "FAILED"))
        else:
            ok, path = run_one(ARGS.control, ARGS.minutes, seed,
                               os.path.join(outdir, "control" if ARGS.control else "real"),
                               ARGS.clients)
            results.append(path)
    except Exception:
        traceback.print_exc()
        return 2
    if ARGS.results:
        with open(ARGS.results, "w", encoding="utf-8") as out:
            for path in results:
                with open(path, encoding="utf-8") as f:
                    out.write(f.read() + "\n")
        print("nemesis: results copied to %s" % ARGS.results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
