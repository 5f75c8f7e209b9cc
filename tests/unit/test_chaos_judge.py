"""batchop_dev.chaos's judging of a run (bench/chaos.py): recovery,
consistency, failures, RSS, decisions applied twice."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from batchop_dev import chaos


def _sample(t: float, **over: Any) -> dict[str, Any]:
    base = {"t": t, "ready_condition": "True", "degraded": "False", "deployment": 2}
    return {**base, "ready_pods": 2, "decided": 2, **over}


def test_recovery_ends_with_the_last_broken_window_after_the_fault() -> None:
    send = np.array([1.0, 11.0, 12.0, 16.0, 31.0])
    latency = np.array([10.0, 90.0, 10.0, 10.0, 10.0])  # window 2 (10-15 s) over a 50 ms SLO
    ok = np.ones(5, dtype=bool)
    failed = np.array([False, False, False, True, False])  # window 3 (15-20 s) failed one
    breaks = chaos.window_breaks(send, latency, ok, failed, 50.0)
    assert breaks == {0: False, 2: True, 3: True, 6: False}
    assert chaos.recovery_s(breaks, 10.0, 40.0) == pytest.approx(10.0)  # to the end of 15-20
    assert chaos.recovery_s(breaks, 25.0, 40.0) == 0.0
    assert chaos.recovery_s(breaks, 0.0, 9.0) == 0.0  # the breaks came after this span


def test_reconciled_is_the_start_of_the_last_consistent_run_of_samples() -> None:
    samples = [
        _sample(0.0),
        _sample(2.0, error="connection refused"),  # the API server was the fault
        _sample(4.0, ready_pods=1),
        _sample(6.0),
        _sample(8.0),
    ]
    assert chaos.reconciled_s(samples, 1.0, 10.0) == pytest.approx(5.0)
    # Still inconsistent at the end of the span: not reconciled.
    assert chaos.reconciled_s(samples, 1.0, 5.0) is None
    assert not chaos.consistent(_sample(0.0, decided=3))  # a decision not applied
    assert not chaos.consistent(_sample(0.0, degraded="True"))


def test_failures_count_the_killed_pods_in_flight_requests_apart() -> None:
    records = {
        "send_s": [9.5, 9.9, 10.5, 11.0, 12.0],
        "latency_ms": [600.0, None, 5.0, None, None],
        "ok": [False, False, True, False, False],
        "rejected": [False, False, False, False, True],
        "target": ["a:8000", "a:8000", "b:8000", "a:8000", "b:8000"],
    }
    got = chaos.failures(records, 10.0, 20.0, killed="a:8000")
    assert got == {
        "requests": 3,
        "failed": 1,  # 11.0 to the dead pod; 12.0 was refused by the guard
        "refused": 1,
        "in_flight_failed": 2,
        "in_flight_failed_inside": 0,  # sent before the fault: not in `failed`
        "failed_at_killed_pod": 1,
    }
    assert chaos.beyond_in_flight(got) == 1  # the in-flight ones do not hide it


def test_a_deleted_nodes_pods_count_in_flight_at_their_servers_stop() -> None:
    # Node deleted at 10 s, its pods' servers gone at 12 s: what was in flight then failed,
    # whenever it was sent; a failure sent to them after that, or to another pod, is beyond.
    records = {
        "send_s": [9.0, 10.5, 11.9, 12.5, 13.0, 14.0],
        "latency_ms": [3100.0, 1500.0, 150.0, None, None, 5.0],
        "ok": [False, False, False, False, False, True],
        "rejected": [False] * 6,
        "target": ["a:8000", "a:8000", "c:8000", "c:8000", "b:8000", "b:8000"],
    }
    got = chaos.failures(records, 10.0, 20.0, killed=["a:8000", "c:8000"], killed_at_s=12.0)
    assert got["failed"] == 4
    assert got["in_flight_failed"] == 3 and got["in_flight_failed_inside"] == 2
    assert got["failed_at_killed_pod"] == 1  # 12.5, sent to a stopped server
    assert chaos.beyond_in_flight(got) == 2  # 12.5 and 13.0 (to a live pod)


def test_judge_reports_each_fault_and_the_targets() -> None:
    records = {
        "send_s": [1.0, 21.0, 22.0],
        "latency_ms": [5.0, 5.0, None],
        "ok": [True, True, False],
        "rejected": [False, False, False],
        "target": ["a:8000"] * 3,
    }
    samples = [
        {**_sample(t), "rss_kb": {"b": kb}}
        for t, kb in ((0.0, 100), (10.0, 100), (300.0, 100), (400.0, 104))
    ]
    faults = [{"name": "prometheus-restarted", "t": 5.0}, {"name": "node-deleted", "t": 20.0}]
    got = chaos.judge(faults, samples, records, 50.0, 500.0, 3, 4)
    assert [r["failed"] for r in got["faults"]] == [0, 1]
    assert got["faults"][1]["recovered_s"] == pytest.approx(5.0)
    assert got["applied_twice"] == 1 and got["targets"]["failed_beyond_in_flight"] == 1
    (rss,) = got["rss"]
    assert rss["growth"] == pytest.approx(0.04) and got["targets"]["rss_growth_met"]
    text = chaos.markdown("- provenance", got, "setup")
    assert "| node-deleted | 20 |" in text and "1 applied twice" in text


def test_rss_is_judged_from_five_minutes_into_the_role_an_operator_ends_in() -> None:
    """b is a standby, then the leader from 200 s: it grows to a leader's working set, then
    holds; judged from 500 s. c starts at 200 s as the new standby: judged from 500 s too.
    a, killed at 200 s, is not judged."""
    samples = []
    for t in range(0, 1001, 50):
        kb = {"b": 100 if t < 200 else (150 if t < 450 else 152), "c": 90}
        leaders = {"a": 1.0 if t < 200 else None, "b": 0.0 if t < 200 else 1.0}
        rss = {"a": 120 if t < 200 else None, "b": kb["b"], **({"c": 90} if t >= 200 else {})}
        samples.append({"t": float(t), "rss_kb": rss, "leaders": leaders})
    b, c = chaos.operators_rss(samples)
    assert (b["operator"], b["role"], b["since_s"], b["at_s"]) == ("b", "leader", 200.0, 500.0)
    assert b["growth"] == pytest.approx(0.0)  # 152 at 500 s and at the end; +52% from 300 s
    assert (c["operator"], c["role"], c["since_s"], c["at_s"]) == ("c", "standby", 200.0, 500.0)
    assert "a" not in {r["operator"] for r in chaos.operators_rss(samples)}
