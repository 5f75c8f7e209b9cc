"""bench/demo_vs_sim.py's scoring: the real run's figures from a demo report, and the judgement."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from bench_modules import load_bench


def _bench() -> ModuleType:
    return load_bench("demo_vs_sim")


def _report(samples: list[tuple[float, int, int]], sent: int, within: int) -> dict[str, Any]:
    return {
        "timeline": [{"t": t, "replicas": n, "ready": r} for t, n, r in samples],
        "summary": {
            "bursty": {"totals": {"sent": sent, "served_within_slo": within, "rejected": 1}}
        },
    }


def test_replica_seconds_hold_each_sample_until_the_next_and_stop_at_the_slice_end() -> None:
    bench = _bench()
    # 1 replica from 0 (the first sample stands for the start) to 10, 3 asked at 10 (Ready
    # at 20), 3 until the end at 30 though the timeline runs on to 35.
    got = bench.real_figures(_report([(5, 1, 1), (10, 3, 1), (20, 3, 3), (35, 1, 1)], 100, 97), 30)
    assert got["replica_seconds"] == pytest.approx(10 * 1 + 20 * 3)
    assert got["request_attainment"] == pytest.approx(0.97)
    assert got["max_replicas"] == 3 and got["pod_start_s"] == pytest.approx(10)


def test_the_targets_are_judged_on_both_figures() -> None:
    bench = _bench()
    real = {"request_attainment": 0.99, "replica_seconds": 1000.0}
    close = bench.compare(real, {"request_attainment": 0.975, "replica_seconds": 1090.0})
    assert close["attainment_met"] and close["replica_seconds_met"]
    far = bench.compare(real, {"request_attainment": 0.96, "replica_seconds": 1200.0})
    assert not far["attainment_met"] and not far["replica_seconds_met"]
    assert far["replica_seconds_difference"] == pytest.approx(0.2)
