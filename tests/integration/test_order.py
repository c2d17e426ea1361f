"""The order guarantee through the real binary.

For every fence, the backend never processes a write with a lower token after, or while, it
processes one with a higher token (contract: "Raising a fence, and the order guarantee"). The demo
backend records each applied request's [start, end] on the host's monotonic clock, the same clock
these tests read, so order and overlap can be checked from its log.
"""

import os
import random
import threading
import time
import unittest

from harness import ProxyTestCase, metric

CONFIG = {
    "threads": 2,
    "timeouts": {"connect": "1s", "request": "10s", "idle": "10s", "header_read": "5s",
                 "shutdown": "5s"},
    "routes": [{"name": "orders", "prefix": "/orders"}],
}


def in_flight(entry):
    """The in-flight count from a /fences entry, whatever the proxy calls it; None if absent."""
    for key, value in entry.items():
        if key.replace("_", "").replace("-", "").lower() in ("inflight", "inflightcount"):
            return value
    return None


def wait_fence(proxy, predicate, fallback_sleep):
    """Waits (up to 5s) until /fences shows what predicate expects; when /fences lacks the
    fields, sleeps fallback_sleep instead."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        entry = proxy.fence("orders")
        if "pending" not in entry or in_flight(entry) is None:
            time.sleep(fallback_sleep)
            return
        if predicate(entry):
            return
        time.sleep(0.01)
    raise AssertionError("timed out waiting for /fences to show the expected state: %r"
                         % proxy.fence("orders"))


def check_order(test, records):
    """Asserts the guarantee on backend records of one fence: ordered by start, tokens never
    decrease, and no record overlaps one with a higher token."""
    records = sorted(records, key=lambda r: r["start"])
    tokens = [int(r["token"]) for r in records]
    for a, b in zip(records, records[1:]):
        test.assertLessEqual(int(a["token"]), int(b["token"]),
                             "backend started token %s after token %s (seq %d after %d): tokens "
                             "must never decrease" % (b["token"], a["token"], b["seq"], a["seq"]))
    groups = {}
    for r in records:
        start, end = groups.get(int(r["token"]), (r["start"], r["end"]))
        groups[int(r["token"])] = (min(start, r["start"]), max(end, r["end"]))
    latest_end, latest_token = None, None
    for token in sorted(groups):
        start, end = groups[token]
        if latest_end is not None:
            test.assertLessEqual(latest_end, start,
                                 "a write with token %d was still being processed when one with "
                                 "token %d started (%.6f > %.6f): a raise must wait for older "
                                 "in-flight writes" % (latest_token, token, latest_end, start))
        if latest_end is None or end > latest_end:
            latest_end, latest_token = end, token
    return tokens


class OrderTest(ProxyTestCase):

    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()
        self.proxy = self.start_proxy(CONFIG, self.backend)

    def test_raise_waits_for_in_flight_lower_token(self):
        proxy, results = self.proxy, {}

        def put(name, token, delay_ms):
            headers = {"X-Demo-Delay-Ms": str(delay_ms)} if delay_ms else {}
            sent = time.monotonic()
            try:
                results[name] = (proxy.request("PUT", "/orders/o", token, name.encode(),
                                               headers=headers), sent, time.monotonic())
            except Exception as e:  # reported by the assertions below
                results[name] = (e, sent, time.monotonic())

        t10 = threading.Thread(target=put, args=("10", 10, 1500), daemon=True)
        t10.start()
        # Token 10 is raised and then held in flight at the backend for 1.5s.
        wait_fence(proxy, lambda f: f.get("max_token") == 10 and in_flight(f) == 1, 0.4)
        # In flight at the fence counts from the admission, before the request has reached the
        # backend; on a loaded machine 11 could be sent before it has. The backend holds 10 for
        # 1.5 s: a moment more puts 10 there first (the setup check below says so if not).
        time.sleep(0.2)
        t11 = threading.Thread(target=put, args=("11", 11, 0), daemon=True)
        t11.start()
        # Token 11 becomes the pending raise, waiting for 10 to finish.
        wait_fence(proxy, lambda f: f.get("pending") == 11, 0.2)
        started = time.monotonic()
        late = proxy.request("PUT", "/orders/o", 10, b"late 10")
        elapsed = time.monotonic() - started
        self.assertProblem(late, 409, "token 10 while a raise to 11 is pending")
        self.assertLess(elapsed, 0.5, "the pending raise counts as the maximum: the late 10 is "
                        "rejected at once, not after the raise (took %.3fs)" % elapsed)
        t10.join(10)
        t11.join(10)
        for name in ("10", "11"):
            self.assertIn(name, results, "the write with token %s finished within 10s" % name)
            response = results[name][0]
            self.assertNotIsInstance(response, Exception, "token %s: %r" % (name, response))
            self.assert2xx(response, "the write with token %s" % name)

        records = self.backend.records("/orders")
        self.assertEqual([r["token"] for r in records], ["10", "11"],
                         "the backend applies 10 then 11, and never the late 10")
        r10, r11 = records
        self.assertLess(r10["start"], results["11"][1],
                        "test setup: token 10 must be in flight at the backend when 11 is sent")
        self.assertGreaterEqual(r11["start"], r10["end"],
                                "token 11 reaches the backend only after 10 completed")
        # Measured against the backend's clock, not 10's client thread: that thread may be
        # scheduled after 11's even though 10's response left the proxy first.
        self.assertGreaterEqual(results["11"][2], r10["end"],
                                "11's response cannot come before the backend finished 10")

    def test_raise_behind_a_hung_write_goes_once_that_write_is_cut_off(self):
        # Token 10 hangs at the backend past timeouts.request (2 s) and is cut off with 504 by the
        # sweep, which runs every half second here. Token 11, sent a moment after 10 was
        # admitted, waits for it: 10 was forwarded first, so it is cut off first, and the raise
        # must then go. (A raise that gave up at its own timeouts.request failed a moment before
        # 10 was cut off, whenever the sweep came later than the gap between the two.)
        config = dict(CONFIG, timeouts=dict(CONFIG["timeouts"], request="2s"))
        proxy, results = self.start_proxy(config, self.backend), {}

        def put(name, token, delay_ms):
            headers = {"X-Demo-Delay-Ms": str(delay_ms)} if delay_ms else {}
            try:
                results[name] = proxy.request("PUT", "/orders/o", token, name.encode(), headers=headers)
            except Exception as e:  # reported by the assertions below
                results[name] = e

        for round_no in range(3):
            hung, raised = 10 + 2 * round_no, 11 + 2 * round_no
            t_hung = threading.Thread(target=put, args=(str(hung), hung, 8000), daemon=True)
            t_hung.start()
            wait_fence(proxy, lambda f: f.get("max_token") == hung and in_flight(f) == 1, 0.4)
            t_raise = threading.Thread(target=put, args=(str(raised), raised, 0), daemon=True)
            t_raise.start()
            t_hung.join(15)
            t_raise.join(15)
            for name in (str(hung), str(raised)):
                self.assertIsInstance(results.get(name), tuple, "round %d: token %s answered: %r"
                                      % (round_no, name, results.get(name)))
            self.assertEqual(results[str(hung)][0], 504, "round %d: the hung write is cut off at "
                             "timeouts.request: %r" % (round_no, results[str(hung)][:1]))
            self.assert2xx(results[str(raised)], "round %d: the raise behind the hung write goes "
                           "once it is cut off (not 503)" % round_no)

    def test_random_handovers_keep_order(self):
        seed = int(os.environ.get("FP_TEST_SEED") or time.time())
        print("\n  FP_TEST_SEED=%d" % seed)
        proxy, duration, clients = self.proxy, 3.0, 8
        service = {"token": 0, "holder": None, "grants": 0}  # the "lock service"
        service_lock = threading.Lock()
        outcomes, outcomes_lock, errors = [], threading.Lock(), []
        deadline = time.monotonic() + duration

        def client(i):
            rng = random.Random(seed * 100 + i)
            conn = proxy.connect()
            my_token, n = None, 0

            def write(delay_ms, holder):
                nonlocal n
                n += 1
                path = "/orders/h/%d/%d" % (i, n)
                status = proxy.request("PUT", path, my_token, b"w",
                                       headers={"X-Demo-Delay-Ms": str(delay_ms)}, conn=conn)[0]
                with outcomes_lock:
                    outcomes.append((path, my_token, status, holder))

            def release():
                with service_lock:
                    if service["holder"] == i:
                        service["holder"] = None

            try:
                while time.monotonic() < deadline:
                    with service_lock:
                        holder = service["holder"] is None
                        if holder:  # the lock is free: take it with the next token
                            service["token"] += 1
                            service["grants"] += 1
                            service["holder"], my_token = i, service["token"]
                    if holder:
                        writes = rng.randint(1, 4)
                        for k in range(writes):
                            if k == writes - 1 and rng.random() < 0.5:
                                # The lease runs out as the last write goes out: the next holder
                                # may raise the fence while this one is still in flight.
                                release()
                                write(rng.choice([20, 40, 80]), False)
                            else:
                                write(rng.choice([0, 0, 2, 5, 10]), True)
                        release()
                    elif my_token is not None and rng.random() < 0.3:
                        write(rng.choice([0, 5, 20, 40]), False)  # a stale holder writes on
                    time.sleep(rng.uniform(0.001, 0.02))
            except Exception as e:
                errors.append("client %d: %r" % (i, e))
            finally:
                conn.close()

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(duration + 15)
        self.assertFalse(any(t.is_alive() for t in threads), "clients finished in time")
        self.assertEqual(errors, [], "no client hit a transport error")

        bad = [o for o in outcomes if o[2] not in (200, 409) or (o[3] and o[2] != 200)]
        self.assertEqual(bad[:10], [], "a holder's write (latest token) is always forwarded; a "
                         "stale holder's write is forwarded or rejected with 409, nothing else: "
                         "(path, token, status, holder)")
        accepted = {o[0]: o[1] for o in outcomes if o[2] == 200}
        rejected = {o[0] for o in outcomes if o[2] == 409}
        records = self.backend.records("/orders/h")
        applied = {r["path"]: int(r["token"]) for r in records}
        self.assertEqual(len(records), len(applied), "each write is applied at most once")
        self.assertEqual(applied, accepted,
                         "the backend applied exactly the writes that got 2xx, with their tokens")
        self.assertFalse(rejected & set(applied), "a 409'd write never reaches the backend")
        check_order(self, records)
        samples = proxy.metrics()
        raises = metric(samples, "fencing_proxy_raise_wait_seconds_count", fence="orders") or 0
        waited = raises - (metric(samples, "fencing_proxy_raise_wait_seconds_bucket",
                                  fence="orders", le="0.005") or 0)
        print("  %d grants, %d writes forwarded, %d stale writes rejected, %d of %d raises "
              "waited > 5ms for older writes" % (service["grants"], len(accepted), len(rejected),
                                                 waited, raises))
        self.assertGreater(waited, 0, "test setup: some raise had to wait for an older write "
                           "(fencing_proxy_raise_wait_seconds)")
        self.assertGreaterEqual(service["grants"], 10, "test setup: enough hand-overs happened")
        self.assertGreater(len(rejected), 0, "test setup: some stale writes were attempted")


if __name__ == "__main__":
    unittest.main()
