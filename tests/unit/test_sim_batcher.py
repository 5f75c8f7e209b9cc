"""The fast batcher against a slow, step-by-step reference of the same Triton rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from batchop.sim.batcher import BatcherConfig, Replica, RequestStore, advance


def reference(
    arrivals: list[float], delay: float, maxb: int, preferred: tuple[int, ...], lat: list[float]
) -> list[float]:
    """Batch start time per request, walking time event by event (arrival or deadline)."""
    n = len(arrivals)
    target = max(preferred) if preferred else maxb
    start = [math.nan] * n
    free, i = 0.0, 0
    while i < n:
        t = max(free, arrivals[i])
        while True:
            queued = sum(1 for j in range(i, min(n, i + maxb)) if arrivals[j] <= t)
            if queued >= target:
                size = target
                break
            if t >= arrivals[i] + delay:
                fits = [p for p in preferred if p <= queued]
                size = max(fits) if fits else queued
                break
            nxt = arrivals[i + queued] if i + queued < n else math.inf
            t = min(nxt, arrivals[i] + delay)
        for j in range(i, i + size):
            start[j] = t
        free = t + lat[size]
        i += size
    return start


@pytest.mark.parametrize(
    ("rate", "delay_ms", "preferred"),
    [(300, 0.0, ()), (300, 3.0, ()), (1500, 1.0, ()), (800, 5.0, (4, 8)), (3000, 0.0, (2, 6))],
)
def test_fast_batcher_matches_the_reference(
    rate: float, delay_ms: float, preferred: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(int(rate + delay_ms))
    arrivals = np.sort(rng.uniform(0.0, 3000 / rate, 3000))
    maxb = 8
    lat = [0.0] + [0.002 + 0.0005 * b for b in range(1, maxb + 1)]
    cfg = BatcherConfig(max_batch_size=maxb, preferred_batch_sizes=preferred)
    store = RequestStore(arrivals)
    rep = Replica(id=0, created_s=0.0, ready_s=0.0, delay_s=delay_ms / 1000)
    # Feed it in slices, as the engine does, to exercise the carry-over between slices.
    edges = np.linspace(0, arrivals[-1] + 1, 13)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        new = np.flatnonzero((arrivals >= lo) & (arrivals < hi))
        advance(rep, new, hi, store, cfg, lat)
    advance(rep, np.zeros(0, dtype=np.int64), math.inf, store, cfg, lat)
    expected = reference(arrivals.tolist(), delay_ms / 1000, maxb, preferred, lat)
    n = len(arrivals)
    np.testing.assert_allclose(store.start[:n], expected, rtol=0, atol=1e-12)
    assert store.batch[:n].max() <= maxb
