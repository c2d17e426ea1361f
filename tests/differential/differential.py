#!/usr/bin/env python3
"""The differential oracle of issue 23: the bytes fencing-proxy forwards, read by independent
HTTP/1.1 parsers, against what the proxy decided (tests/differential/README.md).

    differential.py --short              corpus, hostile, smuggling and response cases, pinned
                                         streams, 6,000 mutated requests (the ctest)
    differential.py --messages 1000000   the same, then the mutator until that many requests were
                                         forwarded and checked (scripts/differential.sh)

The last line is "N passed, N failed" (client connections without / with a disagreement); the
exit status is 1 when any failed, 2 when the run itself could not be made.

Environment: FP_BINARY, the fencing-proxy binary (default build/proxy/fencing-proxy in the
source tree); FP_DIFF_GOCACHE, a Go build cache kept between runs.
"""

import argparse
import collections
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))

import responses  # noqa: E402
import streams  # noqa: E402
from runner import Lane  # noqa: E402
from servers import Servers  # noqa: E402
from common import die_with_parent  # noqa: E402

PROGRESS_EVERY = 20.0  # seconds


def fixed_cases(worker, args):
    rc = responses.ResponseCases(b"w%d-f" % worker)
    cases = streams.pinned_cases()
    cases += streams.corpus_cases(lambda source, actions: rc.case(source, actions))
    cases += streams.hostile_cases()
    cases += streams.smuggle_cases()
    cases += rc.fixed()
    cases += [streams.request_case("stream %s" % path, open(path, "rb").read(), 9500 + i)
              for i, path in enumerate(args.stream or [])]
    if args.only:
        cases = [c for c in cases if args.only in c.source]
    return cases


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def worker_main(worker, args, ports, goparse, queue):
    lane = None
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so the lane's proxy is stopped too
    die_with_parent()  # and a killed run takes its workers (and so their proxies) with it
    try:
        workdir = os.path.join(args.workdir, "lane%d" % worker)
        os.makedirs(workdir, exist_ok=True)
        lane = Lane(args.binary, workdir, ports, goparse, worker, args.verbose)
        last = time.monotonic()

        def progress():
            nonlocal last
            if time.monotonic() - last >= PROGRESS_EVERY:
                last = time.monotonic()
                queue.put(("progress", worker, dict(lane.stats)))

        if not args.no_fixed:
            for case in fixed_cases(worker, args)[worker::args.workers]:
                lane.run_case(case)
                progress()
        # the mutator's streams depend on (seed, worker, stream number) only
        state = streams.MutatorState(args.seed * 7919 + worker, 100)
        rc = responses.ResponseCases(b"w%d-m" % worker)
        import random
        response_rng = random.Random(args.seed * 1000 + worker)
        generated = 0
        number = 0
        if args.messages:
            def more():
                return lane.stats["forwarded"] < args.messages / args.workers
        else:
            def more():
                return generated < args.mutated / args.workers
        while more():
            number += 1
            case, count = streams.mutated_case(state, number, worker)
            lane.run_case(case)
            generated += count
            if response_rng.random() * 100 < args.response_rate:
                lane.run_case(rc.mutated(response_rng, number))
            progress()
        lane.finish()
        queue.put(("done", worker, {"stats": dict(lane.stats), "per_parser": dict(lane.per_parser),
                                    "signatures": dict(lane.signatures), "failures": lane.failures,
                                    "notes": lane.notes, "generated": generated,
                                    "limits": dict(lane.limits), "limit_examples": lane.limit_examples}))
    except BaseException:
        if lane is not None:
            try:
                lane.finish()
            except BaseException:
                pass
        queue.put(("error", worker, traceback.format_exc()))


def save(failures, directory):
    os.makedirs(directory, exist_ok=True)
    for i, f in enumerate(failures):
        if f.parts is None:
            continue
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", f.source)[:80]
        with open(os.path.join(directory, "%04d-%s.bin" % (i, name)), "wb") as out:
            out.write(b"".join(p for _, p in f.parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", action="store_true", help="the CI run (default when --messages is not given)")
    ap.add_argument("--messages", type=int, default=0, help="run the mutator until this many requests were forwarded")
    ap.add_argument("--mutated", type=int, default=6000, help="mutated requests generated (without --messages)")
    ap.add_argument("--response-rate", type=float, default=5.0, help="mutated response cases per 100 mutated streams")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--binary", default=os.environ.get("FP_BINARY") or
                    os.path.join(SOURCE_DIR, "build", "proxy", "fencing-proxy"))
    ap.add_argument("--save", help="write every disagreeing client stream into this directory")
    ap.add_argument("--show", type=int, default=40, help="disagreements printed in full")
    ap.add_argument("--only", help="only the fixed cases whose source contains this text")
    ap.add_argument("--no-fixed", action="store_true", help="the mutator only")
    ap.add_argument("--stream", action="append", help="a raw client stream file to play too")
    ap.add_argument("--keep", action="store_true", help="keep the run's directory")
    ap.add_argument("--verbose", action="store_true", help="print every client connection, what the proxy "
                    "forwarded and answered")
    args = ap.parse_args()
    args.binary = os.path.abspath(args.binary)
    if not os.access(args.binary, os.X_OK):
        print("fencing-proxy binary not found at %s (build it, or set FP_BINARY)" % args.binary)
        print("0 passed, 1 failed")
        return 2
    started = time.monotonic()
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    args.workdir = tempfile.mkdtemp(prefix="fp-diff-")
    servers = Servers(args.workdir)
    try:
        try:
            ports = servers.start()
        except Exception as e:
            print("could not start the parsers: %s" % e)
            print("0 passed, 1 failed")
            return 2
        import compare
        compare.NODE_METHODS.update(m.encode() for m in servers.node_methods)
        print("binary %s; parsers %s; %d workers; seed %d; started in %.1f s" % (
            args.binary, ", ".join("%s:%s" % kv for kv in ports.items()), args.workers, args.seed,
            time.monotonic() - started), flush=True)
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        procs = [ctx.Process(target=worker_main, args=(w, args, ports, servers.goparse, queue), daemon=True)
                 for w in range(args.workers)]
        for p in procs:
            p.start()
        results, errors = {}, []
        progress = {}
        printed = 0.0
        while len(results) + len(errors) < len(procs):
            try:
                kind, worker, payload = queue.get(timeout=30)
            except Exception:
                if not any(p.is_alive() for p in procs):
                    errors.append("workers ended without a result")
                    break
                continue
            if kind == "progress":
                progress[worker] = payload
                if time.monotonic() - printed < PROGRESS_EVERY * 0.9:
                    continue
                printed = time.monotonic()
                total = collections.Counter()
                for s in progress.values():
                    total.update(s)
                elapsed = time.monotonic() - started
                print("  %.0f s: %d connections, %d requests forwarded (%.0f/s), %d failed" % (
                    elapsed, total["units"], total["forwarded"], total["forwarded"] / elapsed, total["failed"]),
                    flush=True)
            elif kind == "done":
                results[worker] = payload
            else:
                errors.append("worker %d: %s" % (worker, payload))
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    finally:
        servers.stop()
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    return report(args, results, errors, time.monotonic() - started)


def report(args, results, errors, elapsed):
    stats, per_parser, signatures = collections.Counter(), collections.Counter(), collections.Counter()
    failures, notes = [], []
    limits = collections.Counter()
    limit_examples = {}
    generated = 0
    for r in results.values():
        stats.update(r["stats"])
        per_parser.update(r["per_parser"])
        signatures.update(r["signatures"])
        failures += r["failures"]
        notes += r["notes"]
        generated += r["generated"]
        limits.update(r["limits"])
        for key, examples in r["limit_examples"].items():
            merged = limit_examples.setdefault(key, [])
            merged += [m for m in examples if m not in merged][:8 - len(merged)]
    for i, f in enumerate(failures):
        print()
        print(f.report(full=i < args.show))
    if notes:
        print()
        print("notes (not disagreements):")
        for n in notes[:50]:
            print("  " + n)
        if len(notes) > 50:
            print("  ... and %d more" % (len(notes) - 50))
    for e in errors:
        print()
        print("RUN ERROR " + e)
    print()
    print("%.0f s; %d client connections (%d mutated requests generated), %d requests forwarded to the "
          "backend, %d responses to clients" % (elapsed, stats["units"], generated, stats["forwarded"],
                                               stats["responses"]))
    print("read by each parser:")
    for name in sorted(per_parser):
        print("  %-18s %d" % (name, per_parser[name]))
    if limits:
        print("parser limits met (a request a parser cannot read by design; not disagreements):")
        for (server, limit), n in limits.most_common():
            key = "%s: %s" % (server, limit)
            print("  %6d  %s, e.g. %s" % (n, key, ", ".join(
                repr(m)[1:] for m in limit_examples.get(key, []))))
    if signatures:
        print("disagreements by class (count of occurrences):")
        for sig, n in signatures.most_common():
            print("  %6d  %s" % (n, sig))
    if args.save and failures:
        save(failures, args.save)
        print("disagreeing client streams written to %s" % args.save)
    failed = stats["failed"] + len(errors)
    if not errors and not stats["forwarded"]:
        print("RUN ERROR nothing was forwarded: the run checked nothing")
        failed += 1
    print("%d passed, %d failed" % (stats["passed"], failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
