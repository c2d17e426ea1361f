"""Crashes: kill -9 in the middle of a raise storm, and a simulated power loss.

Contract ("Raising a fence", "State file"): a raise is made durable (fdatasync) before the write
carrying it is forwarded, so every token answered 2xx survives kill -9 and power loss: after a
restart each fence's max_token is at least every token that got 2xx, and a token below it gets
409 with X-Fencing-Token-Max. The backend never sees a lower token after a higher one.

Three loops of rounds: start (or restart) the proxy on the same state file, run a storm of raises
from several client threads, kill -9 the proxy at a random moment, then check the state file
(`state show`), restart, and check /fences and stale tokens. The backend is never restarted, so
its log covers every round.

- plain kill -9: what reached the page cache survives, so this checks recovery (replay, a
  leftover snapshot file, compaction) but cannot see a missing fsync;
- under the drop_unsynced shim (tests/fault), written bytes reach the state file only when
  synced, so kill -9 loses what a power loss would;
- the negative control: the shim with fsync/fdatasync made no-ops by libeatmydata (preloaded
  first, so the shim never sees a sync). It must lose acknowledged raises; if it does not, the
  power-loss loop is blind and its pass means nothing.

Every other round starts from a state file padded past the compaction threshold (valid records
with token 0, which lower nothing), so compaction runs, and may be killed, during the storm. Under
the shim, half of those rounds hold the snapshot's rename back by 200 ms
(FP_FAULT_RENAME_DELAY_MS) and kill inside that window.

FP_TEST_SEED replays a run (the seed is printed); FP_CRASH_ROUNDS sets the rounds (default 16).
"""

import ctypes.util
import json
import os
import random
import threading
import time
import unittest

from harness import ProxyTestCase, fault_shim_path, pad_state_file, preload_env, run_cli
from test_order import check_order

FENCES = ["f0", "f1", "f2", "f3"]
CONFIG = {
    "threads": 2,
    "timeouts": {"connect": "1s", "request": "5s", "idle": "10s", "header_read": "5s",
                 "shutdown": "5s"},
    "routes": [{"name": f, "prefix": "/" + f} for f in FENCES],
}
ROUNDS = int(os.environ.get("FP_CRASH_ROUNDS") or 16)
CLIENTS = 6
PAD_BYTES = 80 * 1024  # past the 64 KiB below which the log is never compacted


def choose_seed():
    seed = int(os.environ.get("FP_TEST_SEED") or time.time())
    print("\n  FP_TEST_SEED=%d" % seed)
    return seed


def state_show(path):
    """The maxima in the state file, read by `fencing-proxy state show` while no proxy runs."""
    done = run_cli("state", "show", "--state-file", path)
    if done.returncode != 0:
        raise AssertionError("`state show` on the state file left by kill -9 failed (exit %d): the "
                             "contract expects a crash to leave a valid file (a torn last record "
                             "is dropped on recovery): %s" % (done.returncode, done.stderr.strip()))
    return {k: int(v) for k, v in json.loads(done.stdout)["fences"].items()}


def eatmydata_library():
    """The libeatmydata soname for LD_PRELOAD, or None when Debian's eatmydata is missing."""
    return ctypes.util.find_library("eatmydata")


# --- the storm ------------------------------------------------------------------------------

class Storm:
    """CLIENTS threads raising the fences' tokens (strictly increasing per fence, from one shared
    counter: the lock service) and writing, until run_and_kill() kill -9s the proxy."""

    def __init__(self, proxy, counters, rng, label):
        self.proxy, self.counters, self.label = proxy, counters, label
        self.lock = threading.Lock()
        self.outcomes = []     # (fence, token, path, status, X-Fencing-Token-Max or None)
        self.errors = []       # transport errors before the kill
        self.killed = False
        self.seeds = [rng.randrange(1 << 30) for _ in range(CLIENTS)]

    def client(self, i):
        rng = random.Random(self.seeds[i])
        conn = self.proxy.connect(timeout=5.0)
        last = {}  # fence -> the last token this client held
        n = 0
        try:
            while not self.killed:
                fence = rng.choice(FENCES)
                if fence in last and rng.random() < 0.25:
                    token = last[fence]  # write on with a token already held: equal or stale
                else:
                    with self.lock:
                        self.counters[fence] += 1
                        token = self.counters[fence]
                last[fence] = token
                n += 1
                path = "/%s/%s/c%d/%d" % (fence, self.label, i, n)
                headers = {"X-Demo-Delay-Ms": str(rng.choice([0, 0, 0, 1, 3]))}
                try:
                    status, h, _ = self.proxy.request("PUT", path, token, b"w", headers=headers,
                                                      conn=conn, timeout=5.0)
                except Exception as e:  # the connection reset or refused by the kill
                    if not self.killed:
                        self.errors.append("client %d: %s before the kill: %r" % (i, path, e))
                    return
                with self.lock:
                    self.outcomes.append((fence, token, path, status, h.get("x-fencing-token-max")))
        finally:
            conn.close()

    def run_and_kill(self, kill_after):
        threads = [threading.Thread(target=self.client, args=(i,), daemon=True)
                   for i in range(CLIENTS)]
        for t in threads:
            t.start()
        time.sleep(kill_after)
        self.killed = True
        self.proxy.kill9()
        for t in threads:
            t.join(10)
        if any(t.is_alive() for t in threads):
            raise AssertionError("storm clients did not stop within 10s of the kill")

    def acked(self):
        """(fence, token) of every write answered 2xx."""
        return [(o[0], o[1]) for o in self.outcomes if 200 <= o[3] < 300]


class CrashTest(ProxyTestCase):

    def crash_rounds(self, rounds, env=None, expect_durable=True, label="kill -9"):
        """Runs the rounds. With expect_durable, asserts the contract after every kill; without
        (the negative control), only counts what went wrong. Returns a dict of counts."""
        seed = choose_seed()
        rng = random.Random(seed)
        backend = self.start_backend()
        proxy = self.start_proxy(CONFIG, backend, env=env, start=False)
        shim = bool(env and "FP_FAULT_PATH_PREFIX" in env)
        if shim:
            env["FP_FAULT_PATH_PREFIX"] = proxy.state_file  # the log and its temp file FILE.tmp
        if not expect_durable:
            # The negative control is about acknowledged raises: the file is created with its
            # header synced first. Created without any sync, it would be empty on disk, and a
            # restart refuses an empty state file as damage (FORMAT.md "Creation"), which ends
            # the rounds before they can count a lost raise.
            proxy.set_launch()
            proxy.start()
            proxy.terminate()
            proxy.set_launch(env=env)
        counters = {f: 0 for f in FENCES}
        best_acked = {f: 0 for f in FENCES}  # highest token answered 2xx, over all rounds
        stats = {"rounds": rounds, "acked": 0, "losses": [], "stale_forwarded": [],
                 "compactions": 0, "rounds_acked": 0, "tokens_acked": 0,
                 "killed_in_compaction": 0}
        rejected_paths = set()
        started = time.monotonic()
        for r in range(rounds):
            if r % 2 == 1 and expect_durable:
                # A fence not raised yet shows up once padded, at 0: the same maximum.
                raised = lambda shown: {f: m for f, m in shown.items() if m}  # noqa: E731
                before = raised(state_show(proxy.state_file))
                pad_state_file(proxy.state_file, PAD_BYTES, FENCES)
                self.assertEqual(raised(state_show(proxy.state_file)), before,
                                 "test setup: token-0 records change no maximum")
            # Under the shim, half the padded rounds hold the compaction's rename back for 200 ms
            # and kill inside that window: the snapshot is synced, the old log still named.
            in_compaction = shim and r % 2 == 1 and expect_durable and rng.random() < 0.5
            if shim:
                env["FP_FAULT_RENAME_DELAY_MS"] = "200" if in_compaction else "0"
                proxy.set_launch(env=env)
            proxy.start()
            inode = os.stat(proxy.state_file).st_ino
            storm = Storm(proxy, counters, rng, "r%d" % r)
            # Now and then very early, while the first raises (and, in a padded round, the
            # compaction right after the first sync) are under way.
            if in_compaction:
                kill_after = rng.uniform(0.03, 0.17)
            elif rng.random() < 0.25:
                kill_after = rng.uniform(0.003, 0.03)
            else:
                kill_after = rng.uniform(0.05, 0.6)
            storm.run_and_kill(kill_after)
            self.assertEqual(storm.errors, [], "round %d: no transport error before the kill" % r)
            bad = [o for o in storm.outcomes
                   if not (200 <= o[3] < 300 or o[3] == 409)
                   or (o[3] == 409 and not (o[4] and int(o[4]) > o[1]))]
            self.assertEqual(bad[:5], [], "round %d: a write is forwarded (2xx) or rejected with "
                             "409 and X-Fencing-Token-Max above its token, nothing else: (fence, "
                             "token, path, status, X-Fencing-Token-Max)" % r)
            rejected_paths.update(o[2] for o in storm.outcomes if o[3] == 409)
            acked = storm.acked()
            stats["acked"] += len(acked)
            stats["tokens_acked"] += len(set(acked))
            stats["rounds_acked"] += 1 if acked else 0
            for fence, token in acked:
                best_acked[fence] = max(best_acked[fence], token)
            if os.stat(proxy.state_file).st_ino != inode:
                stats["compactions"] += 1  # a snapshot was renamed over the log
            if os.path.exists(proxy.state_file + ".tmp"):
                stats["killed_in_compaction"] += 1  # the snapshot was not renamed yet

            shown = state_show(proxy.state_file)
            lost = [(f, best_acked[f], shown.get(f, 0)) for f in FENCES
                    if shown.get(f, 0) < best_acked[f]]
            stats["losses"].extend((r,) + loss for loss in lost)
            if expect_durable:
                self.assertEqual(lost, [], "round %d: after kill -9 every fence's max_token must "
                                 "be at least every token answered 2xx (durable before forwarded):"
                                 " (fence, highest 2xx token, max in the state file)" % r)

            proxy.start()
            for f in FENCES:
                self.assertEqual(proxy.fence(f).get("max_token", 0), shown.get(f, 0),
                                 "round %d: the restarted proxy serves fence %s with the max_token "
                                 "of its state file" % (r, f))
            forwarded = self.check_stale_rejected(proxy, backend, shown, best_acked, acked, r,
                                                  expect_durable)
            stats["stale_forwarded"].extend(forwarded)
            proxy.terminate()

        elapsed = time.monotonic() - started
        disorder = []
        for f in FENCES:
            try:
                check_order(self, backend.records("/" + f))  # never a lower token after a higher
            except AssertionError as e:
                if expect_durable:
                    raise
                disorder.append(f)
        stats["fences_out_of_order"] = disorder
        applied = {rec["path"] for rec in backend.records()}
        self.assertFalse(rejected_paths & applied, "a write answered 409 never reaches the "
                         "backend: %r" % sorted(rejected_paths & applied)[:5])
        self.assertGreaterEqual(stats["rounds_acked"], (rounds + 1) // 2,
                                "test setup: most rounds acknowledged raises before the kill")
        print("  %s: %d rounds in %.1fs, %d writes acknowledged (2xx) with %d distinct tokens, "
              "%d times a fence had lost an acknowledged token, %d stale tokens forwarded after "
              "restart, %d fences out of order at the backend, %d rounds compacted the log, %d "
              "kills hit a compaction"
              % (label, rounds, elapsed, stats["acked"], stats["tokens_acked"],
                 len(stats["losses"]), len(stats["stale_forwarded"]), len(disorder),
                 stats["compactions"], stats["killed_in_compaction"]))
        return stats

    def check_stale_rejected(self, proxy, backend, shown, best_acked, acked, r, expect_durable):
        """Tokens below an acknowledged one (and below the recovered max) must get 409 with
        X-Fencing-Token-Max and never reach the backend. Asserts that, or (not expect_durable)
        returns the (fence, token, status) of each that was forwarded instead."""
        stale = {}
        for f in FENCES:
            candidates = [t for fence, t in acked if fence == f and t < shown.get(f, 0)]
            if best_acked[f] >= 1:
                candidates.append(best_acked[f] - 1)
            if shown.get(f, 0) >= 1:
                candidates.append(shown[f] - 1)
            if candidates:
                stale[f] = max(candidates)
        forwarded = []
        for f, token in sorted(stale.items()):
            path = "/%s/stale/r%d" % (f, r)
            response = proxy.request("PUT", path, token, b"stale")
            if not expect_durable:
                if response[0] != 409:
                    forwarded.append((f, token, response[0]))
                continue
            self.assertProblem(response, 409, "round %d, fence %s: token %d is below the recovered "
                               "max_token %d" % (r, f, token, shown[f]))
            self.assertEqual(response[1].get("x-fencing-token-max"), str(shown[f]),
                             "round %d: a 409 names the fence's max_token in X-Fencing-Token-Max"
                             % r)
            self.assertEqual(backend.records(path), [], "a stale write never reaches the backend")
        return forwarded

    def test_kill9_rounds_lose_no_acknowledged_raise(self):
        self.crash_rounds(ROUNDS)

    def test_power_loss_rounds_lose_no_acknowledged_raise(self):
        shim = fault_shim_path()
        if shim is None:
            self.skipTest("the drop_unsynced shim (tests/fault) is not built: it needs a C "
                          "compiler; set FP_FAULT_SHIM to its path")
        env = dict(preload_env(shim), FP_FAULT_PATH_PREFIX="")
        self.crash_rounds(ROUNDS, env=env, label="power loss (drop_unsynced)")

    def test_power_loss_negative_control_without_fsync_loses_raises(self):
        shim = fault_shim_path()
        if shim is None:
            self.skipTest("the drop_unsynced shim (tests/fault) is not built: it needs a C "
                          "compiler; set FP_FAULT_SHIM to its path")
        eatmydata = eatmydata_library()
        if eatmydata is None:
            self.skipTest("libeatmydata not found: install Debian's eatmydata package to run the "
                          "negative control of the power-loss test")
        # libeatmydata first: its no-op fsync/fdatasync answer before the shim could see them.
        env = dict(preload_env(eatmydata, shim), FP_FAULT_PATH_PREFIX="")
        stats = self.crash_rounds(3, env=env, expect_durable=False,
                                  label="negative control (no sync)")
        blind = ("so the power-loss test above is blind and its pass means nothing (is the shim "
                 "dropping unsynced writes? is libeatmydata preloaded before it?)")
        self.assertGreater(len(stats["losses"]), 0,
                           "with fsync and fdatasync skipped, a simulated power loss must lose "
                           "acknowledged raises (%d acknowledged); it lost none, %s"
                           % (stats["acked"], blind))
        self.assertGreater(len(stats["stale_forwarded"]), 0,
                           "after losing raises, tokens below an acknowledged one must reach the "
                           "backend; none did, %s" % blind)
        self.assertGreater(len(stats["fences_out_of_order"]), 0,
                           "after losing raises, the backend must see a lower token after a "
                           "higher one; it did not, %s" % blind)


if __name__ == "__main__":
    unittest.main()
