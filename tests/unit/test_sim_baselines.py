"""Baseline policies: the HPA algorithm (queue time and requests/s), AIMD on the delay,
static, static-peak, the oracle's table, the oracle and the reactive oracle."""

from __future__ import annotations

import math

import pytest

from batchop.sim import baselines as b
from batchop.sim.profile import Profile
from batchop.tuning.types import Observation, TuningSpec, TuningState

SPEC = TuningSpec(slo_ms=50.0, max_batch_size=16, min_replicas=1, max_replicas=10)
TARGET = b.HPA_QUEUE_TARGET_FRACTION * SPEC.slo_ms


def obs(
    t: float,
    queue_ms: float | None,
    replicas: int = 2,
    ready: int | None = None,
    p99: float | None = 10.0,
    delay: int = 500,
) -> Observation:
    return Observation(
        time_s=t,
        rps=500.0,
        avg_batch=2.0,
        queue_ms=queue_ms,
        compute_ms=4.0,
        p99_ms=p99,
        replicas=replicas,
        ready_replicas=replicas if ready is None else ready,
        delay_us=delay,
    )


def test_queue_hpa_scales_by_the_metric_ratio_and_keeps_the_delay() -> None:
    d = b.nobatch_decide(obs(15, 3 * TARGET, replicas=2), SPEC, TuningState())
    assert d.replicas == 6 and d.delay_us == 500 and d.kind == "scale-up"


def test_queue_hpa_tolerance_holds_within_ten_percent() -> None:
    d = b.nobatch_decide(obs(15, 1.08 * TARGET, replicas=3), SPEC, TuningState())
    assert d.replicas == 3 and d.kind == "hold"


def test_queue_hpa_scale_up_is_limited_per_sync() -> None:
    d = b.nobatch_decide(obs(15, 100 * TARGET, replicas=1), SPEC, TuningState())
    assert d.replicas == 5  # max(2 x 1, 1 + 4)


def test_queue_hpa_holds_when_the_metric_is_missing() -> None:
    d = b.nobatch_decide(obs(15, None, replicas=4), SPEC, TuningState())
    assert d.replicas == 4 and "missing" in d.reason


def test_queue_hpa_scale_down_waits_for_the_stabilisation_window() -> None:
    state = TuningState()
    replicas = 6
    t = 15.0
    d = b.nobatch_decide(obs(t, 3 * TARGET, replicas=2), SPEC, state)
    state = d.state
    # Load gone: recommendations are 1 from now on, but 6 was recommended at t = 15.
    while t < 15 + b.HPA_SCALE_DOWN_WINDOW_S - 15:
        t += 15
        d = b.nobatch_decide(obs(t, 0.01, replicas=replicas), SPEC, state)
        state = d.state
        assert d.replicas == replicas
    t += 30
    d = b.nobatch_decide(obs(t, 0.01, replicas=replicas), SPEC, state)
    assert d.replicas == SPEC.min_replicas


def test_aimd_adds_while_under_and_halves_on_a_violation() -> None:
    up = b.aimd_decide(obs(15, TARGET, p99=10.0, delay=1000), SPEC, TuningState())
    assert up.delay_us == 1000 + b.AIMD_STEP_US
    down = b.aimd_decide(obs(15, TARGET, p99=80.0, delay=1000), SPEC, TuningState())
    assert down.delay_us == int(1000 * b.AIMD_BACKOFF)
    capped = b.aimd_decide(obs(15, TARGET, p99=1.0, delay=SPEC.max_delay_us), SPEC, TuningState())
    assert capped.delay_us == SPEC.max_delay_us


def test_static_returns_its_config_and_says_so() -> None:
    decide = b.static_policy(2000, 3)
    d = decide(obs(30, 1.0, replicas=1, delay=500), SPEC, TuningState())
    assert (d.replicas, d.delay_us, d.kind) == (3, 2000, "scale-up")
    d = decide(obs(60, 1.0, replicas=3, delay=2000), SPEC, TuningState())
    assert d.kind == "hold" and not d.changes(obs(60, 1.0, replicas=3, delay=2000))


def test_oracle_table_grows_with_rate_and_picks_cheap_delays() -> None:
    profile = Profile("toy", 8, ((1, 2.0), (8, 5.0)))
    table = b.oracle_table(profile, 20.0, 0, 4000)
    for row in table.p99_ms:
        finite = [p for p in row if math.isfinite(p)]
        assert finite[-1] > finite[0]  # heavier load, longer tail
    low = table.best(table.rates[3], 20.0)
    assert low is not None
    delay, p99 = low
    assert p99 <= b.ORACLE_MARGIN * 20.0
    # At light load the cheapest GPU time per request comes from a long delay.
    assert delay >= 1000
    assert table.best(1.01 * profile.capacity_rps(), 20.0) is None


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        b.make_policy("magic", None, None, SPEC, 0, 1)  # type: ignore[arg-type]


def test_hpa_queue_counts_the_fixed_delay_in_its_target() -> None:
    # 6 ms of mean queue time at a 5 ms delay is mostly the delay: the target without it
    # (0.1 x 50 ms = 5 ms) scales up, the target with it (5 + 5 ms) does not.
    seen = obs(15, 6.0, replicas=4, delay=5000)
    assert b.nobatch_decide(seen, SPEC, TuningState()).replicas == 5
    d = b.hpa_queue_decide(seen, SPEC, TuningState())
    assert d.replicas == 4 and d.delay_us == 5000
    d = b.hpa_queue_decide(obs(15, 3 * (5.0 + 5.0), replicas=2, delay=5000), SPEC, TuningState())
    assert d.replicas == 6


TOY = Profile("toy", 8, ((1, 2.0), (8, 5.0)), startup_seconds=10.0)


def test_replica_capacity_is_the_biggest_batch_within_the_slo() -> None:
    # latency(b) = 2 + 3 (b - 1) / 7 ms: batch 8 fits a 20 ms SLO, 1600 req/s
    assert b.replica_capacity_rps(TOY, 20.0) == pytest.approx(8 / 0.005)
    # a 3.5 ms SLO fits batch 4 (3.29 ms) but not 5 (3.71 ms)
    assert b.replica_capacity_rps(TOY, 3.5) == pytest.approx(4 / (TOY.latency_ms(4) / 1000))


def rps_obs(t: float, rps: float, replicas: int, rejected: float = 0.0) -> Observation:
    return Observation(time_s=t, rps=rps, replicas=replicas, ready_replicas=replicas,
                       delay_us=500, rejected_rps=rejected)  # fmt: skip


def test_hpa_on_requests_per_second_follows_keda_rule() -> None:
    decide = b.hpa_rps_policy(1000.0, 0.5)  # target 500 req/s per replica
    spec = TuningSpec(slo_ms=20.0, max_batch_size=8, max_replicas=16, start_delay_us=700)
    d = decide(rps_obs(15, 2600.0, 2), spec, TuningState())
    assert d.replicas == 6 and d.delay_us == 700  # ceil(2600 / 500); the spec's delay
    assert decide(rps_obs(15, 1050.0, 2), spec, TuningState()).replicas == 2  # in tolerance
    assert decide(rps_obs(15, 20000.0, 2), spec, TuningState()).replicas == 6  # max(2x, +4)
    # refused requests count: they are load the replicas did not take
    assert decide(rps_obs(15, 900.0, 2, rejected=1600.0), spec, TuningState()).replicas == 5
    missing = Observation(time_s=15, replicas=3, ready_replicas=3, delay_us=500)
    assert decide(missing, spec, TuningState()).replicas == 3


def _run(
    name: str, trace_rows: str, slo_ms: float = 20.0, delay_us: int = 500, **kw: object
) -> dict:
    from batchop.api.tuning_spec import profile_tuning_spec
    from batchop.sim.engine import SimConfig, simulate
    from batchop.sim.report import summarize
    from batchop.sim.trace import Trace

    pairs = [tuple(float(x) for x in line.split(",")) for line in trace_rows.split()]
    trace = Trace(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), "t")
    spec = profile_tuning_spec(TOY, slo_ms, max_replicas=16, start_delay_us=delay_us)
    policy = b.make_policy(name, TOY, trace, spec, spec.start_delay_us, 1, **kw)  # type: ignore[arg-type]
    return summarize(simulate(TOY, trace, spec, policy, SimConfig(seed=3)), slo_ms)


def test_hpa_at_a_lower_target_fraction_runs_more_replicas() -> None:
    rows = "0,3000 300,3000"
    low = _run("hpa", rows, hpa_fraction=0.5)
    high = _run("keda", rows, hpa_fraction=0.9)
    assert low["max_replicas_used"] > high["max_replicas_used"]
    assert low["gpu_seconds"] > high["gpu_seconds"]


def test_hpa_queue_does_not_run_to_max_replicas_at_low_load() -> None:
    # 200 req/s is an eighth of one replica's capacity, and most requests wait out the
    # 1.5 ms delay: above 10% of the 10 ms SLO, so a target without the delay scaled to max.
    got = _run("hpa-queue", "0,200 600,200", slo_ms=10.0, delay_us=1500)
    assert got["max_replicas_used"] <= 2 and got["window_attainment"] == 1.0


def _replicas_at(result: dict, t: float) -> int:
    return max(row["replicas"] for row in result["timeline"] if abs(row["t"] - t) < 5.1)


def test_reactive_oracle_lags_the_oracle_on_a_step() -> None:
    rows = "0,300 300,4000 600,4000"
    oracle = _run("oracle", rows)
    reactive = _run("reactive-oracle", rows)
    # The oracle has its pods ready when the step comes; the reactive one sees it only after.
    assert _replicas_at(oracle, 300) >= 3
    assert _replicas_at(reactive, 290) == 1
    assert reactive["slo_attainment"] < oracle["slo_attainment"]
    assert _replicas_at(reactive, 400) == _replicas_at(oracle, 400)


def test_oracle_searches_the_specs_whole_delay_range() -> None:
    table = b.oracle_table(TOY, 20.0, 300, 12_000)
    assert table.delays[0] == 300 and table.delays[-1] == 12_000


def test_static_peak_runs_the_fewest_replicas_meeting_the_slo_at_the_peak() -> None:
    from batchop.api.tuning_spec import profile_tuning_spec
    from batchop.sim.trace import Trace

    spec = profile_tuning_spec(TOY, 20.0, max_replicas=16)
    table = b.oracle_table(TOY, 20.0, spec.min_delay_us, spec.max_delay_us)
    trace = Trace((0.0, 60.0, 120.0, 180.0), (100.0, 4000.0, 100.0, 0.0), "t")
    n = b.peak_replicas(TOY, trace, spec)
    assert table.best(4000.0 / n, 20.0) is not None
    assert table.best(4000.0 / (n - 1), 20.0) is None
    assert b.start_replicas("static-peak", TOY, trace, spec) == n
    assert b.start_replicas("hpa", TOY, trace, spec) == spec.start_replicas


def test_simulate_offers_every_baseline() -> None:
    from batchop.cli.simulate import POLICY_NAMES

    assert set(POLICY_NAMES) == set(b.POLICIES)
