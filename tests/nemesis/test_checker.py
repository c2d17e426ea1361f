"""The nemesis checker on hand-made histories: each violation kind is found, a clean history
passes, the timing assumption excuses what it should (python3 -m unittest test_checker, from
tests/nemesis; no processes are started)."""

import unittest

import checker


def rec(seq, path, token, start, end):
    return {"seq": seq, "path": path, "token": str(token), "start": start, "end": end}


def out(rid, token, status, sent, done, proxy="A", lock="orders", kind="raise", ptype=None):
    return {"id": rid, "lock": lock, "token": token, "status": status, "sent": sent, "done": done,
            "proxy": proxy, "kind": kind, "ptype": ptype}


def kinds(violations):
    return sorted(v["kind"] for v in violations)


class CheckerTest(unittest.TestCase):

    def run_check(self, records, outcomes, max_seen=(), final=None, pauses=()):
        return checker.check(records, outcomes, list(max_seen), final or {}, list(pauses), 3)

    def test_clean_history(self):
        records = [rec(1, "/orders/A/a1", 10, 1.0, 1.5), rec(2, "/orders/B/a2", 10, 1.2, 1.4),
                   rec(3, "/orders/C/b1", 12, 1.6, 1.7), rec(4, "/objects/k1/A/c1", 5, 1.0, 2.0)]
        outcomes = [out("a1", 10, 200, 0.9, 1.6), out("a2", 10, 200, 1.1, 1.5, kind="equal"),
                    out("b1", 12, 200, 1.55, 1.8), out("c1", 5, 200, 0.9, 2.1, lock="k1"),
                    out("d1", 9, 409, 2.0, 2.01, kind="late")]
        final = {"etcd": {"orders": 12, "objects/k1": 5}}
        v, e, stats = self.run_check(records, outcomes, [(1.55, "etcd", "orders", 10, None),
                                                         (1.75, "etcd", "orders", 12, None)],
                                 final)
        self.assertEqual(v, [])
        self.assertEqual(e, [])
        self.assertEqual(stats["records"], 4)

    def test_stale_and_overlap(self):
        records = [rec(1, "/orders/A/a", 10, 1.0, 2.0), rec(2, "/orders/B/b", 12, 1.5, 1.6),
                   rec(3, "/orders/C/c", 11, 1.7, 1.8)]
        outcomes = [out("a", 10, 200, 0.9, 2.1), out("b", 12, 200, 1.4, 1.7),
                    out("c", 11, 200, 1.6, 1.9)]
        v, _, _ = self.run_check(records, outcomes)
        # 12 started while 10 ran; 11 started after 12 had started (and while 10 ran).
        self.assertEqual(kinds(v), ["overlap", "overlap", "stale"])

    def test_equal_tokens_may_overlap(self):
        records = [rec(1, "/orders/A/a", 10, 1.0, 2.0), rec(2, "/orders/B/b", 10, 1.5, 1.6)]
        outcomes = [out("a", 10, 200, 0.9, 2.1), out("b", 10, 200, 1.4, 1.7)]
        self.assertEqual(self.run_check(records, outcomes)[0], [])

    def test_delivery(self):
        records = [rec(1, "/orders/A/a", 10, 1.0, 1.1), rec(2, "/orders/A/a", 10, 1.2, 1.3),
                   rec(3, "/orders/B/r", 10, 1.4, 1.5)]
        outcomes = [out("a", 10, 200, 0.9, 1.4), out("r", 10, 503, 1.3, 1.6),
                    out("lost", 10, 200, 1.7, 1.8)]
        v, _, _ = self.run_check(records, outcomes)
        self.assertEqual(kinds(v), ["duplicate", "lost_ack", "refused_applied"])

    def test_acknowledged_max_lost(self):
        records = [rec(1, "/orders/A/a", 10, 1.0, 1.1)]
        outcomes = [out("a", 10, 200, 0.9, 1.2)]
        v, _, _ = self.run_check(records, outcomes, final={"proxy B": {"orders": 9},
                                                            "etcd": {"orders": 10}})
        self.assertEqual(kinds(v), ["acked_max"])
        self.assertIn("proxy B", v[0]["detail"])

    def test_refused_token_becomes_max(self):
        outcomes = [out("a", 10, 503, 1.0, 2.0), out("b", 10, 200, 3.0, 3.1, kind="raise")]
        records = [rec(1, "/orders/A/b", 10, 3.05, 3.06)]
        # Seen as the max at 2.5, after the 503 and before the retry was sent: a violation.
        v, _, _ = self.run_check(records, outcomes, [(2.5, "etcd watch", "orders", 10, 7)])
        self.assertEqual(kinds(v), ["refused_max"])
        # Seen only after the retry was sent: not one (the retry may have raised it).
        v, _, _ = self.run_check(records, outcomes, [(3.08, "etcd watch", "orders", 10, 7)])
        self.assertEqual(v, [])
        # A 409'd token that shows up as the max at the end.
        v, _, _ = self.run_check([], [out("c", 7, 409, 1.0, 1.1)],
                                 [(9.0, "etcd (end)", "orders", 7, None)])
        self.assertEqual(kinds(v), ["refused_max"])

    def test_a_raise_committed_as_its_proxys_membership_lapsed_is_excused(self):
        # The raise waited 6 s, was answered 503 fence-store-unavailable 0.2 s before its token
        # was seen as the max: committed while its proxy could not forward it. Reported apart.
        lapsed = out("a", 10, 503, 1.0, 7.0, ptype="fence-store-unavailable")
        v, excused, _ = self.run_check([], [lapsed], [(7.2, "etcd watch", "orders", 10, 7)])
        self.assertEqual(v, [])
        self.assertEqual(kinds(excused), ["refused_max"])
        # Answered long before the commit: its raise had failed; a violation.
        early = out("b", 10, 503, 1.0, 3.0, ptype="fence-store-unavailable")
        v, _, _ = self.run_check([], [early], [(7.2, "etcd watch", "orders", 10, 7)])
        self.assertEqual(kinds(v), ["refused_max"])
        # Refused at once (the gate was closed): no raise of its own; a violation.
        at_once = out("c", 10, 503, 7.0, 7.0, ptype="fence-store-unavailable")
        v, _, _ = self.run_check([], [at_once], [(7.2, "etcd watch", "orders", 10, 7)])
        self.assertEqual(kinds(v), ["refused_max"])
        # Held until its last word, 3 s after the commit, the membership still not renewed.
        held = out("d", 10, 503, 1.0, 10.2, ptype="fence-store-unavailable")
        v, excused, _ = self.run_check([], [held], [(7.2, "etcd watch", "orders", 10, 7)])
        self.assertEqual((v, kinds(excused)), ([], ["refused_max"]))

    def test_a_committed_raise_refused_once_a_newer_holders_raise_stood_is_excused(self):
        # Committed at 7.2, answered 409 at 8.0: a higher raise stood by the time its proxy was
        # back, and 12 became the max later. Reported apart.
        late = out("a", 10, 409, 1.0, 8.0)
        newer = out("n", 12, 200, 7.5, 9.1, kind="raise")
        seen = [(7.2, "etcd watch", "orders", 10, 7), (9.0, "etcd watch", "orders", 12, 9)]
        v, excused, _ = self.run_check([rec(1, "/orders/A/n", 12, 9.05, 9.06)], [late, newer], seen)
        self.assertEqual((v, kinds(excused)), ([], ["refused_max"]))
        # No higher max ever: the 409 said the token had lost, and it stayed the max.
        v, _, _ = self.run_check([], [late], seen[:1])
        self.assertEqual(kinds(v), ["refused_max"])
        # Answered 409 before it became the max: never excused.
        early = out("b", 10, 409, 1.0, 2.0)
        v, _, _ = self.run_check([rec(1, "/orders/A/n", 12, 9.05, 9.06)], [early, newer], seen)
        self.assertEqual(kinds(v), ["refused_max"])

    def test_max_decreased(self):
        outcomes = [out("a", 10, 200, 1.0, 1.1), out("b", 12, 200, 2.0, 2.1)]
        records = [rec(1, "/orders/A/a", 10, 1.05, 1.06), rec(2, "/orders/A/b", 12, 2.05, 2.06)]
        # The watch's events arrive late but in revision order: 12 (rev 30) then 10 (rev 31).
        seen = [(2.2, "etcd watch", "orders", 12, 30), (2.3, "etcd watch", "orders", 10, 31),
                (2.1, "proxy A", "orders", 12, None), (2.4, "proxy A", "orders", 12, None)]
        v, _, _ = self.run_check(records, outcomes, seen)
        self.assertEqual(kinds(v), ["max_decreased"])
        self.assertIn("revisions 30 -> 31", v[0]["detail"])
        seen[1] = (2.3, "etcd watch", "orders", 10, 29)  # 10 before 12: fine
        self.assertEqual(self.run_check(records, outcomes, seen)[0], [])

    def test_timing_assumption_excuses_a_write_through_a_long_paused_proxy(self):
        records = [rec(1, "/orders/B/b", 12, 1.5, 1.6), rec(2, "/orders/A/a", 10, 6.0, 6.1)]
        outcomes = [out("b", 12, 200, 1.4, 1.7), out("a", 10, 200, 1.0, 6.2, proxy="A")]
        long_pause = {"proxy": "A", "start": 1.1, "end": 5.9}
        v, e, _ = self.run_check(records, outcomes, pauses=[long_pause])
        self.assertEqual((v, kinds(e)), ([], ["stale"]))
        short_pause = {"proxy": "A", "start": 1.1, "end": 2.0}
        v, e, _ = self.run_check(records, outcomes, pauses=[short_pause])
        self.assertEqual((kinds(v), e), (["stale"], []))

    def test_availability(self):
        faults = [{"kind": "etcd_pause_all", "start": 10.0, "end": 11.0, "recovered": 11.2},
                  {"kind": "proxy_kill", "start": 20.0, "end": 21.0, "recovered": 21.5}]
        outcomes = [out("a", 10, 503, 10.5, 12.5), out("b", 10, 503, 12.6, 13.0),
                    out("c", 10, 200, 13.1, 13.2),
                    out("d", 10, 503, 14.0, 14.1, kind="equal"),
                    out("e", 11, 200, 20.5, 20.6), out("f", 11, None, 20.1, 20.2, kind="equal")]
        table = checker.availability(faults, outcomes, 100.0)
        self.assertEqual(table["etcd_pause_all"]["raise"], [3.0])
        self.assertAlmostEqual(table["etcd_pause_all"]["equal"][0], 4.1)
        self.assertEqual(table["etcd_pause_all"]["raise_503"], 2)
        self.assertEqual(table["proxy_kill"]["raise"], [0.0])
        self.assertEqual(table["proxy_kill"]["no_answer"], 1)
        self.assertIn("| proxy_kill | 1 |", checker.availability_markdown(table))

    def test_outages(self):
        faults = [{"kind": "etcd_pause_all", "target": "m0,m1,m2", "start": 10.0, "end": 11.0}]
        outcomes = [out("a", 10, 503, 10.5, 12.5), out("b", 10, 503, 12.6, 13.0),
                    out("c", 10, 200, 13.1, 13.2), out("d", 10, 503, 14.0, 14.1, kind="equal"),
                    out("e", 12, 503, 20.0, 29.0, lock="k1")]
        spans = checker.outages(outcomes, faults)
        self.assertEqual([(s["fence"], round(s["seconds"], 2), s["refused"]) for s in spans],
                         [("objects/k1", 9.0, 1), ("orders", 2.7, 2)])
        self.assertEqual(spans[1]["faults"], ["etcd_pause_all m0,m1,m2"])


if __name__ == "__main__":
    unittest.main()
