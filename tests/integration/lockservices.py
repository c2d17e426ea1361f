"""Real lock services for the end-to-end tests: etcd and ZooKeeper on 127.0.0.1.

Each server runs from Debian's packages (etcd-server + etcd-client; zookeeper + a JRE) on free
127.0.0.1 ports with a temporary data directory, and is stopped (its directory removed) by stop(),
which the test modules call from their class cleanups; an atexit hook kills whatever is left. All
waits are bounded.

Client libraries are Debian's too: python3-etcd3 and python3-kazoo. They install into Debian's
/usr/lib/python3/dist-packages, which only /usr/bin/python3 searches; when the tests run under
another interpreter of the same major.minor version (a pyenv python3 found first on PATH, as on
the project's machines, and so chosen by CMake's FindPython3), that directory is appended to
sys.path (import_debian). An interpreter of another version does not get it: a C extension
(grpc) built for one version does not load in another.

Skipping: when a server or a client library is missing, missing_etcd() / missing_zookeeper() say
what is missing, and the test modules skip with that message. Set FP_REQUIRE_LOCK_SERVICES=1 (CI
should) to turn the skip into a failure, so a missing package cannot pass unnoticed.

Also here:
  Holder: a lock holder in its own process (this file run as a script), driven over stdin/stdout,
          that can be paused with SIGSTOP: the "GC pause" of the fencing story, for real.
  assert_tokens_never_decrease: the backend-side check that applied tokens per fence never
          decrease.
"""

import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.environ.get("FP_SOURCE_DIR") or os.path.join(HERE, "..", ".."))
EXAMPLES_DIR = os.path.join(SOURCE_DIR, "examples")
DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"
START_TIMEOUT = 30.0  # seconds for a server to answer (a JVM on a busy 2-core machine is slow)
STOP_TIMEOUT = 10.0

# One registry of started processes for the whole test run: harness stops them all in cleanup,
# and at exit if a test forgot.
import harness  # noqa: E402
from harness import _live, _stop_process, free_port as _free_port  # noqa: E402


class LockServiceError(RuntimeError):
    pass


def wait_for(predicate, timeout, what, interval=0.05):
    """harness.wait_for with this module's argument order."""
    return harness.wait_for(predicate, timeout, interval, what)


# ---------------------------------------------------------------------------------------------
# Client libraries from Debian packages

def _debian_python_matches():
    """True when Debian's dist-packages were built for this interpreter's major.minor."""
    return (sys.version_info[0] == 3 and os.path.isdir(DEBIAN_DIST_PACKAGES)
            and os.path.isdir("/usr/lib/python3.%d" % sys.version_info[1]))


def import_debian(name):
    """Imports a module, looking in Debian's dist-packages as well when this interpreter does
    not (see the module docstring). Returns the module, or None when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    if not _debian_python_matches():
        return None
    if DEBIAN_DIST_PACKAGES not in sys.path:
        sys.path.append(DEBIAN_DIST_PACKAGES)  # last: never shadows this interpreter's packages
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def child_env(extra=None):
    """Environment for a Python child process (an example, a Holder): PYTHONPATH gains the
    examples directory and, where import_debian would use it, Debian's dist-packages."""
    env = dict(os.environ)
    paths = [EXAMPLES_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _debian_python_matches():
        paths.append(DEBIAN_DIST_PACKAGES)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra or {})
    return env


def import_example(name):
    """A module from examples/ (the shipped client-side helpers), imported for the tests."""
    if EXAMPLES_DIR not in sys.path:
        sys.path.insert(0, EXAMPLES_DIR)
    return importlib.import_module(name)


def _require_or_skip(reason):
    """reason (str) when something is missing and skipping is allowed; raises when
    FP_REQUIRE_LOCK_SERVICES demands the services; None when nothing is missing."""
    if reason and os.environ.get("FP_REQUIRE_LOCK_SERVICES", "") not in ("", "0"):
        raise LockServiceError("FP_REQUIRE_LOCK_SERVICES is set but " + reason)
    return reason


def _which(name, *fallbacks):
    found = shutil.which(name)
    if found:
        return found
    for path in fallbacks:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


# ---------------------------------------------------------------------------------------------
# etcd

ETCD = _which("etcd", "/usr/bin/etcd")
ETCDCTL = _which("etcdctl", "/usr/bin/etcdctl")


def missing_etcd():
    """None when etcd, etcdctl and python3-etcd3 are all usable; else why not (a skip message)."""
    lacking = []
    if not ETCD:
        lacking.append("etcd (Debian package etcd-server)")
    if not ETCDCTL:
        lacking.append("etcdctl (Debian package etcd-client)")
    if import_debian("etcd3") is None:
        lacking.append("the Python module etcd3 (Debian package python3-etcd3, for python3.%d)"
                       % sys.version_info[1])
    if not shutil.which("curl"):
        lacking.append("curl (Debian package curl, for examples/etcd-lock-write.sh)")
    if not lacking:
        return None
    return _require_or_skip("missing: " + "; ".join(lacking) +
                            " — install them with: apt-get install etcd-server etcd-client "
                            "python3-etcd3 curl")


class EtcdServer:
    """A single-member etcd on 127.0.0.1 with a temporary data directory.

    Short raft timings (heartbeat 50 ms, election 500 ms) let leases be as short as 1 s (etcd's
    floor is 1.5 election timeouts), so a test can let a lease run out in a couple of seconds.
    """

    def __init__(self):
        if not ETCD:
            raise LockServiceError("etcd is not installed")
        self.workdir = tempfile.mkdtemp(prefix="fp-etcd-")
        self.client_port, self.peer_port = _free_port(), _free_port()
        self.endpoint = "127.0.0.1:%d" % self.client_port
        self.url = "http://" + self.endpoint
        client_url = self.url
        peer_url = "http://127.0.0.1:%d" % self.peer_port
        self.log_path = os.path.join(self.workdir, "etcd.log")
        self._log = None
        self._client_url, self._peer_url = client_url, peer_url
        self.started = time.monotonic()
        self._launch()
        self.startup_seconds = time.monotonic() - self.started

    def _launch(self, keep_on_failure=False):
        """Starts etcd on this server's ports and data directory and waits until it is healthy.
        The data directory may hold an earlier run's data (restart): etcd then ignores the
        --initial-cluster flags and carries on from it. keep_on_failure: a failed start leaves
        the data directory for another try."""
        self._log = open(self.log_path, "ab")
        self._launch_log_offset = self._log.tell()
        self.proc = subprocess.Popen(
            [ETCD, "--name", "fp-test", "--data-dir", os.path.join(self.workdir, "data"),
             "--listen-client-urls", self._client_url,
             "--advertise-client-urls", self._client_url,
             "--listen-peer-urls", self._peer_url,
             "--initial-advertise-peer-urls", self._peer_url,
             "--initial-cluster", "fp-test=" + self._peer_url, "--initial-cluster-state", "new",
             "--heartbeat-interval", "50", "--election-timeout", "500",
             "--logger", "zap", "--log-outputs", "stderr"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        _live.add(self.proc)
        try:
            wait_for(self._healthy, START_TIMEOUT, "etcd /health on %s" % self.endpoint)
            if self.proc.poll() is not None:
                raise LockServiceError("etcd exited with %s; log:\n%s"
                                       % (self.proc.returncode, self.log_tail()))
        except Exception:
            if keep_on_failure:
                _stop_process(self.proc, signal.SIGKILL)
                self._log.close()
            else:
                self.stop()
            raise

    def kill(self):
        """SIGKILL: the server is gone at once (clients see refused connections); its data
        directory stays, for restart()."""
        _stop_process(self.proc, signal.SIGKILL)
        self._log.close()

    def restart(self):
        """Starts the server again on the same port and data directory (after kill())."""
        if self.proc.poll() is None:
            raise LockServiceError("etcd is still running")
        for attempt in range(5):
            try:
                self._launch(keep_on_failure=True)
                return
            except LockServiceError:
                with open(self.log_path, "rb") as f:
                    f.seek(self._launch_log_offset)
                    this_try = f.read().decode("utf-8", "replace")
                if "address already in use" not in this_try or self.endpoint in this_try.split(
                        "address already in use")[0].rsplit("\n", 1)[-1] or attempt == 4:
                    raise
                # While etcd was down, another test took its peer port (a single member's peer
                # port serves nobody else): another one. The client port, which the clients
                # know, is what stays.
                self._peer_url = "http://127.0.0.1:%d" % _free_port()

    def pause(self):
        """SIGSTOP: connections stay open and accepted, nothing is answered (a hung server).
        Returns once every thread has stopped."""
        harness.sigstop_and_wait(self.proc.pid)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def _healthy(self):
        if self.proc.poll() is not None:
            return True
        try:
            with urllib.request.urlopen("http://%s/health" % self.endpoint, timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def log_tail(self, n=3000):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def client(self):
        """A python3-etcd3 client for this server (close() it when done)."""
        etcd3 = import_debian("etcd3")
        host, _, port = self.endpoint.rpartition(":")
        return etcd3.client(host=host, port=int(port), timeout=10)

    def ctl_env(self, extra=None):
        env = dict(os.environ, ETCDCTL_API="3", ETCDCTL_ENDPOINTS=self.endpoint,
                   ETCDCTL_DIAL_TIMEOUT="3s")
        env.update(extra or {})
        return env

    def etcdctl(self, *args, timeout=20, check=True):
        """Runs etcdctl against this server -> CompletedProcess (text)."""
        result = subprocess.run([ETCDCTL, *map(str, args)], env=self.ctl_env(),
                                capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            raise LockServiceError("etcdctl %s exited %d: %s" % (
                " ".join(map(str, args)), result.returncode, result.stderr.strip()))
        return result

    def stop(self):
        _stop_process(self.proc)
        self._log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# ZooKeeper

JAVA = _which("java", "/usr/bin/java")
ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"  # Debian's; its manifest lists its dependencies


def missing_zookeeper():
    """None when java, ZooKeeper's jar and python3-kazoo are usable; else why not."""
    lacking = []
    if not JAVA:
        lacking.append("java (Debian package default-jre-headless)")
    if not os.path.isfile(ZOOKEEPER_JAR):
        lacking.append("%s (Debian package zookeeper)" % ZOOKEEPER_JAR)
    if import_debian("kazoo") is None:
        lacking.append("the Python module kazoo (Debian package python3-kazoo, for python3.%d)"
                       % sys.version_info[1])
    if not lacking:
        return None
    return _require_or_skip("missing: " + "; ".join(lacking) +
                            " — install them with: apt-get install zookeeper "
                            "default-jre-headless python3-kazoo")


class ZooKeeperServer:
    """A standalone ZooKeeper (org.apache.zookeeper.server.ZooKeeperServerMain) on 127.0.0.1.

    tickTime 200 ms lets sessions be as short as 400 ms (2 ticks) so a test can let one expire
    quickly; the AdminServer (Jetty on :8080 by default) is off; the JVM is kept small for a
    2-core machine. Readiness is the `ruok` four-letter word answering `imok`.
    """

    TICK_MS = 200

    def __init__(self):
        if not JAVA or not os.path.isfile(ZOOKEEPER_JAR):
            raise LockServiceError("ZooKeeper or java is not installed")
        self.workdir = tempfile.mkdtemp(prefix="fp-zookeeper-")
        self.port = _free_port()
        self.hosts = "127.0.0.1:%d" % self.port
        data = os.path.join(self.workdir, "data")
        os.makedirs(data)
        self.config_path = os.path.join(self.workdir, "zoo.cfg")
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write("\n".join([
                "tickTime=%d" % self.TICK_MS,
                "dataDir=" + data,
                "clientPort=%d" % self.port,
                "clientPortAddress=127.0.0.1",
                "maxClientCnxns=0",
                "minSessionTimeout=%d" % (2 * self.TICK_MS),
                "maxSessionTimeout=60000",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,srvr",
                "forceSync=no",  # test data only: no fsync per transaction
                ""]))
        self.log_path = os.path.join(self.workdir, "zookeeper.log")
        self._log = None
        self.started = time.monotonic()
        self._launch()
        self.startup_seconds = time.monotonic() - self.started

    def _launch(self):
        """Starts the JVM on this server's port and data directory (an earlier run's data is
        kept: sessions and znodes survive a restart) and waits for `ruok`."""
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [JAVA, "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-XX:ActiveProcessorCount=2", "-Djava.net.preferIPv4Stack=true",
             "-Dzookeeper.admin.enableServer=false",
             "-cp", ZOOKEEPER_JAR, "org.apache.zookeeper.server.ZooKeeperServerMain",
             self.config_path],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            cwd=self.workdir, start_new_session=True)
        _live.add(self.proc)
        try:
            wait_for(lambda: self.proc.poll() is not None or self.four_letter("ruok") == "imok",
                      START_TIMEOUT, "ZooKeeper to answer ruok on %s" % self.hosts, 0.1)
            if self.proc.poll() is not None:
                raise LockServiceError("ZooKeeper exited with %s; output:\n%s"
                                       % (self.proc.returncode, self.log_tail()))
        except Exception:
            self.stop()
            raise

    def kill(self):
        """SIGKILL: the server is gone at once; its data directory stays, for restart()."""
        _stop_process(self.proc, signal.SIGKILL)
        self._log.close()

    def restart(self):
        """Starts the server again on the same port and data directory (after kill())."""
        if self.proc.poll() is None:
            raise LockServiceError("ZooKeeper is still running")
        self._launch()

    def pause(self):
        """SIGSTOP: connections stay open and accepted, nothing is answered (a hung server).
        Returns once every thread has stopped."""
        harness.sigstop_and_wait(self.proc.pid)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def four_letter(self, word):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(word.encode())
                chunks = []
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    chunks.append(chunk)
                return b"".join(chunks).decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n=3000):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def client(self, session_timeout=10.0, **kwargs):
        """A started kazoo client (stop() and close() it when done)."""
        kazoo_client = import_debian("kazoo.client")
        zk = kazoo_client.KazooClient(hosts=self.hosts, timeout=session_timeout, **kwargs)
        zk.start(timeout=10)
        return zk

    def expire_session(self, zk):
        """Ends zk's session on the server as an expiry would (its ephemeral znodes go), without
        zk doing anything: a second connection attaches to the same session id and password and
        closes it. Zk itself learns of it only on its next exchange with the server."""
        kazoo_client = import_debian("kazoo.client")
        session_id, password = zk.client_id
        killer = kazoo_client.KazooClient(hosts=self.hosts, client_id=(session_id, password))
        killer.start(timeout=10)
        killer.stop()
        killer.close()

    def stop(self):
        _stop_process(self.proc)
        self._log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Backend-side check

def assert_tokens_never_decrease(test, records, what):
    """The applied writes of one fence (backend records, in the order the backend applied them)
    carry tokens that never decrease. Returns the list of tokens."""
    records = sorted(records, key=lambda r: r["seq"])
    tokens = [int(r["token"]) for r in records]
    for a, b in zip(records, records[1:]):
        test.assertLessEqual(int(a["token"]), int(b["token"]),
                             "%s: the backend applied token %s (seq %d) after token %s (seq %d): "
                             "applied tokens per fence must never decrease"
                             % (what, b["token"], b["seq"], a["token"], a["seq"]))
    return tokens


# ---------------------------------------------------------------------------------------------
# A lock holder in its own process, to be paused for real (SIGSTOP) while it holds the lock.

class Holder:
    """Runs this file as `holder etcd|zookeeper ...` in a child process.

    The child acquires the lock (etcd: examples/etcd_lock_write.EtcdLock, whose lease is kept
    alive by a thread; ZooKeeper: kazoo's Lock recipe, the session kept by kazoo's thread), takes
    the lock's fencing token, and then writes through the proxy on request: write() sends a PUT
    with that token and returns the status. pause() stops the whole process (SIGSTOP: every
    thread, keep-alives included, as in a long GC pause or a VM freeze); resume() continues it.
    The child never checks whether it still holds the lock before writing, as a paused process
    cannot: it woke up and carries on.

    token is the number the holder writes with: etcd, the revision at which it got the lock
    (EtcdLock.token); ZooKeeper, its znode's czxid. create_revision (etcd only; None for
    ZooKeeper) is its lock key's create revision, the number a verified route checks; write()
    sends another number when given one.
    """

    def __init__(self, kind, server_address, lock_name, proxy_port, ttl):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "holder", kind, server_address,
             lock_name, str(proxy_port), str(ttl)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=child_env(), start_new_session=True)
        _live.add(self.proc)
        try:
            hello = self._read(30.0)
            self.token = int(hello["token"])
            created = hello.get("create_revision")
            self.create_revision = None if created is None else int(created)
        except Exception:
            self.stop()
            raise

    def _read(self, timeout):
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise LockServiceError("holder process gave no answer within %.0fs; stderr: %s"
                                       % (timeout, self._stderr()))
            chunk = os.read(self.proc.stdout.fileno(), 1)
            if not chunk:
                raise LockServiceError("holder process exited (%s); stderr: %s"
                                       % (self.proc.poll(), self._stderr()))
            line += chunk
        answer = json.loads(line)
        if "error" in answer:
            raise LockServiceError("holder process: %s" % answer["error"])
        return answer

    def _stderr(self):
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")[-3000:]

    def _command(self, command, timeout=20.0):
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        self.proc.stdin.flush()
        return self._read(timeout)

    def write(self, path, body, token=None):
        """PUT path with the holder's token (or token, when given) -> (status, body text)."""
        command = {"op": "write", "path": path, "body": body}
        if token is not None:
            command["token"] = int(token)
        answer = self._command(command)
        return answer["status"], answer["body"]

    def holds(self):
        """Whether the holder's lock key / znode still exists (asked from the child)."""
        return self._command({"op": "holds"})["holds"]

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill9(self):
        """SIGKILL: the holder dies without releasing; its lease or session runs out by itself."""
        _stop_process(self.proc, signal.SIGKILL)

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        _stop_process(self.proc)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


def _holder_main(kind, server_address, lock_name, proxy_port, ttl):
    import http.client

    def say(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    if kind == "etcd":
        etcd3 = import_debian("etcd3")
        from etcd_lock_write import EtcdLock
        host, _, port = server_address.rpartition(":")
        client = etcd3.client(host=host, port=int(port), timeout=10)
        lock = EtcdLock(client, lock_name, ttl=int(ttl))
        lock.acquire(timeout=20)
        token = lock.token
        create_revision = lock.create_revision
        holds = lock.is_held
    else:
        from kazoo.client import KazooClient
        from zookeeper_lock_write import fencing_token
        zk = KazooClient(hosts=server_address, timeout=float(ttl))
        zk.start(timeout=10)
        lock = zk.Lock(lock_name, "paused-holder")
        if not lock.acquire(timeout=20):
            say({"error": "lock not acquired within 20s"})
            return 1
        token = fencing_token(zk, lock)
        create_revision = None
        node = lock.path + "/" + lock.node

        def holds():
            try:
                return zk.exists(node) is not None
            except Exception:
                return False
    say({"token": token, "create_revision": create_revision})
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "write":
            conn = http.client.HTTPConnection("127.0.0.1", int(proxy_port), timeout=10)
            try:
                conn.request("PUT", command["path"], body=command["body"].encode(),
                             headers={"X-Fencing-Token": str(command.get("token", token))})
                resp = conn.getresponse()
                say({"status": resp.status, "body": resp.read().decode(errors="replace")})
            finally:
                conn.close()
        elif command["op"] == "holds":
            say({"holds": bool(holds())})
        else:
            break
    try:  # a clean goodbye; after an expiry there is nothing left to release
        if kind == "etcd":
            lock.release()
            client.close()
        else:
            lock.release()
            zk.stop()
            zk.close()
    except Exception:
        pass
    return 0


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "holder":
    sys.exit(_holder_main(*sys.argv[2:]))


class EtcdTestCase(harness.ProxyTestCase):
    """A ProxyTestCase with one etcd server for the whole class (self.etcd), started again
    before a test if an earlier one killed it and failed before restarting it."""

    @classmethod
    def setUpClass(cls):
        cls.etcd = EtcdServer()
        cls.addClassCleanup(cls.etcd.stop)
        print("\n  etcd %s up in %.2fs" % (cls.etcd.endpoint, cls.etcd.startup_seconds))

    def setUp(self):
        super().setUp()
        if self.etcd.proc.poll() is not None:
            self.etcd.restart()

