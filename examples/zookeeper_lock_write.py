#!/usr/bin/env python3
"""Take a ZooKeeper lock (kazoo's Lock recipe), then write through fencing-proxy with its token.

    python3 examples/zookeeper_lock_write.py --hosts 127.0.0.1:2181 --lock /locks/orders \\
        http://127.0.0.1:8080/orders/42 --data '{"status": "paid"}'

Client library: kazoo (Debian package python3-kazoo; `pip install kazoo` elsewhere). Its Lock is
the standard ZooKeeper lock recipe: each contender creates an EPHEMERAL|SEQUENCE znode under the
lock's path, the lowest sequence number holds the lock, the others wait for their predecessor to
go. The znode lives as long as the holder's session: if the holder stalls longer than the session
timeout (GC pause, VM freeze), the server expires the session, deletes the znode, and the next
contender holds the lock.

The fencing token is the lock znode's czxid: the zxid of the transaction that created it.
  - zxids are cluster-wide and only grow (the high 32 bits are the leader epoch, which a new
    leader raises; the low 32 bits count transactions within it), and the recipe grants the lock
    in creation order, so each holder's czxid is higher than every earlier holder's;
  - the sequence number in the znode's name is NOT a good token: it is a counter of the parent
    znode, so it restarts at 0 when the lock's parent is deleted and recreated (by an operator, a
    cleanup job, or automatically when it is a container znode, as Curator makes them) -- and
    every later holder would then be refused as stale. It is also a signed 32-bit number.
czxid goes backwards only if ZooKeeper's data is lost or restored from an old snapshot: then
repair the proxy with `fencing-proxy state set` (see docs/tokens.md).
"""

import argparse
import sys
import urllib.error
import urllib.request

from kazoo.client import KazooClient


def fencing_token(zk, lock):
    """The fencing token of an acquired kazoo Lock: its znode's czxid.

    Raises RuntimeError if the znode is already gone (the session expired since acquire()):
    then the lock is lost and there is no token to write with."""
    stat = zk.exists(lock.path + "/" + lock.node)
    if stat is None:
        raise RuntimeError("lock znode %s/%s is gone: the lock was lost" % (lock.path, lock.node))
    return stat.czxid


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
    parser.add_argument("--hosts", default="127.0.0.1:2181", help="ZooKeeper connect string")
    parser.add_argument("--lock", required=True, help="the lock's znode path, e.g. /locks/orders")
    parser.add_argument("--session-timeout", type=float, default=10.0, help="seconds")
    parser.add_argument("--timeout", type=float, default=30, help="seconds to wait for the lock")
    parser.add_argument("--data", default="", help="request body")
    parser.add_argument("--method", default="PUT")
    args = parser.parse_args()

    zk = KazooClient(hosts=args.hosts, timeout=args.session_timeout)
    zk.start(timeout=10)
    try:
        lock = zk.Lock(args.lock, "zookeeper_lock_write.py")
        lock.acquire(timeout=args.timeout)  # raises kazoo.exceptions.LockTimeout
        try:
            token = fencing_token(zk, lock)
            status, body = fenced_write(args.url, token, args.data.encode(), args.method)
        finally:
            lock.release()
    finally:
        zk.stop()
        zk.close()
    print("token %d -> %d %s" % (token, status, body.strip()))
    return 0 if 200 <= status < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
