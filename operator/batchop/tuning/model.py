"""A closed-form model of one Triton replica running the dynamic batcher.

The policy must compare candidate (delay, replicas) pairs without trying them, so it needs to
predict, for a per-replica arrival rate, how big batches get, how busy the GPU is and what p99
a request sees. The model covers the three regimes Triton shows:

* light load: the first request of a batch waits the whole delay, so a batch is about
  ``1 + rate * delay`` and the wait is bounded by the delay;
* heavy load: requests that arrive while the instance executes are batched as soon as it
  frees, so the batch is about ``rate * exec(batch)`` and the delay adds little;
* overload: beyond ``max_batch / exec(max_batch)`` the queue grows without bound.

The mean batch is the fixed point of a formula mixing the first two regimes by the chance
that no request arrived during the previous execution. The p99 adds the longest likely
formation wait, the execution of a large-but-likely batch, and a Kingman-style backlog term
for when full batches are needed. `P99_SAFETY` and `BACKLOG_SAFETY` were calibrated against
`batchop.sim` (see docs/policy.md for the error over a grid).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

LatencyCurve = Callable[[float], float]  # batch size -> execution milliseconds

# z for the 99th percentile of the (size-biased) batch a request lands in.
BATCH_Z = 2.33
# Multiplier on the backlog term of the tail (queueing beyond one batch).
BACKLOG_SAFETY = 1.0
# Multiplier on the whole predicted p99, for what the closed form leaves out.
P99_SAFETY = 1.0
# Per-replica utilisation of full batches above which a replica counts as overloaded.
MAX_UTILISATION = 0.97


@dataclass(frozen=True)
class Prediction:
    """What one replica is expected to do at a given rate and delay."""

    rate_rps: float
    delay_us: int
    avg_batch: float
    exec_ms: float  # execution time of the average batch
    busy: float  # fraction of time the instance executes (GPU busy fraction)
    p99_ms: float  # queue + compute; math.inf when overloaded
    capacity_rps: float  # most the replica can serve (full batches back to back)

    @property
    def stable(self) -> bool:
        return math.isfinite(self.p99_ms)

    @property
    def gpu_ms_per_inference(self) -> float:
        """GPU time spent per request: what a bigger batch saves."""
        return self.exec_ms / self.avg_batch


def capacity_rps(max_batch: int, latency: LatencyCurve) -> float:
    """Requests per second one replica serves executing full batches back to back."""
    return 1000.0 * max_batch / latency(max_batch)


def _batch_formula(lam: float, d: float, max_batch: int, exec_ms: float) -> float:
    """Mean batch given the execution time of the previous batch (all times in ms)."""
    p_idle = math.exp(-lam * exec_ms)  # nothing arrived while the instance executed
    # From idle: the first request opens the batch, which closes after the delay or when full.
    from_idle = 1.0 + lam * min(d, (max_batch - 1) / lam if lam > 0 else d)
    # From busy: the requests that queued during execution, plus what arrives before the
    # oldest one has waited the delay (it is already exec * (1 - 1/(n+1)) old on average).
    age = exec_ms * (1.0 - 1.0 / (lam * exec_ms + 1.0))
    extra = (1.0 - p_idle) * lam * max(0.0, d - age)
    return min(float(max_batch), p_idle * from_idle + lam * exec_ms + extra)


def mean_batch(rate_rps: float, delay_us: float, max_batch: int, latency: LatencyCurve) -> float:
    """Fixed point b = f(exec(b)) of the batch formula; monotone iteration from b = 1."""
    lam = rate_rps / 1000.0
    d = delay_us / 1000.0
    b = 1.0
    for _ in range(200):
        nb = _batch_formula(lam, d, max_batch, latency(b))
        if abs(nb - b) < 1e-6:
            return max(1.0, nb)
        b = nb
    return max(1.0, b)


def predict(rate_rps: float, delay_us: float, max_batch: int, latency: LatencyCurve) -> Prediction:
    """Predict batch size, busy fraction and p99 for one replica."""
    if rate_rps < 0:
        raise ValueError(f"rate_rps must be >= 0, got {rate_rps}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    cap = capacity_rps(max_batch, latency)
    delay_us = max(0.0, float(delay_us))
    lam = rate_rps / 1000.0  # per ms; a subnormal rate underflows to 0 here: no load either
    if lam <= 0:
        e1 = latency(1.0)
        return Prediction(0.0, int(delay_us), 1.0, e1, 0.0, e1 + delay_us / 1000.0, cap)
    d = delay_us / 1000.0
    b = mean_batch(rate_rps, delay_us, max_batch, latency)
    e = latency(b)
    busy = min(1.0, lam * e / b)
    full_util = lam * latency(max_batch) / max_batch
    if full_util >= MAX_UTILISATION:
        return Prediction(
            rate_rps, int(delay_us), float(max_batch), latency(max_batch), 1.0, math.inf, cap
        )
    # The batch a request lands in is size-biased: take a high percentile of it.
    b_hi = min(float(max_batch), b + BATCH_Z * math.sqrt(b))
    e_hi = latency(b_hi)
    # Formation wait: up to the delay when the instance is idle; when busy (probability
    # `busy`) the residual execution, whose p99 is e_hi * (1 - 0.01 / busy).
    d_fill = min(d, (max_batch - 1) / lam)
    residual = e_hi * max(0.0, 1.0 - 0.01 / busy) if busy > 0 else 0.0
    wait = max(d_fill, residual)
    # Backlog once full batches are needed: Kingman for batches of max_batch requests
    # (arrival cv^2 = 1/max_batch, deterministic service), exponential tail (ln 100).
    backlog = (
        BACKLOG_SAFETY
        * math.log(100.0)
        * full_util
        / (1.0 - full_util)
        * latency(max_batch)
        / (2.0 * max_batch)
    )
    p99 = P99_SAFETY * (wait + e_hi + backlog)
    return Prediction(rate_rps, int(delay_us), b, e, busy, p99, cap)


def capacity_at_slo(
    target_ms: float,
    max_batch: int,
    latency: LatencyCurve,
    delays_us: tuple[float, ...] = (0.0,),
) -> float:
    """Highest per-replica rate whose predicted p99 stays within target_ms (bisection).

    Uses the best of the given delays at each rate; predicted p99 is monotone in rate for a
    fixed delay, so bisection on the rate is sound.
    """
    cap = capacity_rps(max_batch, latency)

    def ok(rate: float) -> bool:
        return any(predict(rate, d, max_batch, latency).p99_ms <= target_ms for d in delays_us)

    if not ok(1e-6):
        return 0.0
    lo, hi = 0.0, cap
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
