"""Burst-aware replicas: the remembered peak, the burst factor, the forecast, and the
peak each observer reports (the simulator's scrapes and the Prometheus queries)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from batchop.observe.prometheus import build_queries, duration_s, parse_matrix
from batchop.sim.scrape import SUCCESS, Sample, peak_rate
from batchop.tuning.forecast import MAX_RISE, trend
from batchop.tuning.policy import (
    BURST_MAX,
    DOWN_HEADROOM,
    HEADROOM,
    LEVEL_DOWN_HEADROOM,
    LEVEL_S,
    P99_WINDOW_S,
    SHORT_MEMORY_S,
    _faded,
    _latency,
    _learn_startup,
    _Model,
    decide,
)
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
    peak_memory_s=300.0,
)
LEVEL_TICKS = int(LEVEL_S // SPEC.interval_s) + 2  # a load held this long is a level


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


def decisions(
    points: list[tuple[float, float | None]], spec: TuningSpec = SPEC, replicas: int = 1
) -> list[Decision]:
    """Feed (mean rate, peak rate) per tick; the cluster follows every decision."""
    state, out = TuningState(), []
    for i, (rps, peak) in enumerate(points):
        dec = decide(obs(i * spec.interval_s, rps, replicas, peak=peak), spec, state)
        state, replicas = dec.state, dec.replicas
        out.append(dec)
    return out


def run(
    points: list[tuple[float, float | None]], spec: TuningSpec = SPEC, replicas: int = 1
) -> list[int]:
    return [d.replicas for d in decisions(points, spec, replicas)]


def test_a_short_burst_sizes_replicas_by_its_peak_not_the_windows_mean() -> None:
    quiet = run([(300.0, 300.0)] * 4)[-1]
    burst = run([(300.0, 300.0)] * 4 + [(500.0, 3000.0)])[-1]
    assert burst > quiet


def test_replicas_are_held_between_bursts_for_the_memory_then_given_back() -> None:
    ticks = [(300.0, 3000.0)] + [(300.0, 300.0)] * 30
    replicas = run(ticks)
    held = int(SPEC.peak_memory_s // SPEC.interval_s)
    assert min(replicas[:held]) == replicas[0] > 1  # held through the memory
    assert replicas[-1] < replicas[0]  # then the peak fades and replicas go


def test_with_no_memory_the_window_alone_holds_replicas() -> None:
    spec = replace(SPEC, peak_memory_s=0.0)
    replicas = run([(300.0, 3000.0)] + [(300.0, 300.0)] * 6, spec)
    assert replicas[0] > 1 and replicas[-1] < replicas[0]


def test_the_remembered_peak_fades_linearly_after_the_memory() -> None:
    assert _faded(1000.0, 0.0, 300.0, 300.0) == 1000.0
    assert _faded(1000.0, 0.0, 450.0, 300.0) == pytest.approx(500.0)
    assert _faded(1000.0, 0.0, 600.0, 300.0) == 0.0


def _sized(state_peak: float, factor: float = 1.0) -> TuningState:
    return TuningState(
        peak_rps=state_peak,
        peak_at_s=0.0,
        burst_factor=factor,
        last_time_s=0.0,
        last_rps=600.0,
        last_pending=0.0,
    )


def test_a_breach_at_a_load_sized_for_raises_the_burst_factor_and_replicas() -> None:
    state = _sized(2500.0)
    calm = decide(obs(P99_WINDOW_S + 30, 2500.0, 2, peak=2500.0), SPEC, state)
    hot = decide(obs(P99_WINDOW_S + 30, 2500.0, 2, peak=2500.0, p99=90.0), SPEC, state)
    assert calm.state.burst_factor == 1.0
    assert hot.state.burst_factor > 1.0 and hot.replicas > calm.replicas
    assert "burst factor" in hot.reason
    # one raise per event: the next tick, within Triton's p99 window, does not raise again
    again = decide(
        obs(P99_WINDOW_S + 60, 2500.0, hot.replicas, peak=2500.0, p99=90.0), SPEC, hot.state
    )
    assert again.state.burst_factor == hot.state.burst_factor


def test_refusals_at_a_load_sized_for_raise_the_burst_factor_too() -> None:
    # The peak counts refusals too (the arrivals' busiest interval): 600 served + 30 refused.
    dec = decide(obs(P99_WINDOW_S + 30, 600.0, 2, peak=630.0, rejected=30.0), SPEC, _sized(630.0))
    assert dec.state.burst_factor > 1.0 and "refused" in dec.reason


def test_refusals_from_before_new_replicas_were_ready_are_not_arrivals() -> None:
    """Seen on bert-base-like step x4: the 60 s window still held the refusals of the minute
    before the new replicas were ready, and 7,713 served + 1,875 refused read as 9,583 req/s
    arriving where 7,200 arrived: one replica too many for ten minutes. The busiest recent
    interval (which counts refusals) bounds what arrives."""
    state = TuningState(last_time_s=0.0, last_rps=7700.0, last_pending=0.0)
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
    state = TuningState(last_time_s=0.0, last_rps=6480.0, last_pending=0.0)
    inflated = obs(15.0, 7201.0, 3)  # the same 11% above what arrives, at this SPEC's scale
    bounded = decide(replace(inflated, peak_rps=6505.0), SPEC, state)
    unbounded = decide(inflated, SPEC, state)
    assert bounded.replicas == 3 < unbounded.replicas
    assert "7,201 rps arriving" in unbounded.reason and "arriving" not in bounded.reason


def _after_start(t: float, **kw: float) -> TuningState:
    """The previous tick (t - 30) saw replicas starting; this one sees them all ready."""
    return TuningState(
        last_time_s=t - 30.0,
        last_starting_s=t - 30.0,
        last_rps=2500.0,
        last_pending=0.0,
        peak_rps=2500.0,
        peak_at_s=0.0,
        **kw,
    )


def test_the_p99_counts_from_the_first_tick_with_every_replica_ready() -> None:
    """Replicas become ready between the tick that last saw one starting and the next, so
    Triton's minute-long p99 shows only the new replicas P99_WINDOW_S after the first tick
    that sees them all ready: a p99 over the SLO before that neither teaches the burst
    factor nor forces a scale-up."""
    t0 = 300.0
    state = _after_start(t0)
    t, seen = t0, []
    while t < t0 + P99_WINDOW_S:  # the last tick that saw a replica starting is > 60 s old
        dec = decide(obs(t, 2500.0, 2, peak=2500.0, p99=90.0), SPEC, state)
        seen.append(dec)
        state, t = dec.state, t + SPEC.interval_s
    assert t - SPEC.interval_s - (t0 - 30.0) >= P99_WINDOW_S  # the old clock had started
    assert all(d.replicas == 2 and d.state.burst_factor == 1.0 for d in seen)
    dec = decide(obs(t, 2500.0, 2, peak=2500.0, p99=90.0), SPEC, state)
    assert dec.state.burst_factor > 1.0 and dec.replicas > 2  # now it is the present


def test_rising_refusals_are_the_present_before_the_p99_is() -> None:
    """Refusals are counters: a refused rate that rises just after a start is a new burst
    (azure-code: the next burst 30-50 s after the replicas were ready), while a falling one
    is the window emptying of the past."""
    t0 = 300.0
    rising = decide(
        obs(t0, 600.0, 2, peak=630.0, rejected=30.0), SPEC, _after_start(t0, last_refused_rps=0.0)
    )
    assert rising.state.burst_factor > 1.0 and "refused" in rising.reason
    falling = decide(
        obs(t0, 600.0, 2, peak=630.0, rejected=30.0), SPEC, _after_start(t0, last_refused_rps=60.0)
    )
    assert falling.state.burst_factor == 1.0
    # Within a rate window of a scale-up the window still fills with the refusals of the load
    # that scale-up answered (a step: seen at 15 s ticks, burst factor 1.89, 6 replicas for 2).
    answered = decide(
        obs(t0, 600.0, 2, peak=630.0, rejected=30.0),
        SPEC,
        _after_start(t0, last_refused_rps=0.0, last_scale_up_s=t0 - 30.0),
    )
    assert answered.state.burst_factor == 1.0


def test_a_breach_at_a_new_higher_peak_is_the_peaks_not_the_factors() -> None:
    dec = decide(obs(P99_WINDOW_S + 30, 600.0, 1, peak=3000.0, p99=90.0), SPEC, _sized(600.0))
    assert dec.state.burst_factor == 1.0 and dec.state.peak_rps == 3000.0


def test_the_burst_factor_is_bounded_and_relaxes_when_tested_without_trouble() -> None:
    state = _sized(600.0, factor=BURST_MAX)
    hot = decide(obs(P99_WINDOW_S + 30, 600.0, 8, peak=600.0, p99=90.0), SPEC, state)
    assert hot.state.burst_factor == BURST_MAX
    calm = decide(obs(P99_WINDOW_S + 30, 600.0, 8, peak=600.0, p99=10.0), SPEC, state)
    assert calm.state.burst_factor < BURST_MAX
    untested = decide(obs(P99_WINDOW_S + 30, 100.0, 8, peak=100.0, p99=10.0), SPEC, state)
    assert untested.state.burst_factor == BURST_MAX  # a light load proves nothing


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
    state = replace(_sized(5800.0), startup_s=300.0)  # the trend looks 330 s ahead
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


def test_a_one_off_rise_is_forgotten_sooner_than_a_burst_that_came_back() -> None:
    """A level that fell and never came back holds replicas for SHORT_MEMORY_S; once a
    burst has come back after a quiet spell, the long memory holds them."""
    spec = replace(SPEC, peak_memory_s=900.0)
    one_off = [(3000.0, 3000.0)] * 3 + [(300.0, 300.0)] * 20
    kept = run(one_off, spec)
    short_ticks = int(SHORT_MEMORY_S // spec.interval_s)
    # held, fading over as long again, gone (+ the scale-down window) within 2 x SHORT_MEMORY_S
    assert kept[2] > 1 and kept[2 + 2 * short_ticks + 3] < kept[2]
    recurring = [(3000.0, 3000.0)] * 3 + [(300.0, 300.0)] * 4 + [(3000.0, 3000.0)] * 2
    recurring += [(300.0, 300.0)] * 20
    held = run(recurring, spec)
    assert held[8 + 2 * short_ticks + 3] == held[8] > 1  # still held where the one-off was not


def test_startup_time_is_learned_when_the_last_new_replica_is_ready() -> None:
    state = TuningState(last_scale_up_s=0.0, last_starting_s=30.0, last_time_s=30.0)
    starting = replace(obs(60.0, 100.0, 2), ready_replicas=1)
    assert _learn_startup(state, starting, 60.0) is None  # still starting
    assert _learn_startup(state, obs(60.0, 100.0, 2), 60.0) == 60.0
    learned = replace(state, startup_s=20.0)
    assert _learn_startup(learned, obs(60.0, 100.0, 2), 60.0) == 40.0  # EWMA
    later = replace(learned, last_time_s=45.0)  # a tick passed since the start completed
    assert _learn_startup(later, obs(60.0, 100.0, 2), 60.0) == 20.0


def test_a_smaller_burst_during_a_held_peak_holds_its_replicas_once_that_peak_fades() -> None:
    """azure-code: a burst smaller than the remembered peak came while that peak was held;
    with one slot it was forgotten and replicas went before it came back. Once bursts recur
    it is kept, and takes over when the larger peak has faded below it."""
    quiet = [(300.0, 300.0)] * 4
    big = [(6000.0, 12000.0)]
    small = [(3000.0, 6000.0)]
    recurring = big + quiet + big + quiet  # the big burst came back: bursts recur
    after = [(300.0, 300.0)] * 25
    with_small = run(recurring + small + after)
    without = run(recurring + after + [(300.0, 300.0)])
    states = [d.state for d in decisions(recurring + small + after)]
    s = len(recurring)  # the small burst's tick
    assert states[s].bursts_recur and states[s].peak_rps == 12000.0
    assert states[s].next_peak_rps == 6000.0 and states[s].next_peak_at_s == s * SPEC.interval_s
    # the big peak (last seen at tick 5) is held 300 s and fades over 300 s, gone at tick 25;
    # the small one (tick 10) fades from tick 20 to 30: at tick 25 it holds half of 6,000
    t25 = 25
    assert states[t25].peak_rps == 6000.0  # the small burst has taken over
    assert with_small[t25] > without[t25]
    assert with_small[-1] == without[-1] == 1  # and it fades too


def test_a_lower_peak_is_not_kept_before_bursts_recur() -> None:
    # a one-off level (a step) that fell: nothing below it is kept, it fades as before
    points = [(6000.0, 12000.0)] * 2 + [(3000.0, 6000.0)] + [(300.0, 300.0)] * 3
    states = [d.state for d in decisions(points)]
    assert not states[-1].bursts_recur
    assert all(s.next_peak_rps == 0.0 for s in states)


def test_a_level_that_falls_is_given_back_through_the_window_not_held() -> None:
    """diurnal: the remembered peak held a falling load's replicas 4-6 minutes. A load near
    its peak for LEVEL_S with no burst in the window is a level: when it falls (the window's
    mean lagging the load, as Prometheus reads it) its replicas go through the scale-down
    window, where a rise as high but shorter is held for SHORT_MEMORY_S."""
    fall = [(2000.0, 300.0), (1000.0, 300.0)] + [(300.0, 300.0)] * 20
    level = run([(3000.0, 3000.0)] * LEVEL_TICKS + fall)
    short = run([(3000.0, 3000.0)] * 3 + fall)
    base = run([(300.0, 300.0)] * 4)[-1]
    window_ticks = int(SPEC.scale_down_window_s // SPEC.interval_s)
    after = 2 + window_ticks + 1  # the lagging fall, the window, one tick to act
    assert level[LEVEL_TICKS - 1] == short[2] > base
    assert level[LEVEL_TICKS + after] == base
    assert short[3 + after] > base  # the one-off rise is still held there
    assert min(short[3 : 3 + int(SHORT_MEMORY_S // SPEC.interval_s)]) == short[2]


def test_a_quiet_spell_under_a_held_burst_is_never_a_level() -> None:
    """bursty: bursts some 5 minutes apart. The quiet between them is calm, but far under the
    burst held: it does not become a level, so the burst's replicas stay for the next."""
    spec = replace(SPEC, peak_memory_s=600.0)
    cycle = [(3000.0, 3000.0)] * 2 + [(300.0, 300.0)] * LEVEL_TICKS
    points = cycle * 3
    decs = decisions(points, spec)
    base = run([(300.0, 300.0)] * 4, spec)[-1]
    end_of_second_quiet = 2 * len(cycle) - 1
    assert decs[end_of_second_quiet].replicas == decs[len(cycle)].replicas > base
    assert all(d.state.level_since_s is None for d in decs[len(cycle) + 2 : 2 * len(cycle)])


def test_a_burst_in_the_window_ends_a_level_and_its_peak_is_held() -> None:
    steady = [(1000.0, 1000.0)] * LEVEL_TICKS
    decs = decisions(steady + [(1200.0, 3000.0)] + [(1000.0, 1000.0)] * 4)
    assert decs[LEVEL_TICKS - 1].state.level_since_s == 0.0  # a level
    burst = decs[LEVEL_TICKS]
    assert burst.state.level_since_s is None and burst.state.peak_rps == 3000.0
    assert min(d.replicas for d in decs[LEVEL_TICKS:]) == burst.replicas > decs[0].replicas


def test_triton_p99_after_a_fast_scale_up_is_believed_a_window_after_the_pods_were_seen() -> None:
    """cpu-demo step (pods ready in 5 s, ticks 15 s apart): no tick saw the new pods start,
    so the settle clock ran from the scale-up; a window later Triton's p99 summary still held
    the queue that built before them and drained once they were ready (32.5 ms there, 13 ms
    a tick later), and read as a breach at a load sized for: burst factor up, a 4th pod, the
    model's correction 0.84 -> 1.15. The clock runs from the first tick that sees them."""
    state = replace(_sized(2500.0), last_rps=2500.0, last_scale_up_s=0.0)
    ticks = [30.0 * k for k in range(1, int(P99_WINDOW_S // 30.0) + 3)]
    decs = []
    for t in ticks:
        dec = decide(obs(t, 2500.0, 2, peak=2500.0, p99=90.0), SPEC, state)
        state = dec.state
        decs.append(dec)
    assert decs[0].state.ready_at_s == 30.0
    window = int(P99_WINDOW_S // 30.0)  # the tick P99_WINDOW_S after the scale-up
    assert all(d.state.burst_factor == 1.0 and d.replicas == 2 for d in decs[:window])
    assert decs[window].state.burst_factor > 1.0  # a window after the first ready tick


def test_a_breach_during_a_level_still_raises_the_burst_factor() -> None:
    """A level keeps only the last tick's peak, not none: the burst factor learns from a
    breach at the load it was sized for, so a forced scale-up is not given back by the
    model a window later (with no peak at all it could not, and the count would flap)."""
    decs = decisions([(1000.0, 1000.0)] * LEVEL_TICKS)
    state, n = decs[-1].state, decs[-1].replicas
    assert state.level_since_s == 0.0
    hot = decide(obs(LEVEL_TICKS * SPEC.interval_s, 1000.0, n, peak=1000.0, p99=90.0), SPEC, state)
    assert hot.state.burst_factor > 1.0 and hot.replicas > n


def test_a_level_gives_back_a_replica_the_burst_hysteresis_would_hold() -> None:
    """cpu-demo and resnet50-like diurnal: 15% more load on top of the margin and the headroom
    held a replica the level did not need. A level moves by a percent or two between ticks,
    so a lower count there must pass with LEVEL_DOWN_HEADROOM more, not DOWN_HEADROOM; until
    the load has been a level for LEVEL_S the wider hysteresis holds."""
    rate = 4300.0  # 2 replicas fit it with 5% on top, not with 15%
    model = _Model(SPEC, _latency(SPEC, ()), 1.0)
    plan = rate * (1 + HEADROOM)
    assert model.replicas_for(plan * (1 + LEVEL_DOWN_HEADROOM), 1, 16, 0) == 2
    assert model.replicas_for(plan * (1 + DOWN_HEADROOM), 1, 16, 0) == 3
    seen = model.at(rate / 3, 0)  # what Triton shows: the model is right, nothing to correct
    state, n, counts = TuningState(), 3, []
    for i in range(LEVEL_TICKS + 4):
        now = replace(
            obs(i * SPEC.interval_s, rate, n, peak=rate),
            p99_ms=seen.p99_ms,
            avg_batch=seen.avg_batch,
            compute_ms=seen.exec_ms,
        )
        dec = decide(now, SPEC, state)
        state, n = dec.state, dec.replicas
        counts.append(n)
    before_level = int(LEVEL_S // SPEC.interval_s)
    assert counts[:before_level] == [3] * before_level
    assert counts[-1] == 2 and counts[-2:] == [2, 2]  # given back, and it stays given back
