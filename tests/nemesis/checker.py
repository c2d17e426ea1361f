"""The nemesis run's checker: pure functions over what the recording backend applied, what the
clients were answered, and the maxima seen in etcd and at the proxies.

A "fence" here is what one lock's writes share: "orders" (route /orders) or "objects/<key>"
(the keyed route /objects, one key per lock). Paths are /orders/<proxy>/<id> and
/objects/<key>/<proxy>/<id>; <id> is unique per client attempt.

Violations (each a dict with "kind" and a readable "detail"):
  stale          the backend started a write whose token is lower than one it had already
                 started for the same fence
  overlap        a write with a higher token started while one with a lower token was still
                 being processed (the raise did not wait for it)
  duplicate      one client attempt (id) reached the backend more than once (at most once)
  refused_applied  an attempt answered 409, 428 or 503 reached the backend anyway
  lost_ack       an attempt answered 200 never reached the backend
  acked_max      a token answered 200 is above the fence's max at the end (a proxy's /fences
                 or etcd's max key): an acknowledged raise was lost
  refused_max    a token became a fence's max (seen in etcd's max keys, through a watch, or in a
                 proxy's /fences) although every attempt with it sent before that moment was
                 answered 409 or 503: a refused raise committed later
  max_decreased  etcd's max key of a fence went down (in revision order, from the watch), or a
                 proxy's /fences showed a lower max than before

stale and overlap are "excused" (reported apart, not failing the run) when the lower-token write
went through a proxy that was SIGSTOPped for longer than member_ttl between the client's send
and the backend's start: the contract's one timing assumption (a proxy paused that long between
its last check and its write can deliver one stale write).

refused_max is excused (reported apart) when one of the refusals was answered once the token was
the max, in one of the two shapes docs/design-notes.md "Refused tokens" allows: a raise's 503
fence-store-unavailable that waited at least 1 s (it committed as its proxy's membership lapsed,
and the membership was not renewed by the request's last word), or a 409 for a fence whose max
later went higher (a newer holder's raise stood in etcd before the proxy was back). Every other
refused_max fails the run: a refusal before the token became the max never is.
"""

import heapq


def parse_path(path):
    """-> (fence, proxy, id) or None for a path the clients do not make."""
    parts = path.strip("/").split("/")
    if len(parts) == 3 and parts[0] == "orders":
        return "orders", parts[1], parts[2]
    if len(parts) == 4 and parts[0] == "objects":
        return "objects/" + parts[1], parts[2], parts[3]
    return None


def fence_of_lock(lock):
    return "orders" if lock == "orders" else "objects/" + lock


def _excused(write_id, proxy, outcomes_by_id, pauses, member_ttl, backend_start):
    o = outcomes_by_id.get(write_id)
    sent = o["sent"] if o else backend_start - 60.0
    for p in pauses:
        if p["proxy"] != proxy:
            continue
        if p["end"] - p["start"] <= member_ttl:
            continue
        if p["start"] < backend_start and p["end"] > sent:
            return True
    return False


def check(records, outcomes, max_seen, final_maxima, pauses, member_ttl):
    """records: backend log entries (path, token, start, end, seq); outcomes: client "write"
    entries; max_seen: [(t, source, fence, token, etcd mod_revision or None)] every time a max
    was observed;
    final_maxima: {source: {fence: max}} read at the end; pauses: [{"proxy", "start", "end"}].
    -> (violations, excused, stats)."""
    violations, excused = [], []
    outcomes_by_id = {o["id"]: o for o in outcomes}
    by_fence = {}
    ids = {}
    for r in records:
        parsed = parse_path(r["path"])
        if parsed is None:
            continue
        fence, proxy, rid = parsed
        rec = {"fence": fence, "proxy": proxy, "id": rid, "token": int(r["token"] or 0),
               "start": r["start"], "end": r["end"], "seq": r["seq"]}
        by_fence.setdefault(fence, []).append(rec)
        ids.setdefault(rid, []).append(rec)

    def report(kind, detail, low=None):
        v = {"kind": kind, "detail": detail}
        if low is not None and _excused(low["id"], low["proxy"], outcomes_by_id, pauses,
                                        member_ttl, low["start"]):
            excused.append(v)
        else:
            violations.append(v)

    # Order: stale (a lower token started after a higher one had started) and overlap (a higher
    # token started while a lower one was still at the backend).
    for fence, recs in by_fence.items():
        recs.sort(key=lambda r: (r["start"], r["seq"]))
        highest = None
        active = []  # heap of (end, seq, rec) still running at the current start
        for r in recs:
            if highest is not None and r["token"] < highest["token"]:
                report("stale", "%s: token %d (%s via %s) started %.3fs after token %d (%s via %s)"
                       " had started" % (fence, r["token"], r["id"], r["proxy"],
                                          r["start"] - highest["start"], highest["token"],
                                          highest["id"], highest["proxy"]), low=r)
            while active and active[0][0] <= r["start"]:
                heapq.heappop(active)
            for _, _, a in active:
                if a["token"] < r["token"]:
                    report("overlap", "%s: token %d (%s via %s) started while token %d (%s via "
                           "%s) was still at the backend (%.3fs before it ended)"
                           % (fence, r["token"], r["id"], r["proxy"], a["token"], a["id"],
                              a["proxy"], a["end"] - r["start"]), low=a)
            heapq.heappush(active, (r["end"], r["seq"], r))
            if highest is None or r["token"] > highest["token"]:
                highest = r

    # At most once; refused attempts never applied; acknowledged attempts applied.
    for rid, recs in ids.items():
        if len(recs) > 1:
            violations.append({"kind": "duplicate", "detail": "%s reached the backend %d times "
                               "(seq %s)" % (rid, len(recs), [r["seq"] for r in recs])})
    for o in outcomes:
        applied = o["id"] in ids
        if o["status"] in (409, 428, 503) and applied:
            violations.append({"kind": "refused_applied", "detail": "%s (token %d via %s) was "
                               "answered %d %s but reached the backend"
                               % (o["id"], o["token"], o["proxy"], o["status"], o["ptype"])})
        if o["status"] == 200 and not applied:
            violations.append({"kind": "lost_ack", "detail": "%s (token %d via %s) was answered "
                               "200 but never reached the backend" % (o["id"], o["token"],
                                                                        o["proxy"])})

    # Acknowledged maxima.
    acked = {}
    for o in outcomes:
        if o["status"] == 200:
            f = fence_of_lock(o["lock"])
            acked[f] = max(acked.get(f, 0), o["token"])
    for source, maxima in sorted(final_maxima.items()):
        for fence, token in sorted(acked.items()):
            have = maxima.get(fence, 0) or 0
            if have < token:
                violations.append({"kind": "acked_max", "detail": "%s: token %d was answered 200"
                                   " but %s's max at the end is %d" % (fence, token, source,
                                                                       have)})

    # A refused token never becomes the max: the first moment each (fence, token) was seen as a
    # max must come after an attempt with that token that was not refused (200, another status,
    # or no answer) had been sent.
    attempts = {}
    for o in outcomes:
        attempts.setdefault((fence_of_lock(o["lock"]), o["token"]), []).append(o)
    first_seen = {}
    for t, source, fence, token, _ in max_seen:
        if not token:
            continue
        key = (fence, token)
        if key not in first_seen or t < first_seen[key][0]:
            first_seen[key] = (t, source)
    for (fence, token), (t, source) in sorted(first_seen.items()):
        tries = attempts.get((fence, token), [])
        ok = [o for o in tries if o["sent"] <= t and o["status"] not in (409, 503, 428)]
        if not ok:
            answers = [(o["status"], o["ptype"], o["proxy"], round(o["sent"] - t, 2),
                        round(o["done"] - t, 2)) for o in tries]
            v = {"kind": "refused_max", "detail": "%s: token %d was seen as the max by %s, but "
                 "every attempt with it sent before then was refused, or none was sent: (status, "
                 "type, proxy, sent - seen, answered - seen) %s" % (fence, token, source,
                                                                   answers[:6])}
            higher = any(f == fence and tk > token for (f, tk) in first_seen)
            after = [o for o in tries if o["done"] >= t - 1.0 and (
                (o["status"] == 503 and o["ptype"] == "fence-store-unavailable" and o["sent"] <= t - 1.0)
                or (o["status"] == 409 and higher))]
            (excused if after else violations).append(v)

    # A max never decreases: etcd's max key in revision order (from the watch), each proxy's
    # /fences in time order (across its restarts too: it loads the max from etcd).
    series = {}
    for t, source, fence, token, revision in max_seen:
        if source.endswith("(end)"):
            continue
        order = revision if revision is not None else t
        series.setdefault((source, fence), []).append((order, t, token))
    for (source, fence), points in sorted(series.items()):
        points.sort()
        top = None
        for order, t, token in points:
            if top is not None and token < top[2]:
                violations.append({"kind": "max_decreased", "detail": "%s: %s saw the max go "
                                   "from %d to %d (%s)" % (
                                       fence, source, top[2], token,
                                       "revisions %d -> %d" % (top[0], order)
                                       if source == "etcd watch" else
                                       "%.2fs apart" % (t - top[1]))})
            if top is None or token > top[2]:
                top = (order, t, token)

    stats = {"records": sum(len(v) for v in by_fence.values()),
             "fences": {f: len(v) for f, v in sorted(by_fence.items())},
             "acked_max": acked, "max_observations": len(max_seen)}
    return violations, excused, stats


def findings(outcomes, shared):
    """Contract deviations that are not safety violations (reported, not failing the run):
    with shared fences, every refused raise is 503 fence-store-unavailable, whatever the cause.
    -> {description: [example details]}"""
    out = {}
    if not shared:
        return out
    for o in outcomes:
        if o["status"] == 503 and o.get("ptype") != "fence-store-unavailable":
            key = "503 with problem type %r instead of fence-store-unavailable" % o.get("ptype")
            out.setdefault(key, []).append("%s token %d via %s after %.2fs: %s" % (
                o["kind"], o["token"], o["proxy"], o["done"] - o["sent"], o.get("detail")))
    return out


def outages(outcomes, faults, top=8):
    """Per fence, the periods in which holders' raises were refused: from a raise answered 503
    to the next raise answered 200 on the same fence (or the last 503, if none came). The
    longest `top`, each with the faults that began meanwhile."""
    by_fence = {}
    for o in outcomes:
        if o["kind"] == "raise" and o["status"] in (200, 503):
            by_fence.setdefault(fence_of_lock(o["lock"]), []).append(o)
    spans = []
    for fence, tries in by_fence.items():
        tries.sort(key=lambda o: o["sent"])
        span = None
        for o in tries:
            if o["status"] == 503:
                if span is None:
                    span = {"fence": fence, "start": o["sent"], "end": o["done"], "refused": 0}
                span["refused"] += 1
                span["end"] = max(span["end"], o["done"])
            elif span is not None:  # a 200
                span["end"] = o["done"]
                spans.append(span)
                span = None
        if span is not None:
            spans.append(span)
    for span in spans:
        span["seconds"] = span["end"] - span["start"]
        span["faults"] = ["%s %s" % (f["kind"], f["target"]) for f in faults
                          if span["start"] - 1.0 <= f["start"] <= span["end"]]
    spans.sort(key=lambda s: -s["seconds"])
    return spans[:top]


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def availability(faults, outcomes, run_end):
    """Per fault kind: how long raises and equal-token writes were answered 503 after each fault
    began. A fault's window runs from its start to the next fault's start (the last one's: 3 s
    after it recovered);
    for each class (raise, equal) the refusal time of one fault is the end of the last 503
    answer to an attempt sent in the window, minus the fault's start (0 when none was refused).
    -> {kind: {"n", "raise": [seconds per fault], "equal": [...], "raise_503", "equal_503",
               "no_answer", "ok"}}"""
    faults = sorted(faults, key=lambda f: f["start"])
    writes = sorted((o for o in outcomes if o["kind"] in ("raise", "equal")),
                    key=lambda o: o["sent"])
    table = {}
    for i, f in enumerate(faults):
        if i + 1 < len(faults):
            end = faults[i + 1]["start"]
        else:  # the last one: until it recovered (or healed) and a little more
            end = min(run_end, (f.get("recovered") or f["end"]) + 3.0)
        row = table.setdefault(f["kind"], {"n": 0, "raise": [], "equal": [], "raise_503": 0,
                                           "equal_503": 0, "no_answer": 0, "ok": 0,
                                           "seconds": 0.0})
        row["n"] += 1
        row["seconds"] += f["end"] - f["start"]
        last = {"raise": None, "equal": None}
        for o in writes:
            if o["sent"] < f["start"]:
                continue
            if o["sent"] >= end:
                break
            if o["status"] == 503:
                row[o["kind"] + "_503"] += 1
                last[o["kind"]] = max(last[o["kind"]] or 0, o["done"] - f["start"])
            elif o["status"] is None:
                row["no_answer"] += 1
            elif o["status"] == 200:
                row["ok"] += 1
        for c in ("raise", "equal"):
            row[c].append(last[c] or 0.0)
    return table


def availability_markdown(table):
    lines = ["| fault kind | faults | fault s (mean) | raise 503s | raise refused p50 / max (s) "
             "| equal 503s | equal refused p50 / max (s) | no answer | 200s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind in sorted(table):
        row = table[kind]
        fmt = lambda xs: "%.2f / %.2f" % (percentile(xs, 0.5), max(xs)) if xs else "-"
        lines.append("| %s | %d | %.1f | %d | %s | %d | %s | %d | %d |" % (
            kind, row["n"], row["seconds"] / max(1, row["n"]), row["raise_503"], fmt(row["raise"]),
            row["equal_503"], fmt(row["equal"]), row["no_answer"], row["ok"]))
    return "\n".join(lines)
