#!/bin/sh
# Take an etcd lock with `etcdctl lock`, and write once through fencing-proxy with its token.
#
#   examples/etcd-lock-write.sh [--token acquired|create-revision] LOCK_NAME URL [BODY_FILE]
#   ETCDCTL_ENDPOINTS=10.0.0.5:2379 examples/etcd-lock-write.sh orders-lock \
#       http://127.0.0.1:8080/orders/42 order.json
#   examples/etcd-lock-write.sh --token create-revision /locks/orders \
#       http://127.0.0.1:8080/orders/42 order.json      # a route with verify:
#
# Environment: ETCDCTL_ENDPOINTS (default 127.0.0.1:2379), LOCK_TTL (lease TTL in seconds,
# default 10), METHOD (default PUT), TOKEN_HEADER (default X-Fencing-Token, as the proxy's
# token_header). Needs etcdctl (v3 API; Debian package etcd-client), curl and sed.
#
# How it works:
#   - `etcdctl lock NAME -- CMD...` waits for the lock (etcd's standard recipe: a key under NAME/
#     attached to a lease that etcdctl keeps alive; the oldest key holds the lock), runs CMD while
#     holding it, and releases it when CMD exits.
#   - CMD gets ETCD_LOCK_KEY (its lock key) and ETCD_LOCK_REV (the etcd revision at which it got
#     the lock) in its environment. ETCD_LOCK_REV grows with every grant of the lock: it is the
#     fencing token, sent in the X-Fencing-Token header.
#   - --token create-revision sends ETCD_LOCK_KEY's create revision instead, read under the lock
#     with `etcdctl get "$ETCD_LOCK_KEY" -w json`. A route with `verify:` accepts a new token only
#     if it is the create revision of the lock's holder key (that is what etcd can confirm), and
#     ETCD_LOCK_REV differs from it whenever etcdctl waited for the lock: on such a route every
#     client must send the create revision (docs/tokens.md, "Verified raises").
#   - If etcdctl stalls for longer than LOCK_TTL (or the lease is revoked), the lease expires and
#     another client gets the lock with a higher revision. etcdctl does not stop CMD when that
#     happens: CMD's next write goes out with the old token, and fencing-proxy refuses it with
#     409. curl --fail-with-body then exits non-zero, and so does this script (etcdctl exits 1
#     when CMD fails; it does not pass on CMD's own exit code, nor its standard input).
#   - Use the same lock name from every client of the resource (etcdctl, Go's
#     clientv3/concurrency, examples/etcd_lock_write.py all use this recipe), and a fence of its
#     own per lock in the proxy's routes (`fence:`).
set -eu

usage() {
  echo "usage: $0 [--token acquired|create-revision] LOCK_NAME URL [BODY_FILE]" >&2
  exit 2
}

token_kind=acquired
if [ "${1:-}" = --token ]; then
  [ $# -ge 2 ] || usage
  token_kind=$2
  shift 2
fi
case $token_kind in
  acquired|create-revision) ;;
  *) echo "$0: --token must be acquired or create-revision, not '$token_kind'" >&2; exit 2 ;;
esac
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  usage
fi

export ETCDCTL_API=3
export ETCDCTL_ENDPOINTS="${ETCDCTL_ENDPOINTS:-127.0.0.1:2379}"

# The single quotes are meant: $ETCD_LOCK_REV and $1.. expand in the inner shell, under the lock.
# etcdctl's JSON has one "create_revision" (of the one key asked for); no key (the lease ended
# already) leaves the token empty, and then nothing is sent.
# shellcheck disable=SC2016
exec etcdctl lock --ttl "${LOCK_TTL:-10}" "$1" -- \
  sh -c 'token=$ETCD_LOCK_REV
         if [ "$5" = create-revision ]; then
           token=$(etcdctl get "$ETCD_LOCK_KEY" -w json |
                   sed -n "s/.*\"create_revision\":\([0-9][0-9]*\).*/\1/p")
           if [ -z "$token" ]; then
             echo "etcd-lock-write: no create revision for $ETCD_LOCK_KEY: the lock was lost" >&2
             exit 1
           fi
         fi
         exec curl --silent --show-error --fail-with-body --max-time 30 \
           -X "$3" -H "$4: $token" --data-binary "@$2" "$1"' \
  etcd-lock-write "$2" "${3:-/dev/null}" "${METHOD:-PUT}" "${TOKEN_HEADER:-X-Fencing-Token}" \
  "$token_kind"
