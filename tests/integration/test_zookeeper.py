"""End to end with a real ZooKeeper: lock service -> client -> fencing-proxy -> legacy backend.

ZooKeeper (Debian's zookeeper package, on the default JRE) runs standalone on 127.0.0.1 with a
temporary data directory, started once for the module (a JVM is slow to start on 2 cores).
Clients use kazoo's Lock (python3-kazoo): the standard recipe on EPHEMERAL|SEQUENCE znodes, the
lowest sequence number holds the lock. The fencing token is the lock znode's czxid
(examples/zookeeper_lock_write.fencing_token); docs/tokens.md says why not the sequence number,
and test_sequence_number_restarts_but_czxid_does_not shows it.

Skips with a message naming the missing packages; FP_REQUIRE_LOCK_SERVICES=1 makes that a failure.
"""

import json
import logging
import os
import random
import subprocess
import sys
import threading
import time
import unittest
import warnings

import lockservices as ls
from harness import ProxyTestCase

SKIP = ls.missing_zookeeper()
if not SKIP:
    fencing_token = ls.import_example("zookeeper_lock_write").fencing_token
    # Sessions are expired on purpose here: kazoo's warnings about it are expected.
    logging.getLogger("kazoo").setLevel(logging.ERROR)

EXAMPLE = os.path.join(ls.EXAMPLES_DIR, "zookeeper_lock_write.py")
CONFIG = {
    "threads": 2,
    "timeouts": {"connect": "1s", "request": "10s", "idle": "10s", "header_read": "5s",
                 "shutdown": "5s"},
    "routes": [
        {"name": "orders", "prefix": "/orders"},
        {"name": "a", "prefix": "/a", "fence": "lock-a"},
        {"name": "b", "prefix": "/b", "fence": "lock-b"},
        {"name": "by_seq", "prefix": "/by-seq"},
        {"name": "by_czxid", "prefix": "/by-czxid"},
    ],
}


@unittest.skipIf(SKIP, SKIP)
class ZooKeeperEndToEndTest(ProxyTestCase):

    @classmethod
    def setUpClass(cls):
        # kazoo 2.8 calls Event.isSet(); unittest shows DeprecationWarnings (set here, inside
        # the runner's own warning filters, to take precedence over them).
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"kazoo\.")
        cls.zookeeper = ls.ZooKeeperServer()
        cls.addClassCleanup(cls.zookeeper.stop)
        print("\n  ZooKeeper %s up in %.2fs" % (cls.zookeeper.hosts,
                                               cls.zookeeper.startup_seconds))

    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()
        self.proxy = self.start_proxy(CONFIG, self.backend)
        self.lock_root = "/fp/%s" % self._testMethodName  # one server: paths of its own

    # -- helpers --

    def client(self, session_timeout=10.0):
        zk = self.zookeeper.client(session_timeout)

        def close():
            zk.stop()
            zk.close()
        self.addCleanup(close)
        return zk

    def acquire(self, zk, name, timeout=20):
        """kazoo Lock on lock_root/name, acquired -> (lock, czxid token)."""
        lock = zk.Lock("%s/%s" % (self.lock_root, name), "test")
        self.assertTrue(lock.acquire(timeout=timeout))
        self.addCleanup(lambda: zk.connected and lock.release())
        return lock, fencing_token(zk, lock)

    def put(self, path, token, body):
        return self.proxy.request("PUT", path, token, body.encode())

    def stored(self, path):
        status, _, body = self.proxy.request("GET", path)
        self.assertEqual(status, 200, "GET %s through the proxy (unfenced)" % path)
        return body.decode()

    def tokens_at(self, path):
        return [int(r["token"]) for r in self.backend.records(path)
                if r["method"] not in ("GET", "HEAD")]

    # -- tests --

    def test_paused_holder_session_expires_and_its_late_write_is_refused(self):
        """A holds the lock and writes; A's process is paused (SIGSTOP: kazoo's pings stop too)
        past its session timeout; the server expires the session and deletes A's znode, B gets
        the lock and writes; A wakes up and writes with its old czxid: 409, B's data stays."""
        session = 2.0
        a = ls.Holder("zookeeper", self.zookeeper.hosts, self.lock_root + "/orders",
                      self.proxy.port, ttl=session)
        self.addCleanup(a.stop)
        status, body = a.write("/orders/42", "A: first")
        self.assertEqual(status, 200, "the holder's write is forwarded: %s" % body)

        zk_b = self.client()
        lock_b = zk_b.Lock(self.lock_root + "/orders", "B")
        self.addCleanup(lambda: zk_b.connected and lock_b.release())
        got = {}

        def contend():
            try:
                lock_b.acquire(timeout=30)
                got["token"] = fencing_token(zk_b, lock_b)
            except Exception as e:  # reported below
                got["error"] = e
            got["at"] = time.monotonic()

        waiter = threading.Thread(target=contend, daemon=True)
        waiter.start()
        time.sleep(session + 0.5)
        self.assertNotIn("at", got, "while A runs, its pings keep the session past its timeout "
                         "and B waits: %r" % got)

        paused = time.monotonic()
        a.pause()
        waiter.join(20)
        self.assertIn("token", got, "B gets the lock once A's session expires: %r" % got)
        expired_after = got["at"] - paused
        self.assertGreater(got["token"], a.token, "B's czxid is above A's")
        self.assert2xx(self.put("/orders/42", got["token"], "B: second"), "B's write")

        a.resume()
        status, body = a.write("/orders/42", "A: late")
        self.assertEqual(status, 409, "A's late write with its old czxid is refused: %s" % body)
        problem = json.loads(body)
        self.assertEqual((problem["token"], problem["max_token"]), (a.token, got["token"]))
        self.assertFalse(a.holds(), "A's znode went with its session")

        self.assertEqual(self.stored("/orders/42"), "B: second", "the backend keeps B's data")
        self.assertEqual(self.tokens_at("/orders/42"), [a.token, got["token"]],
                         "the backend applied A's first write and B's, never A's late one")
        print("\n  ZooKeeper: A paused; its session (%.1fs) expired and B had the lock %.2fs "
              "later; A's late write (czxid %d < %d) got 409"
              % (session, expired_after, a.token, got["token"]))

    def test_session_closed_under_a_holder(self):
        """The holder's session is ended on the server (closed through its session id, without
        the holder deleting anything, as an expiry would); the waiter gets the lock at once;
        the old holder, unaware, writes with its old czxid: 409."""
        zk_a, zk_b = self.client(), self.client()
        lock_a, token_a = self.acquire(zk_a, "orders")
        self.assert2xx(self.put("/orders/1", token_a, "A"))
        lock_b = zk_b.Lock(self.lock_root + "/orders", "B")
        got = {}
        waiter = threading.Thread(target=lambda: got.setdefault("ok", lock_b.acquire(timeout=20)),
                                  daemon=True)
        waiter.start()
        self.zookeeper.expire_session(zk_a)
        waiter.join(20)
        self.assertTrue(got.get("ok"), "B gets the lock when A's session ends")
        token_b = fencing_token(zk_b, lock_b)
        self.assertGreater(token_b, token_a)
        self.assert2xx(self.put("/orders/1", token_b, "B"))
        self.assertProblem(self.put("/orders/1", token_a, "A late"), 409, "A's late write")
        self.assertEqual(self.stored("/orders/1"), "B")
        lock_b.release()

    def test_handovers_applied_tokens_never_decrease(self):
        """Two kazoo clients and the shipped example (examples/zookeeper_lock_write.py, a new
        process each time) contend for one lock; every grant writes through the proxy; now and
        then a client that has released writes again with its old czxid after the next holder
        wrote. The backend's applied tokens never decrease; stale writes are refused."""
        target, deadline = 60, time.monotonic() + 40
        state = {"max_written": 0}
        cond = threading.Condition()
        grants, stale, errors = [], [], []
        stop = threading.Event()
        path = self.lock_root + "/orders"

        def kazoo_client(i):
            rng = random.Random(i)
            n = 0
            try:
                zk = self.zookeeper.client(10.0)
            except Exception as e:
                errors.append("zk%d: %r" % (i, e))
                return
            try:
                lock = zk.Lock(path, "zk%d" % i)
                while not stop.is_set() and time.monotonic() < deadline:
                    lock.acquire(timeout=20)
                    try:
                        token = fencing_token(zk, lock)
                        grants.append(("zk%d" % i, token))
                        for _ in range(rng.randint(1, 2)):
                            n += 1
                            status = self.put("/orders/h/zk%d/%d" % (i, n), token, "w")[0]
                            if status != 200:
                                errors.append("zk%d czxid %d: holder's write got %d"
                                              % (i, token, status))
                        with cond:
                            state["max_written"] = max(state["max_written"], token)
                            cond.notify_all()
                    finally:
                        lock.release()
                    if len(grants) % 7 == i:
                        with cond:
                            cond.wait_for(lambda: state["max_written"] > token or stop.is_set(),
                                          timeout=5)
                            newer = state["max_written"] > token
                        if newer:
                            stale.append((token, self.put("/orders/h/stale", token, "s")[0]))
                    time.sleep(rng.uniform(0, 0.005))
            except Exception as e:
                errors.append("zk%d: %r" % (i, e))
            finally:
                zk.stop()
                zk.close()

        def example_client():
            n = 0
            try:
                while not stop.is_set() and time.monotonic() < deadline:
                    n += 1
                    result = subprocess.run(
                        [sys.executable, EXAMPLE, "--hosts", self.zookeeper.hosts,
                         "--lock", path, "--data", "w",
                         "http://127.0.0.1:%d/orders/h/example/%d" % (self.proxy.port, n)],
                        env=ls.child_env(), capture_output=True, text=True, timeout=30,
                        stdin=subprocess.DEVNULL)
                    if result.returncode != 0:
                        errors.append("example: %s %s" % (result.stdout, result.stderr[-1000:]))
                        continue
                    token = self.tokens_at("/orders/h/example/%d" % n)[-1]
                    grants.append(("example", token))
                    with cond:
                        state["max_written"] = max(state["max_written"], token)
                        cond.notify_all()
            except Exception as e:
                errors.append("example: %r" % e)

        def distinct_applied():
            return len({r["token"] for r in self.backend.records("/orders/h")})

        started = time.monotonic()
        threads = [threading.Thread(target=kazoo_client, args=(i,), daemon=True)
                   for i in range(2)] + [threading.Thread(target=example_client, daemon=True)]
        for t in threads:
            t.start()
        try:
            ls.wait_for(lambda: (distinct_applied() > target
                                  and sum(1 for g in grants if g[0] == "example") >= 2) or errors
                         or not any(t.is_alive() for t in threads), 45,
                         "%d hand-overs" % target, 0.1)
        finally:
            stop.set()
            with cond:
                cond.notify_all()
            for t in threads:
                t.join(30)
        elapsed = time.monotonic() - started
        self.assertFalse(any(t.is_alive() for t in threads), "clients finished")
        self.assertEqual(errors, [], "every holder's write is forwarded")

        records = self.backend.records("/orders/h")
        tokens = ls.assert_tokens_never_decrease(self, records, "ZooKeeper hand-overs")
        handovers = len(set(tokens)) - 1
        self.assertGreaterEqual(handovers, 50, "at least 50 hand-overs within the time limit")
        self.assertTrue(stale, "some stale holders wrote after a newer holder")
        self.assertEqual([s for s in stale if s[1] != 409], [],
                         "every stale write (after a newer holder wrote) is refused with 409")
        self.assertNotIn("stale", [r["path"].rsplit("/", 1)[-1] for r in records])
        in_lock = [t for who, t in grants if who.startswith("zk")]  # appended while holding it
        self.assertEqual(in_lock, sorted(set(in_lock)),
                         "each grant's czxid is above every earlier grant's")
        by_client = {}
        for who, _ in grants:
            by_client[who] = by_client.get(who, 0) + 1
        changes = sum(1 for a, b in zip(records, records[1:]) if a["token"] != b["token"])
        print("\n  ZooKeeper: %d hand-overs (grants %s) with %d writes in %.2fs, %.1f ms per "
              "hand-over; %d stale writes refused" % (handovers, by_client, len(records),
                                                       elapsed, 1000 * elapsed / max(changes, 1),
                                                       len(stale)))

    def test_sequence_number_restarts_but_czxid_does_not(self):
        """The lock's parent znode is deleted and recreated between two grants (a cleanup job,
        an operator, or a container znode going away when empty): the sequence number restarts
        at 0, so a holder sending it is refused; the czxid keeps growing and is accepted."""
        zk = self.client()
        path = self.lock_root + "/seq"
        for i in range(3):
            lock, czxid = self.acquire(zk, "seq")
            seq = int(lock.node[-10:])
            self.assert2xx(self.put("/by-seq/x", seq, "seq %d" % i))
            self.assert2xx(self.put("/by-czxid/x", czxid, "czxid %d" % i))
            lock.release()
        self.assertEqual(seq, 2)
        zk.delete(path)  # empty now: the recipe deletes its znode on release
        lock, czxid = self.acquire(zk, "seq")
        self.assertEqual(int(lock.node[-10:]), 0, "the recreated parent counts from 0 again")
        self.assertProblem(self.put("/by-seq/x", 0, "seq after recreation"), 409,
                           "a sequence number after the parent was recreated")
        self.assert2xx(self.put("/by-czxid/x", czxid, "czxid after recreation"),
                       "czxid is cluster-wide and keeps growing")
        lock.release()

    def test_independent_locks_write_to_independent_fences(self):
        """Two locks (two znode paths), two fences: czxids of both locks come from one counter,
        yet their holders, writing interleaved to their own routes, never fence each other
        out; a stale czxid on either route is still refused."""
        zk = self.client()
        prev, writes = {}, 0
        for round_ in range(5):
            cur = {name: self.acquire(zk, "lock-" + name) for name in ("a", "b")}
            ta, tb = cur["a"][1], cur["b"][1]
            self.assertLess(ta, tb)
            for i in range(3):
                self.assert2xx(self.put("/b/x", tb, "b%d.%d" % (round_, i)), "lock-b's holder")
                self.assert2xx(self.put("/a/x", ta, "a%d.%d" % (round_, i)),
                               "lock-a's holder, right after lock-b's higher czxid")
                writes += 2
            for name, route in (("a", "/a/x"), ("b", "/b/x")):
                if name in prev:
                    self.assertProblem(self.put(route, prev[name], "stale"), 409,
                                       "lock-%s's previous holder on its own route" % name)
                prev[name] = cur[name][1]
                cur[name][0].release()
        self.assertEqual(len(self.backend.records("/a/x")) + len(self.backend.records("/b/x")),
                         writes, "every holder's write was applied; no stale one")

    def test_one_route_one_lock_per_key(self):
        """Fence keys: one route, one kazoo lock per object (lock_root/objects/<key>), the key
        from a header, the token the lock znode's czxid (one cluster-wide zxid counter). The
        holders of three keys, each in its own session, write concurrently and none is refused;
        key 1's holder is deposed (its session ended on the server), the next holder of key 1
        writes with a czxid above every other key's, the deposed holder is refused, and the other
        keys' holders write on with their lower czxids."""
        keyed = {"name": "objects", "prefix": "/objects", "token_order": "global",
                 "fence_key": {"header": "X-Object"}}
        proxy = self.start_proxy({"threads": 2, "timeouts": CONFIG["timeouts"],
                                  "routes": [keyed]}, self.backend, name="keyed")
        keys = ["obj-1", "obj-2", "obj-3"]
        holders = {}
        for key in keys:
            zk = self.client()
            lock, token = self.acquire(zk, "objects/" + key)
            holders[key] = (zk, lock, token)
        errors, statuses = [], {}

        def put(key, token, body):
            return proxy.request("PUT", "/objects/doc-" + key, token, body.encode(),
                                 headers={"X-Object": key})

        def writer(key, token, n):
            for i in range(n):
                try:
                    statuses.setdefault(key, []).append(put(key, token, "%s.%d" % (key, i))[0])
                except Exception as e:  # reported below
                    errors.append("%s: %r" % (key, e))

        def write_all(tokens, n):
            threads = [threading.Thread(target=writer, args=(k, t, n), daemon=True)
                       for k, t in tokens.items()]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)

        write_all({k: h[2] for k, h in holders.items()}, 5)
        self.assertEqual(errors, [])
        self.assertEqual(statuses, {k: [200] * 5 for k in keys},
                         "holders of different keys write concurrently, none refused")

        zk_old, _, old_token = holders["obj-1"]
        zk_new = self.client()
        lock_new = zk_new.Lock("%s/objects/obj-1" % self.lock_root, "next")
        got = {}
        waiter = threading.Thread(target=lambda: got.setdefault(
            "ok", lock_new.acquire(timeout=20)), daemon=True)
        waiter.start()
        self.zookeeper.expire_session(zk_old)  # deposed, and unaware of it
        waiter.join(20)
        self.assertTrue(got.get("ok"), "the next holder of obj-1 gets its lock")
        self.addCleanup(lambda: zk_new.connected and lock_new.release())
        new_token = fencing_token(zk_new, lock_new)
        self.assertGreater(new_token, max(h[2] for h in holders.values()))
        self.assert2xx(put("obj-1", new_token, "new holder"), "obj-1's new holder")
        statuses.clear()
        write_all({"obj-2": holders["obj-2"][2], "obj-3": holders["obj-3"][2]}, 3)
        problem = self.assertProblem(put("obj-1", old_token, "deposed holder"), 409,
                                     "obj-1's deposed holder")
        self.assertEqual((problem.get("key"), problem.get("max_token")), ("obj-1", new_token))
        self.assertEqual(statuses, {"obj-2": [200] * 3, "obj-3": [200] * 3},
                         "the other keys' holders (czxids below obj-1's new one) write on")
        for key in keys:
            ls.assert_tokens_never_decrease(self, self.backend.records("/objects/doc-" + key),
                                            "key " + key)
        self.assertEqual(self.backend.request("GET", "/objects/doc-obj-1")[2], b"new holder")


if __name__ == "__main__":
    unittest.main()
