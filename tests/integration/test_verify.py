"""Verified raises end to end (contract: "Verified raises"): the lock service confirms a new token.

A route with `verify: {service: NAME, lock: LOCK}` raises a fence only to the number of the lock's
current holder, asked of a real etcd or ZooKeeper (Debian's packages, started once per class on
127.0.0.1, as test_etcd.py and test_zookeeper.py do):

  etcd       the holder of LOCK is the key under LOCK/ with the lowest create revision
             (`etcdctl lock`, Go's concurrency.Mutex, examples/etcd_lock_write.EtcdLock); its
             number is that create revision (NOT ETCD_LOCK_REV after a wait)
  ZooKeeper  the holder is the lowest sequential child of LOCK (kazoo Lock); its number is that
             child's czxid

One set of tests (VerifiedRaisesTests) runs against each service; the service classes at the end
say how to take a lock, queue behind one, and what number a client sends. Each class's route
file has an unkeyed route with one lock (`/orders`, lock ROOT/orders) and a keyed route with a
lock per key (`/objects/<key>/...`, lock ROOT/objects/{key}); ROOT is the test's own, so the tests
of a class share its server without sharing locks.

What the proxy is expected to do, beyond the contract's text (the decisions these tests encode):
  - a raise that is not the holder's number, or of a lock nobody holds: 409 with problem type
    urn:fencing-proxy:problem:token-not-verified, outcome rejected_unverified, max unchanged;
  - the lock service unreachable or slower than its timeout: 503, problem type
    lock-service-unavailable, a Retry-After header (delta-seconds), outcome
    lock_service_unavailable, within timeout + MARGIN; /readyz stays 200;
  - equal (and lower) tokens never ask the lock service: they work while it is down, and leave
    fencing_proxy_lock_service_requests_total{service,result} unchanged; result is one of
    verified, rejected, unavailable; fencing_proxy_lock_service_seconds{service} is a histogram;
  - /fences has "lock_services": [{"name", "kind" ("etcd" | "zookeeper"), "last_error" (null
    or text), ...}].

Skips with a message naming the missing packages; FP_REQUIRE_LOCK_SERVICES=1 makes that a failure.
The examples (examples/etcd-lock-write.sh --token create-revision, etcd_lock_write.py --token
create-revision, zookeeper_lock_write.py) are run twice: straight at the backend, to show that the
number they send is the one the proxy will check (needs no proxy), and through a verified route.
"""

import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import unittest
import warnings

import lockservices as ls
from harness import ProxyTestCase, metric

SKIP_ETCD = ls.missing_etcd()
SKIP_ZOOKEEPER = ls.missing_zookeeper()
if not SKIP_ETCD:
    EtcdLock = ls.import_example("etcd_lock_write").EtcdLock
if not SKIP_ZOOKEEPER:
    fencing_token = ls.import_example("zookeeper_lock_write").fencing_token
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # servers are killed on purpose here

PROBLEM = "urn:fencing-proxy:problem:"
LOCK_SERVICE_TIMEOUT = 1.0  # seconds: the lock services' `timeout:` in the route file
MARGIN = 1.0                # seconds a 503 may take beyond it on a busy 2-core machine
FORGED = 10 ** 15           # far above any revision or zxid these servers hand out
TIMEOUTS = {"connect": "1s", "request": "10s", "idle": "10s", "header_read": "5s",
            "shutdown": "5s"}
SH_EXAMPLE = os.path.join(ls.EXAMPLES_DIR, "etcd-lock-write.sh")
ETCD_PY_EXAMPLE = os.path.join(ls.EXAMPLES_DIR, "etcd_lock_write.py")
ZK_PY_EXAMPLE = os.path.join(ls.EXAMPLES_DIR, "zookeeper_lock_write.py")


class Held:
    """A lock held by the test process: token is the number a verified route checks."""

    def __init__(self, token, release):
        self.token, self.release = token, release


class Contender:
    """A client queued for a lock in a thread. token: its number once its entry exists (it is
    known while it waits); acquired: set when it holds the lock."""

    def __init__(self):
        self.token, self.error = None, None
        self.acquired = threading.Event()

    def wait_queued(self, timeout=10):
        ls.wait_for(lambda: self.token is not None or self.error, timeout, "a queued contender")
        if self.error:
            raise self.error
        return self.token

    def wait_acquired(self, timeout):
        self.acquired.wait(timeout)
        if self.error:
            raise self.error
        return self.acquired.is_set()


def fence_holds_key(proxy, fence, key):
    """Whether a keyed fence holds the key (admin /fences/FENCE?key=KEY: 200, or 404)."""
    status, _, body = proxy.admin("GET", "/fences/%s?key=%s" % (fence, key))
    assert status in (200, 404), (status, body[:300])
    return status == 200


def fence_key_max(proxy, fence, key):
    """The max of one key of a keyed fence (admin /fences/FENCE?key=KEY); 0 when the fence does
    not hold the key (404)."""
    status, _, body = proxy.admin("GET", "/fences/%s?key=%s" % (fence, key))
    if status == 404:
        return 0
    assert status == 200, (status, body[:300])
    return json.loads(body).get("max_token")


def retry_after_seconds(headers):
    value = headers.get("retry-after")
    if value is None or not re.fullmatch(r"[0-9]+", value):
        return None
    return int(value)


class VerifiedRaisesTests:
    """The contract's "Verified raises", against one lock service (a subclass names it)."""

    SERVICE = None  # the lock service's name in the route file
    KIND = None     # "etcd" | "zookeeper": the service's kind in /fences

    # -- set-up --

    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()
        self.lock_root = "/fp-verify/%s" % self._testMethodName
        self._proxy = None

    @property
    def proxy(self):
        """The proxy with the verified routes, started on first use (some tests need none)."""
        if self._proxy is None:
            self._proxy = self.start_proxy(self.config(), self.backend, name="verified")
        return self._proxy

    def config(self):
        verify = {"service": self.SERVICE}
        return {
            "threads": 2,
            "timeouts": TIMEOUTS,
            "lock_services": {self.SERVICE: self.service_entry()},
            "routes": [
                {"name": "orders", "prefix": "/orders",
                 "verify": dict(verify, lock=self.lock_root + "/orders")},
                {"name": "objects", "prefix": "/objects", "fence_key": {"path_segment": 1},
                 "verify": dict(verify, lock=self.lock_root + "/objects/{key}")},
                {"name": "plain", "prefix": "/plain"},  # no verify: never asks the service
            ],
        }

    def lock(self, name):
        """The lock service's name of lock `name` ("orders", "objects/k1")."""
        return "%s/%s" % (self.lock_root, name)

    # -- helpers --

    def put(self, path, token, body="x"):
        return self.proxy.request("PUT", path, token, body.encode())

    def assertProblemType(self, response, status, slug, msg):
        problem = self.assertProblem(response, status, msg)
        self.assertEqual(problem.get("type"), PROBLEM + slug, "%s: problem type" % msg)
        return problem

    def assertNotVerified(self, response, token, msg):
        problem = self.assertProblemType(response, 409, "token-not-verified", msg)
        self.assertEqual(problem.get("token"), token, "%s: the problem names the token" % msg)
        return problem

    def assertUnavailable(self, path, token, msg):
        """A raise while the lock service cannot answer: 503 lock-service-unavailable with
        Retry-After, within the service's timeout plus MARGIN. Returns the seconds it took."""
        started = time.monotonic()
        response = self.put(path, token, "unavailable")
        took = time.monotonic() - started
        self.assertProblemType(response, 503, "lock-service-unavailable", msg)
        self.assertIsNotNone(retry_after_seconds(response[1]),
                             "%s: a 503 carries Retry-After in seconds, got %r"
                             % (msg, response[1].get("retry-after")))
        self.assertLess(took, LOCK_SERVICE_TIMEOUT + MARGIN,
                        "%s: answered within the service's timeout (%.1fs) + %.1fs, took %.2fs"
                        % (msg, LOCK_SERVICE_TIMEOUT, MARGIN, took))
        return took

    def max_of(self, fence):
        return self.proxy.fence(fence).get("max_token") or 0

    def tokens_at(self, path):
        return [int(r["token"]) for r in self.backend.records(path)
                if r["method"] not in ("GET", "HEAD")]

    def service_counts(self):
        """fencing_proxy_lock_service_requests_total of this service, by result."""
        samples = self.proxy.metrics()
        return {result: metric(samples, "fencing_proxy_lock_service_requests_total",
                               service=self.SERVICE, result=result) or 0
                for result in ("verified", "rejected", "unavailable")}

    def outcome(self, route, outcome):
        return metric(self.proxy.metrics(), "fencing_proxy_requests_total", route=route,
                      outcome=outcome) or 0

    def lock_service_entry(self):
        status, _, body = self.proxy.admin("GET", "/fences")
        self.assertEqual(status, 200)
        entries = json.loads(body).get("lock_services")
        self.assertIsInstance(entries, list, "/fences has a lock_services list: %s" % body[:500])
        mine = [e for e in entries if e.get("name") == self.SERVICE]
        self.assertEqual(len(mine), 1, "/fences lists the service %s once: %r"
                         % (self.SERVICE, entries))
        self.assertEqual(mine[0].get("kind"), self.KIND)
        self.assertIn("last_error", mine[0])
        return mine[0]

    def hold_when_back(self, name, timeout=20):
        """hold(name), retried while the restarted service refuses the test's own client (a
        gRPC connection to the killed server backs off before it dials again)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.hold(name)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    @staticmethod
    def _reap(proc):
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)

    def run_example(self, argv, env, wait=True):
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, stdin=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(self._reap, proc)
        if not wait:
            return proc
        out, err = proc.communicate(timeout=30)
        return proc.returncode, out, err

    # -- the tests --

    def test_forged_token_is_refused_and_the_holders_token_raises(self):
        """Before anyone wrote, and after the holder did: a forged token far above the max, and
        numbers next to the holder's, get 409 token-not-verified; the max does not move and
        nothing reaches the backend. The holder's own number gets 200 and becomes the max.
        Equal and lower tokens are decided without asking the lock service."""
        holder = self.hold("orders")
        refused = [FORGED, holder.token - 1, holder.token + 1]
        for token in refused[:2]:
            self.assertNotVerified(self.put("/orders/refused", token), token,
                                   "token %d before the holder wrote" % token)
        self.assertEqual(self.max_of("orders"), 0, "an unverified token raises nothing")

        self.assert2xx(self.put("/orders/1", holder.token, "holder"), "the holder's number")
        self.assertEqual(self.max_of("orders"), holder.token, "the max is the holder's number")
        for token in (FORGED, holder.token + 1):
            self.assertNotVerified(self.put("/orders/refused", token), token,
                                   "token %d above the holder's" % token)
        self.assertEqual(self.max_of("orders"), holder.token, "the max did not move")
        self.assertEqual(self.backend.records("/orders/refused"), [],
                         "no unverified write reached the backend")
        self.assertEqual(self.outcome("orders", "rejected_unverified"), len(refused) + 1)

        asked = self.service_counts()
        self.assertEqual(asked, {"verified": 1, "rejected": len(refused) + 1, "unavailable": 0},
                         "one question per raise")
        for i in range(5):
            self.assert2xx(self.put("/orders/1", holder.token, "again %d" % i), "equal token")
        self.assertProblemType(self.put("/orders/1", holder.token - 1), 409, "stale-token",
                               "a token below the max is stale, as on any route")
        self.assertEqual(self.service_counts(), asked,
                         "equal and lower tokens never ask the lock service")
        samples = self.proxy.metrics()
        observed = metric(samples, "fencing_proxy_lock_service_seconds_count",
                          service=self.SERVICE)
        self.assertIsNotNone(observed, "the lock_service_seconds histogram of %s" % self.SERVICE)
        self.assertGreaterEqual(observed, sum(asked.values()),
                                "every question to the lock service is timed")
        self.assertIsNone(self.lock_service_entry()["last_error"], "no error so far")

    def test_queued_contender_is_refused_until_the_holder_session_ends(self):
        """A holder in its own process writes; a contender queued behind it sends its own
        number: 409 while the holder lives. The holder is killed (kill -9: no release), its
        lease or session runs out, the contender holds the lock: its number gets 200, and the
        old holder's number is refused as stale."""
        a = ls.Holder(self.KIND, self.server_address(), self.lock("orders"), self.proxy.port,
                      ttl=self.HOLDER_TTL)
        self.addCleanup(a.stop)
        a_token = self.holder_token(a)
        status, body = a.write("/orders/1", "A", token=a_token)
        self.assertEqual(status, 200, "the holder's write: %s" % body)

        b = self.contend("orders")
        b_token = b.wait_queued()
        self.assertGreater(b_token, a_token)
        self.assertNotVerified(self.put("/orders/refused", b_token, "B queued"), b_token,
                               "a queued contender's number while the holder lives")
        self.assertEqual(self.max_of("orders"), a_token)

        killed = time.monotonic()
        a.kill9()
        self.assertTrue(b.wait_acquired(self.HOLDER_TTL + 15),
                        "the contender gets the lock once the killed holder's %s ends"
                        % self.SESSION_WORD)
        took = time.monotonic() - killed
        self.assert2xx(self.put("/orders/1", b_token, "B"), "the new holder's number")
        self.assertEqual(self.max_of("orders"), b_token)
        self.assertProblemType(self.put("/orders/refused", a_token, "A late"), 409,
                               "stale-token", "the old holder's number")
        self.assertEqual(self.tokens_at("/orders"), [a_token, b_token],
                         "the backend applied A's write and B's, nothing refused")
        print("\n  %s: holder killed; its %s (%.1fs) ended and the contender held the lock "
              "%.2fs later" % (self.KIND, self.SESSION_WORD, self.HOLDER_TTL, took))

    def test_lock_nobody_holds_is_refused(self):
        """A lock never taken, and one taken and released before its holder wrote: every raise
        is 409 token-not-verified, on the unkeyed and on the keyed route, and raises nothing."""
        released = self.hold("objects/released")
        released.release()
        self.assertNotVerified(self.put("/objects/released/doc", released.token),
                               released.token, "the released holder's number")
        self.assertNotVerified(self.put("/objects/never/doc", 12345), 12345,
                               "a key whose lock was never taken")
        self.assertNotVerified(self.put("/orders/1", 12345), 12345, "an unkeyed lock never taken")
        for key in ("released", "never"):
            # An unconfirmed token makes no key: forged requests cannot fill max_keys.
            self.assertFalse(fence_holds_key(self.proxy, "objects", key), key)
        self.assertEqual(self.max_of("orders"), 0)
        self.assertEqual(self.backend.records("/"), [], "nothing reached the backend")
        self.assertEqual(self.service_counts()["rejected"], 3)
        self.assertEqual(self.outcome("objects", "rejected_unverified"), 2)

    def test_holder_is_the_oldest_entry_not_the_lowest_name(self):
        """Two entries queued by hand, the older with the higher name: the older holds the lock
        (the recipe orders by creation, not by name), so its number is accepted and the
        younger's refused, whichever sorts first."""
        older = self.entry("orders", "ffffffffffffffffffffffffffffffff")
        younger = self.entry("orders", "00000000000000000000000000000000")
        self.assertGreater(younger, older)
        self.assertNotVerified(self.put("/orders/refused", younger), younger,
                               "the younger entry, first by name")
        self.assert2xx(self.put("/orders/1", older), "the older entry holds the lock")

    def test_each_key_is_verified_against_its_own_lock(self):
        """Keyed route: the lock of /objects/K/... is ROOT/objects/K. Two keys, two holders:
        each key takes its own holder's number and refuses the other's; a new holder of one key
        raises it and leaves the other alone."""
        h1, h2 = self.hold("objects/k1"), self.hold("objects/k2")
        self.assertNotVerified(self.put("/objects/k1/doc", h2.token), h2.token,
                               "k2's holder's number on key k1")
        self.assertEqual(fence_key_max(self.proxy, "objects", "k1"), 0)
        self.assert2xx(self.put("/objects/k1/doc", h1.token, "k1"), "k1's holder")
        self.assert2xx(self.put("/objects/k2/doc", h2.token, "k2"), "k2's holder")
        self.assertEqual((fence_key_max(self.proxy, "objects", "k1"),
                          fence_key_max(self.proxy, "objects", "k2")), (h1.token, h2.token))

        h1.release()
        h1b = self.hold("objects/k1")
        self.assertNotVerified(self.put("/objects/k2/doc", h1b.token), h1b.token,
                               "k1's new holder's number on key k2")
        self.assert2xx(self.put("/objects/k1/doc", h1b.token, "k1 new"), "k1's new holder")
        self.assertProblemType(self.put("/objects/k1/doc", h1.token), 409, "stale-token",
                               "k1's old holder")
        self.assert2xx(self.put("/objects/k2/doc", h2.token, "k2 again"),
                       "k2's holder writes on, its number below k1's new one")
        self.assertEqual((fence_key_max(self.proxy, "objects", "k1"),
                          fence_key_max(self.proxy, "objects", "k2")), (h1b.token, h2.token))
        self.assertEqual(self.outcome("objects", "rejected_unverified"), 2)

    def test_lock_service_outage_fails_closed_and_recovers(self):
        """The lock service hangs (SIGSTOP), then dies (SIGKILL): a raise gets 503
        lock-service-unavailable with Retry-After within the timeout plus a margin, the max
        stays; the holder's equal token keeps getting 200 at once; /readyz stays 200; /fences
        shows the error; the metrics count it. Restarted on the same port and data, the service
        verifies raises again (the proxy's client reconnects)."""
        self.addCleanup(self.ensure_server_running)
        holder = self.hold("orders")
        self.assert2xx(self.put("/orders/1", holder.token), "the holder's raise")
        before = self.service_counts()

        timings = {}
        for how in ("hung", "killed"):
            if how == "hung":
                self.server().pause()
            else:
                self.server().kill()
            timings[how] = self.assertUnavailable("/orders/refused", FORGED,
                                                  "a raise while the lock service is " + how)
            started = time.monotonic()
            self.assert2xx(self.put("/orders/1", holder.token, "equal while " + how),
                           "the holder's equal token while the lock service is " + how)
            self.assertLess(time.monotonic() - started, 0.5 * LOCK_SERVICE_TIMEOUT,
                            "an equal token does not wait for the lock service")
            self.assertEqual(self.proxy.admin("GET", "/readyz")[0], 200,
                             "/readyz stays 200 while the lock service is " + how)
            self.assertEqual(self.max_of("orders"), holder.token)
        self.assertEqual(self.backend.records("/orders/refused"), [])
        self.assertEqual(self.outcome("orders", "lock_service_unavailable"), 2)
        after = self.service_counts()
        self.assertEqual((after["verified"], after["rejected"]),
                         (before["verified"], before["rejected"]))
        self.assertGreaterEqual(after["unavailable"], before["unavailable"] + 2)
        last_error = self.lock_service_entry()["last_error"]
        self.assertIsInstance(last_error, str, "/fences names the lock service's error")
        self.assertTrue(last_error.strip())

        self.server().restart()
        fresh = self.hold_when_back("objects/after-restart")
        deadline = time.monotonic() + 20
        while True:  # the proxy's client reconnects in its own time; each try is one raise
            response = self.put("/objects/after-restart/doc", fresh.token, "after restart")
            if response[0] != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assert2xx(response, "a raise once the lock service is back")
        self.assertEqual(fence_key_max(self.proxy, "objects", "after-restart"), fresh.token)
        self.assertNotVerified(self.put("/orders/refused", FORGED), FORGED,
                               "a forged raise once the lock service is back")
        print("\n  %s down: 503 after %.2fs (hung), %.2fs (killed); timeout %.1fs"
              % (self.KIND, timings["hung"], timings["killed"], LOCK_SERVICE_TIMEOUT))

    def test_examples_send_the_number_the_proxy_verifies(self):
        """Needs no proxy: each example, queued behind a holder and run straight at the
        backend, writes with the number a verified route will check (its lock entry's create
        revision / czxid), read while it waits."""
        for name, argv_of in self.examples():
            with self.subTest(example=name):
                holder = self.hold("orders")
                path = "/direct/%s" % name
                proc = self.run_example(argv_of(self.lock("orders"), self.backend.url + path),
                                        self.example_env(), wait=False)
                queued = self.queued_number("orders")
                holder.release()
                out, err = proc.communicate(timeout=30)
                self.assertEqual(proc.returncode, 0, "%s: %s %s" % (name, out, err))
                self.assertEqual(self.tokens_at(path), [queued],
                                 "%s sent its entry's number, not the revision it got the "
                                 "lock at" % name)

    def test_examples_write_through_a_verified_route(self):
        """Each example, queued behind a holder, writes through the verified route: 200."""
        for name, argv_of in self.examples():
            with self.subTest(example=name):
                holder = self.hold("orders")
                path = "/orders/%s" % name
                proc = self.run_example(
                    argv_of(self.lock("orders"), "http://127.0.0.1:%d%s" % (self.proxy.port, path)),
                    self.example_env(), wait=False)
                queued = self.queued_number("orders")
                holder.release()
                out, err = proc.communicate(timeout=30)
                self.assertEqual(proc.returncode, 0, "%s through the verified route: %s %s"
                                 % (name, out, err))
                self.assertEqual(self.tokens_at(path), [queued])
                self.assertEqual(self.max_of("orders"), queued)


# ---------------------------------------------------------------------------------------------
# etcd

@unittest.skipIf(SKIP_ETCD, SKIP_ETCD)
class EtcdVerifiedRaisesTest(VerifiedRaisesTests, ProxyTestCase):
    SERVICE = "main-etcd"
    KIND = "etcd"
    HOLDER_TTL = 2          # lease TTL of the killed holder, seconds
    SESSION_WORD = "lease"

    @classmethod
    def setUpClass(cls):
        cls.etcd = ls.EtcdServer()
        cls.addClassCleanup(cls.etcd.stop)
        print("\n  etcd %s up in %.2fs" % (cls.etcd.endpoint, cls.etcd.startup_seconds))

    def server(self):
        return self.etcd

    def server_address(self):
        return self.etcd.endpoint

    def ensure_server_running(self):
        if self.etcd.proc.poll() is None:
            self.etcd.resume()
        else:
            self.etcd.restart()

    def service_entry(self):
        return {"etcd": {"endpoints": [self.etcd.url],
                         "timeout": "%dms" % (LOCK_SERVICE_TIMEOUT * 1000)}}

    def client(self):
        client = self.etcd.client()
        self.addCleanup(client.close)
        return client

    def hold(self, name, ttl=30):
        lock = EtcdLock(self.client(), self.lock(name), ttl=ttl)
        self.addCleanup(lock.release)
        lock.acquire(timeout=10)
        self.assertIsNotNone(lock.create_revision)
        return Held(lock.create_revision, lock.release)

    def contend(self, name):
        lock = EtcdLock(self.client(), self.lock(name), ttl=30)
        self.addCleanup(lock.release)
        contender = Contender()

        def run():
            try:
                lock.acquire(timeout=30)
                contender.acquired.set()
            except Exception as e:  # reported by wait_*
                contender.error = e

        threading.Thread(target=run, daemon=True).start()
        ls.wait_for(lambda: lock.create_revision is not None or contender.error, 10,
                    "the contender's key")
        contender.token = lock.create_revision
        return contender

    @staticmethod
    def holder_token(holder):
        return holder.create_revision

    def entry(self, name, label):
        """A key LOCK/label on a lease of its own, as a contender's -> its create revision."""
        client = self.client()
        lease = client.lease(30)
        self.addCleanup(lease.revoke)
        key = "%s/%s" % (self.lock(name), label)
        client.put(key, "", lease=lease)
        return client.get(key)[1].create_revision

    def queued_number(self, name):
        """The create revision of the second key under the lock (the one waiting)."""
        client = self.client()

        def second():
            kvs = sorted((m.create_revision for _, m in client.get_prefix(self.lock(name) + "/")))
            return kvs[1] if len(kvs) >= 2 else None
        return ls.wait_for(second, 10, "a second key queued under " + self.lock(name))

    def example_env(self):
        return ls.child_env(self.etcd.ctl_env({"LOCK_TTL": "5"}))

    def examples(self):
        return [
            ("etcd-lock-write.sh", lambda lock, url: [
                "sh", SH_EXAMPLE, "--token", "create-revision", lock, url]),
            ("etcd_lock_write.py", lambda lock, url: [
                sys.executable, ETCD_PY_EXAMPLE, "--endpoint", self.etcd.endpoint,
                "--token", "create-revision", "--lock", lock, "--data", "py", url]),
        ]

    def test_acquisition_revision_after_a_wait_is_not_verified(self):
        """Why a verified route needs the create revision: a client that waited for the lock
        and sends the revision it got the lock at (etcdctl's ETCD_LOCK_REV, EtcdLock.token, the
        examples' default) sends a number above its key's create revision: 409."""
        holder = self.hold("orders")
        proc = self.run_example(
            [sys.executable, ETCD_PY_EXAMPLE, "--endpoint", self.etcd.endpoint, "--lock",
             self.lock("orders"), "--data", "acquired",
             "http://127.0.0.1:%d/orders/acquired" % self.proxy.port],
            self.example_env(), wait=False)
        created = self.queued_number("orders")
        holder.release()
        out, err = proc.communicate(timeout=30)
        self.assertNotEqual(proc.returncode, 0, "the default token after a wait: %s" % out)
        match = re.search(r"token (\d+) -> 409", out)
        self.assertIsNotNone(match, "the example reports a 409: %s %s" % (out, err))
        self.assertGreater(int(match.group(1)), created)
        self.assertIn("token-not-verified", out)
        self.assertEqual(self.backend.records("/orders"), [])


# ---------------------------------------------------------------------------------------------
# ZooKeeper

@unittest.skipIf(SKIP_ZOOKEEPER, SKIP_ZOOKEEPER)
class ZooKeeperVerifiedRaisesTest(VerifiedRaisesTests, ProxyTestCase):
    SERVICE = "main-zk"
    KIND = "zookeeper"
    HOLDER_TTL = 1.5        # session timeout of the killed holder, seconds
    SESSION_WORD = "session"

    @classmethod
    def setUpClass(cls):
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"kazoo\.")
        cls.zookeeper = ls.ZooKeeperServer()
        cls.addClassCleanup(cls.zookeeper.stop)
        print("\n  ZooKeeper %s up in %.2fs" % (cls.zookeeper.hosts,
                                               cls.zookeeper.startup_seconds))

    def server(self):
        return self.zookeeper

    def server_address(self):
        return self.zookeeper.hosts

    def ensure_server_running(self):
        if self.zookeeper.proc.poll() is None:
            self.zookeeper.resume()
        else:
            self.zookeeper.restart()

    def service_entry(self):
        return {"zookeeper": {"hosts": self.zookeeper.hosts,
                              "timeout": "%dms" % (LOCK_SERVICE_TIMEOUT * 1000)}}

    def client(self):
        zk = self.zookeeper.client(10.0)

        def close():
            zk.stop()
            zk.close()
        self.addCleanup(close)
        return zk

    def hold(self, name):
        zk = self.client()
        lock = zk.Lock(self.lock(name), "test")
        self.assertTrue(lock.acquire(timeout=10))
        released = []

        def release():
            if not released and zk.connected:
                lock.release()
            released.append(True)
        self.addCleanup(release)
        return Held(fencing_token(zk, lock), release)

    def contend(self, name):
        zk = self.client()
        lock = zk.Lock(self.lock(name), "contender")
        self.addCleanup(lambda: zk.connected and lock.release())
        contender = Contender()

        def run():
            try:
                if lock.acquire(timeout=30):
                    contender.acquired.set()
            except Exception as e:  # reported by wait_*
                contender.error = e

        threading.Thread(target=run, daemon=True).start()
        ls.wait_for(lambda: lock.node is not None or contender.error, 10, "the contender's znode")
        contender.token = zk.exists(lock.path + "/" + lock.node).czxid
        return contender

    @staticmethod
    def holder_token(holder):
        return holder.token

    def entry(self, name, label):
        """An EPHEMERAL|SEQUENTIAL child named as kazoo names its contenders -> its czxid."""
        zk = self.client()
        path = zk.create("%s/%s__lock__" % (self.lock(name), label), b"", ephemeral=True,
                         sequence=True, makepath=True)
        return zk.exists(path).czxid

    def queued_number(self, name):
        """The czxid of the second sequential child of the lock (the one waiting)."""
        zk = self.client()
        parent = self.lock(name)

        def second():
            if zk.exists(parent) is None:
                return None
            children = sorted(zk.get_children(parent), key=lambda c: c[-10:])
            if len(children) < 2:
                return None
            stat = zk.exists(parent + "/" + children[1])
            return stat.czxid if stat else None
        return ls.wait_for(second, 10, "a second znode queued under " + parent)

    def example_env(self):
        return ls.child_env()

    def examples(self):
        return [("zookeeper_lock_write.py", lambda lock, url: [
            sys.executable, ZK_PY_EXAMPLE, "--hosts", self.zookeeper.hosts, "--lock", lock,
            "--data", "zk", url])]


if __name__ == "__main__":
    unittest.main()
