"""What Prometheus would hold: per-pod cumulative counters and summary quantiles, sampled
every scrape interval, and the Observation a controller builds from rate windows over them.

The controller never sees ground truth: rates lag by up to a window, p99 is a sliding-window
summary of the worst pod, and a pod that has not been scraped twice has no rate yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from batchop.sim.batcher import Replica, RequestStore
from batchop.tuning.types import Observation

# Counter columns, named as Triton exports them.
SUCCESS, INFER_COUNT, EXEC_COUNT, QUEUE_US, COMPUTE_US, REQUEST_US = range(6)


@dataclass(frozen=True)
class Sample:
    time_s: float
    counters: dict[int, np.ndarray]  # pod id -> cumulative counters
    p99_s: dict[int, float]  # pod id -> summary p99 (pods with requests in the window)
    pending: int
    # pod id -> cumulative timeout refusals (Triton's failure counter, reason REJECTED)
    rejected: dict[int, float] = field(default_factory=dict)


def scrape(t: float, pods: list[Replica], store: RequestStore, summary_window_s: float) -> Sample:
    """Fold requests finished by t into each ready pod's counters and summary window."""
    counters: dict[int, np.ndarray] = {}
    p99: dict[int, float] = {}
    rejected: dict[int, float] = {}
    pending = 0
    for rep in pods:
        if not rep.ready_at(t):
            continue
        if rep.uncounted:
            u = np.concatenate(rep.uncounted) if len(rep.uncounted) > 1 else rep.uncounted[0]
            end = store.end[u]
            done_mask = end <= t
            done = u[done_mask]
            rest = u[~done_mask]
            rep.uncounted = [rest] if len(rest) else []
            if len(done):
                arr = store.arrival[done]
                latency = store.end[done] - arr
                rep.counters += (
                    len(done),
                    len(done),
                    float(np.sum(1.0 / store.batch[done])),
                    float(np.sum(store.start[done] - arr)) * 1e6,
                    float(np.sum(store.compute[done])) * 1e6,
                    float(np.sum(latency)) * 1e6,
                )
                rep.recent.append((t, latency))
        rep.recent = [(s, lat) for s, lat in rep.recent if s > t - summary_window_s]
        if rep.recent:
            window = np.concatenate([lat for _, lat in rep.recent])
            if len(window):
                p99[rep.id] = nearest_rank(window, 0.99)
        counters[rep.id] = rep.counters.copy()
        pending += len(rep.pending)
        rejected[rep.id] = _fold_rejected(rep, store, t)
    return Sample(time_s=t, counters=counters, p99_s=p99, pending=pending, rejected=rejected)


def _fold_rejected(rep: Replica, store: RequestStore, t: float) -> float:
    """The pod's timeout refusals up to t, as its cumulative counter."""
    if rep.unrejected:
        u = np.concatenate(rep.unrejected)
        due = store.rejected[u] <= t
        rep.rejected_total += float(np.count_nonzero(due))
        rep.unrejected = [u[~due]] if not due.all() else []
    return rep.rejected_total


def nearest_rank(values: np.ndarray, q: float) -> float:
    """The q-quantile by the nearest-rank rule (a value that was actually observed)."""
    n = len(values)
    k = max(0, min(n - 1, int(np.ceil(q * n)) - 1))
    return float(np.partition(values, k)[k])


def observe(
    t: float,
    samples: list[Sample],
    rate_window_s: float,
    replicas: int,
    ready: int,
    delay_us: int,
    peak_window_s: float = 30.0,
) -> Observation:
    """Build the controller's Observation from scraped samples, as PromQL `rate(x[window])`
    summed over pods and `max` of the pods' summary p99 would; `peak_rps` as the highest
    per-scrape arrival rate over the last `peak_window_s` (the operator's subquery)."""
    base = Observation(time_s=t, replicas=replicas, ready_replicas=ready, delay_us=delay_us)
    if not samples:
        return base
    last = samples[-1]
    window = [s for s in samples if s.time_s >= last.time_s - rate_window_s - 1e-9]
    delta = np.zeros(6)
    rps = 0.0
    rejected_rps = 0.0
    rated = 0
    for pod, now in last.counters.items():
        first = next((s for s in window if pod in s.counters), None)
        if first is None or first.time_s >= last.time_s:
            continue
        d = now - first.counters[pod]
        delta += d
        rps += d[SUCCESS] / (last.time_s - first.time_s)
        if pod in last.rejected and pod in first.rejected:
            gained = last.rejected[pod] - first.rejected[pod]
            rejected_rps += gained / (last.time_s - first.time_s)
        rated += 1
    p99 = max(last.p99_s.values()) * 1000.0 if last.p99_s else None
    if rated == 0:
        return Observation(
            time_s=t,
            p99_ms=p99,
            pending=float(last.pending),
            replicas=replicas,
            ready_replicas=ready,
            delay_us=delay_us,
            age_s=t - last.time_s,
        )
    served = delta[SUCCESS]
    return Observation(
        time_s=t,
        rps=rps,
        avg_batch=delta[INFER_COUNT] / delta[EXEC_COUNT] if delta[EXEC_COUNT] > 0 else None,
        queue_ms=delta[QUEUE_US] / served / 1000.0 if served > 0 else None,
        compute_ms=delta[COMPUTE_US] / served / 1000.0 if served > 0 else None,
        p99_ms=p99,
        pending=float(last.pending),
        replicas=replicas,
        ready_replicas=ready,
        delay_us=delay_us,
        age_s=t - last.time_s,
        rejected_rps=rejected_rps,
        peak_rps=peak_rate(samples, t - peak_window_s),
    )


def peak_rate(samples: list[Sample], since_s: float) -> float | None:
    """Highest (served + refused) rate between consecutive scrapes ending after since_s,
    summed over the pods scraped at both ends: PromQL's irate under max_over_time."""
    best: float | None = None
    for before, after in zip(samples, samples[1:], strict=False):
        if after.time_s <= since_s or after.time_s <= before.time_s:
            continue
        gained = 0.0
        for pod, now in after.counters.items():
            if pod in before.counters:
                gained += now[SUCCESS] - before.counters[pod][SUCCESS]
                gained += after.rejected.get(pod, 0.0) - before.rejected.get(pod, 0.0)
        rate = gained / (after.time_s - before.time_s)
        best = rate if best is None else max(best, rate)
    return best
