"""End to end with a real etcd: lock service -> client -> fencing-proxy -> legacy backend.

etcd (Debian's etcd-server) runs on 127.0.0.1 with a temporary data directory, once for the
module. Clients use etcd's standard lock recipe (a key under NAME/ attached to a lease; the oldest
key holds the lock), through `etcdctl lock` (etcd-client) and through examples/etcd_lock_write.py
(python3-etcd3), and send the revision at which they got the lock as the fencing token
(ETCD_LOCK_REV). The demo backend logs every write it applied with its token.

Skips with a message naming the missing packages; FP_REQUIRE_LOCK_SERVICES=1 makes that a failure.
"""

import json
import os
import random
import subprocess
import sys
import threading
import time
import unittest

import lockservices as ls
from harness import metric, run_cli

SKIP = ls.missing_etcd()
if not SKIP:
    EtcdLock = ls.import_example("etcd_lock_write").EtcdLock

LOCK_SCRIPT = os.path.join(ls.EXAMPLES_DIR, "etcd-lock-write.sh")
TIMEOUTS = {"connect": "1s", "request": "10s", "idle": "10s", "header_read": "5s",
            "shutdown": "5s"}
CONFIG = {
    "threads": 2,
    "timeouts": TIMEOUTS,
    "routes": [
        {"name": "orders", "prefix": "/orders"},
        # Two locks, two fences.
        {"name": "a", "prefix": "/a", "fence": "lock-a"},
        {"name": "b", "prefix": "/b", "fence": "lock-b"},
        # Two routes naming one fence: the counter-example.
        {"name": "s1", "prefix": "/s1", "fence": "shared"},
        {"name": "s2", "prefix": "/s2", "fence": "shared"},
    ],
}
JUMP = 1000000


@unittest.skipIf(SKIP, SKIP)
class EtcdEndToEndTest(ls.EtcdTestCase):

    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()
        self.proxy = self.start_proxy(CONFIG, self.backend)
        # One etcd serves the whole module: each test locks names of its own.
        self.lock_prefix = "fp/%s/" % self._testMethodName

    # -- helpers --

    def client(self):
        client = self.etcd.client()
        self.addCleanup(client.close)
        return client

    def lock(self, name, ttl=10, client=None):
        lock = EtcdLock(client or self.client(), self.lock_prefix + name, ttl=ttl)
        self.addCleanup(lock.release)
        return lock

    def put(self, path, token, body):
        return self.proxy.request("PUT", path, token, body.encode())

    def stored(self, path):
        status, _, body = self.proxy.request("GET", path)
        self.assertEqual(status, 200, "GET %s through the proxy (unfenced)" % path)
        return body.decode()

    def run_lock_script(self, lock, path, body, wait=True):
        """examples/etcd-lock-write.sh LOCK URL BODY_FILE, with this etcd."""
        body_file = os.path.join(self.workdir, "body-%d" % random.getrandbits(32))
        with open(body_file, "w", encoding="utf-8") as f:
            f.write(body)
        argv = ["sh", LOCK_SCRIPT, self.lock_prefix + lock,
                "http://127.0.0.1:%d%s" % (self.proxy.port, path), body_file]
        env = self.etcd.ctl_env({"LOCK_TTL": "5"})
        if wait:
            return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30,
                                  stdin=subprocess.DEVNULL)
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, stdin=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(self._reap, proc)
        return proc

    @staticmethod
    def _reap(proc):
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)

    def lock_keys(self, name, client):
        return list(client.get_prefix(self.lock_prefix + name + "/"))

    def tokens_at(self, path):
        return [int(r["token"]) for r in self.backend.records(path)
                if r["method"] not in ("GET", "HEAD")]

    # -- tests --

    def test_paused_holder_loses_its_lease_and_its_late_write_is_refused(self):
        """A holds the lock and writes; A's process is paused (SIGSTOP: keep-alives stop too)
        past its lease TTL; the lease expires, B gets the lock and writes; A wakes up and writes
        with its old revision: 409, and the backend keeps B's data."""
        ttl = 2
        a = ls.Holder("etcd", self.etcd.endpoint, self.lock_prefix + "orders", self.proxy.port,
                      ttl=ttl)
        self.addCleanup(a.stop)
        status, body = a.write("/orders/42", "A: first")
        self.assertEqual(status, 200, "the holder's write is forwarded: %s" % body)

        b = self.lock("orders", ttl=10)
        got = {}

        def contend():
            try:
                got["token"] = b.acquire(timeout=30)
            except Exception as e:  # reported below
                got["error"] = e
            got["at"] = time.monotonic()

        waiter = threading.Thread(target=contend, daemon=True)
        waiter.start()
        time.sleep(ttl + 0.5)
        self.assertNotIn("at", got, "while A runs, its keep-alive holds the lease past its TTL "
                         "and B waits: %r" % got)

        paused = time.monotonic()
        a.pause()
        waiter.join(20)
        self.assertIn("token", got, "B gets the lock once A's lease expires: %r" % got)
        expired_after = got["at"] - paused
        self.assertGreater(got["token"], a.token, "B's token (revision) is above A's")
        self.assert2xx(self.put("/orders/42", got["token"], "B: second"), "B's write")

        a.resume()
        self.assertFalse(a.holds(), "A's lock key went with its lease")
        status, body = a.write("/orders/42", "A: late")
        self.assertEqual(status, 409, "A's late write with its old revision is refused: %s" % body)
        problem = json.loads(body)
        self.assertEqual((problem["token"], problem["max_token"]), (a.token, got["token"]))

        self.assertEqual(self.stored("/orders/42"), "B: second", "the backend keeps B's data")
        self.assertEqual(self.tokens_at("/orders/42"), [a.token, got["token"]],
                         "the backend applied A's first write and B's, never A's late one")
        print("\n  etcd: A paused; its lease (TTL %ds) expired and B had the lock %.2fs later; "
              "A's late write (token %d < %d) got 409" % (ttl, expired_after, a.token,
                                                         got["token"]))

    def test_etcdctl_lock_script_takes_over_a_revoked_lease(self):
        """examples/etcd-lock-write.sh waits behind a Python holder; the holder's lease is
        revoked (etcdctl lease revoke: an operator, or a lease lost to a partition); the script
        gets the lock and writes with ETCD_LOCK_REV; the old holder's write is refused."""
        client = self.client()
        a = self.lock("orders", ttl=30, client=client)
        a_token = a.acquire(timeout=10)
        self.assert2xx(self.put("/orders/7", a_token, "python holder"), "A's write")

        script = self.run_lock_script("orders", "/orders/7", "etcdctl holder", wait=False)
        ls.wait_for(lambda: len(self.lock_keys("orders", client)) == 2, 10,
                     "etcdctl's lock key to queue behind A's")
        time.sleep(0.3)
        self.assertIsNone(script.poll(), "the script waits while A holds the lock")

        revoked = time.monotonic()
        self.etcd.etcdctl("lease", "revoke", "%x" % a.lease.id)
        out, err = script.communicate(timeout=20)
        took = time.monotonic() - revoked
        self.assertEqual(script.returncode, 0, "the script's write succeeds: %s %s" % (out, err))
        self.assertIn("stored", out, "curl prints the backend's answer")
        script_token = self.tokens_at("/orders/7")[-1]
        self.assertGreater(script_token, a_token, "ETCD_LOCK_REV is above A's revision")

        self.assertProblem(self.put("/orders/7", a_token, "python holder, late"), 409,
                           "A's write after its lease was revoked")
        self.assertEqual(self.stored("/orders/7"), "etcdctl holder")
        self.assertEqual(self.tokens_at("/orders/7"), [a_token, script_token])

        # The script also reports a refusal: a write with a stale token makes it exit non-zero.
        self.assert2xx(self.put("/orders/7", script_token + 1000, "a newer holder"))
        failed = self.run_lock_script("orders", "/orders/7", "refused")
        self.assertNotEqual(failed.returncode, 0, "409 -> the script fails: %s" % failed.stdout)
        self.assertIn("409", failed.stderr + failed.stdout)
        print("\n  etcd: lease revoked; etcd-lock-write.sh had the lock and wrote %.2fs later"
              % took)

    def test_python_example_script_writes_with_its_token(self):
        """examples/etcd_lock_write.py, run as a user would: takes the lock (queued behind an
        etcdctl holder, the same recipe), writes once with its token, releases."""
        release_file = os.path.join(self.workdir, "release")
        hold = ('i=0; while [ ! -e "$1" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done')
        holder = subprocess.Popen(
            [ls.ETCDCTL, "lock", self.lock_prefix + "orders", "--", "sh", "-c", hold, "hold",
             release_file], env=self.etcd.ctl_env(), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(self._reap, holder)
        client = self.client()
        ls.wait_for(lambda: len(self.lock_keys("orders", client)) == 1, 10, "etcdctl's lock")
        example = subprocess.Popen(
            [sys.executable, os.path.join(ls.EXAMPLES_DIR, "etcd_lock_write.py"),
             "--endpoint", self.etcd.endpoint, "--lock", self.lock_prefix + "orders",
             "--data", "from the example", "http://127.0.0.1:%d/orders/5" % self.proxy.port],
            env=ls.child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(self._reap, example)
        ls.wait_for(lambda: len(self.lock_keys("orders", client)) == 2, 10,
                     "the example to queue behind etcdctl")
        self.assertEqual(self.tokens_at("/orders/5"), [], "no write while etcdctl holds the lock")
        open(release_file, "w").close()
        out, err = example.communicate(timeout=30)
        self.assertEqual(example.returncode, 0, "the example's write succeeds: %s %s" % (out, err))
        token = self.tokens_at("/orders/5")
        self.assertEqual(len(token), 1)
        self.assertIn("token %d -> 200" % token[0], out)
        self.assertEqual(self.stored("/orders/5"), "from the example")
        self.assertEqual(self.lock_keys("orders", client), [], "both released the lock")

    def test_etcdctl_waiter_token_is_above_later_create_revisions(self):
        """Why the token is the revision at which the lock was acquired (ETCD_LOCK_REV), not the
        lock key's create revision: an etcdctl client that waited in the queue sends a revision
        above the create revision of a key queued behind it, so a client sending its create
        revision after it would be refused. EtcdLock.token (acquisition revision) is safe."""
        client = self.client()
        w = self.lock("orders", client=client)
        self.assert2xx(self.put("/orders/9", w.acquire(timeout=10), "w"))

        release_file = os.path.join(self.workdir, "release-etcdctl")
        hold = ('curl -sS --fail-with-body -X PUT -H "X-Fencing-Token: $ETCD_LOCK_REV" '
                '--data-binary x "$1" && i=0 && while [ ! -e "$2" ] && [ $i -lt 400 ]; '
                'do sleep 0.05; i=$((i+1)); done')
        x = subprocess.Popen(
            [ls.ETCDCTL, "lock", self.lock_prefix + "orders", "--", "sh", "-c", hold, "hold",
             "http://127.0.0.1:%d/orders/9" % self.proxy.port, release_file],
            env=self.etcd.ctl_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(self._reap, x)
        ls.wait_for(lambda: len(self.lock_keys("orders", client)) == 2, 10, "etcdctl queued")

        y = self.lock("orders")
        got = {}
        waiter = threading.Thread(target=lambda: got.setdefault("token", y.acquire(timeout=30)),
                                  daemon=True)
        waiter.start()
        ls.wait_for(lambda: len(self.lock_keys("orders", client)) == 3, 10, "y queued")

        w.release()
        ls.wait_for(lambda: len(self.tokens_at("/orders/9")) == 2, 10, "etcdctl's write")
        x_token = self.tokens_at("/orders/9")[-1]
        open(release_file, "w").close()
        waiter.join(20)
        self.assertIn("token", got, "y gets the lock after etcdctl releases it")
        self.assertEqual(x.wait(10), 0)

        self.assertLess(y.create_revision, x_token,
                        "y's key was created before etcdctl got the lock, below its "
                        "ETCD_LOCK_REV")
        self.assertProblem(self.put("/orders/9", y.create_revision, "y by create revision"), 409,
                           "a create revision sent after an etcdctl holder is refused")
        self.assertGreater(got["token"], x_token)
        self.assert2xx(self.put("/orders/9", got["token"], "y"),
                       "the acquisition revision (EtcdLock.token) is accepted")

    def test_handovers_applied_tokens_never_decrease(self):
        """Two Python clients (examples/etcd_lock_write.EtcdLock) and one etcdctl client
        (examples/etcd-lock-write.sh) contend for one lock; every grant writes through the
        proxy; now and then a client that has released writes again with its old token after
        the next holder wrote (a stale holder). The backend applies tokens that never decrease,
        every holder's write is forwarded, every stale write is refused."""
        target, deadline = 60, time.monotonic() + 40
        state = {"max_written": 0}
        cond = threading.Condition()
        grants, stale, errors = [], [], []
        stop = threading.Event()

        def python_client(i):
            client = self.etcd.client()
            rng = random.Random(i)
            n = 0
            try:
                while not stop.is_set() and time.monotonic() < deadline:
                    lock = EtcdLock(client, self.lock_prefix + "orders", ttl=5)
                    token = lock.acquire(timeout=20)
                    try:
                        grants.append(("py%d" % i, token))
                        for k in range(rng.randint(1, 2)):
                            n += 1
                            status = self.put("/orders/h/py%d/%d" % (i, n), token, "w")[0]
                            if status != 200:
                                errors.append("py%d token %d: holder's write got %d"
                                              % (i, token, status))
                        with cond:
                            state["max_written"] = max(state["max_written"], token)
                            cond.notify_all()
                    finally:
                        lock.release()
                    if len(grants) % 7 == i:  # a stale holder writes on, after the next holder
                        with cond:
                            cond.wait_for(lambda: state["max_written"] > token or stop.is_set(),
                                          timeout=5)
                            newer = state["max_written"] > token
                        if newer:
                            status = self.put("/orders/h/stale", token, "stale")[0]
                            stale.append((token, status))
                    time.sleep(rng.uniform(0, 0.005))
            except Exception as e:
                errors.append("py%d: %r" % (i, e))
            finally:
                client.close()

        def etcdctl_client():
            n = 0
            try:
                while not stop.is_set() and time.monotonic() < deadline:
                    n += 1
                    result = self.run_lock_script("orders", "/orders/h/ctl/%d" % n, "w")
                    if result.returncode != 0:
                        errors.append("etcdctl: %s %s" % (result.stdout, result.stderr))
                        continue
                    token = self.tokens_at("/orders/h/ctl/%d" % n)[-1]  # its ETCD_LOCK_REV
                    grants.append(("etcdctl", token))
                    with cond:
                        state["max_written"] = max(state["max_written"], token)
                        cond.notify_all()
            except Exception as e:
                errors.append("etcdctl: %r" % e)

        def distinct_applied():
            return len({r["token"] for r in self.backend.records("/orders/h")})

        started = time.monotonic()
        threads = [threading.Thread(target=python_client, args=(i,), daemon=True)
                   for i in range(2)] + [threading.Thread(target=etcdctl_client, daemon=True)]
        for t in threads:
            t.start()
        try:
            ls.wait_for(lambda: (distinct_applied() > target
                                  and sum(1 for g in grants if g[0] == "etcdctl") >= 2) or errors
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
        tokens = ls.assert_tokens_never_decrease(self, records, "etcd hand-overs")
        handovers = len(set(tokens)) - 1
        self.assertGreaterEqual(handovers, 50, "at least 50 hand-overs within the time limit")
        self.assertTrue(stale, "some stale holders wrote after a newer holder")
        self.assertEqual([s for s in stale if s[1] != 409], [],
                         "every stale write (after a newer holder wrote) is refused with 409")
        self.assertNotIn("stale", [r["path"].rsplit("/", 1)[-1] for r in records])
        in_lock = [t for who, t in grants if who.startswith("py")]  # appended while holding it
        self.assertEqual(in_lock, sorted(set(in_lock)),
                         "each grant's revision is above every earlier grant's")
        by_client = {}
        for who, _ in grants:
            by_client[who] = by_client.get(who, 0) + 1
        changes = sum(1 for a, b in zip(records, records[1:]) if a["token"] != b["token"])
        print("\n  etcd: %d hand-overs (grants %s) with %d writes in %.2fs, %.1f ms per hand-over;"
              " %d stale writes refused" % (handovers, by_client, len(records), elapsed,
                                            1000 * elapsed / max(changes, 1), len(stale)))

    def test_independent_locks_write_to_independent_fences(self):
        """Two locks, two fences: their holders interleave writes on their own routes with
        tokens from their own locks (the lower-revision lock writes right after the higher one)
        and none is refused; a stale token on either route still is. The counter-example: the
        same writes on two routes that share one fence refuse the lower lock's holder."""
        prev = {}
        cur = {}
        writes = 0
        for round_ in range(6):
            for name in ("a", "b"):  # hand over both locks; a's new token < b's new token
                lock = self.lock("lock-" + name)
                cur[name] = (lock, lock.acquire(timeout=10))
            ta, tb = cur["a"][1], cur["b"][1]
            self.assertLess(ta, tb)
            for i in range(3):  # interleaved: the higher token first, then the lower one
                self.assert2xx(self.put("/b/x", tb, "b%d.%d" % (round_, i)), "lock-b's holder")
                self.assert2xx(self.put("/a/x", ta, "a%d.%d" % (round_, i)),
                               "lock-a's holder, right after lock-b's higher token")
                writes += 2
            for name, route in (("a", "/a/x"), ("b", "/b/x")):
                if name in prev:
                    self.assertProblem(self.put(route, prev[name], "stale"), 409,
                                       "lock-%s's previous holder on its own route" % name)
            for name in ("a", "b"):
                prev[name] = cur[name][1]
                cur[name][0].release()
        self.assertEqual(self.proxy.fence("lock-a").get("max_token"), ta)
        self.assertEqual(self.proxy.fence("lock-b").get("max_token"), tb)
        self.assertEqual(len(self.backend.records("/a/x")) + len(self.backend.records("/b/x")),
                         writes, "every holder's write was applied; no stale one")

        self.assert2xx(self.put("/s1/x", tb, "b"))
        self.assertProblem(self.put("/s2/x", ta, "a"), 409,
                           "counter-example: routes sharing one fence mix two locks' tokens and "
                           "fence out the lock with the lower revisions")

    def test_one_route_one_lock_per_key(self):
        """Fence keys: one route, one etcd lock per object (fp/.../objects/<key>), the key from
        the path. The holders of three keys write concurrently, each with the revision it got
        its own lock at, and none is refused although their revisions interleave; when key 1's
        holder is deposed (its lease revoked) and a new holder writes with a revision above every
        other key's, the old holder of key 1 is refused and the other keys' holders, whose
        revisions are lower, keep writing. The same writes on an unkeyed route would fence the
        lower revisions out (test_independent_locks_write_to_independent_fences)."""
        keyed = {"name": "objects", "prefix": "/objects", "fence_key": {"path_segment": 1},
                 "token_order": "global"}
        proxy = self.start_proxy({"threads": 2, "timeouts": TIMEOUTS, "routes": [keyed]},
                                 self.backend, name="keyed")
        keys = ["obj-1", "obj-2", "obj-3"]
        holders = {}
        for key in keys:  # acquired in order: obj-1 has the lowest revision
            lock = self.lock("objects/" + key, ttl=30)
            holders[key] = (lock, lock.acquire(timeout=10))
        errors, statuses = [], {}

        def writer(key, token, n):
            for i in range(n):
                try:
                    statuses.setdefault(key, []).append(proxy.request(
                        "PUT", "/objects/%s/doc" % key, token, ("%s.%d" % (key, i)).encode())[0])
                except Exception as e:  # reported below
                    errors.append("%s: %r" % (key, e))

        def write_all(tokens, n=5):
            threads = [threading.Thread(target=writer, args=(k, t, n), daemon=True)
                       for k, t in tokens.items()]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)

        write_all({k: h[1] for k, h in holders.items()})
        self.assertEqual(errors, [])
        self.assertEqual(statuses, {k: [200] * 5 for k in keys},
                         "holders of different keys write concurrently, none refused")

        old_lock, old_token = holders["obj-1"]
        old_lock.release()  # deposed: lease revoked, the key under its lock deleted
        new_token = self.lock("objects/obj-1", ttl=30).acquire(timeout=10)
        self.assertGreater(new_token, max(h[1] for h in holders.values()))
        self.assert2xx(proxy.request("PUT", "/objects/obj-1/doc", new_token, b"new holder"),
                       "obj-1's new holder")
        statuses.clear()
        write_all({"obj-2": holders["obj-2"][1], "obj-3": holders["obj-3"][1]}, n=3)
        late = proxy.request("PUT", "/objects/obj-1/doc", old_token, b"deposed holder")
        problem = self.assertProblem(late, 409, "obj-1's deposed holder")
        self.assertEqual((problem.get("key"), problem.get("max_token")), ("obj-1", new_token))
        self.assertEqual(statuses, {"obj-2": [200] * 3, "obj-3": [200] * 3},
                         "the other keys' holders (revisions below obj-1's new one) write on")
        for key in keys:
            ls.assert_tokens_never_decrease(self, self.backend.records("/objects/%s" % key),
                                            "key " + key)
        self.assertEqual(self.backend.request("GET", "/objects/obj-1/doc")[2], b"new holder",
                         "the backend keeps the new holder's data")
        status, _, body = proxy.admin("GET", "/fences/objects?key=obj-1")
        self.assertEqual((status, json.loads(body)["max_token"]), (200, new_token))

    def test_max_token_jump_refuses_a_forged_huge_token(self):
        """A route with max_token_jump: a forged token far above the real holders' revisions
        is refused (409, problem type token-jump), never reaches the backend, and does not
        fence out the real holder, who keeps writing, nor the next one."""
        config = dict(CONFIG, routes=[{"name": "jump", "prefix": "/jump",
                                       "max_token_jump": JUMP}])
        proxy = self.start_proxy(config, self.backend, name="jump", start=False)
        check = run_cli("--config", proxy.config_path, "--check")
        if check.returncode != 0:
            output = (check.stdout + check.stderr).strip()
            if "max_token_jump" in output:
                self.skipTest("the fencing-proxy binary under test does not support "
                              "max_token_jump yet (--check: %s)" % output[:300])
            self.fail("--check failed: %s" % output)
        proxy.start()

        lock = self.lock("jump")
        token = lock.acquire(timeout=10)
        self.assert2xx(proxy.request("PUT", "/jump/x", token, b"holder 1"),
                       "the first token of a fence is accepted whatever its size")
        forged = token + 10 ** 9
        problem = self.assertProblem(proxy.request("PUT", "/jump/x", forged, b"forged"), 409,
                                     "a token 10^9 above the max")
        self.assertEqual(problem.get("type"), "urn:fencing-proxy:problem:token-jump", problem)
        self.assertNotIn(str(forged), [r["token"] for r in self.backend.records("/jump")],
                         "the forged write never reached the backend")
        self.assert2xx(proxy.request("PUT", "/jump/x", token, b"holder 1 again"),
                       "the real holder keeps writing")
        lock.release()
        nxt = self.lock("jump")
        token2 = nxt.acquire(timeout=10)
        self.assert2xx(proxy.request("PUT", "/jump/x", token2, b"holder 2"),
                       "the next holder's raise (a small jump) is accepted")
        self.assertEqual(proxy.fence("jump").get("max_token"), token2)
        self.assertEqual(self.backend.records("/jump")[-1]["token"], str(token2))
        self.assertEqual(metric(proxy.metrics(), "fencing_proxy_requests_total", route="jump",
                                outcome="rejected_jump"), 1.0)


if __name__ == "__main__":
    unittest.main()
