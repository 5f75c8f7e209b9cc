"""The tuning policy: replicas first (fewest that keep p99 under the SLO), then the delay.

`decide` is pure and deterministic: the operator and the simulator both call it with an
`Observation` and the `TuningState` it returned last time. Its steps (2: `_read` and the
learning in `decide`; 3: `_demand`; 4: `_choose_replicas`; 5: `_choose_delay`):

1. Hold when metrics are missing or stale: never act on data that may not be true. (No
   traffic at all is not missing data: it lets replicas fall to the minimum.)
2. Learn, from steady states only (no change, nothing starting, rate and queue steady for
   SETTLE_INTERVALS): the batch-latency curve from (avg batch, compute ms), and a correction
   of the queueing model by observed / predicted p99 at the running configuration.
3. Demand: the load now (served + refused + the queue's growth, served and refused no
   more than the busiest recent interval shows, since the window may predate replicas now
   ready; or that busiest interval), times the growth the next horizon (a pod start plus a
   tick) brings at spec.coverage, learned online from the model's own history
   (tuning.sizing); with spec.forecast, floored by a trend. After a start, the settle clock
   runs from the first tick with every replica ready (also after a scale-up no tick saw
   starting).
4. Replicas: the fewest whose predicted p99 (at the smallest delay) stays under MARGIN x SLO
   at that demand (under the SLO itself where maxReplicas would keep the SLO but not the
   margin: no count buys that margin), counting replicas still starting, within [min, max]
   and what the cluster can schedule. Up at once (several if needed); down only when the
   lower count also serves what the sizing keeps (the busiest load of the last two horizons
   at half the risk), and then only to the highest such recommendation over the scale-down
   window: the same sizing in both directions, so a scale-down is not undone by the growth
   the sizing already expected; and never while the observed p99 breaks the SLO. An observed
   p99 over the SLO on two settled ticks forces a scale-up even when the model disagrees,
   unless the delay explains it, a past backlog is draining, or a change or a fall in load
   happened within P99_WINDOW_S (Triton's p99 summary then still shows the past). A scale-up
   within two pod starts of a scale-down is a reversal: the decision says so (it is counted
   and raised as an Event).
5. Delay: the one that spends the least GPU time per inference while the predicted p99 keeps
   the margin, the smallest among near-equals (near capacity the delay buys nothing). Cut at
   once; raised only to the least delay recommended over DELAY_UP_WINDOW_S, with the wider
   UP_MARGIN, and only while the observed p99 plus the added delay keeps that margin too.
   A change must be worth a reload: >= DELAY_MIN_CHANGE relative, and either >= GPU_MIN_GAIN
   less GPU time per inference or a needed latency cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from batchop.tuning import curve as curve_mod
from batchop.tuning import sizing
from batchop.tuning.forecast import trend
from batchop.tuning.model import (
    LatencyCurve,
    Prediction,
    capacity_rps,
    predict,
)
from batchop.tuning.types import Decision, Observation, TuningSpec, TuningState

MARGIN = 0.85  # plan for p99 <= MARGIN x SLO
HEADROOM = sizing.COLD_GROWTH - 1  # `batchop plan` sizes a steady rate as a cold start does
STALE_INTERVALS = 2.5  # samples older than this many intervals are stale
SETTLE_INTERVALS = 3  # after a change, windowed rates and p99 mix old and new this long
STABILISATION_S = 60.0  # default scale-down window (TuningSpec.scale_down_window_s)
DELAY_MIN_CHANGE = 0.2  # relative delay change below which no reload is worth it
GPU_MIN_GAIN = 0.05  # GPU time per inference a delay change must save
DELAY_UP_WINDOW_S = 120.0  # the delay rises only when every recommendation this long agrees
UP_MARGIN = 0.9  # a longer delay must keep p99 under this share of the target
NEAR_BEST = 0.02  # delays within this of the best GPU time count as equal; take the smallest
CORRECTION_ALPHA = 0.3  # EWMA weight of a new observed/predicted p99 ratio
CORRECTION_BOUNDS = (0.5, 1.5)
STEADY_RATE_CHANGE = 0.1  # rate or queue changes beyond this share of the rate: not steady
RISING = 0.02  # a rate up by more than this share since the last tick is rising
BREACH_STEP = 1.5  # an observed breach scales up by at most this factor per tick
REFUSED_BREACH = 0.005  # refusing more than this share of arrivals breaks the SLO too
DEFAULT_STARTUP_S = 30.0  # replicas' startup until one has been seen
P99_WINDOW_S = 60.0  # Triton's p99 summary still shows the past this long after a change or a fall
DELAY_CEILING_S = 900.0  # how long a raise that broke the target bars that delay again
DELAY_CEILING_SHARE = 0.8  # ... at rates per replica from this share of the one it failed at
DELAY_GRID_US = (
    0,
    100,
    200,
    300,
    500,
    700,
    1000,
    1500,
    2000,
    3000,
    4000,
    5000,
    7000,
    10000,
    15000,
    20000,
    30000,
    50000,
    100000,
)


@dataclass(frozen=True)
class Plan:
    """A recommended starting configuration for a rate (what `batchop plan` prints)."""

    rps: float
    replicas: int
    delay_us: int
    predicted_p99_ms: float
    avg_batch: float
    gpu_ms_per_inference: float
    busy: float  # GPU busy fraction per replica
    rps_per_gpu: float  # the rate served per allocated GPU (per replica for a CPU model)
    capacity_rps_per_replica: float  # most one replica serves at the SLO margin
    feasible: bool  # False: even max replicas miss the margin
    slo_ms: float
    target_ms: float


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def _fmt_ms(x: float) -> str:
    if not math.isfinite(x):
        return "inf"
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _delay_grid(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(sorted({lo, hi, *(d for d in DELAY_GRID_US if lo <= d <= hi)}))


def _p99(pred: Prediction, correction: float) -> float:
    return pred.p99_ms * correction


class _Model:
    """Predictions for one tick: the curve, the bounds and the correction, bound together."""

    def __init__(self, spec: TuningSpec, latency: LatencyCurve, correction: float) -> None:
        self.spec = spec
        self.latency = latency
        self.correction = correction
        self.target = MARGIN * spec.slo_ms
        self.delays = _delay_grid(spec.min_delay_us, spec.max_delay_us)
        self._cache: dict[tuple[float, int], Prediction] = {}

    def at(self, rate: float, delay_us: int) -> Prediction:
        key = (rate, delay_us)
        if key not in self._cache:
            self._cache[key] = predict(rate, delay_us, self.spec.max_batch_size, self.latency)
        return self._cache[key]

    def p99(self, rate: float, delay_us: int) -> float:
        return _p99(self.at(rate, delay_us), self.correction)

    def fits(self, rate: float, delays: tuple[int, ...]) -> bool:
        return any(self.p99(rate, d) <= self.target for d in delays)

    def replicas_for(
        self, total_rps: float, lo: int, hi: int, delay_us: int, bound: float | None = None
    ) -> int:
        """Fewest replicas in [lo, hi] whose predicted p99 at `delay_us` keeps `bound` (by
        default `self.bound` at this rate); hi when none does.

        Bisection: the predicted p99 falls as the rate per replica falls.
        """
        lo, hi = max(1, lo), max(1, hi)
        if lo >= hi:
            return lo
        if bound is None:
            bound = self.bound(total_rps / hi, delay_us)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.p99(total_rps / mid, delay_us) <= bound:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def bound(self, rate: float, delay_us: int) -> float:
        """The p99 to size for when `rate` per replica is the least there can be (the load
        over maxReplicas): the margin, or the SLO itself where even that rate misses the
        margin but keeps the SLO.

        Why: there the model's p99 is the compute's own (a request that comes during a batch
        waits for it), flat in the count, and holding maxReplicas buys a margin that no count
        can give (a 3 ms SLO over batches of 1.4 ms held 16 replicas where 2 kept 99.9% of
        requests). At the edge, a load a little lower that keeps the margin at maxReplicas
        is sized for the margin again, with many more replicas: the reason says which.
        """
        at_most = self.p99(rate, delay_us)
        if at_most <= self.target or at_most > self.spec.slo_ms:
            return self.target
        return self.spec.slo_ms

    def best_delay(
        self, rate: float, current: int | None = None, ceiling: int | None = None
    ) -> int:
        """Least GPU time per inference within the margin; smallest among near-equals.

        A delay above `current` must keep a wider margin (UP_MARGIN), so that a delay chosen
        at the edge of the target is not raised and cut again on every tick, and stay below
        `ceiling` (a delay that broke the target when last tried here).
        """
        top = math.inf if current is None else current
        bar = math.inf if ceiling is None else ceiling

        def target(d: int) -> float:
            return self.target if d <= top else UP_MARGIN * self.target

        ok = [d for d in self.delays if (d <= top or d < bar) and self.p99(rate, d) <= target(d)]
        if not ok:
            return min(self.delays, key=lambda d: (self.p99(rate, d), d))
        best = min(self.at(rate, d).gpu_ms_per_inference for d in ok)
        return min(d for d in ok if self.at(rate, d).gpu_ms_per_inference <= best * (1 + NEAR_BEST))


def _effective(spec: TuningSpec) -> TuningSpec:
    """minReplicas 0 counts as 1: with no pod there are no Triton metrics to see demand by,
    so scaling from zero needs an activator this policy does not have."""
    if spec.min_replicas >= 1:
        return spec
    return replace(spec, min_replicas=1, max_replicas=max(1, spec.max_replicas))


def _latency(spec: TuningSpec, buckets: tuple[curve_mod.Bucket, ...]) -> LatencyCurve | None:
    return curve_mod.estimate(buckets, spec.prior_batch_latency_ms, spec.max_batch_size)


def _hold(obs: Observation, spec: TuningSpec, state: TuningState, reason: str) -> Decision:
    replicas = obs.replicas
    if spec.tune_replicas:
        replicas = min(max(replicas, spec.min_replicas), spec.max_replicas)
    delay = obs.delay_us
    if spec.tune_delay:
        delay = min(max(delay, spec.min_delay_us), spec.max_delay_us)
    kind = "hold"
    if (replicas, delay) != (obs.replicas, obs.delay_us):
        kind = "bounds"
        reason += f"; brought within bounds: {replicas} replicas, delay {delay:,} us"
    return Decision(replicas=replicas, delay_us=delay, reason=reason, state=state, kind=kind)


def _replicas(n: int) -> str:
    return f"{n} replica" if n == 1 else f"{n} replicas"


def _missing(obs: Observation) -> list[str]:
    names = ("rps", "avg_batch", "compute_ms", "p99_ms")
    return [n for n in names if getattr(obs, n) is None or not math.isfinite(getattr(obs, n))]


def _learn_startup(state: TuningState, obs: Observation, t: float) -> float | None:
    """How long new replicas took to become ready (EWMA), once the last of them is."""
    started = state.last_scale_up_s
    if obs.starting_replicas > 0 or started is None or state.last_starting_s is None:
        return state.startup_s
    if state.last_starting_s < started or state.last_starting_s != state.last_time_s:
        return state.startup_s  # not the tick right after the start completed
    took = t - started
    return took if state.startup_s is None else 0.5 * state.startup_s + 0.5 * took


def stale_after_s(spec: TuningSpec) -> float:
    """How old the newest sample may be before the tuner holds. Pure.

    Why the scrape interval counts: with a 5 s tuning interval and 15 s scrapes, a bound of
    2.5 tuning intervals (12.5 s) called every third tick's data stale, so MetricsAvailable
    and SLOMet flipped, and each flip was a status write (65 API calls per tick at 200 models).
    """
    return STALE_INTERVALS * max(spec.interval_s, spec.scrape_interval_s)


@dataclass(frozen=True)
class _Reading:
    """Step 2's reading of one observation against the state: what it can be trusted for."""

    t: float
    rps: float
    p99_ms: float  # Triton's p99 (0 when it has none)
    ready: int
    starting: int
    growth: float  # how fast the queue grew: arrivals beyond what was served (req/s)
    p99_current: bool  # Triton's p99 summary shows the present (why: in _read)
    last_fall_s: float | None  # the last tick whose request rate fell
    breaches: int  # consecutive settled ticks with a current p99 over the SLO
    settled: bool  # nothing changed or started for SETTLE_INTERVALS
    steady: bool  # settled, and the rate and the queue steady


def _read(obs: Observation, spec: TuningSpec, state: TuningState) -> _Reading:
    """Step 2: is this a steady state? Rates and p99 are windowed: after a change (or while
    replicas start) they mix old and new, and only a steady state teaches anything."""
    assert obs.rps is not None  # decide holds on a missing rate
    t = obs.time_s
    rps = max(0.0, obs.rps)
    p99_obs = obs.p99_ms if obs.p99_ms is not None else 0.0
    ready = max(0, obs.ready_replicas)
    starting = obs.starting_replicas
    dt = t - state.last_time_s if state.last_time_s is not None else 0.0
    settled_since = max(
        (
            x
            for x in (
                state.last_scale_up_s,
                state.last_scale_down_s,
                state.last_delay_change_s,
                state.last_starting_s,
                state.ready_at_s,
            )
            if x is not None
        ),
        default=-math.inf,
    )
    settled = starting == 0 and t - settled_since >= SETTLE_INTERVALS * spec.interval_s
    growth = 0.0  # how fast the queue grew: arrivals beyond what was served
    if obs.pending is not None and state.last_pending is not None and dt > 0:
        growth = (obs.pending - state.last_pending) / dt
    # Triton's p99 is a summary over its last minute or so: after a change, or when the load
    # falls, it still shows the past (a transient's backlog, a heavier load) while the
    # counters' rates already show the present. Until it has caught up, the observed p99
    # neither forces a scale-up nor blocks a scale-down nor trains the correction.
    falling = state.last_rps is not None and rps < (1 - STEADY_RATE_CHANGE) * state.last_rps
    last_fall_s = t if falling else state.last_rate_fall_s
    p99_since = max(settled_since, last_fall_s if last_fall_s is not None else -math.inf)
    p99_current = starting == 0 and t - p99_since >= P99_WINDOW_S
    breaches = state.slo_breaches + 1 if settled and p99_current and p99_obs > spec.slo_ms else 0
    steady = (
        settled
        and rps > 0
        and ready > 0
        and p99_obs > 0
        and state.last_rps is not None
        and abs(rps - state.last_rps) <= STEADY_RATE_CHANGE * rps
        and abs(growth) <= STEADY_RATE_CHANGE * rps
    )
    return _Reading(
        t,
        rps,
        p99_obs,
        ready,
        starting,
        growth,
        p99_current,
        last_fall_s,
        breaches,
        settled,
        steady,
    )


def decide(obs: Observation, spec: TuningSpec, state: TuningState) -> Decision:
    """The replicas and delay to run next, with the reason; see the module docstring."""
    spec = _effective(spec)
    missing = _missing(obs)
    if obs.rps is not None and obs.rps == 0 and "rps" not in missing:
        missing = []  # no traffic: there is no batch or latency to report, and none is needed
    if missing:
        return _hold(obs, spec, state, f"holding: metrics missing ({', '.join(missing)})")
    stale_after = stale_after_s(spec)
    if obs.age_s > stale_after:
        return _hold(
            obs,
            spec,
            state,
            f"holding: metrics stale ({obs.age_s:.0f} s old > {stale_after:.0f} s)",
        )
    now = _read(obs, spec, state)
    t, rps, p99_obs = now.t, now.rps, now.p99_ms

    # 2. Learn the curve, then the model's correction at the running configuration. From
    # steady ticks: a window whose load moved mixes batch sizes, and its mean execution
    # time then lies below the curve (family bench, every settled tick teaching it: worse
    # on 15 of 48 cases, better on 3). Except while there is no curve at all: a model
    # without a profile whose traffic is never steady (bursts) would otherwise never be
    # tuned (the bursty e2e: its first decision at 165 s, 1 replica throughout, the
    # overload guard refusing 5% of requests).
    buckets = state.curve
    latency = _latency(spec, buckets)
    learns = now.steady or (now.settled and rps > 0 and now.ready > 0 and latency is None)
    if learns and obs.avg_batch is not None and obs.compute_ms is not None:
        buckets = curve_mod.update(buckets, obs.avg_batch, obs.compute_ms)
        latency = _latency(spec, buckets)
    if latency is None:  # no prior and no settled tick with traffic seen yet
        return _hold(
            obs,
            spec,
            replace(state, curve=buckets, last_time_s=t, last_pending=obs.pending, last_rps=rps),
            "holding: no batch-latency data yet (no profile, no settled tick with traffic seen)",
        )
    correction = state.p99_correction
    # Not on a rising load: Triton's p99 summary then shows a lighter past, and a correction
    # learned from it turns optimistic just as replicas are needed (bert-base-like diurnal at
    # 15 s ticks: 0.92 -> 0.81 on the ramp, the scale-up 45 s late, a window lost).
    rising_load = state.last_rps is not None and rps > (1 + RISING) * state.last_rps
    if now.steady and now.p99_current and not rising_load:
        pred = predict(rps / now.ready, obs.delay_us, spec.max_batch_size, latency)
        ratio = p99_obs / pred.p99_ms if pred.stable else math.inf
        if CORRECTION_BOUNDS[0] / 2 <= ratio <= CORRECTION_BOUNDS[1] * 2:
            correction = (1 - CORRECTION_ALPHA) * correction + CORRECTION_ALPHA * ratio
            correction = min(CORRECTION_BOUNDS[1], max(CORRECTION_BOUNDS[0], correction))
    model = _Model(spec, latency, correction)

    # 3. Demand: the load now and what the sizing model expects of the horizon.
    demand, learned = _demand(obs, spec, state, model, now)

    # 4. Replicas.
    scaled = _choose_replicas(obs, spec, state, model, now, demand)
    cur_n, replicas = obs.replicas, scaled.replicas
    kind_r, why_r = scaled.kind, scaled.why
    notes = list(scaled.notes)

    # 5. Delay, for the replicas that will serve (the fewer of ready and desired).
    serving = max(1, min(replicas, now.ready) if now.ready > 0 else replicas)
    chosen = _choose_delay(obs, spec, state, model, now, rate=demand.plan_rps / serving)
    delay, kind_d, why_d = chosen.delay_us, chosen.kind, chosen.why
    notes.extend(chosen.notes)

    final = model.at(demand.plan_rps / max(1, replicas), delay)
    new_state = replace(
        learned,
        curve=buckets,
        recommendations=scaled.recommendations,
        p99_correction=correction,
        last_time_s=t,
        last_pending=obs.pending,
        last_rps=rps,
        startup_s=_learn_startup(state, obs, t),
        delay_recommendations=chosen.recommendations,
        delay_raised_from_us=chosen.raised_from_us,
        delay_ceiling=chosen.ceiling,
        last_starting_s=t if now.starting > 0 else state.last_starting_s,
        # The first tick that sees every replica ready after some were starting, or after a
        # scale-up whose pods were ready before a tick saw them start (a queue built before
        # them drains only then, and Triton's p99 summary shows it for a window more).
        ready_at_s=(
            t
            if now.starting == 0
            and state.last_time_s is not None
            and state.last_time_s in (state.last_starting_s, state.last_scale_up_s)
            else state.ready_at_s
        ),
        slo_breaches=now.breaches,
        last_rate_fall_s=now.last_fall_s,
        last_scale_up_s=t if kind_r == "scale-up" else state.last_scale_up_s,
        last_scale_down_s=t if kind_r == "scale-down" else state.last_scale_down_s,
        last_delay_change_s=t if kind_d else state.last_delay_change_s,
    )
    parts = []
    if kind_r:
        # A scale-up's reason predicts at the running count; say what the new count expects.
        then = (
            f" (then {_fmt_ms(_p99(final, correction))} ms predicted)"
            if kind_r == "scale-up"
            else ""
        )
        parts.append(f"{why_r}: {cur_n} → {_replicas(replicas)}{then}")
    if kind_d:
        parts.append(why_d)
    if not parts:
        parts.append(
            f"steady: p99 {_fmt_ms(p99_obs)} ms (SLO {_fmt_ms(spec.slo_ms)} ms) at "
            f"{_fmt_rate(rps)} rps on {cur_n} replicas, delay {obs.delay_us:,} us, "
            f"batch {obs.avg_batch or 0:.1f}"
        )
    startup = state.startup_s or DEFAULT_STARTUP_S
    down_s = state.last_scale_down_s
    reversal = kind_r == "scale-up" and down_s is not None and t - down_s <= 2 * startup
    if reversal:
        notes.append(
            f"reverses the scale-down of {t - down_s:.0f} s ago (within two pod starts, "
            f"{2 * startup:.0f} s)"
        )
    reason = "; ".join(parts + notes)
    kind = "+".join(k for k in (kind_r, kind_d) if k) or "hold"
    return Decision(
        replicas=replicas,
        delay_us=delay,
        reason=reason,
        state=new_state,
        kind=kind,
        predicted_p99_ms=_p99(final, correction),
        reversal=reversal,
    )


@dataclass(frozen=True)
class _Demand:
    """Step 3's outcome: the load to size for and what the later steps need to know of it."""

    plan_rps: float  # the load to survive: the coverage quantile of the horizon's peak
    hold_rps: float  # the load a lower count must serve: the same over two horizons
    why: str
    horizon_s: float  # a pod start plus one tick: how far ahead replicas asked for now serve
    rising: bool  # a higher load than the last tick's, or refusals: arrivals, not a backlog
    draining: bool  # a backlog from the past is shrinking
    delay_explains: bool  # the delay alone would explain the observed p99's excess


def _demand(
    obs: Observation, spec: TuningSpec, state: TuningState, model: _Model, now: _Reading
) -> tuple[_Demand, TuningState]:
    """Step 3: the load now (served + refused + the queue's growth, or the busiest scrape
    interval since the last tick), and the load to size for: the sizing model's quantile of
    what the next horizon brings (tuning.sizing), learned with this tick's load."""
    t, rps, p99_obs, growth = now.t, now.rps, now.p99_ms, now.growth
    refused = max(0.0, obs.rejected_rps or 0.0)
    served = rps
    if obs.peak_rps is not None:
        # The window may predate replicas that are ready now: its refusals, and a pod's
        # saturated minute summed with the new pods' present rates (8,001 req/s read where
        # 7,200 arrived). No more arrive than the busiest recent interval saw.
        served = min(rps, obs.peak_rps)
        refused = min(refused, max(0.0, obs.peak_rps - served))
    arrivals = max(0.0, served + refused + growth)
    draining = growth < -STEADY_RATE_CHANGE * rps  # a backlog from the past is shrinking
    # While a backlog drains the served rate overstates arrivals: the load is what arrives.
    load = arrivals if draining else max(arrivals, obs.peak_rps or 0.0)
    delay_explains = spec.tune_delay and p99_obs - obs.delay_us / 1000.0 <= model.target
    # A p99 over the SLO at a load the replicas were sized for says the load was more than
    # they serve, whatever the rate window shows (bursts shorter than a scrape interval
    # hide in it): such a tick counts as the load its replicas could not serve.
    # Two settled ticks, as for the forced scale-up below: one bad window may be a burst.
    breach_note = ""
    if now.breaches >= 2 and not delay_explains and not draining and now.ready > 0:
        served_at_slo = now.ready * _capacity(model)
        beyond = served_at_slo * min(BREACH_STEP, p99_obs / spec.slo_ms)
        if beyond > load:
            load = beyond
            breach_note = (
                f"p99 {_fmt_ms(p99_obs)} ms > SLO {_fmt_ms(spec.slo_ms)} ms on "
                f"{_replicas(now.ready)}: counted as {_fmt_rate(load)} rps; "
            )
    horizon = (state.startup_s or DEFAULT_STARTUP_S) + spec.interval_s
    memory = sizing.learn(state.sizing, t, load, horizon)
    sized = sizing.size(memory, load, horizon, spec.coverage)
    demand, hold = sized.rps, sized.hold_rps
    demand_why = f"{breach_note}{_fmt_rate(load)} rps now x {sized.why}"
    if spec.forecast and obs.rate_history:
        ahead = horizon  # the trend looks as far as the sizing does
        expected = trend(obs.rate_history, t, ahead)
        if expected is not None and expected > demand:
            demand = hold = max(hold, expected)
            demand_why = f"trend: {_fmt_rate(expected)} rps expected in {ahead:.0f} s"
    before = state.sizing.loads[-1][1] if state.sizing.loads else 0.0
    rising = load > (1 + RISING) * before or refused > REFUSED_BREACH * arrivals
    return (
        _Demand(
            plan_rps=demand,
            hold_rps=hold,
            why=demand_why,
            horizon_s=horizon,
            rising=rising,
            draining=draining,
            delay_explains=delay_explains,
        ),
        replace(state, sizing=memory),
    )


@dataclass(frozen=True)
class _ReplicaChoice:
    """Step 4's outcome: the replicas, why they changed, the window's recommendations."""

    replicas: int
    kind: str  # "scale-up", "scale-down" or "" (kept)
    why: str
    recommendations: tuple[tuple[float, int], ...]
    notes: tuple[str, ...]


def _choose_replicas(
    obs: Observation,
    spec: TuningSpec,
    state: TuningState,
    model: _Model,
    now: _Reading,
    demand: _Demand,
) -> _ReplicaChoice:
    """Step 4 (module docstring): the replicas for the demand."""
    t, rps, p99_ms, plan_rps = now.t, now.rps, now.p99_ms, demand.plan_rps
    cur_n = obs.replicas
    if not spec.tune_replicas:
        return _ReplicaChoice(cur_n, "", "", state.recommendations, ())
    notes: list[str] = []
    recs = state.recommendations
    kind = ""
    hi = spec.max_replicas
    if obs.schedulable_headroom is not None:
        hi = min(hi, max(cur_n, spec.min_replicas) + max(0, obs.schedulable_headroom))
    hi = max(hi, spec.min_replicas)
    # Replicas are sized at the delay best for latency (the smallest one, when tuned). The
    # same size decides both directions (see tuning.sizing).
    lat_delay = spec.min_delay_us if spec.tune_delay else obs.delay_us
    # One bound for both directions (read at the load to size for), or the two would
    # disagree.
    least_rate = plan_rps / spec.max_replicas
    bound = model.bound(least_rate, lat_delay)
    need_up = model.replicas_for(plan_rps, spec.min_replicas, spec.max_replicas, lat_delay, bound)
    need_down = model.replicas_for(
        demand.hold_rps, spec.min_replicas, spec.max_replicas, lat_delay, bound
    )
    rec = max(need_up, min(max(cur_n, spec.min_replicas), need_down))
    why = (
        f"predicted p99 {_fmt_ms(model.p99(plan_rps / max(1, cur_n), obs.delay_us))} ms"
        f" vs target {_fmt_ms(bound)} ms at {_fmt_rate(plan_rps)} rps "
        f"({demand.why})"
    )
    # An observed p99 over the SLO on two settled ticks (once Triton's summary shows the
    # present) scales up even when the model disagrees, HPA-like: in proportion to the
    # excess, at most by BREACH_STEP per tick.
    if (
        now.breaches >= 2
        and rps > 0
        and not demand.delay_explains
        and not demand.draining
        and rec <= cur_n
    ):
        factor = min(BREACH_STEP, p99_ms / spec.slo_ms)
        forced = cur_n + max(1, math.ceil(cur_n * (factor - 1)))
        if forced > rec:
            rec = forced
            why = (
                f"p99 {_fmt_ms(p99_ms)} ms > SLO {_fmt_ms(spec.slo_ms)} ms at {_fmt_rate(rps)} rps"
            )
    # Just after a scale-up the windowed rate still holds the backlog the new replicas
    # drained: wait for it to settle unless the queue is still growing.
    up_since = max(state.last_scale_up_s or -math.inf, state.last_starting_s or -math.inf)
    recent_up = t - up_since < SETTLE_INTERVALS * spec.interval_s
    if rec > cur_n and recent_up and now.growth <= STEADY_RATE_CHANGE * rps and not demand.rising:
        notes.append(f"{rec} replicas suggested; waiting for the last scale-up to show")
        rec = cur_n
    # Fewer replicas only while the SLO holds: a model that sees room while the observed
    # p99 breaks the SLO is wrong here (seen on a starved machine: 3 → 2 → 3 replicas).
    if rec < cur_n and rps > 0 and now.p99_current and p99_ms > spec.slo_ms:
        notes.append(
            f"{_replicas(rec)} would do by the model; no scale-down while p99 "
            f"{_fmt_ms(p99_ms)} ms > SLO {_fmt_ms(spec.slo_ms)} ms"
        )
        rec = cur_n
    rec = min(max(rec, spec.min_replicas), spec.max_replicas)
    if not recs:  # no history: the running count is the recommendation to wait out
        recs = ((t, cur_n),)
    # Down only to the most recommended over the scale-down window (as the HPA's
    # stabilization: a recommendation is the count wanted, the sizing's hold included, so
    # a burst gap shorter than the window keeps the burst's replicas).
    window = spec.scale_down_window_s
    recs = tuple((ts, n) for ts, n in recs if ts > t - window) + ((t, rec),)
    if rec > cur_n:
        replicas = min(rec, hi)
        if replicas < rec:
            notes.append(f"capacity limited: {rec} wanted, {replicas} schedulable")
    else:
        window_max = max(n for _, n in recs)
        replicas = min(cur_n, max(rec, window_max))
        if rec < cur_n and replicas == cur_n:
            notes.append(f"{rec} replicas would do; scale-down waits for the {window:.0f} s window")
    replicas = min(max(replicas, spec.min_replicas), spec.max_replicas)
    if obs.schedulable_headroom is not None and replicas > cur_n:
        # minReplicas is the user's floor: it wins over what the cluster can schedule.
        replicas = min(replicas, max(cur_n + max(0, obs.schedulable_headroom), spec.min_replicas))
    if replicas > cur_n:
        kind = "scale-up"
    elif replicas < cur_n:
        kind = "scale-down"
        why = (
            f"load {_fmt_rate(rps)} rps fits {_replicas(replicas)} (predicted p99 "
            f"{_fmt_ms(model.p99(plan_rps / max(1, replicas), obs.delay_us))} ms, target "
            f"{_fmt_ms(bound)} ms), the most recommended in the last {window:.0f} s"
        )
    if bound > model.target:
        notes.append(
            f"SLO margin not reachable within maxReplicas {spec.max_replicas}: sized for the "
            f"SLO, {_fmt_ms(bound)} ms"
        )
    elif need_up >= spec.max_replicas and not model.fits(least_rate, (lat_delay,)):
        notes.append(f"SLO not reachable within maxReplicas {spec.max_replicas}")

    return _ReplicaChoice(replicas, kind, why, recs, tuple(notes))


@dataclass(frozen=True)
class _DelayChoice:
    """Step 5's outcome: the delay, why it changed, and what the delay's rules remember."""

    delay_us: int
    kind: str  # "delay-up", "delay-down" or "" (kept)
    why: str
    recommendations: tuple[tuple[float, int], ...]
    raised_from_us: int | None
    ceiling: tuple[int, float, float] | None
    notes: tuple[str, ...]


def _choose_delay(
    obs: Observation,
    spec: TuningSpec,
    state: TuningState,
    model: _Model,
    now: _Reading,
    *,
    rate: float,
) -> _DelayChoice:
    """Step 5 (module docstring): the delay for `rate` per serving replica."""
    t, rps, p99_ms = now.t, now.rps, now.p99_ms
    notes: list[str] = []
    raised_from = state.delay_raised_from_us
    ceiling = state.delay_ceiling
    if ceiling is not None and t - ceiling[2] >= DELAY_CEILING_S:
        ceiling = None
    if not spec.tune_delay:
        return _DelayChoice(
            obs.delay_us, "", "", state.delay_recommendations, raised_from, ceiling, ()
        )
    kind = ""
    why = ""
    cur_d = min(max(obs.delay_us, spec.min_delay_us), spec.max_delay_us)
    # A raise is on trial until Triton's p99 shows it. Over the target, the model was wrong
    # about the delay at this load (real Triton at maxBatch 2 on two busy cores: 0 ->
    # 5,000 us predicted 17 ms, Triton's p99 went from <= 25.6 to 47 ms, SLO 40 ms):
    # back to the delay before it, and that delay is barred at this load for a while.
    on_trial = raised_from is not None and raised_from < cur_d
    failed = on_trial and now.p99_current and rps > 0 and p99_ms > model.target
    failed_from = raised_from if failed else None
    if now.p99_current or not on_trial:
        raised_from = None  # judged (or moot): no longer on trial
    if failed_from is not None:
        ceiling = (cur_d, rate, t)
    bar = ceiling[0] if ceiling is not None and rate >= DELAY_CEILING_SHARE * ceiling[1] else None
    new_d = model.best_delay(rate, cur_d, bar)
    if failed_from is not None:
        new_d = min(new_d, max(failed_from, spec.min_delay_us))
    # Cut at once, raise slowly: up only to the least delay recommended in the window
    # (which starts again after a failed raise).
    kept = () if failed_from is not None else state.delay_recommendations
    recs = tuple((ts, d) for ts, d in kept if ts > t - DELAY_UP_WINDOW_S) + ((t, new_d),)
    if new_d > cur_d:
        new_d = max(cur_d, min(d for _, d in recs))
    cur_p = model.at(rate, cur_d)
    new_p = model.at(rate, new_d)
    rel = abs(new_d - cur_d) / max(cur_d, new_d, 1)
    gpu_gain = 1 - new_p.gpu_ms_per_inference / cur_p.gpu_ms_per_inference
    lat_gain = _p99(new_p, model.correction) < _p99(cur_p, model.correction) * 0.9
    # A cut for lateness: the observed p99 breaks the SLO, or the predicted one misses the
    # target and the cut lowers it. Near capacity every delay predicts the same p99, and
    # a cut that buys nothing would be undone once new replicas share the load (two
    # reloads; hypothesis found 500 -> 0 -> 5,475 us on a steady load).
    late_cut = new_d < cur_d and (
        failed_from is not None
        or p99_ms > spec.slo_ms
        or (
            _p99(cur_p, model.correction) > model.target
            and _p99(new_p, model.correction) < _p99(cur_p, model.correction) * (1 - NEAR_BEST)
        )
    )
    worth = rel >= DELAY_MIN_CHANGE and (
        gpu_gain >= GPU_MIN_GAIN or (new_d < cur_d and (late_cut or lat_gain))
    )
    delay = new_d if worth or late_cut else cur_d
    # A longer delay adds up to its length to a request's wait. Raised only when the
    # observed p99 (current) plus that wait keeps the wider margin too: the model alone
    # may be wrong by more than its bounded model.correction (seen on real Triton at maxBatch 2
    # on two busy cores: p99 36 ms at 0 us, the model predicting 29 ms at 5,000 us,
    # Triton's p99 then 66-97 ms against a 40 ms SLO).
    added_ms = (delay - cur_d) / 1000.0
    if added_ms > 0 and not (
        now.p99_current and rps > 0 and p99_ms + added_ms <= UP_MARGIN * model.target
    ):
        until = (
            f"while the observed p99 {_fmt_ms(p99_ms)} ms + {_fmt_ms(added_ms)} ms > "
            f"{_fmt_ms(UP_MARGIN * model.target)} ms"
            if now.p99_current
            else "until Triton's p99 shows the present"
        )
        notes.append(f"delay {delay:,} us would do by the model; kept {until}")
        delay = cur_d
    if delay > obs.delay_us:
        kind = "delay-up"
    elif delay < obs.delay_us:
        kind = "delay-down"
    if kind:
        p_old = model.at(rate, obs.delay_us)
        p_new = model.at(rate, delay)
        why = (
            f"delay {obs.delay_us:,} → {delay:,} us: batch {p_old.avg_batch:.1f} → "
            f"{p_new.avg_batch:.1f}, GPU ms/inference "
            f"{p_old.gpu_ms_per_inference:.2f} → {p_new.gpu_ms_per_inference:.2f}, "
            f"predicted p99 {_fmt_ms(_p99(p_new, model.correction))} ms "
            f"(target {_fmt_ms(model.target)} ms)"
        )
    if failed_from is not None and kind == "delay-down":
        why = (
            f"delay {obs.delay_us:,} → {delay:,} us: the raise from {failed_from:,} us broke "
            f"the target (p99 {_fmt_ms(p99_ms)} ms > {_fmt_ms(model.target)} ms); no delay "
            f"of {obs.delay_us:,} us or more at {_fmt_rate(DELAY_CEILING_SHARE * rate)} "
            f"rps per replica or more for {DELAY_CEILING_S:.0f} s"
        )
    if kind == "delay-up":
        raised_from = obs.delay_us
    elif kind == "delay-down":
        raised_from = None
    return _DelayChoice(delay, kind, why, recs, raised_from, ceiling, tuple(notes))


def recommend(latency: LatencyCurve, rps: float, spec: TuningSpec) -> Plan:
    """The starting (replicas, delay) for a steady rate, from a known batch-latency curve."""
    if rps < 0:
        raise ValueError(f"rps must be >= 0, got {rps}")
    spec = _effective(spec)
    model = _Model(spec, latency, 1.0)
    plan_rps = rps * (1 + HEADROOM)
    n = model.replicas_for(plan_rps, spec.min_replicas, spec.max_replicas, spec.min_delay_us)
    rate = plan_rps / n
    delay = model.best_delay(rate)
    served = model.at(rps / n, delay)
    planned = model.at(rate, delay)
    cap = _capacity(model)
    return Plan(
        rps=rps,
        replicas=n,
        delay_us=delay,
        predicted_p99_ms=served.p99_ms,
        avg_batch=served.avg_batch,
        gpu_ms_per_inference=served.gpu_ms_per_inference,
        busy=served.busy,
        rps_per_gpu=rps / (n * max(1, spec.gpus_per_replica)) if n else 0.0,
        capacity_rps_per_replica=cap,
        feasible=planned.p99_ms <= model.target,
        slo_ms=spec.slo_ms,
        target_ms=model.target,
    )


def _capacity(model: _Model) -> float:
    """Highest per-replica rate that keeps the margin at some allowed delay (bisection)."""
    lo, hi = 0.0, capacity_rps(model.spec.max_batch_size, model.latency)
    if not model.fits(1e-3, model.delays):
        return 0.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if model.fits(mid, model.delays):
            lo = mid
        else:
            hi = mid
    return lo
