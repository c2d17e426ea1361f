#!/usr/bin/env python3
"""The nemesis run's clients: N threads in one process, each a lock holder of the real etcd.

Each thread, until the deadline:
  1. picks one of the locks (orders, k1, k2) and takes it with etcd's lock recipe
     (examples/etcd_lock_write.EtcdLock, the recipe `etcdctl lock` runs: a lease of --lock-ttl
     seconds, a key under the lock's name, the lowest create revision holds it); its fencing
     token is the revision at which it saw that it holds the lock (etcdctl's ETCD_LOCK_REV). A
     member that does not answer makes the thread try the next member (python3-etcd3 0.12 talks
     to one endpoint per client);
  2. writes 1-4 times through a random proxy with that token in X-Fencing-Token, some writes
     slow (X-Demo-Delay-Ms: the recording backend holds them). A 503 or a refused connection is
     retried (a new request, a new random proxy) for up to --retry-for seconds;
  3. releases the lock (revokes its lease). Sometimes the last write is sent just after the
     release (slow: the next holder's raise races with it), and sometimes the thread writes once
     more later with its old token (a stale holder): both are kind "late".

Every attempt is one JSON line in --out, written when its answer came:
  {"ev": "write", "id", "lock", "path", "token", "proxy", "kind": "raise"|"equal"|"late",
   "hold_ms", "sent", "done", "status" (null: no answer), "ptype" (problem type), "detail" (the problem's, cut),
   "err"}
"raise" is a holder's write before any 200 for its token, "equal" one after. Lock events:
  {"ev": "grant", "lock", "token", "t", "thread"}, {"ev": "lock_error", "t", "err"}.
Times are time.monotonic() (CLOCK_MONOTONIC: one clock for every process on the host).
"""

import argparse
import http.client
import json
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import lockservices as ls  # noqa: E402

etcd3 = ls.import_debian("etcd3")
if etcd3 is None:
    sys.stderr.write("client_worker: python3-etcd3 is not importable\n")
    sys.exit(3)
EtcdLock = ls.import_example("etcd_lock_write").EtcdLock

HOLDS = [0, 0, 0, 0, 10, 50, 200, 600]        # ms the backend holds a holder's write
LATE_HOLDS = [20, 100, 300, 800]               # ms for a write sent after the release


def lock_paths(lock, proxy, rid):
    if lock == "orders":
        return "/orders/%s/%s" % (proxy, rid)
    return "/objects/%s/%s/%s" % (lock, proxy, rid)


class Out:
    def __init__(self, path):
        self.f = open(path, "a", encoding="utf-8")
        self.lock = threading.Lock()

    def put(self, entry):
        line = json.dumps(entry)
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()


class Failover:
    """One python3-etcd3 client per member, made lazily and kept; next() moves to another."""

    def __init__(self, endpoints, rng):
        self.endpoints = endpoints
        self.i = rng.randrange(len(endpoints))
        self.clients = {}

    def client(self):
        ep = self.endpoints[self.i]
        if ep not in self.clients:
            host, _, port = ep.rpartition(":")
            self.clients[ep] = etcd3.client(host=host, port=int(port), timeout=3)
        return self.clients[ep]

    def next(self):
        self.i = (self.i + 1) % len(self.endpoints)


def run_thread(n, args, proxies, out, stop):
    rng = random.Random(args.seed * 1000 + n)
    fo = Failover(args.etcd, rng)
    counter = [0]

    def write(lock, token, kind, hold_ms, retry, state):
        """One logical write: attempts until an answer that is not 503 / no answer, or retry
        time is up. Returns the last status."""
        first = time.monotonic()
        while True:
            counter[0] += 1
            rid = "%s-c%d-%d" % (args.tag, n, counter[0])
            name = rng.choice(sorted(proxies))
            path = lock_paths(lock, name, rid)
            k = kind if kind == "late" else ("equal" if state["raised"] else "raise")
            entry = {"ev": "write", "id": rid, "lock": lock, "path": path, "token": token,
                     "proxy": name, "kind": k, "hold_ms": hold_ms, "sent": time.monotonic(),
                     "done": None, "status": None, "ptype": None, "err": None}
            conn = http.client.HTTPConnection("127.0.0.1", proxies[name], timeout=args.http_timeout)
            try:
                headers = {"X-Fencing-Token": str(token)}
                if hold_ms:
                    headers["X-Demo-Delay-Ms"] = str(hold_ms)
                conn.request("PUT", path, body=rid.encode(), headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                entry["status"] = resp.status
                if resp.status >= 400:
                    try:
                        problem = json.loads(body)
                        entry["ptype"] = problem.get("type", "").rpartition(":")[2]
                        entry["detail"] = str(problem.get("detail", ""))[:200]
                    except ValueError:
                        pass
            except Exception as e:  # no answer: refused, reset, timed out
                entry["err"] = "%s: %s" % (type(e).__name__, str(e)[:120])
            finally:
                conn.close()
                entry["done"] = time.monotonic()
            out.put(entry)
            status = entry["status"]
            if status == 200:
                state["raised"] = True
            if status not in (503, None) or not retry:
                return status
            if time.monotonic() - first > args.retry_for or stop.is_set():
                return status
            time.sleep(rng.uniform(0.05, 0.15))

    while not stop.is_set() and time.monotonic() < args.deadline:
        lock_name = rng.choice(args.locks)
        lock = EtcdLock(fo.client(), "%s/%s" % (args.lock_prefix, lock_name), ttl=args.lock_ttl)
        try:
            token = lock.acquire(timeout=6)
        except Exception as e:
            out.put({"ev": "lock_error", "t": time.monotonic(), "thread": n, "lock": lock_name,
                     "endpoint": fo.endpoints[fo.i], "err": "%s: %s" % (type(e).__name__,
                                                                       str(e)[:120])})
            fo.next()
            time.sleep(rng.uniform(0.1, 0.4))
            continue
        out.put({"ev": "grant", "lock": lock_name, "token": token, "t": time.monotonic(),
                 "thread": n})
        state = {"raised": False}
        writes = rng.randint(1, 4)
        released = False
        for k in range(writes):
            if k == writes - 1 and rng.random() < 0.25:
                # The lease is given up as the last write goes out: the next holder may raise
                # the fence while this one is still in flight.
                lock.release()
                released = True
                write(lock_name, token, "late", rng.choice(LATE_HOLDS), False, state)
                break
            status = write(lock_name, token, "holder", rng.choice(HOLDS), True, state)
            if status == 409:
                break  # the lock was lost (its lease expired): a holder stops writing
        if not released:
            lock.release()
        if rng.random() < 0.2 and not stop.is_set():
            time.sleep(rng.uniform(0.0, 0.6))
            write(lock_name, token, "late", rng.choice([0, 0, 50, 300]), False, state)
        time.sleep(rng.uniform(0.02, 0.25))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--etcd", required=True, help="comma-separated host:port of the members")
    p.add_argument("--proxies", required=True, help="NAME=PORT,...")
    p.add_argument("--locks", default="orders,k1,k2")
    p.add_argument("--lock-prefix", required=True)
    p.add_argument("--lock-ttl", type=int, default=4)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--deadline", type=float, required=True, help="time.monotonic() to stop at")
    p.add_argument("--retry-for", type=float, default=10.0)
    p.add_argument("--http-timeout", type=float, default=20.0)
    p.add_argument("--tag", default="r")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    args.etcd = args.etcd.split(",")
    args.locks = args.locks.split(",")
    proxies = dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in args.proxies.split(","))
    out = Out(args.out)
    stop = threading.Event()
    threads = [threading.Thread(target=run_thread, args=(n, args, proxies, out, stop),
                                daemon=True) for n in range(args.threads)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        stop.set()
    out.put({"ev": "worker_done", "t": time.monotonic()})
    # python3-etcd3's grpc threads can keep the interpreter from exiting: leave at once.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
