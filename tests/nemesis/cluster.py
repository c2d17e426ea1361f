"""A 3-member etcd cluster on 127.0.0.1 for the nemesis run (Debian's /usr/bin/etcd).

Each member has its own data directory under one temp dir, its own client and peer port, and
etcd's short raft timings (heartbeat 50 ms, election 500 ms), so that leases as short as the
proxies' member_ttl (3 s) and leader elections both happen within the run. Members can be killed
(SIGKILL) and restarted on the same ports and data directory, paused (SIGSTOP, returning once
every thread has stopped) and resumed. The leader is found with `etcdctl endpoint status`.
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.request

from harness import _live, _stop_process, free_port, sigstop_and_wait, wait_for

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"
START_TIMEOUT = 30.0


class Member:
    def __init__(self, index, workdir):
        self.index = index
        self.name = "m%d" % index
        self.client_port, self.peer_port = free_port(), free_port()
        self.endpoint = "127.0.0.1:%d" % self.client_port
        self.url = "http://" + self.endpoint
        self.peer_url = "http://127.0.0.1:%d" % self.peer_port
        self.data_dir = os.path.join(workdir, self.name)
        self.log_path = os.path.join(workdir, self.name + ".log")
        self.proc = None
        self.paused = False
        self._log = None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def healthy(self):
        """/health answers {"health": "true"} (the member is up and the cluster has a leader)."""
        if not self.running() or self.paused:
            return False
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False


class EtcdCluster:
    def __init__(self, workdir=None, size=3):
        self.workdir = workdir or tempfile.mkdtemp(prefix="fp-nemesis-etcd-")
        os.makedirs(self.workdir, exist_ok=True)
        self.members = [Member(i, self.workdir) for i in range(size)]
        self.initial_cluster = ",".join("%s=%s" % (m.name, m.peer_url) for m in self.members)
        for m in self.members:
            self._launch(m)
        self.wait_healthy()

    @property
    def endpoints(self):
        return [m.endpoint for m in self.members]

    def _launch(self, m):
        m._log = open(m.log_path, "ab")
        m.proc = subprocess.Popen(
            [ETCD, "--name", m.name, "--data-dir", m.data_dir,
             "--listen-client-urls", m.url, "--advertise-client-urls", m.url,
             "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
             "--initial-cluster", self.initial_cluster, "--initial-cluster-state", "new",
             "--initial-cluster-token", "fp-nemesis",
             "--heartbeat-interval", "50", "--election-timeout", "500",
             "--logger", "zap", "--log-outputs", "stderr"],
            stdin=subprocess.DEVNULL, stdout=m._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        m.paused = False
        _live.add(m.proc)

    def wait_healthy(self, timeout=START_TIMEOUT):
        """Every member answers /health true. Raises harness.HarnessError on timeout."""
        wait_for(lambda: all(m.healthy() for m in self.members), timeout, 0.1,
                 "every etcd member healthy")

    def all_healthy(self):
        return all(m.healthy() for m in self.members)

    def kill(self, i):
        m = self.members[i]
        _stop_process(m.proc, signal.SIGKILL)
        m._log.close()
        m.paused = False

    def restart(self, i):
        """Starts a killed member again on its ports and data directory; returns once it runs
        (not necessarily healthy: the caller waits for that as a state)."""
        m = self.members[i]
        if m.running():
            return
        self._launch(m)

    def pause(self, i):
        m = self.members[i]
        sigstop_and_wait(m.proc.pid)
        m.paused = True

    def resume(self, i):
        m = self.members[i]
        if m.running():
            os.kill(m.proc.pid, signal.SIGCONT)
        m.paused = False

    def ctl_env(self):
        return dict(os.environ, ETCDCTL_API="3", ETCDCTL_DIAL_TIMEOUT="2s")

    def etcdctl(self, *args, endpoints=None, timeout=15):
        eps = ",".join(endpoints or [m.endpoint for m in self.members
                                     if m.running() and not m.paused])
        return subprocess.run([ETCDCTL, "--endpoints", eps, "--command-timeout", "3s",
                               *map(str, args)], env=self.ctl_env(), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def leader(self):
        """The index of the leader as `etcdctl endpoint status` says, or None."""
        live = [m for m in self.members if m.running() and not m.paused]
        if not live:
            return None
        try:
            out = self.etcdctl("endpoint", "status", "-w", "json",
                               endpoints=[m.endpoint for m in live])
        except subprocess.TimeoutExpired:
            return None
        try:
            statuses = json.loads(out.stdout or "[]")
        except ValueError:
            return None
        for status in statuses:
            s = status.get("Status") or {}
            if s.get("leader") and s.get("header", {}).get("member_id") == s.get("leader"):
                for m in live:
                    if status.get("Endpoint", "").endswith(m.endpoint):
                        return m.index
        return None

    def get_prefix(self, prefix):
        """{key: value} under prefix, read with etcdctl (None when etcd did not answer)."""
        out = self.etcdctl("get", "--prefix", prefix, "-w", "json")
        if out.returncode != 0:
            return None
        doc = json.loads(out.stdout or "{}")
        return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
                for kv in doc.get("kvs") or []}

    def stop(self, remove=True):
        for m in self.members:
            if m.proc is not None:
                if m.running():
                    try:
                        os.kill(m.proc.pid, signal.SIGCONT)
                    except OSError:
                        pass
                _stop_process(m.proc)
                if m._log and not m._log.closed:
                    m._log.close()
        if remove:
            for m in self.members:
                shutil.rmtree(m.data_dir, ignore_errors=True)

