#!/usr/bin/env python3
"""Take an etcd lock, then write through fencing-proxy with the lock's fencing token.

    python3 examples/etcd_lock_write.py --endpoint 127.0.0.1:2379 --lock orders-lock \\
        http://127.0.0.1:8080/orders/42 --data '{"status": "paid"}'

    # a route with `verify:` (the proxy asks etcd who holds the lock): send the create revision
    python3 examples/etcd_lock_write.py --token create-revision --lock /locks/orders \\
        http://127.0.0.1:8080/orders/42 --data '{"status": "paid"}'

Client library: python3-etcd3 (Debian package; `pip install etcd3` elsewhere), the common Python
client for the etcd v3 API. Its own `client.lock()` recipe is NOT used here, for three reasons:
  - it does not tell you a fencing token (the revision it got the lock at is thrown away);
  - `with client.lock(...)` enters the block even when acquiring timed out;
  - it locks the key /locks/NAME, while `etcdctl lock NAME`, Go's clientv3/concurrency.Mutex and
    jetcd use keys under NAME/: a Python client and an etcdctl client would not exclude each other.
EtcdLock below is etcd's standard recipe (the one `etcdctl lock` runs), written on the library's
primitives, so it interoperates with every other etcd client of the same lock name:
  1. grant a lease (TTL seconds) and keep it alive from a thread while you hold the lock;
  2. create the key NAME/<lease id in hex>, attached to the lease;
  3. the key with the lowest create revision under NAME/ holds the lock: wait until every older
     key is gone (released, or its lease expired);
  4. the fencing token is the revision at which you saw that you hold the lock -- the same number
     `etcdctl lock NAME -- cmd` gives cmd as ETCD_LOCK_REV.

Why that revision and not your key's create revision: both grow from holder to holder as long as
every client uses the same one, but they can be mixed safely only one way. A holder that waited
in the queue gets an ETCD_LOCK_REV above the create revisions of keys queued behind it, so a
client that sent its create revision after an etcdctl holder would be refused with 409. The
"revision when acquired" is above the deletion of the previous holder's key, whatever that holder
sent, so it is safe to mix with anything. (tests/integration/test_etcd.py shows both.)

A verified route (`verify: {service: ..., lock: ...}` in the proxy's route file) is the exception:
there the proxy raises a fence only to the number etcd itself reports for the lock's holder, the
create revision of the oldest key under NAME/, so on such a route every client must send its key's
create revision (`--token create-revision`, EtcdLock.create_revision). The revision at which the
lock was acquired is refused there with 409 token-not-verified whenever the client waited in the
queue (it is then above its key's create revision). Create revisions are safe on a verified route
because it only ever accepts the holder's own: no client can send a number from another scheme.

If this process stalls longer than the TTL (GC pause, VM freeze, SIGSTOP), the lease expires, the
next client gets the lock with a higher token, and fencing-proxy answers this process's late write
with 409 Conflict: that is the point of the token. Treat 409 as "I lost the lock": stop writing.
"""

import argparse
import sys
import threading
import time
import urllib.error
import urllib.request

import etcd3


class LockLost(RuntimeError):
    """The lease expired or was revoked: the lock is no longer held."""


class EtcdLock:
    """etcd's lock recipe (as `etcdctl lock`), with the fencing token of each acquisition.

        lock = EtcdLock(etcd3.client(host="127.0.0.1", port=2379), "orders-lock", ttl=10)
        token = lock.acquire(timeout=30)       # blocks; raises TimeoutError
        ...  send token with every write ...
        lock.release()

    or `with EtcdLock(client, name) as token: ...`.
    """

    def __init__(self, client, name, ttl=10):
        self.client = client
        self.prefix = name.rstrip("/") + "/"
        self.ttl = int(ttl)
        self.lease = self.key = None
        self.token = None            # the fencing token: revision at which the lock was acquired
        self.create_revision = None  # this key's create revision: the token of a verified route
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._keeper = None

    def acquire(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        tx = self.client.transactions
        self.lease = self.client.lease(self.ttl)
        self.key = "%s%x" % (self.prefix, self.lease.id)  # the key name etcdctl and Go use
        self.lost.clear()
        self._stop.clear()
        self._keeper = threading.Thread(target=self._keep_alive, daemon=True)
        self._keeper.start()
        try:
            self.client.transaction(compare=[tx.create(self.key) == 0],
                                    success=[tx.put(self.key, "", lease=self.lease)], failure=[])
            poll = 0.01
            while True:
                resp = self.client.get_prefix_response(self.prefix, sort_order="ascend",
                                                       sort_target="create")
                mine = [kv for kv in resp.kvs if kv.key == self.key.encode()]
                if not mine:
                    raise LockLost("lease %x ended while waiting for %s"
                                   % (self.lease.id, self.prefix))
                self.create_revision = mine[0].create_revision
                older = [kv for kv in resp.kvs if kv.create_revision < self.create_revision]
                if not older:
                    self.token = resp.header.revision
                    return self.token
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("%s still held after %.1fs" % (self.prefix, timeout))
                # Wait for the older keys to go, then look again. etcdctl and Go watch the
                # newest older key; this polls (10 ms, growing to 100 ms) because python3-etcd3
                # 0.12's watcher thread dies with "Channel closed" once the client is closed
                # (kragniz/python-etcd3#997).
                time.sleep(min(poll, left))
                poll = min(poll * 2, 0.1)
        except BaseException:
            self.release()
            raise

    def _keep_alive(self):
        while not self._stop.wait(max(self.ttl / 3.0, 0.2)):
            try:
                answers = self.lease.refresh()
                if not answers or answers[0].TTL <= 0:
                    self.lost.set()  # expired: someone else may hold the lock now
                    return
            except Exception:
                pass  # transient; the lease may still be alive: try again next period

    def is_held(self):
        """Whether our key still exists (a round trip; a paused process cannot ask in time,
        which is why the token, not this check, is what protects the resource)."""
        return (self.key is not None and not self.lost.is_set()
                and self.client.get(self.key)[0] is not None)

    def release(self):
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(5)
            self._keeper = None
        if self.lease is not None:
            try:
                self.lease.revoke()  # deletes the key: the next waiter gets the lock
            except Exception:
                pass  # already expired, or etcd unreachable: the TTL ends it anyway
            self.lease = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def fenced_write(url, token, data, method="PUT", header="X-Fencing-Token", timeout=10):
    """One write through fencing-proxy -> (status, body text). 409 means: you lost the lock."""
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={header: str(token)})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="where to write, through fencing-proxy")
    parser.add_argument("--endpoint", default="127.0.0.1:2379", help="etcd HOST:PORT")
    parser.add_argument("--lock", required=True, help="lock name (same as for etcdctl lock)")
    parser.add_argument("--ttl", type=int, default=10, help="lease TTL in seconds")
    parser.add_argument("--timeout", type=float, default=30, help="seconds to wait for the lock")
    parser.add_argument("--data", default="", help="request body")
    parser.add_argument("--method", default="PUT")
    parser.add_argument("--token", choices=("acquired", "create-revision"), default="acquired",
                        help="the number to send: the revision at which the lock was acquired "
                             "(default, as etcdctl's ETCD_LOCK_REV), or the lock key's create "
                             "revision, which a route with verify: requires")
    args = parser.parse_args()

    host, _, port = args.endpoint.rpartition(":")
    client = etcd3.client(host=host, port=int(port))
    try:
        lock = EtcdLock(client, args.lock, ttl=args.ttl)
        lock.acquire(timeout=args.timeout)
        try:
            token = lock.create_revision if args.token == "create-revision" else lock.token
            status, body = fenced_write(args.url, token, args.data.encode(), args.method)
        finally:
            lock.release()
    finally:
        client.close()
    print("token %d -> %d %s" % (token, status, body.strip()))
    return 0 if 200 <= status < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
