"""Sizing for what the next horizon brings (tuning.sizing, and the policy around it), the
forecast, and the peak each observer reports (the simulator's scrapes and the Prometheus
queries)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchop.observe.prometheus import build_queries, duration_s, parse_matrix
from batchop.sim.scrape import SUCCESS, Sample, peak_rate
from batchop.tuning import sizing
from batchop.tuning.forecast import MAX_RISE, trend
from batchop.tuning.policy import DEFAULT_STARTUP_S, P99_WINDOW_S, _learn_startup, decide
from batchop.tuning.types import Decision, Observation, TuningSpec, TuningState

CPU_DEMO = ((1, 4.0), (4, 5.0), (8, 6.0), (16, 8.0), (32, 12.0))
SPEC = TuningSpec(
    slo_ms=50,
    max_batch_size=32,
    max_replicas=16,
    min_delay_us=0,
    max_delay_us=1000,
    prior_batch_latency_ms=CPU_DEMO,
    interval_s=30.0,
    scale_down_window_s=60.0,
)
HORIZON_S = DEFAULT_STARTUP_S + SPEC.interval_s  # no start seen: the default pod start


def obs(
    t: float,
    rps: float,
    replicas: int,
    *,
    peak: float | None = None,
    p99: float = 10.0,
    rejected: float = 0.0,
) -> Observation:
    return Observation(
        time_s=t,
        rps=rps,
        avg_batch=2.0,
        queue_ms=1.0,
        compute_ms=5.0,
        p99_ms=p99,
        pending=0.0,
        replicas=replicas,
        ready_replicas=replicas,
        delay_us=0,
        peak_rps=peak,
        rejected_rps=rejected,
    )


def decisions(points: list[float], spec: TuningSpec = SPEC, replicas: int = 1) -> list[Decision]:
    """Feed one load per tick (mean = busiest interval); the cluster follows every decision
    at once (pods ready by the next tick)."""
    state, out = TuningState(), []
    for i, rps in enumerate(points):
        dec = decide(obs(i * spec.interval_s, rps, replicas, peak=rps), spec, state)
        state, replicas = dec.state, dec.replicas
        out.append(dec)
    return out


def run(points: list[float], spec: TuningSpec = SPEC, replicas: int = 1) -> list[int]:
    return [d.replicas for d in decisions(points, spec, replicas)]


def memory(loads: list[float], step: float = 30.0, horizon: float = HORIZON_S) -> sizing.Memory:
    mem = sizing.Memory()
    for i, x in enumerate(loads):
        mem = sizing.learn(mem, i * step, x, horizon)
    return mem


def steady(level: float, ticks: int = 20) -> TuningState:
    """A state that has seen `level` held for a while: growth 1 at that load."""
    return TuningState(sizing=memory([level] * ticks))


def test_a_tick_is_labelled_once_two_horizons_have_passed_with_what_they_brought() -> None:
    mem = memory([100.0, 100.0, 300.0, 100.0, 100.0, 100.0], horizon=60.0)
    # tick 0 (t=0): the next 60 s reach 300 (t=60), the next 120 s too
    first = mem.labels[0]
    assert first[0] == 0.0 and first[1] == 100.0
    assert first[3] == pytest.approx(301 / 101) and first[4] == pytest.approx(301 / 101)
    assert first[2] == 0.0  # no tick one horizon before it: flat
    # the last labelled tick is t=30 (t=30 + 120 <= 150); t=60.. still wait
    assert [lab[0] for lab in mem.labels] == [0.0, 30.0]
    assert mem.labels[1][3] == pytest.approx(301 / 101)
    # kept: the unlabelled ticks and the horizon before them (the trend's reference)
    assert [t for t, _, _ in mem.loads] == [0.0, 30.0, 60.0, 90.0, 120.0, 150.0]
    # t=120 is 100 where t=60, one horizon before, was 300: falling; t=90 is flat
    assert mem.loads[4][2] == pytest.approx(math.log(101 / 301)) and mem.loads[3][2] == 0.0


def test_a_load_falling_through_a_level_is_not_sized_for_the_rise_through_it() -> None:
    """A day passes each load twice: rising, the next horizon grows; falling, it does not.
    The trend tells the two apart, so the falling side gives its replicas back."""
    day = [1000.0 + 900.0 * math.sin(2 * math.pi * i / 40) for i in range(120)]  # 10 min
    # tick 82 rises through ~1,280 req/s in the third day, tick 98 falls through it
    assert day[82] == pytest.approx(day[98], rel=0.01) and day[83] > day[82] and day[97] > day[98]
    up = sizing.size(memory(day[:83], 15.0, 60.0), day[82], 60.0, 0.95)
    down = sizing.size(memory(day[:99], 15.0, 60.0), day[98], 60.0, 0.95)
    assert up.growth > 1.2 and down.growth == 1.0 and down.rps < up.rps
    # what is kept falling: the busiest load of the last two horizons, grown by nothing
    assert down.hold_rps == pytest.approx(max(day[99 - 9 : 99]))


def test_between_recurring_bursts_the_burst_is_kept_once_not_grown_by_itself() -> None:
    """A quiet load whose next horizon often brings a burst is sized for the burst, and keeps
    what the burst needs. The burst's own ticks grow by nothing: what is kept is not the
    burst x the quiet load's growth (that held the maximum count between bursts)."""
    mem = memory(([100.0] * 14 + [500.0] * 2) * 6 + [100.0] * 9, step=15.0, horizon=60.0)
    got = sizing.size(mem, 100.0, 60.0, 0.95)
    assert got.rps == pytest.approx(500.0)  # 101 x 501/101 - 1
    assert got.hold_rps == pytest.approx(500.0)


def test_before_any_label_the_load_now_is_sized_with_the_cold_growth() -> None:
    got = sizing.size(sizing.Memory(), 200.0, 60.0, 0.95)
    assert got.rps == pytest.approx(200.0 * sizing.COLD_GROWTH) and got.labels == 0
    assert "no horizon" in got.why


def test_recurring_bursts_hold_their_replicas_through_the_quiet_between_them() -> None:
    # a burst to 8,000 for one tick every 5 ticks over 300: the quiet ticks before a burst
    # grow by 27x within a horizon, more than 5% of them.
    pattern = ([300.0] * 4 + [8000.0]) * 12
    replicas = run(pattern)
    burst = max(replicas)
    quiet_late = [n for n, x in zip(replicas[30:], pattern[30:], strict=True) if x == 300.0]
    assert burst > 2 and min(quiet_late) == burst  # held: the pattern has been learned


def test_a_lower_coverage_gives_the_quiet_spells_replicas_back() -> None:
    # a quiet tick grows within one horizon on 2/19 of ticks, within two on 4/19
    pattern = ([300.0] * 19 + [8000.0]) * 6
    held = run(pattern)
    loose = run(pattern, replace(SPEC, coverage=0.5))
    assert min(loose[60:]) < min(held[60:])


def test_a_burst_is_not_sized_for_the_growth_its_quiet_spells_saw() -> None:
    """The growth is read at the load now: a quiet spell's 10x rise is not put on top of
    the burst it rises to."""
    mem = memory(([300.0] * 4 + [3000.0]) * 12)
    quiet = sizing.size(mem, 300.0, HORIZON_S, 0.95)
    burst = sizing.size(mem, 3000.0, HORIZON_S, 0.95)
    assert quiet.rps == pytest.approx(3000.0, rel=0.01)
    assert burst.rps == pytest.approx(3000.0, rel=0.01)


@settings(max_examples=60, deadline=None)
@given(
    loads=st.lists(st.floats(0.0, 5000.0), min_size=1, max_size=40),
    now=st.floats(0.0, 5000.0),
    q=st.tuples(st.floats(0.5, 0.999), st.floats(0.5, 0.999)),
)
def test_the_coverage_moves_the_sizing_monotonically_and_never_below_the_load(
    loads: list[float], now: float, q: tuple[float, float]
) -> None:
    mem = memory(loads)
    lo, hi = sizing.size(mem, now, HORIZON_S, min(q)), sizing.size(mem, now, HORIZON_S, max(q))
    assert now - 1e-9 <= lo.rps <= hi.rps + 1e-9
    assert lo.rps <= lo.hold_rps + 1e-9 and hi.rps <= hi.hold_rps + 1e-9
    assert lo.hold_rps <= hi.hold_rps + 1e-9


def test_labels_are_forgotten_after_the_evidence_window() -> None:
    mem = memory([100.0] * 10 + [1000.0] + [100.0] * 200, step=30.0)
    oldest = min(lab[0] for lab in mem.labels)
    newest = max(lab[0] for lab in mem.labels)
    assert newest - oldest < sizing.EVIDENCE_S
    assert all(lab[3] == pytest.approx(1.0) for lab in mem.labels)  # the rise is forgotten


def test_a_scale_down_waits_until_the_lower_count_covers_two_horizons() -> None:
    """What is kept must cover two horizons (a reversal is counted over two pod starts):
    a load that doubles every third tick keeps its replicas through the dips."""
    pattern = ([3000.0, 3000.0, 6000.0]) * 20
    replicas = run(pattern)
    assert min(replicas[20:]) == max(replicas[20:])


def test_a_scale_up_within_two_pod_starts_of_a_scale_down_is_a_reversal() -> None:
    state = TuningState(
        last_time_s=0.0, last_rps=300.0, last_pending=0.0, last_scale_down_s=0.0, startup_s=60.0
    )
    up = decide(obs(30.0, 3000.0, 1, peak=3000.0), SPEC, state)
    assert up.kind.startswith("scale-up") and up.reversal
    assert "reverses the scale-down of 30 s ago" in up.reason
    later = decide(obs(150.0, 3000.0, 1, peak=3000.0), SPEC, replace(state, last_time_s=120.0))
    assert later.kind.startswith("scale-up") and not later.reversal  # 150 s > 2 x 60 s


def test_a_breach_at_a_load_the_replicas_were_sized_for_counts_as_more_load() -> None:
    """Bursts shorter than a scrape interval hide in the rate window; the SLO breach says the
    load was more than the replicas served."""
    state = TuningState(last_time_s=P99_WINDOW_S, last_rps=2500.0, last_pending=0.0)
    t = 2 * P99_WINDOW_S

    def two_ticks(p99: float) -> Decision:  # one bad window may be a burst: a second
        first = decide(obs(t, 2500.0, 3, peak=2500.0, p99=p99), SPEC, state)
        return decide(obs(t + SPEC.interval_s, 2500.0, 3, peak=2500.0, p99=p99), SPEC, first.state)

    calm, hot = two_ticks(10.0), two_ticks(90.0)
    assert hot.replicas > calm.replicas and "p99 90 ms > SLO 50 ms on 3 replicas" in hot.reason
    assert hot.state.sizing.loads[-1][1] > calm.state.sizing.loads[-1][1] == 2500.0


def test_the_learned_horizon_follows_the_pod_start_seen() -> None:
    state = replace(TuningState(), startup_s=300.0)
    horizon = 300.0 + SPEC.interval_s
    t = 0.0
    while t <= 2 * horizon + SPEC.interval_s:
        dec = decide(obs(t, 500.0, 2, peak=500.0), SPEC, state)
        state = dec.state
        # a tick is labelled once two of its horizons (pod start + tick) have passed
        labelled = math.isfinite(state.sizing.labelled_to_s)
        assert labelled == (t >= 2 * horizon), t
        t += SPEC.interval_s


def test_refusals_from_before_new_replicas_were_ready_are_not_arrivals() -> None:
    """Seen on bert-base-like step x4: the 60 s window still held the refusals of the minute
    before the new replicas were ready, and 7,713 served + 1,875 refused read as 9,583 req/s
    arriving where 7,200 arrived: one replica too many for ten minutes. The busiest recent
    interval (which counts refusals) bounds what arrives."""
    state = replace(steady(7300.0), last_time_s=0.0, last_rps=7700.0, last_pending=0.0)
    stale = obs(30.0, 7713.0, 3, rejected=1875.0)
    bounded = decide(replace(stale, peak_rps=7300.0), SPEC, state)
    unbounded = decide(stale, SPEC, state)  # no peak series: the window is all there is
    assert bounded.replicas < unbounded.replicas
    assert "9,588 rps" in unbounded.reason and "9,588" not in bounded.reason


def test_a_served_rate_past_the_busiest_recent_interval_is_not_arrivals() -> None:
    """Seen on bert-base-like step x4 at 15 s ticks: just after two new pods were ready the
    pods' summed window rates read 8,001 req/s where 7,200 arrived (the old pod's window
    still held its saturated minute, the new pods' their present), and a 4th replica was
    added. What arrives is at most the busiest recent interval."""
    state = replace(steady(6700.0), last_time_s=0.0, last_rps=6660.0, last_pending=0.0)
    inflated = obs(15.0, 7400.0, 3)  # the same 11% above what arrives, at this SPEC's scale
    bounded = decide(replace(inflated, peak_rps=6700.0), SPEC, state)
    unbounded = decide(inflated, SPEC, state)
    assert bounded.replicas == 3 < unbounded.replicas
    assert "7,400 rps now" in unbounded.reason and "7,400 rps now" not in bounded.reason


def test_trend_predicts_a_steady_rise_and_nothing_else() -> None:
    rising = tuple((t, 100.0 + t) for t in range(0, 600, 30))
    assert trend(rising, 570.0, 60.0) == pytest.approx(100.0 + 630.0)
    assert trend(tuple((t, 500.0 - t / 2) for t in range(0, 600, 30)), 570.0, 60.0) is None
    rng = np.random.default_rng(3)
    noise = tuple((float(t), float(rng.uniform(0, 1000))) for t in range(0, 600, 30))
    assert trend(noise, 570.0, 60.0) is None
    assert trend(rising[:3], 60.0, 60.0) is None  # too few points
    steep = tuple((t, 1.0 + 10.0 * t) for t in range(0, 600, 30))
    assert trend(steep, 570.0, 6000.0) == pytest.approx(MAX_RISE * steep[-1][1])


def test_the_forecast_floors_replicas_only_when_switched_on() -> None:
    history = tuple((float(t), 100.0 + 10.0 * t) for t in range(0, 600, 30))
    now = replace(obs(600.0, 5800.0, 4, peak=5800.0), rate_history=history)
    state = TuningState(last_time_s=570.0, last_rps=5800.0, last_pending=0.0, startup_s=300.0)
    # the trend looks 330 s ahead
    off = decide(now, SPEC, state)
    on = decide(now, replace(SPEC, forecast=True), state)
    assert on.replicas > off.replicas and "trend" in on.reason


def _sample(t: float, served: dict[int, float], rejected: dict[int, float]) -> Sample:
    counters = {}
    for pod, n in served.items():
        row = np.zeros(6)
        row[SUCCESS] = n
        counters[pod] = row
    return Sample(time_s=t, counters=counters, p99_s={}, pending=0, rejected=rejected)


def test_the_simulators_peak_is_the_busiest_scrape_interval_served_plus_refused() -> None:
    samples = [
        _sample(0.0, {1: 0.0}, {1: 0.0}),
        _sample(15.0, {1: 150.0}, {1: 0.0}),  # 10/s
        _sample(30.0, {1: 450.0, 2: 0.0}, {1: 150.0}),  # 20/s + 10/s refused
        _sample(45.0, {1: 600.0, 2: 150.0}, {1: 150.0}),  # 10/s + 10/s on the new pod
    ]
    assert peak_rate(samples, -1.0) == pytest.approx(30.0)
    assert peak_rate(samples, 31.0) == pytest.approx(20.0)  # only intervals ending after
    assert peak_rate(samples[:1], -1.0) is None


def test_prometheus_peak_query_counts_refusals_and_covers_every_model() -> None:
    query = build_queries("1m")["peak_rps"]
    assert query.startswith("max_over_time(") and "[1m:15s]" in query
    assert 'reason=~"|REJECTED"' in query and "sum by (namespace, batchedmodel)" in query


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("1m", 60), ("1m30s", 90), ("2h", 7200), ("500ms", 0.5)]
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "10", "1x", "s1"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="PromQL duration"):
        duration_s(text)


def test_range_replies_parse_per_model_oldest_first() -> None:
    reply = [
        {
            "metric": {"namespace": "ml", "batchedmodel": "a"},
            "values": [[20, "2"], [10, "1"], [30, "NaN"]],
        },
        {"metric": {"namespace": "ml"}, "values": [[10, "1"]]},
    ]
    assert parse_matrix(reply) == {("ml", "a"): ((10.0, 1.0), (20.0, 2.0))}


def test_startup_time_is_learned_when_the_last_new_replica_is_ready() -> None:
    state = TuningState(last_scale_up_s=0.0, last_starting_s=30.0, last_time_s=30.0)
    starting = replace(obs(60.0, 100.0, 2), ready_replicas=1)
    assert _learn_startup(state, starting, 60.0) is None  # still starting
    assert _learn_startup(state, obs(60.0, 100.0, 2), 60.0) == 60.0
    learned = replace(state, startup_s=20.0)
    assert _learn_startup(learned, obs(60.0, 100.0, 2), 60.0) == 40.0  # EWMA
    later = replace(learned, last_time_s=45.0)  # a tick passed since the start completed
    assert _learn_startup(later, obs(60.0, 100.0, 2), 60.0) == 20.0
