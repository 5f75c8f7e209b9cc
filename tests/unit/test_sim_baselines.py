"""Baseline policies: the HPA algorithm, AIMD on the delay, static, and the oracle's table."""

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


def test_hpa_scales_by_the_metric_ratio_and_keeps_the_delay() -> None:
    d = b.hpa_decide(obs(15, 3 * TARGET, replicas=2), SPEC, TuningState())
    assert d.replicas == 6 and d.delay_us == 500 and d.kind == "scale-up"


def test_hpa_tolerance_holds_within_ten_percent() -> None:
    d = b.hpa_decide(obs(15, 1.08 * TARGET, replicas=3), SPEC, TuningState())
    assert d.replicas == 3 and d.kind == "hold"


def test_hpa_scale_up_is_limited_per_sync() -> None:
    d = b.hpa_decide(obs(15, 100 * TARGET, replicas=1), SPEC, TuningState())
    assert d.replicas == 5  # max(2 x 1, 1 + 4)


def test_hpa_holds_when_the_metric_is_missing() -> None:
    d = b.hpa_decide(obs(15, None, replicas=4), SPEC, TuningState())
    assert d.replicas == 4 and "missing" in d.reason


def test_hpa_scale_down_waits_for_the_stabilisation_window() -> None:
    state = TuningState()
    replicas = 6
    t = 15.0
    d = b.hpa_decide(obs(t, 3 * TARGET, replicas=2), SPEC, state)
    state = d.state
    # Load gone: recommendations are 1 from now on, but 6 was recommended at t = 15.
    while t < 15 + b.HPA_SCALE_DOWN_WINDOW_S - 15:
        t += 15
        d = b.hpa_decide(obs(t, 0.01, replicas=replicas), SPEC, state)
        state = d.state
        assert d.replicas == replicas
    t += 30
    d = b.hpa_decide(obs(t, 0.01, replicas=replicas), SPEC, state)
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
