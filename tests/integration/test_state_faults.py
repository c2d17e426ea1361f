"""A state file that cannot be written or synced: the proxy fails closed.

Contract ("Raising a fence"): if the state file cannot be written or synced, the raise fails with
503, the proxy stops accepting fenced writes and /readyz fails; it never retries an fsync on the
same file and never forwards a raise that is not durable. Unfenced requests still pass. After a
restart the max_token is the last durable one.

Faults come from libfiu (Debian's fiu-utils): the proxy runs under `fiu-run -x` with a control
fifo, and a failure point is enabled with `fiu-ctrl` only once the proxy is up, since the state
file is created and synced at start-up. libfiu's points are per function, not per file:
posix/io/sync/fdatasync fails every fdatasync(2) of the process (only the state store calls it,
on the log and on a snapshot), posix/io/sync/fsync every fsync(2) (the store's directory syncs),
and posix/io/rw/write every write(2), which includes the proxy's own log lines on stderr (client
and backend sockets use sendmsg, so they keep working).

Also covered: a sync failure while creating a new state file stops the start, and a failed
directory fsync after a compaction renamed its snapshot over the log fails closed like a failed
append (FORMAT.md "Compaction").

Contract ("Request integrity"): state file creation is atomic, so an empty or header-less state
file is damage, not a new file: the proxy refuses to start and names the file, and `--check`
and `state show` report the same (DamagedStateFileTest; no libfiu needed).
"""

import json
import os
import shutil
import signal
import subprocess
import unittest

from harness import (ProxyTestCase, binary_sanitizer, metric, pad_state_file, preload_env, run_cli,
                     wait_for)

FIU_PRELOAD = "/usr/lib/fiu/fiu_posix_preload.so"
EIO, ENOSPC = 5, 28
CONFIG = {
    "threads": 2,
    "timeouts": {"connect": "1s", "request": "5s", "idle": "10s", "header_read": "5s",
                 "shutdown": "5s"},
    "routes": [{"name": "orders", "prefix": "/orders"}, {"name": "users", "prefix": "/users"}],
}


def fiu_missing():
    """Why libfiu's tools cannot be used here, or None."""
    for tool in ("fiu-run", "fiu-ctrl"):
        if shutil.which(tool) is None:
            return "%s not found: install Debian's fiu-utils package" % tool
    if not os.path.isfile(FIU_PRELOAD):
        return "%s not found: install Debian's fiu-utils package (libfiu0)" % FIU_PRELOAD
    if binary_sanitizer():
        return ("the proxy is built with the %s sanitizer, whose allocator libfiu's POSIX preload "
                "library crashes in" % binary_sanitizer())
    return None


class StateFaultTest(ProxyTestCase):

    def setUp(self):
        super().setUp()
        missing = fiu_missing()
        if missing:
            self.skipTest(missing)
        self.backend = self.start_backend()
        self.fifo = os.path.join(self.workdir, "fiu-ctrl")
        self.proxy = self.start_proxy(CONFIG, self.backend, env=preload_env(),
                                      wrapper=["fiu-run", "-x", "-f", self.fifo])
        # fiu-run execs the proxy, which keeps its pid; libfiu opens FIFO-PID.in at start-up.
        wait_for(lambda: os.path.exists("%s-%d.in" % (self.fifo, self.proxy.proc.pid)),
                 timeout=5.0, what="libfiu's control fifo (is fiu-run working?)")

    def fiu_ctrl(self, command):
        """Sends one libfiu remote-control command to the running proxy (bounded)."""
        ctrl = subprocess.Popen(["fiu-ctrl", "-f", self.fifo, "-c", command,
                                 str(self.proxy.proc.pid)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = ctrl.communicate(timeout=5.0)
        except subprocess.TimeoutExpired:
            os.killpg(ctrl.pid, signal.SIGKILL)
            ctrl.communicate()
            self.fail("fiu-ctrl %r did not finish within 5s" % command)
        self.assertEqual((ctrl.returncode, "error" in out), (0, False),
                         "fiu-ctrl %r: %s" % (command, out))

    def put(self, path, token, body=b"w"):
        return self.proxy.request("PUT", path, token, body)

    def check_fails_closed(self, failpoint, errno, durable_after_restart):
        """durable_after_restart: the max_token values of fence orders acceptable after the
        restart (the failed raise to 6 may or may not have reached the disk)."""
        proxy, backend = self.proxy, self.backend
        self.assert2xx(self.put("/orders/a", 5, b"order a"), "raise orders to 5 before the fault")
        self.assert2xx(self.put("/users/a", 3, b"user a"), "raise users to 3 before the fault")
        self.assertEqual(proxy.admin("GET", "/readyz")[0], 200, "ready before the fault")

        self.fiu_ctrl("enable name=%s,failinfo=%d" % (failpoint, errno))

        response = self.put("/orders/b", 6)
        problem = self.assertProblem(response, 503, "a raise whose %s fails" % failpoint)
        self.assertEqual((problem.get("fence"), problem.get("token")), ("orders", 6),
                         "the 503 problem names the fence and the token: %r" % problem)
        after = [("/orders/c", 7, "a later, higher raise"),
                 ("/orders/d", 5, "a write with the durable token (equal: no disk I/O needed)"),
                 ("/users/b", 3, "an equal-token write on another fence"),
                 ("/users/c", 4, "a raise on another fence")]
        for path, token, what in after:
            self.assertProblem(self.put(path, token), 503, "%s after a failed state write: fenced "
                               "writes are off until restart" % what)
        self.assertEqual([r["path"] for r in backend.records() if r["method"] == "PUT"],
                         ["/orders/a", "/users/a"],
                         "no write reaches the backend after the state write failed: a raise "
                         "that is not durable is never forwarded")

        status, _, body = proxy.admin("GET", "/readyz")
        self.assertEqual(status, 503, "/readyz fails after a state write failure: %r" % body)
        self.assertEqual(proxy.admin("GET", "/healthz")[0], 200, "the process still serves")
        status, _, body = proxy.admin("GET", "/fences")
        self.assertIs(json.loads(body).get("state_healthy", False), False,
                      "/fences does not call the state healthy after a failed write: %r" % body)
        samples = proxy.metrics()
        self.assertGreaterEqual(metric(samples, "fencing_proxy_state_write_failures_total") or 0, 1,
                                "fencing_proxy_state_write_failures_total counts the failure")
        self.assertGreaterEqual(metric(samples, "fencing_proxy_requests_total", route="orders",
                                       outcome="raise_failed") or 0, 1,
                                "requests_total{outcome=\"raise_failed\"} counts the failed raise")
        self.assertEqual(metric(samples, "fencing_proxy_max_token", fence="orders"), 5,
                         "the max_token gauge stays at the last durable raise")

        status, _, body = proxy.request("GET", "/orders/a")
        self.assertEqual((status, body), (200, b"order a"), "an unfenced GET still passes")
        self.assertEqual(backend.records("/orders/a")[-1]["method"], "GET",
                         "the unfenced GET reached the backend")

        # The fault is gone, but the store never retries a failed write or sync on this file.
        self.fiu_ctrl("disable name=%s" % failpoint)
        self.assertProblem(self.put("/orders/e", 8), 503, "a raise after the fault cleared: the "
                           "proxy never retries on the same file, only a restart recovers")
        self.assertEqual(proxy.admin("GET", "/readyz")[0], 503, "/readyz stays failed")

        self.assertEqual(proxy.terminate(), 0, "SIGTERM still shuts down cleanly")
        shown = run_cli("state", "show", "--state-file", proxy.state_file)
        self.assertEqual(shown.returncode, 0, "state show: %s" % shown.stderr)
        maxima = json.loads(shown.stdout)["fences"]
        self.assertIn(maxima.get("orders"), durable_after_restart,
                      "orders' max_token in the state file is the last durable one (5), or the "
                      "failed raise's 6 if its bytes reached the disk; never 7 or 8, which were "
                      "refused before any write: %r" % maxima)
        self.assertEqual(maxima.get("users"), 3, "users keeps its last durable max_token")

        proxy.set_launch()  # no fault injection
        proxy.start()
        self.assertEqual(proxy.admin("GET", "/readyz")[0], 200, "ready again after a restart")
        self.assertEqual(proxy.fence("orders").get("max_token"), maxima["orders"],
                         "the restarted proxy serves the state file's max_token")
        self.assertProblem(self.put("/orders/f", 4), 409, "below the durable max after restart")
        self.assert2xx(self.put("/orders/g", 9), "a raise after the restart is durable again")
        self.assert2xx(self.put("/users/d", 4), "users raises again after the restart")

    def test_sync_failure_at_creation_refuses_to_start(self):
        # A new state file: its header is fdatasync'd under the temporary name, renamed, and the
        # directory fsync'd before the proxy serves (FORMAT.md "Creation"); if a sync fails,
        # nothing starts.
        self.proxy.kill9()
        cases = [("posix/io/sync/fdatasync", "fdatasync of the new file's header"),
                 ("posix/io/sync/fsync", "fsync of the directory holding the new file")]
        for failpoint, what in cases:
            with self.subTest(failpoint=failpoint):
                proxy = self.start_proxy(CONFIG, self.backend, start=False, env=preload_env(),
                                         name=failpoint.replace("/", "_"),
                                         wrapper=["fiu-run", "-x", "-f", "", "-c",
                                                  "enable name=%s,failinfo=%d" % (failpoint, EIO)])
                proxy.start(wait=False)
                code = proxy.wait_exit(timeout=10.0)
                self.assertNotIn(code, (None, 0), "when the %s fails the proxy must not start "
                                 "(exit code %r): it could not make a raise durable" % (what, code))
                self.assertIn("Input/output error", proxy.stderr_text(),
                              "the start-up error says why")
                if os.path.exists(proxy.state_file):  # only ever a whole one
                    with open(proxy.state_file, "rb") as f:
                        self.assertEqual(len(f.read()), 16, "a failed creation leaves no state "
                                         "file or one with its whole header, never a torn one")
                proxy.set_launch()
                proxy.start()  # the fault is gone: no file, or the one left behind, is usable
                self.assertEqual(proxy.admin("GET", "/readyz")[0], 200, "ready without the fault")
                self.assert2xx(proxy.request("PUT", "/orders/x", 1, b"w"), "a raise after restart")
                proxy.terminate()

    def test_compaction_directory_sync_failure_fails_closed(self):
        # FORMAT.md "Compaction": a log padded past 64 KiB (and 4x its snapshot) is compacted
        # after the next synced raise; the snapshot is renamed over the log and the directory
        # fsync'd. If that fsync fails, the name may or may not hold the snapshot: terminal, like
        # a failed append. The raise itself was answered before the compaction and is durable.
        proxy = self.proxy
        self.assert2xx(self.put("/orders/a", 5), "raise orders to 5")
        self.assert2xx(self.put("/users/a", 3), "raise users to 3")
        proxy.terminate()
        pad_state_file(proxy.state_file, 80 * 1024, ["orders", "users"])
        proxy.start()
        wait_for(lambda: os.path.exists("%s-%d.in" % (self.fifo, proxy.proc.pid)), timeout=5.0,
                 what="libfiu's control fifo")
        inode = os.stat(proxy.state_file).st_ino
        # fsync(2) is only used on directories (fdatasync on the log and the snapshot).
        self.fiu_ctrl("enable name=posix/io/sync/fsync,failinfo=%d" % EIO)

        self.assert2xx(self.put("/orders/b", 6), "the raise that triggers the compaction is "
                       "answered before the compaction runs")
        try:
            wait_for(lambda: proxy.admin("GET", "/readyz")[0] == 503, timeout=5.0,
                     what="/readyz to fail")
        except Exception:
            self.fail("after a compaction whose directory fsync failed, /readyz must fail (is the "
                      "80 KiB log compacted at all? its inode %s)" %
                      ("changed" if os.stat(proxy.state_file).st_ino != inode else "is unchanged"))
        self.assertNotEqual(os.stat(proxy.state_file).st_ino, inode,
                            "the snapshot was renamed over the log")
        self.assertProblem(self.put("/orders/c", 7), 503, "a raise after the failed directory "
                           "sync: fenced writes are off until restart")
        self.assertProblem(self.put("/orders/d", 6), 503, "an equal-token write after it")
        self.assertEqual([r["path"] for r in self.backend.records() if r["method"] == "PUT"],
                         ["/orders/a", "/users/a", "/orders/b"],
                         "nothing reaches the backend after the state failed")
        self.assertGreaterEqual(metric(proxy.metrics(),
                                       "fencing_proxy_state_write_failures_total") or 0, 1,
                                "fencing_proxy_state_write_failures_total counts the failure")

        self.assertEqual(proxy.terminate(), 0, "SIGTERM still shuts down cleanly")
        shown = run_cli("state", "show", "--state-file", proxy.state_file)
        self.assertEqual(shown.returncode, 0, "state show: %s" % shown.stderr)
        self.assertEqual(json.loads(shown.stdout)["fences"], {"orders": 6, "users": 3},
                         "the snapshot holds every acknowledged maximum (6 was answered 2xx) "
                         "and nothing that was refused")
        self.assertLess(os.path.getsize(proxy.state_file), 1024, "the log was compacted")
        proxy.set_launch()
        proxy.start()
        self.assertEqual(proxy.admin("GET", "/readyz")[0], 200, "ready again after a restart")
        self.assertProblem(self.put("/orders/e", 5), 409, "below the durable max after restart")
        self.assert2xx(self.put("/orders/f", 7), "a raise after the restart")

    def test_fdatasync_failure_fails_closed(self):
        self.check_fails_closed("posix/io/sync/fdatasync", EIO, (5, 6))

    def test_write_enospc_fails_closed(self):
        # write(2) fails before a byte reaches the file: the durable max stays exactly 5.
        self.check_fails_closed("posix/io/rw/write", ENOSPC, (5,))


class DamagedStateFileTest(ProxyTestCase):
    """A state file under its real name always has its whole header (it is created under a
    temporary name and renamed), so an empty or header-less one was damaged after creation and
    may have held maxima: starting empty would forget every fence's max token."""

    def damaged_state_file(self, size):
        """A proxy whose state file was created by the real binary, then cut to size bytes."""
        backend = self.start_backend()
        proxy = self.start_proxy(CONFIG, backend, name="cut-to-%d" % size)
        self.assertEqual(proxy.terminate(), 0)
        with open(proxy.state_file, "rb") as f:
            header = f.read()
        self.assertEqual(len(header), 16, "test setup: a new state file is just its header")
        with open(proxy.state_file, "r+b") as f:
            f.truncate(size)
        return proxy, header[:size]

    def check_refused(self, size, what):
        proxy, damaged = self.damaged_state_file(size)
        path = proxy.state_file
        advice = ["this is damage, not a new file", "restore it from a backup",
                  "remove it deliberately to start every fence from 0",
                  "loses the fences' max tokens"]

        proxy.start(wait=False)
        code = proxy.wait_exit(timeout=10.0)
        stderr = proxy.stderr_text()
        self.assertNotIn(code, (None, 0), "the proxy must not start on %s (exit code %r): it "
                         "would forget every fence's max token" % (what, code))
        self.assertIn(path, stderr, "the start-up error names the state file")
        for words in advice:
            self.assertIn(words, stderr, "the start-up error says what to do")

        check = run_cli("--config", proxy.config_path, "--check")
        self.assertEqual(check.returncode, 1, "--check on %s exits 1: %r" % (what, check))
        self.assertIn(path + ": state file is ", check.stderr, "--check names the state file")
        for words in advice:
            self.assertIn(words, check.stderr, "--check says what to do")

        shown = run_cli("state", "show", "--state-file", path)
        self.assertEqual(shown.returncode, 1, "state show on %s fails: %r" % (what, shown))
        self.assertIn(path + ": state file is ", shown.stderr, "state show names the state file")

        with open(path, "rb") as f:
            self.assertEqual(f.read(), damaged, "a refused state file is left as it was")
        self.assertFalse(os.path.exists(path + ".tmp"), "and no new file is made beside it")

        os.unlink(path)  # the operator's deliberate choice: every fence starts from 0
        proxy.start()
        self.assertEqual(proxy.admin("GET", "/readyz")[0], 200, "a removed file is created anew")
        self.assertEqual(proxy.terminate(), 0)

    def test_empty_state_file_refuses_to_start(self):
        self.check_refused(0, "an empty (0-byte) state file")

    def test_state_file_with_half_a_header_refuses_to_start(self):
        self.check_refused(8, "a state file holding half a header")


if __name__ == "__main__":
    unittest.main()
