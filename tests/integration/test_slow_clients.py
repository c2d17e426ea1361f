"""Slow and numerous clients: slowloris (Debian's slowhttptest), slow bodies, and a connection
flood, each bounded and on loopback only. The proxy must close the slow connections at its
timeouts, refuse the excess ones, and keep answering a normal client throughout."""

import shutil
import socket
import subprocess
import threading
import time

from harness import ProxyTestCase, metric, wait_for

ROUTES = [{"name": "orders", "prefix": "/orders"}]


class SlowClientsTest(ProxyTestCase):
    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()

    def normal_requests_during(self, proxy, seconds):
        """Runs a normal client for `seconds`; returns (answered, failures)."""
        answered, failures = 0, []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                status = proxy.request("GET", "/orders/probe", timeout=2.0)[0]
                if status in (200, 404):
                    answered += 1
                else:
                    failures.append(status)
            except OSError as e:
                failures.append(repr(e))
            time.sleep(0.05)
        return answered, failures

    def run_slowhttptest(self, proxy, *mode):
        if not shutil.which("slowhttptest"):
            self.skipTest("slowhttptest is not installed (Debian package slowhttptest)")
        # 300 connections at 100/s, one more header (or body) byte each second, for 6 s.
        return subprocess.Popen(
            ["slowhttptest", *mode, "-c", "300", "-r", "100", "-i", "1", "-l", "6", "-p", "2",
             "-u", "http://127.0.0.1:%d/orders/x" % proxy.port],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def test_slowloris_is_cut_off_and_normal_clients_are_served(self):
        proxy = self.start_proxy({"routes": ROUTES, "timeouts": {"header_read": "2s", "idle": "5s"}},
                                 self.backend)
        attack = self.run_slowhttptest(proxy, "-H")
        try:
            time.sleep(1.5)  # let the slow connections pile up
            answered, failures = self.normal_requests_during(proxy, 3.0)
            self.assertEqual(failures, [], "a normal client is answered during slowloris")
            self.assertGreater(answered, 10)
            # Each slow connection dies at header_read (2 s) even though it keeps sending.
            peak = metric(proxy.metrics(), "fencing_proxy_connections")
        finally:
            attack.wait(timeout=30)
        wait_for(lambda: metric(proxy.metrics(), "fencing_proxy_connections") <= 1, timeout=8.0,
                 what="the slowloris connections to be closed")
        print("\n  slowloris: %d normal requests answered, %s connections open at the peak"
              % (answered, peak))

    def test_slow_body_is_cut_off_at_the_request_timeout(self):
        proxy = self.start_proxy({"routes": ROUTES, "timeouts": {"request": "2s", "header_read": "2s"}},
                                 self.backend)
        attack = self.run_slowhttptest(proxy, "-B", "-t", "POST")
        try:
            time.sleep(1.5)
            answered, failures = self.normal_requests_during(proxy, 3.0)
            self.assertEqual(failures, [], "a normal client is answered during a slow-body attack")
            self.assertGreater(answered, 10)
        finally:
            attack.wait(timeout=30)
        wait_for(lambda: metric(proxy.metrics(), "fencing_proxy_connections") <= 1, timeout=8.0,
                 what="the slow-body connections to be closed")

    def test_connection_flood_is_held_to_the_limit(self):
        proxy = self.start_proxy({"routes": ROUTES, "limits": {"max_connections": 200}}, self.backend)
        flood, stop = [], threading.Event()

        def open_connections():
            # 1500 connections, as fast as the loopback allows; each held open until the end.
            for _ in range(1500):
                if stop.is_set():
                    return
                try:
                    flood.append(socket.create_connection(("127.0.0.1", proxy.port), timeout=2))
                except OSError:
                    pass

        opener = threading.Thread(target=open_connections)
        opener.start()
        try:
            answered, failures = self.normal_requests_during(proxy, 2.0)
        finally:
            stop.set()
            opener.join(30)
        samples = proxy.metrics()
        open_now = metric(samples, "fencing_proxy_connections")
        refused = metric(samples, "fencing_proxy_connections_refused_total")
        evicted = metric(samples, "fencing_proxy_connections_evicted_total")
        for s in flood:
            s.close()
        # Silent flood connections are the longest idle, so they give their slots to new clients
        # (the probe among them); what matters is that the proxy never stops answering.
        self.assertGreater(answered, 5, "the proxy keeps answering during the flood (%s)" % failures[:3])
        self.assertLessEqual(open_now, 201, "at most one connection over limits.max_connections, "
                             "while an evicted one closes")
        self.assertGreater(refused + evicted, 1000, "the excess connections are evicted or refused, and counted")
        wait_for(lambda: proxy.request("GET", "/orders/after")[0] in (200, 404), what="service after the flood")
        print("\n  flood: %d connections opened, %d evicted, %d refused, %d normal requests answered"
              % (len(flood), evicted, refused, answered))
