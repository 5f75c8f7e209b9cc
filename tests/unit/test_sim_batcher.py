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


def _feed(
    arrivals: np.ndarray, cfg: BatcherConfig, lat: list[float], delay_s: float, instances: int = 1
) -> tuple[RequestStore, Replica]:
    """Run one replica over `arrivals` in 13 slices, as the engine does, then drain it."""
    store = RequestStore(arrivals)
    rep = Replica(id=0, created_s=0.0, ready_s=0.0, delay_s=delay_s, instances=instances)
    edges = np.linspace(0, arrivals[-1] + 1, 13)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        advance(rep, np.flatnonzero((arrivals >= lo) & (arrivals < hi)), hi, store, cfg, lat)
    advance(rep, np.zeros(0, dtype=np.int64), math.inf, store, cfg, lat)
    return store, rep


MAXB = 8
LAT = [0.0] + [0.002 + 0.0005 * b for b in range(1, MAXB + 1)]  # capacity 1,333 req/s


@pytest.mark.parametrize(
    ("rate", "delay_ms", "preferred", "instances"),
    [(300, 3.0, (), 1), (1500, 1.0, (), 1), (800, 5.0, (4, 8), 1), (2500, 0.0, (), 2),
     (900, 2.0, (2, 6), 3)],
)  # fmt: skip
def test_guarded_batcher_that_refuses_nothing_matches_the_fast_one(
    rate: float, delay_ms: float, preferred: tuple[int, ...], instances: int
) -> None:
    """The queue-policy path keeps every batching rule: with a timeout no request reaches
    and an unreachable queue bound, it forms exactly the batches the fast paths form."""
    rng = np.random.default_rng(int(rate))
    arrivals = np.sort(rng.uniform(0.0, 2000 / rate, 2000))
    plain = BatcherConfig(MAXB, preferred, instances=instances)
    a, rep_a = _feed(arrivals, plain, LAT, delay_ms / 1000, instances)
    for bound in (0, 10**6):  # the timeout-only path and the general one
        guarded = BatcherConfig(
            MAXB, preferred, instances=instances, queue_timeout_s=1e6, max_queue_size=bound
        )
        assert guarded.guarded and not plain.guarded
        b, rep_b = _feed(arrivals, guarded, LAT, delay_ms / 1000, instances)
        assert np.array_equal(a.start[: a.n], b.start[: b.n])
        assert np.array_equal(a.batch[: a.n], b.batch[: b.n])
        assert rep_a.executions == rep_b.executions and np.isinf(b.rejected[: b.n]).all()


@pytest.mark.parametrize("instances", [1, 2])
def test_timeout_only_path_matches_the_general_one(instances: int) -> None:
    """The fast path for a timeout without a queue bound refuses and serves exactly as the
    general path does with a bound no queue reaches."""
    rng = np.random.default_rng(23 + instances)
    arrivals = np.sort(rng.uniform(0.0, 2.0, 6000))  # 3,000 req/s: overloaded
    runs = [
        _feed(
            arrivals,
            BatcherConfig(
                MAXB, (4, 8), instances=instances, queue_timeout_s=0.008, max_queue_size=bound
            ),
            LAT,
            0.002,
            instances,
        )[0]
        for bound in (0, 10**6)
    ]
    fast, general = runs
    n = fast.n
    assert np.isfinite(fast.rejected[:n]).sum() > 1000
    for column in ("start", "end", "batch", "rejected"):
        assert np.array_equal(getattr(fast, column)[:n], getattr(general, column)[:n]), column


def test_timeout_refuses_requests_that_waited_past_it_when_the_batcher_looks() -> None:
    rng = np.random.default_rng(21)
    arrivals = np.sort(rng.uniform(0.0, 2.0, 5000))  # 2,500 req/s: twice the capacity
    timeout = 0.010
    cfg = BatcherConfig(MAXB, queue_timeout_s=timeout)
    store, rep = _feed(arrivals, cfg, LAT, 0.001)
    n = store.n
    refused = np.isfinite(store.rejected[:n])
    served = np.isfinite(store.end[:n])
    assert 0.3 < refused.mean() < 0.7 and not (refused & served).any()
    assert (refused | served).all()  # every request is answered one way or the other
    wait = store.start[:n][served] - arrivals[served]
    assert wait.max() <= timeout + 1e-12  # the served never queued past the timeout
    late = store.rejected[:n][refused] - arrivals[refused]
    assert late.min() > timeout
    # refused when an instance frees up (a batch ends), not at the timeout itself
    ends = set(np.round(store.end[:n][served], 12))
    assert set(np.round(store.rejected[:n][refused], 12)) <= ends
    assert rep.rejected_total == 0 and sum(len(u) for u in rep.unrejected) == refused.sum()


def test_full_queue_refuses_on_arrival_and_never_holds_more() -> None:
    rng = np.random.default_rng(22)
    arrivals = np.sort(rng.uniform(0.0, 2.0, 5000))
    cap = 5
    store, rep = _feed(arrivals, BatcherConfig(MAXB, max_queue_size=cap), LAT, 0.001)
    n = store.n
    refused = np.isfinite(store.rejected[:n])
    assert refused.any() and np.array_equal(store.rejected[:n][refused], arrivals[refused])
    admitted = ~refused
    starts = store.start[:n][admitted]
    adm_arrivals = arrivals[admitted]
    for i in np.flatnonzero(refused)[::50]:  # a full queue met each refused arrival
        t = arrivals[i]
        waiting = np.count_nonzero((adm_arrivals < t) & (starts > t))
        assert waiting == cap
    # queue-full refusals do not reach Triton's failure counter (measured on 2.51)
    assert not rep.unrejected
