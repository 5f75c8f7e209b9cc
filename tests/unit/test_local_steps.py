"""Judging a stepped-load run: knob changes per decision, p99 per step once settled."""

from __future__ import annotations

from batchop_dev.local.demo import summary_lines
from batchop_dev.local.steps import client_p99, judge_steps, knob_changes, summary


def test_knob_changes_compare_each_decision_with_the_one_before() -> None:
    decisions = [
        {"maxQueueDelayMicroseconds": 0, "replicas": 1},  # delay 500 -> 0
        {"maxQueueDelayMicroseconds": 0, "replicas": 3},  # replicas 1 -> 3
        {"maxQueueDelayMicroseconds": 2000, "replicas": 2},  # both
    ]
    assert knob_changes(decisions, 500, 1) == {"delay": 2, "replicas": 2}
    assert knob_changes([], 500, 1) == {"delay": 0, "replicas": 0}


def sample(t: float, p99: float | None, replicas: int = 1) -> dict[str, object]:
    return {"t": t, "p99_ms": p99, "replicas": replicas}


def test_only_settled_samples_are_judged_and_tolerance_applies() -> None:
    timeline = [
        sample(5, 90.0),
        sample(25, 39.0),
        sample(35, 41.0, 2),
        sample(45, None, 2),
        sample(55, 120.0, 3),
        sample(80, 30.0, 3),
    ]
    segments = [(0.0, 50.0, 40.0), (50.0, 90.0, 300.0)]
    first, second = judge_steps(timeline, segments, slo_ms=40.0, settle_s=20.0)
    # The 90 ms transient at t=5 is before settling; 41 ms is over a 40 ms SLO.
    assert (first.samples, first.p99_max_ms, first.within_slo) == (2, 41.0, False)
    assert first.max_replicas == 2 and first.last_replicas == 2
    # The 120 ms spike at t=55 is the second step's transient.
    assert (second.samples, second.within_slo, second.last_replicas) == (1, True, 3)
    loose, _ = judge_steps(timeline, segments, slo_ms=40.0, settle_s=20.0, tolerance=0.05)
    assert loose.within_slo is True


def test_a_step_shorter_than_settling_is_not_judged() -> None:
    (step,) = judge_steps([sample(3, 500.0)], [(0.0, 10.0, 50.0)], 40.0, settle_s=10.5)
    assert step.within_slo is None and step.samples == 0


def test_summary_lines_name_changes_and_each_step() -> None:
    report = summary(
        [sample(30, 20.0)],
        [{"maxQueueDelayMicroseconds": 0, "replicas": 2}],
        [(0.0, 40.0, 40.0), (40.0, 45.0, 300.0)],
        slo_ms=40.0,
        settle_s=20.0,
        start_delay_us=500,
        start_replicas=1,
    )
    lines = summary_lines(report)
    assert "1 delay change(s), 1 replica change(s)" in lines[0]
    assert "p99 max 20.0 ms <= SLO 40 ms" in lines[1]
    assert "not judged" in lines[2]


def test_with_records_the_clients_p99_over_the_settled_part_is_judged() -> None:
    # 100 requests a second for 60 s: 10 ms, except a 200 ms transient in the first 10 s of
    # the second step and one failed request (not counted) at 45 s.
    send = [i / 100 for i in range(6000)]
    latency = [200.0 if 30 <= s < 40 else 10.0 + (s % 1) for s in send]
    ok = [not (45 <= s < 45.01) for s in send]
    records = {"send_s": send, "latency_ms": latency, "ok": ok}
    p99, n = client_p99(records, 40.0, 60.0)
    assert n == 1999 and 10.9 < p99 < 11.0  # the transient is excluded, the failure too
    assert client_p99(records, 100.0, 110.0) == (None, 0)
    # Triton's p99 still shows the transient at t=45 (its summary lags); the clients' does not.
    timeline = [sample(25, 12.0), sample(45, 150.0, 2), sample(55, 30.0, 2)]
    first, second = judge_steps(
        timeline,
        [(0.0, 30.0, 100.0), (30.0, 60.0, 100.0)],
        slo_ms=20.0,
        settle_s=10.0,
        records=records,
    )
    assert first.within_slo is True and first.client_requests == 2000
    assert second.within_slo is True and second.p99_max_ms == 150.0
    assert second.client_p99_ms is not None and second.client_p99_ms < 11.0
    (strict,) = judge_steps(
        timeline, [(0.0, 30.0, 100.0)], slo_ms=10.5, settle_s=10.0, records=records
    )
    assert strict.within_slo is False
    report = summary(
        timeline,
        [],
        [(0.0, 30.0, 100.0)],
        slo_ms=20.0,
        settle_s=10.0,
        start_delay_us=0,
        start_replicas=1,
        records=records,
    )
    assert report["p99_judged"] == "client"
    assert "clients' p99" in summary_lines(report)[1]
