"""The generated family of cases, warm scoring, reversals, and the frontier judgement."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from batchop.api.tuning_spec import profile_tuning_spec
from batchop.sim.baselines import make_policy
from batchop.sim.engine import SimConfig, simulate
from batchop.sim.family import HELD_OUT_SEEDS, PASS_S, SHAPES, TUNING_SEEDS, case
from batchop.sim.profile import Profile
from batchop.sim.score import reversals, span
from batchop.sim.trace import Trace, constant_trace
from batchop_dev.frontier import Point, dominators, frontier_gpu, judge, lower_envelope

AZURE = Trace(
    seconds=tuple(float(s) for s in range(0, 4001)),
    rps=tuple(float((s * 7919) % 13 * 50) for s in range(0, 4001)),
    name="azure-code",
)


def test_the_tuning_and_held_out_seeds_are_apart_and_hold_every_shape() -> None:
    assert not set(TUNING_SEEDS) & set(HELD_OUT_SEEDS)
    assert len(TUNING_SEEDS) + len(HELD_OUT_SEEDS) >= 40
    for seeds in (TUNING_SEEDS, HELD_OUT_SEEDS):
        assert {case(s, AZURE).shape for s in seeds} == set(SHAPES)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 101])
def test_a_case_is_a_pure_function_of_its_seed_and_scaled_to_need_replicas(seed: int) -> None:
    a, b = case(seed, AZURE), case(seed, AZURE)
    assert a == b
    assert a.trace.end == PASS_S and min(a.trace.rps) >= 0
    assert 5 <= a.profile.startup_seconds <= 120
    sizes = [s for s, _ in a.profile.batch_latency_ms]
    times = [t for _, t in a.profile.batch_latency_ms]
    assert sizes[0] == 1 and sizes[-1] == a.profile.max_batch_size
    assert times == sorted(times)  # slower for bigger batches, flat to steep
    assert a.slo_ms >= a.profile.latency_ms(a.profile.max_batch_size) * 0.99
    assert 4 <= a.peak_replicas <= 10
    looped = a.looped()
    assert looped.end == 2 * PASS_S
    assert looped.rate_at(10.0) == looped.rate_at(PASS_S + 10.0)


def test_different_seeds_draw_different_cases() -> None:
    assert case(0, AZURE).trace.rps != case(6, AZURE).trace.rps
    assert case(0, AZURE).profile != case(6, AZURE).profile


def _run(n: int) -> object:
    profile = Profile("p", 8, ((1, 2.0), (8, 4.0)), startup_seconds=10.0)
    trace = constant_trace(400.0, 240.0)
    spec = replace(profile_tuning_spec(profile, 20.0, max_replicas=4), start_replicas=n)
    policy = make_policy("static", profile, trace, spec, 0, n)
    return simulate(profile, trace, spec, policy, SimConfig(seed=3))


def test_a_span_counts_its_own_requests_windows_and_gpu_seconds() -> None:
    run = _run(2)
    whole, half = span(run, 20.0, 0.0, 240.0), span(run, 20.0, 120.0, 240.0)
    assert whole.requests == run.store.n
    arrivals = run.store.arrival[: run.store.n]
    assert half.requests == int(np.count_nonzero(arrivals >= 120.0))
    assert half.gpu_seconds == pytest.approx(2 * 120.0)
    assert whole.slo_attainment == pytest.approx(1.0) and whole.window_attainment == 1.0
    starved = span(_run(1), 0.5, 0.0, 240.0)  # an SLO below one execution: nothing meets it
    assert starved.slo_attainment == 0.0 and starved.window_attainment == 0.0


def test_a_reversal_is_a_scale_down_undone_within_two_pod_starts() -> None:
    history = [(0.0, 2, 2, 0), (100.0, 1, 1, 0), (150.0, 2, 1, 0), (400.0, 1, 1, 0)]
    assert reversals(history, startup_s=30.0) == [(100.0, 150.0)]
    assert reversals(history, startup_s=20.0) == []  # 50 s > 2 x 20 s
    assert reversals(history, startup_s=30.0, start_s=120.0) == []
    late = [*history, (500.0, 3, 1, 0)]
    assert reversals(late, startup_s=60.0) == [(100.0, 150.0), (400.0, 500.0)]


def _points() -> list[Point]:
    return [
        Point("static", 2.0, 200.0, 0.80, 0.95),
        Point("static", 3.0, 300.0, 1.00, 1.00),
        Point("rule", 0.5, 250.0, 0.90, 0.99),
        Point("reactive-oracle", None, 220.0, 0.85, 0.97),
        Point("oracle", None, 150.0, 1.0, 1.0),  # foresight: never on the online frontier
    ]


def test_the_frontier_is_the_cheapest_online_run_reaching_both_attainments() -> None:
    pts = _points()
    assert frontier_gpu(pts, 0.9, 0.99).label == "rule 0.5"
    assert frontier_gpu(pts, 0.95, 0.99).label == "static 3"
    assert frontier_gpu(pts, 0.5, 0.5).label == "static 2"
    assert frontier_gpu([p for p in pts if p.family == "oracle"], 0.5, 0.5) is None


def test_batchop_is_dominated_only_by_a_cheaper_run_at_least_as_good_on_both() -> None:
    pts = _points()
    on = Point("batchop", 0.95, 240.0, 0.90, 0.99)
    assert dominators(pts, on) == []  # the rule reaching it costs more
    over = Point("batchop", 0.95, 260.0, 0.90, 0.99)
    assert [p.label for p in dominators(pts, over)] == ["rule 0.5"]
    within = Point("batchop", 0.95, 252.0, 0.90, 0.99)  # under 1% dearer: not dominated
    assert dominators(pts, within) == []
    verdict = judge(pts, over)
    assert verdict["x_frontier"] == pytest.approx(260 / 250) and verdict["best_rule"] == "rule 0.5"
    beyond = judge(pts, Point("batchop", 0.95, 260.0, 1.0, 1.0001))
    assert beyond["x_frontier"] is None  # no online run reaches it


def test_the_lower_envelope_only_rises_with_cost() -> None:
    line = lower_envelope(_points(), "requests")
    assert [x for x, _ in line] == sorted(x for x, _ in line)
    assert [y for _, y in line] == sorted(y for _, y in line)
    assert line[0] == (150.0, 1.0)
