"""Baseline policies, each a `decide(obs, spec, state) -> Decision` like batchop's own.

* static          - fixed delay and replicas (the count given).
* static-peak     - fixed replicas: the fewest that meet the SLO at the trace's peak.
* hpa / keda      - the HPA algorithm on requests/s per replica, target a fraction of one
                    replica's capacity (KEDA's Prometheus-scaler rule), delay fixed.
* hpa-queue       - the HPA algorithm on mean queue time per request, target a fraction of
                    the SLO plus the fixed delay, delay fixed.
* nobatch         - Triton without the dynamic batcher (one request per execution),
                    queue-time HPA replicas.
* aimd            - Clipper-style additive increase / multiplicative decrease of the delay,
                    queue-time HPA replicas.
* oracle          - knows the trace: per minute, the fewest replicas and the cheapest delay
                    whose simulated steady-state p99 meets the SLO (lower bound on GPU-s).
* reactive-oracle - the oracle's choice for the exact rate of the minute just past (no
                    foresight): what a perfect metric and a perfect model buy without a
                    forecast.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

from batchop.sim.policy_names import POLICY_NAMES
from batchop.sim.profile import Profile
from batchop.sim.trace import Trace
from batchop.tuning.types import Decision, Observation, TuningSpec, TuningState

# hpa-queue target: mean queue time per request, as a fraction of the SLO, plus the fixed
# delay (a request waits out the delay whenever it arrives to an idle batcher, so the delay
# alone fills a target that leaves it out). Queue time is the part of latency that replicas
# cut; with a p99 roughly 3-5x the mean wait, 10% of the SLO leaves room for the tail.
HPA_QUEUE_TARGET_FRACTION = 0.10
# hpa/keda target: requests/s per replica as a fraction of one replica's capacity. 0.7 is
# a common hand-picked setting; `batchop bench` sweeps 0.1-0.9 and reports the best.
HPA_RPS_FRACTION = 0.7
HPA_TOLERANCE = 0.10
HPA_SCALE_DOWN_WINDOW_S = 300.0
HPA_SYNC_S = 15.0
# AIMD (Clipper adapted to the delay): +step while p99 is under the SLO with a margin, x0.5
# on a violation.
AIMD_STEP_US = 250
AIMD_BACKOFF = 0.5
AIMD_HEADROOM = 0.9
# Oracle: a candidate meets the SLO when its steady-state p99 is within this share of it.
ORACLE_MARGIN = 0.95
ORACLE_SYNC_S = 15.0
# reactive-oracle: the rate it sizes for is the peak of this trailing window.
REACTIVE_WINDOW_S = 60.0


def _hold(obs: Observation, state: TuningState, why: str) -> Decision:
    return Decision(obs.replicas, obs.delay_us, why, state, kind="hold")


def _kind(obs: Observation, replicas: int, delay_us: int) -> str:
    if replicas > obs.replicas:
        return "scale-up"
    if replicas < obs.replicas:
        return "scale-down"
    if delay_us > obs.delay_us:
        return "delay-up"
    if delay_us < obs.delay_us:
        return "delay-down"
    return "hold"


def static_policy(delay_us: int, replicas: int) -> Callable[..., Decision]:
    def decide(obs: Observation, spec: TuningSpec, state: TuningState) -> Decision:
        kind = _kind(obs, replicas, delay_us)
        return Decision(
            replicas, delay_us, f"static: {replicas} replicas, {delay_us} us", state, kind=kind
        )

    return decide


def _hpa_sync(
    obs: Observation, spec: TuningSpec, state: TuningState, rec: int
) -> tuple[int, TuningState]:
    """The HPA's limits on one recommendation: scale-up to at most max(2x, +4) per sync,
    scale-down only to the highest recommendation of the last 5 minutes, within bounds."""
    current = obs.replicas
    rec = min(max(rec, spec.min_replicas), spec.max_replicas)
    # Before the first sync the count in force is what was last recommended.
    history = state.recommendations or ((0.0, current),)
    recs = tuple((t, r) for t, r in history if t > obs.time_s - HPA_SCALE_DOWN_WINDOW_S) + (
        (obs.time_s, rec),
    )
    if rec > current:
        desired = min(rec, max(2 * current, current + 4))
    else:
        desired = min(current, max(r for _, r in recs))
    desired = min(max(desired, spec.min_replicas), spec.max_replicas)
    return desired, replace(state, recommendations=recs)


def hpa_replicas(
    obs: Observation, spec: TuningSpec, state: TuningState, extra_target_ms: float = 0.0
) -> tuple[int, str, TuningState]:
    """One HPA sync on mean queue time per request (target: HPA_QUEUE_TARGET_FRACTION x SLO
    + extra_target_ms): desired = ceil(ready * metric / target) outside a 10% tolerance.
    Holds when the metric is missing."""
    target = HPA_QUEUE_TARGET_FRACTION * spec.slo_ms + extra_target_ms
    current = obs.replicas
    if obs.queue_ms is None or obs.rps is None:
        return current, "hpa: queue-time metric missing, hold", state
    ratio = obs.queue_ms / target
    ready = max(1, obs.ready_replicas)
    rec = current if abs(ratio - 1.0) <= HPA_TOLERANCE else math.ceil(ready * ratio)
    desired, state = _hpa_sync(obs, spec, state, rec)
    why = (
        f"hpa: queue {obs.queue_ms:.2f} ms vs target {target:.2f} ms (ratio {ratio:.2f}) "
        f"at {obs.rps:.0f} rps: {current} -> {desired} replicas"
    )
    return desired, why, state


def hpa_queue_decide(obs: Observation, spec: TuningSpec, state: TuningState) -> Decision:
    """Queue-time HPA; the fixed delay counts in its target (see HPA_QUEUE_TARGET_FRACTION)."""
    replicas, why, state = hpa_replicas(obs, spec, state, obs.delay_us / 1000.0)
    return Decision(replicas, obs.delay_us, why, state, kind=_kind(obs, replicas, obs.delay_us))


def nobatch_decide(obs: Observation, spec: TuningSpec, state: TuningState) -> Decision:
    """Queue-time HPA without a batcher delay to allow for."""
    replicas, why, state = hpa_replicas(obs, spec, state)
    return Decision(replicas, obs.delay_us, why, state, kind=_kind(obs, replicas, obs.delay_us))


@lru_cache(maxsize=64)
def replica_capacity_rps(profile: Profile, slo_ms: float) -> float:
    """Requests/s one replica serves at most within the SLO: full batches of the largest
    size b <= max_batch_size whose execution fits the SLO (latency(b) <= SLO), back to back:
    b / latency(b). What a user reads off perf_analyzer's throughput at the biggest batch
    whose latency is acceptable; the hpa/keda target is a fraction of it."""
    best = 1
    for b in range(1, profile.max_batch_size + 1):
        if profile.latency_ms(b) <= slo_ms:
            best = b
    return best / (profile.latency_ms(best) / 1000.0)


def hpa_rps_policy(capacity_rps: float, fraction: float) -> Callable[..., Decision]:
    """KEDA's Prometheus scaler (metric type AverageValue) under the HPA: every sync,
    desired = ceil(rps / target) with target = fraction x capacity_rps per replica, held
    while rps / (target x replicas) is within the 10% tolerance; the HPA's scale-up limit and
    5-minute scale-down window; the delay stays at the spec's start value. rps counts every
    request Triton received (served + refused), as `sum(rate(nv_inference_request_success
    [1m])) + sum(rate(nv_inference_request_failure[1m]))` does."""
    target = fraction * capacity_rps

    def decide(obs: Observation, spec: TuningSpec, state: TuningState) -> Decision:
        current = obs.replicas
        if obs.rps is None:
            return _hold(obs, state, "hpa: request-rate metric missing, hold")
        rps = obs.rps + (obs.rejected_rps or 0.0)
        ratio = rps / (target * max(1, current))
        rec = current if abs(ratio - 1.0) <= HPA_TOLERANCE else math.ceil(rps / target)
        desired, state = _hpa_sync(obs, spec, state, max(1, rec))
        why = (
            f"hpa: {rps:.0f} rps vs target {target:.0f} rps/replica ({fraction:g} x "
            f"{capacity_rps:.0f}): {current} -> {desired} replicas"
        )
        delay = spec.start_delay_us
        return Decision(desired, delay, why, state, kind=_kind(obs, desired, delay))

    return decide


def aimd_decide(obs: Observation, spec: TuningSpec, state: TuningState) -> Decision:
    # The delay is a wait AIMD chose; its HPA's queue-time target allows for it.
    replicas, why, state = hpa_replicas(obs, spec, state, obs.delay_us / 1000.0)
    delay = obs.delay_us
    if obs.p99_ms is not None:
        if obs.p99_ms > spec.slo_ms:
            delay = int(delay * AIMD_BACKOFF)
            why += f"; p99 {obs.p99_ms:.1f} ms > SLO: delay x{AIMD_BACKOFF}"
        elif obs.p99_ms < AIMD_HEADROOM * spec.slo_ms:
            delay += AIMD_STEP_US
            why += f"; p99 {obs.p99_ms:.1f} ms under SLO: delay +{AIMD_STEP_US} us"
    delay = min(max(delay, spec.min_delay_us), spec.max_delay_us)
    return Decision(replicas, delay, why, state, kind=_kind(obs, replicas, delay))


@dataclass(frozen=True)
class OracleTable:
    """Steady-state p99 and GPU time per request of ONE replica, from short simulations,
    over a grid of per-replica rates and delays. A Service splits Poisson traffic at random,
    so each of n replicas sees Poisson traffic at rate/n: one replica's table covers all n."""

    rates: tuple[float, ...]
    delays: tuple[int, ...]
    p99_ms: tuple[tuple[float, ...], ...]  # [delay][rate]; inf where unstable / not run
    busy_ms: tuple[tuple[float, ...], ...]  # GPU ms per request

    def best(self, rate: float, slo_ms: float) -> tuple[int, float] | None:
        """Cheapest delay meeting the SLO at this per-replica rate: (delay, p99) or None."""
        k = next((i for i, r in enumerate(self.rates) if r >= rate), None)
        if k is None:
            return None
        best: tuple[float, int, float] | None = None
        for j, d in enumerate(self.delays):
            p99 = self.p99_ms[j][k]
            if p99 <= ORACLE_MARGIN * slo_ms:
                cand = (self.busy_ms[j][k], d, p99)
                if best is None or cand[0] < best[0] - 1e-9:
                    best = cand
        return None if best is None else (best[1], best[2])


@lru_cache(maxsize=16)
def oracle_table(profile: Profile, slo_ms: float, min_delay: int, max_delay: int) -> OracleTable:
    from batchop.sim.engine import SimConfig, SimPolicy, simulate
    from batchop.sim.report import summarize
    from batchop.sim.trace import constant_trace

    cap = profile.capacity_rps()
    rates = tuple(
        cap * f
        for f in (
            0.01,
            0.02,
            0.035,
            0.05,
            0.075,
            0.1,
            0.15,
            0.2,
            0.25,
            0.3,
            0.35,
            0.4,
            0.45,
            0.5,
            0.55,
            0.6,
            0.65,
            0.7,
            0.75,
            0.8,
            0.85,
            0.9,
            0.95,
        )
    )
    # The same range batchop searches: both ends of the spec's bounds and a doubling grid.
    grid = (0, 250, 500, 1000, 2000, 4000, 8000, 16000)
    delays = tuple(
        sorted({min(max(d, min_delay), max_delay) for d in grid} | {min_delay, max_delay})
    )
    p99s: list[tuple[float, ...]] = []
    busys: list[tuple[float, ...]] = []
    for d in delays:
        row_p, row_b = [], []
        stable = True
        for r in rates:
            if not stable:
                row_p.append(math.inf)
                row_b.append(math.inf)
                continue
            seconds = min(120.0, max(10.0, 20000.0 / r))
            spec = TuningSpec(
                slo_ms=slo_ms,
                max_batch_size=profile.max_batch_size,
                start_delay_us=d,
                start_replicas=1,
                interval_s=1e9,
            )
            run = simulate(
                profile,
                constant_trace(r, seconds),
                spec,
                SimPolicy("static", static_policy(d, 1)),
                SimConfig(seed=7),
            )
            s = summarize(run, slo_ms)
            p99 = s["p99_ms"] if s["p99_ms"] is not None else math.inf
            row_p.append(p99)
            row_b.append(s["gpu_busy_seconds"] * 1000.0 / max(1, s["requests"]))
            stable = p99 <= 2 * slo_ms  # beyond this, higher rates cannot meet it either
        p99s.append(tuple(row_p))
        busys.append(tuple(row_b))
    return OracleTable(rates, delays, tuple(p99s), tuple(busys))


def _needs(table: OracleTable, spec: TuningSpec, slo_ms: float) -> Callable[[float], int]:
    """The fewest replicas (within the spec's bounds) for which some delay meets the SLO at
    this total rate; max replicas where none does."""

    def need(rate: float) -> int:
        for n in range(spec.min_replicas, spec.max_replicas + 1):
            if table.best(rate / n, slo_ms) is not None:
                return n
        return spec.max_replicas

    return need


def _cheapest_delay(
    table: OracleTable, spec: TuningSpec, slo_ms: float, rate: float, serving: int
) -> int:
    got = table.best(rate / max(1, serving), slo_ms)
    return got[0] if got is not None else spec.min_delay_us


def peak_replicas(profile: Profile, trace: Trace, spec: TuningSpec) -> int:
    """static-peak's count: the fewest replicas the oracle's table says meet the SLO at the
    trace's highest rate (any delay in the spec's range)."""
    table = oracle_table(profile, spec.slo_ms, spec.min_delay_us, spec.max_delay_us)
    return _needs(table, spec, spec.slo_ms)(max(trace.rps[:-1] or trace.rps))


def oracle_policy(
    profile: Profile, trace: Trace, slo_ms: float, spec: TuningSpec, interval_s: float
) -> Callable[..., Decision]:
    table = oracle_table(profile, slo_ms, spec.min_delay_us, spec.max_delay_us)
    need = _needs(table, spec, slo_ms)

    def decide(obs: Observation, spec_: TuningSpec, state: TuningState) -> Decision:
        t = obs.time_s
        # Replicas: enough for every minute until a pod started now would be ready.
        horizon = t + profile.startup_seconds + interval_s
        minute = math.floor(t / 60.0) * 60.0
        n = spec.min_replicas
        while minute < horizon:
            n = max(n, need(trace.max_rate(max(minute, t), minute + 60.0)))
            minute += 60.0
        # Delay: the cheapest that meets the SLO for the pods serving until the next tick
        # (after a scale-down only n remain; after a scale-up the new ones are not ready yet).
        rate_now = trace.max_rate(t, t + interval_s)
        delay = _cheapest_delay(table, spec, slo_ms, rate_now, min(n, obs.ready_replicas))
        why = f"oracle: {rate_now:.0f} rps next, {n} replicas, {delay} us"
        return Decision(n, delay, why, state, kind=_kind(obs, n, delay))

    return decide


def reactive_oracle_policy(
    profile: Profile, trace: Trace, slo_ms: float, spec: TuningSpec
) -> Callable[..., Decision]:
    """The oracle without foresight: each sync, the replicas and cheapest delay its table
    gives for the exact peak rate of the minute just past (read from the trace, so no metric
    lag or noise), no scale-down window. What batchop could do with a perfect rate metric
    and a perfect latency model but no forecast."""
    table = oracle_table(profile, slo_ms, spec.min_delay_us, spec.max_delay_us)
    need = _needs(table, spec, slo_ms)

    def decide(obs: Observation, spec_: TuningSpec, state: TuningState) -> Decision:
        t = obs.time_s
        rate = trace.max_rate(max(trace.start, t - REACTIVE_WINDOW_S), t)
        n = need(rate)
        delay = _cheapest_delay(table, spec, slo_ms, rate, min(n, obs.ready_replicas))
        why = f"reactive-oracle: {rate:.0f} rps in the last minute, {n} replicas, {delay} us"
        return Decision(n, delay, why, state, kind=_kind(obs, n, delay))

    return decide


POLICIES = POLICY_NAMES


def start_replicas(name: str, profile: Profile, trace: Trace, spec: TuningSpec) -> int:
    """The replicas a policy starts with: static-peak runs its count from the start (a
    fixed provisioning), every other policy the spec's start count."""
    if name == "static-peak":
        return peak_replicas(profile, trace, spec)
    return spec.start_replicas


def make_policy(
    name: str,
    profile: Profile,
    trace: Trace,
    spec: TuningSpec,
    delay_us: int,
    replicas: int,
    hpa_fraction: float = HPA_RPS_FRACTION,
):  # -> SimPolicy
    """The named policy as the simulator runs it. `hpa_fraction`: the hpa/keda target as a
    fraction of one replica's capacity."""
    from batchop.sim.engine import SimPolicy

    if name == "batchop":
        from batchop.tuning.policy import decide

        return SimPolicy("batchop", decide)
    if name == "static":
        return SimPolicy("static", static_policy(delay_us, replicas), interval_s=1e12)
    if name == "static-peak":
        n = peak_replicas(profile, trace, spec)
        return SimPolicy("static-peak", static_policy(delay_us, n), interval_s=1e12)
    if name in ("hpa", "keda"):
        if not 0 < hpa_fraction <= 1:
            raise ValueError(f"hpa fraction must be in (0, 1], got {hpa_fraction:g}")
        capacity = replica_capacity_rps(profile, spec.slo_ms)
        decide_fn = hpa_rps_policy(capacity, hpa_fraction)
        return SimPolicy(name, decide_fn, interval_s=HPA_SYNC_S)
    if name == "hpa-queue":
        return SimPolicy("hpa-queue", hpa_queue_decide, interval_s=HPA_SYNC_S)
    if name == "nobatch":
        return SimPolicy("nobatch", nobatch_decide, dynamic_batching=False, interval_s=HPA_SYNC_S)
    if name == "aimd":
        return SimPolicy("aimd", aimd_decide, interval_s=HPA_SYNC_S)
    if name == "oracle":
        return SimPolicy(
            "oracle",
            oracle_policy(profile, trace, spec.slo_ms, spec, ORACLE_SYNC_S),
            interval_s=ORACLE_SYNC_S,
        )
    if name == "reactive-oracle":
        return SimPolicy(
            "reactive-oracle",
            reactive_oracle_policy(profile, trace, spec.slo_ms, spec),
            interval_s=ORACLE_SYNC_S,
        )
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
