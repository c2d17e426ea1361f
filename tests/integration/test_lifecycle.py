"""Reload and shutdown through the real binary: SIGHUP, a changed file, a ConfigMap-style symlink
swap, an invalid file (old routes kept, metrics say so), SIGTERM draining an in-flight write, and
SIGTERM closing idle keep-alive connections at once."""

import os
import signal
import socket
import threading
import time

from harness import ProxyTestCase, metric, read_response, to_yaml, wait_for

ROUTES_ENFORCE = [{"name": "orders", "prefix": "/orders"}]
TRANSFER_VAR = "TCMALLOC_TRANSFER_NUM_OBJ"  # common/memory.h: ApplyAllocatorSettings


def environ_of(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        pairs = [item.partition(b"=") for item in f.read().split(b"\0") if item]
    return {k.decode(): v.decode() for k, _, v in pairs}


def maps_tcmalloc(pid):
    with open("/proc/%d/maps" % pid, encoding="utf-8") as f:
        return "libtcmalloc" in f.read()
ROUTES_OBSERVE = [{"name": "orders", "prefix": "/orders", "mode": "observe"}]


class LifecycleTest(ProxyTestCase):
    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()

    def write_config(self, proxy, routes, path=None, extra=None):
        """Rewrites the proxy's route file with the same listeners and these routes."""
        config = {"listen": "127.0.0.1:%d" % proxy.port,
                  "admin_listen": "127.0.0.1:%d" % proxy.admin_port,
                  "backend": self.backend.url, "state_file": proxy.state_file, "routes": routes}
        config.update(extra or {})
        target = path or proxy.config_path
        tmp = target + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(to_yaml(config) + "\n")
        os.replace(tmp, target)

    def stale_status(self, proxy):
        """Raises the fence to 10 (idempotent) and returns the status of a write with token 9."""
        self.assert2xx(proxy.request("PUT", "/orders/x", 10, b"ten"), "token 10 is accepted")
        return proxy.request("PUT", "/orders/x", 9, b"nine")[0]

    def reload_metrics(self, proxy):
        samples = proxy.metrics()
        return (metric(samples, "fencing_proxy_config_last_reload_successful"),
                metric(samples, "fencing_proxy_config_reloads_total", result="failure") or 0)

    def test_the_allocator_setting_is_applied_unless_the_operator_chose_one(self):
        """With tcmalloc linked, the binary re-executes itself once with TCMALLOC_TRANSFER_NUM_OBJ=4
        (same PID, still serving); a value the operator set is kept as it is."""
        saved = os.environ.pop(TRANSFER_VAR, None)
        try:
            proxy = self.start_proxy({"routes": ROUTES_ENFORCE}, self.backend)
            if proxy.wrapper or not maps_tcmalloc(proxy.proc.pid):
                self.skipTest("this build does not link tcmalloc (sanitizer builds) or runs under a wrapper")
            self.assertEqual(environ_of(proxy.proc.pid).get(TRANSFER_VAR), "4",
                             "the process the proxy runs as was started with the setting")
            self.assertEqual(self.stale_status(proxy), 409, "the re-executed proxy serves and fences")
            chosen = self.start_proxy({"routes": ROUTES_ENFORCE}, self.backend, env={TRANSFER_VAR: "16"})
            self.assertEqual(environ_of(chosen.proc.pid).get(TRANSFER_VAR), "16", "the operator's value is kept")
            self.assertEqual(self.stale_status(chosen), 409)
        finally:
            if saved is not None:
                os.environ[TRANSFER_VAR] = saved

    def test_sighup_applies_a_valid_file_and_keeps_the_fence(self):
        proxy = self.start_proxy({"routes": ROUTES_ENFORCE}, self.backend)
        self.assertEqual(self.stale_status(proxy), 409, "enforce mode refuses a stale token")
        self.write_config(proxy, ROUTES_OBSERVE)
        proxy.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: self.stale_status(proxy) == 200, what="observe mode after SIGHUP")
        self.assertEqual(proxy.fence("orders").get("max_token"), 10, "a reload never resets a fence")
        self.assertEqual(self.reload_metrics(proxy)[0], 1.0, "config_last_reload_successful is 1")

    def test_invalid_file_keeps_the_running_routes(self):
        proxy = self.start_proxy({"routes": ROUTES_ENFORCE}, self.backend)
        with open(proxy.config_path, "w", encoding="utf-8") as f:
            f.write("listen: [not, an, address]\nroutes: 5\n")
        proxy.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: self.reload_metrics(proxy)[0] == 0.0, what="config_last_reload_successful 0")
        self.assertEqual(self.stale_status(proxy), 409, "the old enforce route still runs")
        self.assertGreaterEqual(self.reload_metrics(proxy)[1], 1, "the failed reload is counted")
        self.assertRegex(proxy.stderr_text(), r"routes\.yaml:\d+:\d+: ",
                         "the log names the error as file:line:col")
        self.assertTrue(proxy.running(), "an invalid file never stops the proxy")

    def test_restart_only_settings_are_refused_on_reload(self):
        proxy = self.start_proxy({"routes": ROUTES_ENFORCE}, self.backend)
        self.write_config(proxy, ROUTES_OBSERVE, extra={"threads": 3})
        proxy.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: self.reload_metrics(proxy)[0] == 0.0, what="the refused reload")
        self.assertEqual(self.stale_status(proxy), 409, "nothing of the refused file was applied")
        self.assertIn("needs a restart", proxy.stderr_text())

    def test_a_changed_file_is_picked_up_without_a_signal(self):
        proxy = self.start_proxy({"routes": ROUTES_ENFORCE}, self.backend)
        self.assertEqual(self.stale_status(proxy), 409)
        self.write_config(proxy, ROUTES_OBSERVE)
        wait_for(lambda: self.stale_status(proxy) == 200, timeout=4.0,
                 what="the directory watch to apply the new file")

    def test_configmap_symlink_swap_is_picked_up(self):
        # A ConfigMap volume: routes.yaml -> ..data/routes.yaml, ..data -> a timestamped
        # directory; an update writes a new directory and renames a new ..data symlink over it.
        proxy = self.start_proxy({"routes": ROUTES_ENFORCE}, self.backend, start=False)
        volume = os.path.join(proxy.workdir, "volume")
        os.makedirs(os.path.join(volume, "..v1"))
        self.write_config(proxy, ROUTES_ENFORCE, path=os.path.join(volume, "..v1", "routes.yaml"))
        os.symlink("..v1", os.path.join(volume, "..data"))
        os.symlink("..data/routes.yaml", os.path.join(volume, "routes.yaml"))
        proxy.config_path = os.path.join(volume, "routes.yaml")
        proxy.start()
        self.assertEqual(self.stale_status(proxy), 409)
        os.makedirs(os.path.join(volume, "..v2"))
        self.write_config(proxy, ROUTES_OBSERVE, path=os.path.join(volume, "..v2", "routes.yaml"))
        os.symlink("..v2", os.path.join(volume, "..data_tmp"))
        os.rename(os.path.join(volume, "..data_tmp"), os.path.join(volume, "..data"))
        wait_for(lambda: self.stale_status(proxy) == 200, timeout=4.0,
                 what="the swapped ConfigMap to be applied")

    def start_slow_write(self, proxy, delay_ms):
        """A write held by the backend for delay_ms, in flight once this returns; returns its
        thread and the dict its response lands in ("response")."""
        result = {}

        def slow_write():
            result["response"] = proxy.request("PUT", "/orders/slow", 5, b"slow",
                                               headers={"X-Demo-Delay-Ms": str(delay_ms)})
        writer = threading.Thread(target=slow_write)
        writer.start()
        wait_for(lambda: proxy.fence("orders").get("inflight") == 1, what="the write in flight")
        return writer, result

    def test_sigterm_drains_an_inflight_write_and_exits_zero(self):
        proxy = self.start_proxy({"routes": ROUTES_ENFORCE, "timeouts": {"shutdown": "5s"}},
                                 self.backend)
        writer, result = self.start_slow_write(proxy, 1000)
        proxy.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: proxy.admin("GET", "/readyz")[0] == 503, timeout=2.0,
                 what="/readyz to turn 503 while draining")
        writer.join(10)
        self.assertEqual(result["response"][0], 200, "the in-flight write completes during the drain")
        self.assertEqual(proxy.wait_exit(), 0, "SIGTERM ends with exit 0")
        self.assertEqual([r["path"] for r in self.backend.records("/orders")], ["/orders/slow"])

    def test_sigterm_closes_idle_keepalive_connections_while_a_write_drains(self):
        # Each worker keeps its connections in a list that shutdown walks: the idle ones (busy
        # ones and cooled ones alike) are closed at once, not when the drain ends.
        proxy = self.start_proxy({"routes": ROUTES_ENFORCE, "timeouts": {"shutdown": "10s"}},
                                 self.backend)
        idle = []
        for i in range(20):
            sock = socket.create_connection(("127.0.0.1", proxy.port))
            sock.sendall(b"GET /orders/read-%d HTTP/1.1\r\nHost: test\r\n\r\n" % i)
            # The backend's answer (404: nothing was written there), on a connection kept alive.
            self.assertEqual(read_response(sock)[0], 404, "an idle connection's first request")
            idle.append(sock)
        time.sleep(1.5)  # some of them cool down (give their buffer back) at a sweep
        writer, result = self.start_slow_write(proxy, 4000)
        proxy.proc.send_signal(signal.SIGTERM)
        for sock in idle:
            sock.settimeout(2.0)
            self.assertEqual(sock.recv(1), b"", "an idle connection is closed at SIGTERM")
            sock.close()
        self.assertTrue(writer.is_alive(), "the idle connections closed while the write still drained")
        writer.join(15)
        self.assertEqual(result["response"][0], 200, "the in-flight write completes during the drain")
        self.assertEqual(proxy.wait_exit(), 0, "SIGTERM ends with exit 0")
