#!/usr/bin/env python3
"""Take an etcd lock, then make gRPC calls through fencing-proxy with the lock's fencing token.

    python3 examples/grpc/lock_and_call.py --endpoint 127.0.0.1:2379 --lock orders-lock \\
        --target 127.0.0.1:8080 --order 42 --body 'paid'

The proxy's route file for it (the backend speaks gRPC, so HTTP/2 in the clear):

    backend: "http://127.0.0.1:50051"
    backend_protocol: h2c
    routes:
      - name: orders
        prefix: /orders.v1.OrderStore
        fence: orders

The token travels as the metadata `x-fencing-token` (the route file's token_header, lower-cased:
gRPC metadata keys are lower case). A call the proxy refuses never reaches the backend and comes
back with a gRPC status:

    ABORTED              the token is stale: a newer holder has written (trailing metadata
                         x-fencing-token-max says the newest). Treat it as "I lost the lock".
    INVALID_ARGUMENT     the token is malformed
    FAILED_PRECONDITION  no token was sent on a fenced route
    PERMISSION_DENIED    this client's certificate identity is not among the route's writers
    UNAVAILABLE          the proxy cannot promise the order now (its state, a lock service, the
                         shared store); the call did not reach the backend: try again later

The lock is etcd's recipe, as `etcdctl lock` takes it (EtcdLock of examples/etcd_lock_write.py).
The messages are orders.proto's (examples/grpc/orders.proto); to keep this example free of
generated code it sends them encoded by hand (a PutRequest is two length-delimited fields), so it
needs only python3-grpcio and python3-etcd3 (Debian packages).
"""

import argparse
import os
import sys

import etcd3
import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from etcd_lock_write import EtcdLock  # noqa: E402  (the lock recipe, shared with the HTTP example)

PUT = "/orders.v1.OrderStore/Put"


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def put_request(order_id, body):
    """orders.v1.PutRequest{order_id, body}, in protobuf's wire format."""
    order = order_id.encode()
    return (b"\x0a" + varint(len(order)) + order +    # field 1, length-delimited
            b"\x12" + varint(len(body)) + body)       # field 2, length-delimited


def fenced_put(channel, token, order_id, body, timeout=10.0):
    """One Put through fencing-proxy -> (status code, details, the newest token when ABORTED)."""
    call = channel.unary_unary(PUT)  # raw bytes in and out: no generated stubs
    try:
        call(put_request(order_id, body), metadata=[("x-fencing-token", str(token))], timeout=timeout)
        return grpc.StatusCode.OK, "", None
    except grpc.RpcError as error:
        newest = dict(error.trailing_metadata() or ()).get("x-fencing-token-max")
        return error.code(), error.details(), newest


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="127.0.0.1:2379", help="etcd HOST:PORT")
    parser.add_argument("--lock", required=True, help="lock name (same as for etcdctl lock)")
    parser.add_argument("--target", default="127.0.0.1:8080", help="fencing-proxy HOST:PORT")
    parser.add_argument("--order", default="42", help="the order to write")
    parser.add_argument("--body", default="paid", help="what to write")
    parser.add_argument("--ttl", type=int, default=10, help="lease TTL in seconds")
    args = parser.parse_args()

    host, _, port = args.endpoint.rpartition(":")
    client = etcd3.client(host=host, port=int(port))
    channel = grpc.insecure_channel(args.target)  # h2c with prior knowledge
    try:
        with EtcdLock(client, args.lock, ttl=args.ttl) as token:
            code, details, newest = fenced_put(channel, token, args.order, args.body.encode())
    finally:
        channel.close()
        client.close()
    if code == grpc.StatusCode.ABORTED:
        print("token %d -> ABORTED: the lock has moved on (newest token %s); stop writing" % (token, newest))
    else:
        print("token %d -> %s %s" % (token, code.name, details))
    return 0 if code == grpc.StatusCode.OK else 1


if __name__ == "__main__":
    sys.exit(main())
