"""Fence keys through the real binary: one fence per lock (contract: "Fence keys").

A keyed route takes the fence key from the request (`fence_key: {path_segment: N}` or
`{header: NAME}`); the fence of a request is (fence name, key), and every key is a fence in full:
its own max, pending raise, admitted writes and drain barrier. These tests drive the binary with
the recording backend (raw_backend.RawBackend: every byte it received, to show that nothing of a
refused request reached it) or the demo backend (its log of applied writes with their tokens and
[start, end] times, and X-Demo-Delay-Ms to hold a write open at the backend).

The crash rounds across 1,000 keys reuse the machinery of test_crash.py: kill -9 in a raise
storm, and the drop_unsynced shim for a simulated power loss (skipped when the shim is not built).
Every other round starts from a state file padded past the compaction threshold (token-0 key
records of known keys, which lower nothing), so a compaction runs, and may be killed, during the
storm. FP_TEST_SEED replays a run; FP_KEY_CRASH_ROUNDS sets the rounds per loop (default 6).
"""

import json
import os
import random
import socket
import threading
import time
import unittest

from harness import (ProxyTestCase, fault_shim_path, metric, pad_state_file_with_keys,
                     preload_env, run_cli, wait_for)
from test_crash import choose_seed

TIMEOUTS = {"connect": "1s", "request": "10s", "idle": "10s", "header_read": "5s",
            "shutdown": "5s"}
KEY_HEADER = "X-Fencing-Key"
PROBLEM = "urn:fencing-proxy:problem:"


def keyed_config(*routes, **top):
    config = {"threads": 2, "timeouts": TIMEOUTS, "routes": list(routes)}
    config.update(top)
    return config


OBJECTS = {"name": "objects", "prefix": "/objects", "fence_key": {"path_segment": 1}}
# A second route on the same fence, taking the key from a header: routes naming one fence share
# its keys.
OBJECTS_BY_HEADER = {"name": "objects_by_header", "prefix": "/by-header", "fence": "objects",
                     "fence_key": {"header": KEY_HEADER}}


def fence_key(proxy, fence, key):
    """GET /fences/FENCE?key=KEY -> (status, parsed body)."""
    status, _, body = proxy.admin("GET", "/fences/%s?key=%s" % (fence, key))
    return status, json.loads(body)


def fences_doc(proxy):
    status, _, body = proxy.admin("GET", "/fences")
    assert status == 200, (status, body)
    return json.loads(body)


def state_show_keys(path, fence):
    """`state show --fence FENCE --keys` on a state file no proxy runs on -> (floor, {key: max})."""
    done = run_cli("state", "show", "--state-file", path, "--fence", fence, "--keys")
    if done.returncode != 0:
        raise AssertionError("`state show --fence %s --keys` failed (exit %d): %s"
                             % (fence, done.returncode, done.stderr.strip()))
    doc = json.loads(done.stdout)
    return int(doc.get("floor", doc.get("max", 0))), {k: int(v) for k, v in
                                                      doc.get("keys", {}).items()}


class KeysTest(ProxyTestCase):

    def assertProblemType(self, response, status, slug, msg=""):
        problem = self.assertProblem(response, status, msg)
        self.assertEqual(problem.get("type"), PROBLEM + slug, "%s: problem type" % msg)
        return problem

    def assertNothingForwarded(self, backend, marker, msg):
        backend.quiet()  # a request would be at the backend by now
        self.assertEqual(backend.count(marker.encode()), 0,
                         "%s: nothing of the refused request (%s) reaches the backend"
                         % (msg, marker))

    # -- 1. independent keys -------------------------------------------------------------------

    def test_independent_keys_on_one_route(self):
        """A at 100, B at 90: both accepted (one fence would refuse B for good); B at 89 refused
        409 with X-Fencing-Token-Max: 90, a problem body with key B and max_token 90, and none of
        its bytes at the backend. A's own max is untouched by B."""
        backend = self.start_raw_backend("answer")
        proxy = self.start_proxy(keyed_config(OBJECTS, OBJECTS_BY_HEADER), backend)
        self.assert2xx(proxy.request("PUT", "/objects/A/w1", 100, b"a"), "key A at 100")
        self.assert2xx(proxy.request("PUT", "/objects/B/w1", 90, b"b"),
                       "key B at 90 after key A at 100: another lock, another max")
        refused = proxy.request("PUT", "/objects/B/refused-89", 89, b"stale b")
        problem = self.assertProblemType(refused, 409, "stale-token", "key B at 89")
        self.assertEqual(refused[1].get("x-fencing-token-max"), "90",
                         "the 409 names key B's max, not the fence's highest")
        self.assertEqual((problem.get("key"), problem.get("token"), problem.get("max_token")),
                         ("B", 89, 90), "the problem body carries the key and its max")
        self.assertEqual(problem.get("fence"), "objects")
        # The same fence through the route that takes the key from a header: same keys.
        by_header = proxy.request("PUT", "/by-header/refused-88", 88, b"stale b",
                                  headers={KEY_HEADER: "B"})
        self.assertEqual((by_header[0], by_header[1].get("x-fencing-token-max")), (409, "90"),
                         "routes naming one fence share its keys: key B from the header")
        self.assert2xx(proxy.request("PUT", "/by-header/w2", 95, b"b",
                                     headers={KEY_HEADER: "B"}), "key B at 95 from the header")
        self.assertProblem(proxy.request("PUT", "/objects/A/refused-99", 99, b"stale a"), 409,
                           "key A keeps its own max 100")
        self.assert2xx(proxy.request("PUT", "/objects/A/w2", 100, b"a"), "key A at 100 again")
        self.assertEqual(fence_key(proxy, "objects", "A")[1].get("max_token"), 100)
        self.assertEqual(fence_key(proxy, "objects", "B")[1].get("max_token"), 95)
        self.assertNothingForwarded(backend, "refused-", "stale tokens of keys A and B")
        self.assertEqual(sorted(r.target for r in backend.requests()),
                         ["/by-header/w2", "/objects/A/w1", "/objects/A/w2", "/objects/B/w1"],
                         "exactly the accepted writes reached the backend")

    # -- 2. drain barrier per key --------------------------------------------------------------

    def test_raise_on_one_key_does_not_wait_for_another_keys_held_write(self):
        """Key A's write (token 10) is held 1.5 s at the backend. A raise of key B (20) completes
        at once, while A's write is still held; a raise of key A itself (11) waits for it."""
        backend = self.start_backend()
        proxy = self.start_proxy(keyed_config(OBJECTS), backend)
        results = {}

        def put(name, path, token, delay_ms=0):
            headers = {"X-Demo-Delay-Ms": str(delay_ms)} if delay_ms else {}
            try:
                response = proxy.request("PUT", path, token, name.encode(), headers=headers)
            except Exception as e:  # reported by the assertions below
                response = e
            results[name] = (response, time.monotonic())

        held = threading.Thread(target=put, args=("A10", "/objects/A/held", 10, 1500),
                                daemon=True)
        held.start()
        wait_for(lambda: fence_key(proxy, "objects", "A")[1].get("inflight") == 1, 5.0,
                 what="key A's write in flight at the backend")
        started = time.monotonic()
        put("B20", "/objects/B/raise", 20)
        b_elapsed = time.monotonic() - started
        self.assert2xx(results["B20"][0], "key B's raise")
        self.assertNotIn("A10", results, "key B's raise answered while key A's write is held")
        self.assertLess(b_elapsed, 0.7, "a raise on key B never waits for key A's write "
                        "(took %.3fs of A's 1.5s hold)" % b_elapsed)

        same = threading.Thread(target=put, args=("A11", "/objects/A/raise", 11), daemon=True)
        same.start()
        wait_for(lambda: fence_key(proxy, "objects", "A")[1].get("pending") == 11, 5.0,
                 what="key A's raise to 11 pending behind its held write")
        held.join(10)
        same.join(10)
        for name in ("A10", "A11"):
            self.assertIn(name, results, "%s finished" % name)
            self.assert2xx(results[name][0], name)
        records = {r["path"]: r for r in backend.records("/objects")}
        a10, a11, b20 = (records["/objects/A/held"], records["/objects/A/raise"],
                         records["/objects/B/raise"])
        self.assertLess(b20["end"], a10["end"], "B's write was applied while A's was held")
        self.assertGreaterEqual(a11["start"], a10["end"],
                                "key A's raise reaches the backend only after A's held write "
                                "finished (the drain barrier of key A)")

    # -- 3. the key cap ------------------------------------------------------------------------

    def test_key_cap_refuses_a_new_key_with_503_and_forwards_nothing(self):
        backend = self.start_raw_backend("answer")
        route = dict(OBJECTS, max_keys=3)
        proxy = self.start_proxy(keyed_config(route), backend)
        for i, key in enumerate(("k1", "k2", "k3")):
            self.assert2xx(proxy.request("PUT", "/objects/%s/w" % key, 10 + i, b"x"), key)
        refused = proxy.request("PUT", "/objects/k4/refused-new-key", 50, b"x")
        problem = self.assertProblemType(refused, 503, "fence-key-limit", "a 4th key at max_keys 3")
        self.assertEqual(problem.get("key"), "k4")
        self.assertProblemType(proxy.request("PUT", "/objects/k5/refused-again", 1, b"x"), 503,
                               "fence-key-limit", "a 5th key, still at the cap")
        for i, key in enumerate(("k1", "k2", "k3")):
            self.assert2xx(proxy.request("PUT", "/objects/%s/again" % key, 20 + i, b"x"),
                           "known key %s keeps working at the cap" % key)
        self.assertProblem(proxy.request("PUT", "/objects/k1/refused-stale", 5, b"x"), 409,
                           "a known key's stale token is still refused")
        self.assert2xx(proxy.request("GET", "/objects/k9/read"), "an unfenced GET needs no slot")
        self.assertNothingForwarded(backend, "refused-", "keys beyond the cap")
        entry = fences_doc(proxy)["fences"]["objects"]
        self.assertEqual((entry.get("keys"), entry.get("max_keys")), (3, 3))
        status, _ = fence_key(proxy, "objects", "k4")
        self.assertEqual(status, 404, "a refused key is not created")
        samples = proxy.metrics()
        self.assertEqual(metric(samples, "fencing_proxy_requests_total", route="objects",
                                outcome="rejected_key_limit"), 2)
        self.assertEqual(metric(samples, "fencing_proxy_fence_keys", fence="objects"), 3)

    # -- 5. forgetting with a floor ------------------------------------------------------------

    def test_forgotten_keys_fold_into_the_floor_across_a_restart(self):
        """token_order: global, forget_idle_keys_after: 2s. Keys A (50) and B (80) go idle and
        are forgotten (/fences/objects?key=A: 404 with floor 80); key C, written all along,
        stays. A's old token 50 is now below the floor: 409. A's next grant (81) is accepted.
        After kill -9 and a restart the floor and the keys are what they were."""
        backend = self.start_backend()
        route = dict(OBJECTS, token_order="global", forget_idle_keys_after="2s")
        proxy = self.start_proxy(keyed_config(route), backend)
        self.assert2xx(proxy.request("PUT", "/objects/A/w", 50, b"a"))
        self.assert2xx(proxy.request("PUT", "/objects/B/w", 80, b"b"))
        self.assert2xx(proxy.request("PUT", "/objects/C/w", 60, b"c"))
        self.assertEqual(fence_key(proxy, "objects", "A")[0], 200)

        def forgotten():
            # C keeps writing (an equal token) while A and B idle.
            self.assert2xx(proxy.request("PUT", "/objects/C/w", 60, b"c"), "key C in use")
            return fence_key(proxy, "objects", "A")[0] == 404 and \
                fence_key(proxy, "objects", "B")[0] == 404
        started = time.monotonic()
        wait_for(forgotten, 8.0, interval=0.3, what="keys A and B forgotten")
        print("\n  keys A and B forgotten %.1fs after their last write (2s idle, sweep 1s)"
              % (time.monotonic() - started))
        status, doc = fence_key(proxy, "objects", "A")
        self.assertEqual((status, doc.get("known"), doc.get("floor")), (404, False, 80),
                         "a forgotten key is unknown and would start at the floor")
        self.assertEqual(fence_key(proxy, "objects", "C")[1].get("max_token"), 60,
                         "key C, in use, is not forgotten")
        entry = fences_doc(proxy)["fences"]["objects"]
        self.assertEqual((entry.get("keys"), entry.get("floor"), entry.get("keys_forgotten")),
                         (1, 80, 2))
        self.assertEqual(metric(proxy.metrics(), "fencing_proxy_fence_keys_forgotten_total",
                                fence="objects"), 2)
        stale = proxy.request("PUT", "/objects/A/stale", 50, b"old a")
        problem = self.assertProblem(stale, 409, "key A's old token after A was forgotten")
        self.assertEqual((stale[1].get("x-fencing-token-max"), problem.get("key")), ("80", "A"))
        self.assert2xx(proxy.request("PUT", "/objects/A/next", 81, b"a"),
                       "key A's next grant, above the floor")

        proxy.kill9()
        floor, keys = state_show_keys(proxy.state_file, "objects")
        self.assertEqual((floor, keys), (80, {"A": 81, "C": 60}),
                         "the state file holds the floor and the keys still known")
        proxy.start()
        status, doc = fence_key(proxy, "objects", "B")
        self.assertEqual((status, doc.get("floor")), (404, 80), "B is still forgotten")
        self.assertEqual(fence_key(proxy, "objects", "A")[1].get("max_token"), 81)
        self.assertProblem(proxy.request("PUT", "/objects/B/stale", 79, b"old b"), 409,
                           "after a restart, a forgotten key's old token is below the floor")
        self.assertProblem(proxy.request("PUT", "/objects/A/stale2", 80, b"old a"), 409,
                           "after a restart, key A's max is its own 81")
        self.assert2xx(proxy.request("PUT", "/objects/B/next", 82, b"b"))
        applied = {r["path"] for r in backend.records("/objects")}
        self.assertFalse({"/objects/A/stale", "/objects/B/stale", "/objects/A/stale2"} & applied,
                         "no refused write reached the backend")

    # -- 6. missing and malformed keys ---------------------------------------------------------

    def test_missing_and_malformed_keys_are_400_also_in_observe_mode(self):
        backend = self.start_raw_backend("answer")
        routes = [OBJECTS, OBJECTS_BY_HEADER,
                  {"name": "watched", "prefix": "/watched", "mode": "observe",
                   "fence_key": {"path_segment": 1}},
                  {"name": "watched_h", "prefix": "/watched-h", "fence": "watched",
                   "mode": "observe", "fence_key": {"header": KEY_HEADER}}]
        proxy = self.start_proxy(keyed_config(*routes), backend)
        long_key = "k" * 129
        n = [0]

        def check(path, slug, headers=None, msg="", raw=None):
            n[0] += 1
            marker = "refused-%d" % n[0]
            if raw is not None:
                response = proxy.raw(raw.replace(b"MARKER", marker.encode()))
            else:
                response = proxy.request("PUT", path, 7, marker.encode(), headers=headers)
            self.assertProblemType(response, 400, slug, "%s (%s)" % (msg, path))
            return slug

        def raw_twice(prefix):
            return ("PUT %s/MARKER HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 7\r\n"
                    "X-Fencing-Key: a\r\nX-Fencing-Key: b\r\nContent-Length: 0\r\n"
                    "Connection: close\r\n\r\n" % prefix).encode()

        markers = []
        for prefix, header_prefix, mode in (("/objects", "/by-header", "enforce"),
                                            ("/watched", "/watched-h", "observe")):
            what = " (mode: %s)" % mode
            markers += [
                check(prefix, "missing-fence-key", msg="no segment after the prefix" + what),
                check(header_prefix + "/x", "missing-fence-key", msg="no key header" + what),
                check(prefix + "/a!b/x", "bad-fence-key", msg="a character outside the rule" + what),
                check(prefix + "/a%20b/x", "bad-fence-key", msg="percent-encoded, never decoded" + what),
                # An encoded slash is refused by the path checks, before the key is looked for.
                check(prefix + "/a%2Fb/x", "ambiguous-path", msg="an encoded slash" + what),
                check(prefix + "/" + long_key + "/x", "bad-fence-key", msg="129 bytes" + what),
                check(header_prefix + "/x", "bad-fence-key", headers={KEY_HEADER: "a/b"},
                      msg="a header key outside the rule" + what),
                check(header_prefix + "/x", "bad-fence-key", headers={KEY_HEADER: long_key},
                      msg="a 129-byte header key" + what),
                check(header_prefix, "bad-fence-key", raw=raw_twice(header_prefix),
                      msg="the key header twice" + what),
            ]
        self.assert2xx(proxy.request("PUT", "/objects/" + "k" * 128 + "/ok", 7, b"x"),
                       "a 128-byte key is a key")
        self.assert2xx(proxy.request("PUT", "/objects/Az09-._~/ok", 7, b"x"),
                       "every character class of the rule")
        # Not fenced: no key needed.
        self.assert2xx(proxy.request("GET", "/objects"), "an unfenced GET on a keyed route")
        self.assert2xx(proxy.request("GET", "/by-header/x"), "an unfenced GET without the header")
        self.assert2xx(proxy.request("PUT", "/watched/A/ok", 1, b"x"), "observe: a good key")
        self.assertNothingForwarded(backend, "refused-", "key errors")
        samples = proxy.metrics()
        rejected = sum(metric(samples, "fencing_proxy_requests_total", route=r,
                              outcome="rejected_key") or 0 for r in
                       ("objects", "objects_by_header", "watched", "watched_h"))
        self.assertEqual(rejected, sum(1 for slug in markers if "fence-key" in slug),
                         "every key error counted as rejected_key")

    # -- 7. /fences and a fence that becomes keyed ---------------------------------------------

    def test_fences_show_counts_never_keys_and_an_unkeyed_max_becomes_the_floor(self):
        backend = self.start_backend()
        unkeyed = self.start_proxy(keyed_config({"name": "objects", "prefix": "/objects"}),
                                   backend, name="unkeyed")
        self.assert2xx(unkeyed.request("PUT", "/objects/x", 500, b"x"), "unkeyed at 500")
        unkeyed.terminate()

        proxy = self.start_proxy(keyed_config(OBJECTS), backend, state_file=unkeyed.state_file,
                                 name="keyed")
        entry = fences_doc(proxy)["fences"]["objects"]
        self.assertEqual((entry.get("keyed"), entry.get("floor"), entry.get("keys")),
                         (True, 500, 0), "the former max is the floor of the keys")
        stale = proxy.request("PUT", "/objects/Secret-Key-1/stale", 499, b"x")
        self.assertEqual((stale[0], stale[1].get("x-fencing-token-max")), (409, "500"),
                         "a new key starts at the floor")
        self.assertEqual(fence_key(proxy, "objects", "Secret-Key-1")[0], 404,
                         "a refused token creates no key")
        for i in range(3):
            self.assert2xx(proxy.request("PUT", "/objects/Secret-Key-%d/w" % i, 501 + i, b"x"))
        # The admission ends once the exchange has, which can be just after the client has the
        # response: wait for it to be released before reading the key.
        wait_for(lambda: fence_key(proxy, "objects", "Secret-Key-2")[1].get("inflight") == 0, 5.0,
                 what="the last write's admission released")
        status, doc = fence_key(proxy, "objects", "Secret-Key-2")
        self.assertEqual(status, 200)
        self.assertEqual((doc.get("max_token"), doc.get("pending"), doc.get("inflight"),
                          doc.get("waiting")), (503, None, 0, 0))
        status, doc = fence_key(proxy, "objects", "Unknown-Key")
        self.assertEqual((status, doc.get("known"), doc.get("floor")), (404, False, 500))
        self.assertEqual(proxy.admin("GET", "/fences/objects?key=a%2Fb")[0], 400,
                         "a malformed key in the query is a 400")
        _, _, fences_body = proxy.admin("GET", "/fences")
        _, _, metrics_body = proxy.admin("GET", "/metrics")
        entry = json.loads(fences_body)["fences"]["objects"]
        self.assertEqual((entry.get("keys"), entry.get("active_keys") is not None,
                          entry.get("floor"), entry.get("keys_forgotten")), (3, True, 500, 0))
        self.assertNotIn(b"Secret-Key", fences_body, "/fences never lists the keys")
        self.assertNotIn(b"Secret-Key", metrics_body, "no key is ever a label value")

        proxy.terminate()
        self.assertEqual(state_show_keys(proxy.state_file, "objects"),
                         (500, {"Secret-Key-0": 501, "Secret-Key-1": 502, "Secret-Key-2": 503}))
        proxy.start()
        self.assertEqual(fences_doc(proxy)["fences"]["objects"].get("floor"), 500,
                         "the floor survives a restart of the keyed config")
        self.assertEqual(proxy.request("PUT", "/objects/Other/stale", 499, b"x")[0], 409)
        self.assertEqual(proxy.request("PUT", "/objects/Secret-Key-2/stale", 502, b"x")[0], 409)
        self.assert2xx(proxy.request("PUT", "/objects/Other/w", 500, b"x"),
                       "a new key at the floor itself is admitted (an equal token)")


# -- 4. crash rounds across 1,000 keys ---------------------------------------------------------

KEYS = ["key-%04d" % i for i in range(1000)]
CRASH_ROUNDS = int(os.environ.get("FP_KEY_CRASH_ROUNDS") or 6)
# Past 4 times the snapshot of 1,000 keys (about 32 KiB): the log is compacted on the next raise.
PAD_BYTES = 256 * 1024
CRASH_CLIENTS = 8
CRASH_CONFIG = keyed_config(OBJECTS, timeouts={"connect": "1s", "request": "5s", "idle": "10s",
                                               "header_read": "5s", "shutdown": "5s"})


class KeyStorm:
    """CRASH_CLIENTS threads raising random keys' tokens (strictly increasing per key, one
    counter per key: per-lock tokens) until kill -9. Keys are chosen from `keys`."""

    def __init__(self, proxy, counters, keys, rng, label):
        self.proxy, self.counters, self.keys, self.label = proxy, counters, keys, label
        self.lock = threading.Lock()
        self.outcomes = []  # (key, token, path, status, X-Fencing-Token-Max)
        self.errors = []
        self.stop = False
        self.seeds = [rng.randrange(1 << 30) for _ in range(CRASH_CLIENTS)]

    def client(self, i, keys=None):
        rng = random.Random(self.seeds[i])
        conn = self.proxy.connect(timeout=5.0)
        held, n = {}, 0
        todo = list(keys) if keys is not None else None
        try:
            while not self.stop and (todo is None or todo):
                key = todo.pop() if todo is not None else rng.choice(self.keys)
                if key in held and rng.random() < 0.25:
                    token = held[key]  # an equal or stale token: another holder writes on
                else:
                    with self.lock:
                        self.counters[key] += 1 + rng.randrange(3)
                        token = self.counters[key]
                held[key] = token
                n += 1
                path = "/objects/%s/%s-c%d-%d" % (key, self.label, i, n)
                try:
                    status, h, _ = self.proxy.request("PUT", path, token, b"w", conn=conn,
                                                      timeout=5.0)
                except Exception as e:
                    if not self.stop:
                        self.errors.append("client %d: %s: %r" % (i, path, e))
                    return
                with self.lock:
                    self.outcomes.append((key, token, path, status, h.get("x-fencing-token-max")))
        finally:
            conn.close()

    def run(self, kill_after=None, keys=None):
        """Until every key in `keys` is written once (split over the clients), or until
        kill_after seconds have passed, then kill -9."""
        parts = [None] * CRASH_CLIENTS if keys is None else \
            [keys[i::CRASH_CLIENTS] for i in range(CRASH_CLIENTS)]
        threads = [threading.Thread(target=self.client, args=(i, parts[i]), daemon=True)
                   for i in range(CRASH_CLIENTS)]
        for t in threads:
            t.start()
        if kill_after is not None:
            time.sleep(kill_after)
            self.stop = True
            self.proxy.kill9()
        for t in threads:
            t.join(30)
        if any(t.is_alive() for t in threads):
            raise AssertionError("storm clients did not stop")

    def acked(self):
        return [(o[0], o[1]) for o in self.outcomes if 200 <= o[3] < 300]


class KeyCrashTest(ProxyTestCase):

    def key_crash_rounds(self, rounds, env=None, label="kill -9"):
        seed = choose_seed()
        rng = random.Random(seed)
        backend = self.start_raw_backend("answer")
        proxy = self.start_proxy(CRASH_CONFIG, backend, env=env, start=False)
        if env is not None:
            env["FP_FAULT_PATH_PREFIX"] = proxy.state_file
            proxy.set_launch(env=env)
        counters = {k: 0 for k in KEYS}
        best = {}  # key -> highest token answered 2xx over all rounds
        started = time.monotonic()
        totals = {"acked": 0, "keys_in_file": 0, "stale_checked": 0, "compactions": 0,
                  "killed_in_compaction": 0}

        def note(storm):
            bad = [o for o in storm.outcomes if not (200 <= o[3] < 300 or o[3] == 409)
                   or (o[3] == 409 and not (o[4] and int(o[4]) > o[1]))]
            self.assertEqual(bad[:5], [], "2xx, or 409 with X-Fencing-Token-Max above the token")
            for key, token in storm.acked():
                best[key] = max(best.get(key, 0), token)
            totals["acked"] += len(storm.acked())

        # Every key once (not killed: the 1,000 keys are in the file), then the kill rounds.
        proxy.start()
        seeding = KeyStorm(proxy, counters, KEYS, rng, "seed")
        seeding.run(keys=KEYS)
        self.assertEqual(seeding.errors, [])
        note(seeding)
        self.assertEqual(len(best), len(KEYS), "test setup: every key acknowledged once")
        seed_seconds = time.monotonic() - started
        for r in range(rounds):
            if r % 2 == 1:
                before = state_show_keys(proxy.state_file, "objects")
                pad_state_file_with_keys(proxy.state_file, PAD_BYTES, "objects", KEYS[:50])
                self.assertEqual(state_show_keys(proxy.state_file, "objects"), before,
                                 "test setup: token-0 key records change no maximum")
            if r > 0:
                proxy.start()
            inode = os.stat(proxy.state_file).st_ino
            storm = KeyStorm(proxy, counters, KEYS, rng, "r%d" % r)
            storm.run(kill_after=rng.uniform(0.05, 0.5) if r else rng.uniform(0.003, 0.03))
            self.assertEqual(storm.errors, [], "round %d: no transport error before the kill" % r)
            note(storm)
            if os.stat(proxy.state_file).st_ino != inode:
                totals["compactions"] += 1  # a snapshot was renamed over the log
            if os.path.exists(proxy.state_file + ".tmp"):
                totals["killed_in_compaction"] += 1
            floor, shown = state_show_keys(proxy.state_file, "objects")
            lost = [(k, t, shown.get(k)) for k, t in sorted(best.items())
                    if shown.get(k, floor) < t]
            self.assertEqual(lost[:5], [], "round %d (%s): every key's max in the state file is "
                             "at least every token answered 2xx for it: (key, acked, in file); "
                             "%d keys lost one" % (r, label, len(lost)))
            totals["keys_in_file"] = len(shown)
            proxy.start()
            # Stale tokens per key: the keys this round wrote, and a sample of the rest.
            touched = sorted({o[0] for o in storm.outcomes})
            sample = touched[:60] + rng.sample(KEYS, 20)
            for key in sample:
                top = shown[key]
                status, doc = fence_key(proxy, "objects", key)
                self.assertEqual((status, doc.get("max_token")), (200, top),
                                 "round %d: key %s served with its max from the file" % (r, key))
                path = "/objects/%s/stale-r%d" % (key, r)
                response = proxy.request("PUT", path, top - 1, b"stale")
                self.assertEqual((response[0], response[1].get("x-fencing-token-max")),
                                 (409, str(top)), "round %d: key %s at %d, below its max"
                                 % (r, key, top - 1))
                totals["stale_checked"] += 1
            proxy.kill9()
        backend.quiet()
        self.assertEqual(backend.count(b"/stale-r"), 0, "no stale write reached the backend")
        print("\n  %s: 1,000 keys seeded in %.1fs; %d rounds, %d writes acknowledged, %d keys in "
              "the file, %d stale tokens refused after restart, %d rounds compacted the log, %d "
              "kills hit a compaction; %.1fs in all"
              % (label, seed_seconds, rounds, totals["acked"], totals["keys_in_file"],
                 totals["stale_checked"], totals["compactions"], totals["killed_in_compaction"],
                 time.monotonic() - started))
        self.assertGreater(totals["compactions"] + totals["killed_in_compaction"], 0,
                           "test setup: a padded round compacts the log")

    def test_kill9_rounds_across_1000_keys_lose_nothing(self):
        self.key_crash_rounds(CRASH_ROUNDS)

    def test_power_loss_rounds_across_1000_keys_lose_nothing(self):
        shim = fault_shim_path()
        if shim is None:
            self.skipTest("the drop_unsynced shim (tests/fault) is not built")
        env = dict(preload_env(shim), FP_FAULT_PATH_PREFIX="")
        self.key_crash_rounds(CRASH_ROUNDS, env=env, label="power loss (drop_unsynced)")


if __name__ == "__main__":
    unittest.main()
