"""The access log through the real binary: lines are buffered per worker and written by a log
thread (proxy/common/access_log.h). Every line arrives whole, none is lost at SIGTERM, and a
stderr nobody reads never holds up a request: the lines that do not fit are dropped and counted.
"""

import json
import os
import signal
import threading
import time

from harness import ProxyTestCase, metric, wait_for

ROUTES = [{"name": "orders", "prefix": "/orders"}]
DROPPED = "fencing_proxy_access_log_dropped_lines_total"


def access_lines(text):
    """The parsed access lines of a stderr text; fails on a line that is not whole JSON."""
    lines = []
    for raw in text.splitlines():
        entry = json.loads(raw)  # a torn or interleaved line does not parse
        if entry.get("msg") == "access":
            lines.append(entry)
    return lines


class AccessLogTest(ProxyTestCase):
    def setUp(self):
        super().setUp()
        self.backend = self.start_backend()

    def test_lines_requested_just_before_sigterm_are_written(self):
        proxy = self.start_proxy({"routes": ROUTES, "access_log": True}, self.backend)
        n = 60

        def client(i):
            for j in range(n // 4):
                status = proxy.request("PUT", "/orders/c%d-%d" % (i, j), 5, b"x")[0]
                self.assertEqual(status, 200)
        threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # At once: the lines are still in the worker's buffer (it is handed over once a second).
        self.assertEqual(proxy.terminate(), 0)
        lines = [l for l in access_lines(proxy.stderr_text()) if l.get("path", "").startswith("/orders/c")]
        self.assertEqual(len(lines), n, "every request's line, written at shutdown")
        self.assertEqual({l["path"] for l in lines}, {"/orders/c%d-%d" % (i, j) for i in range(4) for j in range(n // 4)})
        for l in lines:
            self.assertEqual((l["method"], l["status"], l["decision"], l["route"], l["token"]),
                             ("PUT", 200, "forwarded", "orders", 5), l)
            self.assertEqual(l["upstream_status"], 200)
            self.assertGreaterEqual(l["duration_s"], 0)

    def test_a_stderr_nobody_reads_drops_lines_and_never_holds_up_requests(self):
        fifo = os.path.join(self.workdir, "stderr.fifo")
        os.mkfifo(fifo)
        # Held open, never read until the end: the pipe fills, the log thread blocks in write(2).
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.addCleanup(lambda: os.close(reader) if reader is not None else None)
        proxy = self.start_proxy({"routes": ROUTES, "access_log": True}, self.backend,
                                 wrapper=["sh", "-c", 'exec "$0" "$@" 2>"%s"' % fifo])
        # Long paths make long lines: 4 MiB of backlog and the 64 KiB pipe fill in ~1,500 lines.
        long = "p" * 3000
        n, per = 2400, 600
        statuses = []

        def client(i):
            conn = None
            for j in range(per):
                status = proxy.request("PUT", "/orders/%s/%d-%d" % (long, i, j), 5, b"x", conn=conn)[0]
                statuses.append(status)
        threads = [threading.Thread(target=client, args=(i,)) for i in range(n // per)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertFalse(any(t.is_alive() for t in threads), "requests were held up by the log")
        self.assertEqual(statuses.count(200), n, set(statuses))
        # Every line has been handed over (accepted or dropped) at the next sweep tick.
        wait_for(lambda: metric(proxy.metrics(), DROPPED), timeout=5.0, what="dropped access lines counted")
        time.sleep(1.5)  # one more sweep tick: the last lines are handed over too
        dropped = metric(proxy.metrics(), DROPPED)
        self.assertGreater(dropped, 0)
        # Now read everything: what was not dropped arrives, in whole lines.
        os.set_blocking(reader, True)
        chunks = []

        def drain():
            while True:
                chunk = os.read(reader, 1 << 16)
                if not chunk:
                    return
                chunks.append(chunk)
        t = threading.Thread(target=drain)
        t.start()
        self.assertEqual(proxy.terminate(), 0)
        t.join(30)
        text = b"".join(chunks).decode()
        lines = [l for l in access_lines(text) if l.get("path", "").startswith("/orders/" + long)]
        self.assertEqual(len(lines) + dropped, n, "each line is written or counted as dropped")
        self.assertGreater(len(lines), 1000, "the backlog is written once the reader reads")
