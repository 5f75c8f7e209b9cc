"""Triton's dynamic batcher for one replica, advanced a time slice at a time.

Rules (Triton's batcher documentation): when a model instance is free, the batcher takes
queued requests in arrival order. If the queue holds the largest preferred size (or the
model's max batch size when no preferred sizes are set) the batch goes at once. Otherwise it
waits while the oldest request has waited less than `max_queue_delay`; when that delay runs
out it sends the largest preferred size it can form, or everything queued (up to max batch
size). While every instance is busy, requests pile up, so the next batch takes what queued
meanwhile: with a delay of 0 a loaded server still batches. Without the dynamic batcher
(Triton's default scheduler) every execution holds one request.

The queue policy (spec.overload, measured on Triton 2.51): with a queue timeout, a request
still queued past it is refused when the batcher next looks at the queue, i.e. when an
instance frees up or a batch forms, not at the timeout itself (Triton refused a 30 ms
timeout's requests after 47 ms at the median behind 40 ms batches). With a max queue size,
a request arriving while that many wait is refused at once. Refused requests are never
served (`RequestStore.rejected` holds the time of refusal); only timeout refusals reach the
pod's failure counter, as only those reach Triton's `nv_inference_request_failure`.

Speed: requests are never Python objects. A replica's queue is an array of global request
indices into sorted arrival times; the loop runs once per *batch*, using bisect on a plain list,
and per-request results are filled in afterwards with numpy.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BatcherConfig:
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...] = ()
    dynamic: bool = True  # False: Triton's default scheduler, one request per execution
    instances: int = 1  # instance_group count per replica; they share the replica's GPU(s)
    overlap_slowdown: float = 2.0  # see Profile.overlap_slowdown
    queue_timeout_s: float = 0.0  # queue policy: refuse past this wait (0: never)
    max_queue_size: int = 0  # queue policy: refuse arrivals beyond this many waiting (0: never)

    @property
    def guarded(self) -> bool:
        return self.dynamic and (self.queue_timeout_s > 0 or self.max_queue_size > 0)


class RequestStore:
    """Per-request columns indexed by global request number (arrival order)."""

    def __init__(self, arrivals: np.ndarray | None = None, capacity: int = 1 << 16) -> None:
        n = len(arrivals) if arrivals is not None else 0
        cap = max(n, capacity)
        self.n = n
        self.arrival = np.empty(cap)
        if arrivals is not None:
            self.arrival[:n] = arrivals
        self.start = np.full(cap, np.inf)
        self.end = np.full(cap, np.inf)
        self.compute = np.zeros(cap)  # execution time of the request's batch (s)
        self.batch = np.zeros(cap, dtype=np.int32)
        self.replica = np.full(cap, -1, dtype=np.int32)
        self.client = np.full(cap, -1, dtype=np.int32)
        self.rejected = np.full(cap, np.inf)  # when the queue policy refused it (inf: never)

    def append(self, arrivals: np.ndarray, clients: np.ndarray) -> np.ndarray:
        """Add requests (closed loop); returns their indices."""
        m = len(arrivals)
        if self.n + m > len(self.arrival):
            cap = max(2 * len(self.arrival), self.n + m)
            for name, fill in (
                ("arrival", 0.0),
                ("start", np.inf),
                ("end", np.inf),
                ("compute", 0.0),
                ("batch", 0),
                ("replica", -1),
                ("client", -1),
                ("rejected", np.inf),
            ):
                old = getattr(self, name)
                new = np.full(cap, fill, dtype=old.dtype)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
        idx = np.arange(self.n, self.n + m)
        self.arrival[idx] = arrivals
        self.client[idx] = clients
        self.n += m
        return idx


@dataclass
class Replica:
    """One pod running Triton: its instances, its queue and what Prometheus scrapes from it."""

    id: int
    created_s: float
    ready_s: float
    delay_s: float
    instances: int = 1
    removed_s: float | None = None
    free: list[float] = field(default_factory=list)  # per instance: when it is next idle
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    busy_s: float = 0.0  # nominal execution time (GPU busy, before sharing slowdown)
    executions: int = 0
    # Prometheus-facing state: served requests not yet in a scrape, cumulative counters
    # (success, inference count, exec count, queue us, compute us, request us), and the
    # latencies behind the summary's sliding window as (scrape time, seconds[]).
    uncounted: list[np.ndarray] = field(default_factory=list)
    counters: np.ndarray = field(default_factory=lambda: np.zeros(6))
    recent: list[tuple[float, np.ndarray]] = field(default_factory=list)
    # Queue policy: requests refused on timeout not yet in a scrape, the cumulative count
    # of those (Triton's failure counter, reason REJECTED), and every request the last
    # advance() refused (for closed-loop clients, who get their error back then).
    unrejected: list[np.ndarray] = field(default_factory=list)
    rejected_total: float = 0.0
    refused_new: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        if not self.free:
            self.free = [self.ready_s] * self.instances

    def ready_at(self, t: float) -> bool:
        return self.ready_s <= t and (self.removed_s is None or self.removed_s > t)


def advance(
    rep: Replica,
    new: np.ndarray,
    until: float,
    store: RequestStore,
    cfg: BatcherConfig,
    lat_s: list[float],
) -> np.ndarray:
    """Run the replica's batcher over its queue plus `new` requests, forming every batch
    that starts no later than `until` (later ones may still gain requests arriving after it).
    Returns the global indices of the requests it started, in order."""
    idx = np.concatenate((rep.pending, new)) if len(rep.pending) else new
    if len(idx) == 0:
        return idx
    a_np = store.arrival[idx]
    if cfg.guarded:
        return _advance_guarded(rep, idx, len(rep.pending), until, store, cfg, lat_s)
    if not cfg.dynamic and cfg.instances == 1:
        served, starts, ends = _fifo_single(rep, a_np, until, lat_s[1])
        durs = np.full(served, lat_s[1])
        sizes = np.ones(served, dtype=np.int32)
        rep.busy_s += served * lat_s[1]
        rep.executions += served
        if served:
            rep.free[0] = float(ends[-1])
    else:
        a = a_np.tolist()
        if cfg.instances == 1:
            starts_l, sizes_l, durs_l = _batches_single(rep, a, until, cfg, lat_s)
        else:
            starts_l, sizes_l, durs_l = _batches_multi(rep, a, until, cfg, lat_s)
        if not sizes_l:
            rep.pending = idx
            return idx[:0]
        starts = np.asarray(starts_l)
        sizes = np.asarray(sizes_l, dtype=np.int32)
        durs = np.asarray(durs_l)
        served = int(sizes.sum()) if len(sizes) else 0
        # Nominal (unshared) work, for GPU busy time.
        rep.busy_s += float(np.asarray(lat_s)[sizes].sum()) if len(sizes) else 0.0
        rep.executions += len(sizes)
    done = idx[:served]
    rep.pending = idx[served:]
    if served:
        _record(rep, store, done, starts, durs, sizes)
    return done


def _record(
    rep: Replica,
    store: RequestStore,
    done: np.ndarray,
    starts: np.ndarray,
    durs: np.ndarray,
    sizes: np.ndarray,
) -> None:
    """Write executed batches (start, duration, size; one row per batch) onto their
    requests, and queue them for the pod's next scrape."""
    store.start[done] = np.repeat(starts, sizes)
    store.end[done] = np.repeat(starts + durs, sizes)
    store.compute[done] = np.repeat(durs, sizes)
    store.batch[done] = np.repeat(sizes, sizes)
    store.replica[done] = rep.id
    rep.uncounted.append(done)


def _fifo_single(
    rep: Replica, a: np.ndarray, until: float, s: float
) -> tuple[int, np.ndarray, np.ndarray]:
    """One request per execution, one instance: Lindley's recursion in closed form.
    end_i = (i+1)s + max(free, max_{j<=i}(a_j - j s))."""
    n = len(a)
    k = np.arange(n)
    c = np.maximum.accumulate(a - k * s)
    np.maximum(c, rep.free[0], out=c)
    ends = (k + 1) * s + c
    starts = ends - s
    served = int(np.searchsorted(starts, until, side="right"))
    return served, starts[:served], ends[:served]


def _batches_single(
    rep: Replica, a: list[float], until: float, cfg: BatcherConfig, lat_s: list[float]
) -> tuple[list[float], list[int], list[float]]:
    n = len(a)
    maxb = cfg.max_batch_size if cfg.dynamic else 1
    preferred = sorted(p for p in cfg.preferred_batch_sizes if p <= maxb) if cfg.dynamic else []
    target = preferred[-1] if preferred else maxb
    delay = rep.delay_s if cfg.dynamic else 0.0
    free = rep.free[0]
    starts: list[float] = []
    sizes: list[int] = []
    durs: list[float] = []
    i = 0
    while i < n:
        ai = a[i]
        t0 = free if free > ai else ai
        j = i + target - 1
        if j < n and a[j] <= t0:
            start, size = t0, target
        else:
            deadline = ai + delay
            if t0 >= deadline:
                start = t0
            elif j < n and a[j] < deadline:
                start = a[j]
            else:
                start = deadline
            hi = i + maxb
            size = bisect_right(a, start, i, hi if hi < n else n) - i
            if size >= target:
                size = target
            elif preferred:
                for p in reversed(preferred):
                    if p <= size:
                        size = p
                        break
        if start > until:
            break
        dur = lat_s[size]
        starts.append(start)
        sizes.append(size)
        durs.append(dur)
        free = start + dur
        i += size
    rep.free[0] = free
    return starts, sizes, durs


def _batches_multi(
    rep: Replica, a: list[float], until: float, cfg: BatcherConfig, lat_s: list[float]
) -> tuple[list[float], list[int], list[float]]:
    """Several instances: each batch goes to the instance free first; executions that run at
    the same time on the replica's GPU slow each other down (overlap_slowdown)."""
    n = len(a)
    maxb = cfg.max_batch_size if cfg.dynamic else 1
    preferred = sorted(p for p in cfg.preferred_batch_sizes if p <= maxb) if cfg.dynamic else []
    target = preferred[-1] if preferred else maxb
    delay = rep.delay_s if cfg.dynamic else 0.0
    extra = cfg.overlap_slowdown - 1.0
    free = rep.free
    starts: list[float] = []
    sizes: list[int] = []
    durs: list[float] = []
    i = 0
    while i < n:
        inst = min(range(len(free)), key=free.__getitem__)
        ai = a[i]
        t0 = free[inst] if free[inst] > ai else ai
        j = i + target - 1
        if j < n and a[j] <= t0:
            start, size = t0, target
        else:
            deadline = ai + delay
            start = t0 if t0 >= deadline else (a[j] if j < n and a[j] < deadline else deadline)
            hi = min(n, i + maxb)
            size = min(bisect_right(a, start, i, hi) - i, target)
            if size < target and preferred:
                size = max((p for p in preferred if p <= size), default=size)
        if start > until:
            break
        others = sum(1 for k, f in enumerate(free) if k != inst and f > start)
        dur = lat_s[size] * (1.0 + extra * others)
        starts.append(start)
        sizes.append(size)
        durs.append(dur)
        free[inst] = start + dur
        i += size
    return starts, sizes, durs


def _advance_guarded(
    rep: Replica,
    idx: np.ndarray,
    admitted: int,
    until: float,
    store: RequestStore,
    cfg: BatcherConfig,
    lat_s: list[float],
) -> np.ndarray:
    """advance() under a queue policy: the batches of `_batches_guarded` (or, with no queue
    bound, of the faster `_batches_timeout`), refusals recorded."""
    a = store.arrival[idx].tolist()
    if cfg.max_queue_size <= 0:
        starts_l, sizes_l, durs_l, members_np, refused, pending_np = _timeout_only(
            rep, a, until, cfg, lat_s
        )
        members: Any = members_np
        pending: Any = pending_np
    else:
        starts_l, sizes_l, durs_l, members, refused, pending = _batches_guarded(
            rep, a, admitted, until, cfg, lat_s
        )
    rep.pending = idx[np.asarray(pending, dtype=np.int64)]
    rep.refused_new = idx[:0]
    if refused:
        pos, when, counted = (np.asarray(col) for col in zip(*refused, strict=True))
        who = idx[pos.astype(np.int64)]
        store.rejected[who] = when
        rep.refused_new = who
        if counted.any():
            rep.unrejected.append(who[counted.astype(bool)])
    if not sizes_l:
        return idx[:0]
    starts = np.asarray(starts_l)
    sizes = np.asarray(sizes_l, dtype=np.int32)
    durs = np.asarray(durs_l)
    rep.busy_s += float(np.asarray(lat_s)[sizes].sum())
    rep.executions += len(sizes)
    done = idx[np.asarray(members, dtype=np.int64)]
    _record(rep, store, done, starts, durs, sizes)
    return done


def _timeout_only(
    rep: Replica, a: list[float], until: float, cfg: BatcherConfig, lat_s: list[float]
) -> tuple[
    list[float], list[int], list[float], np.ndarray, list[tuple[int, float, bool]], np.ndarray
]:
    """`_batches_guarded`'s results for a queue timeout without a queue bound: every arrival
    is queued and refusals leave from the head, so the queue stays a contiguous range."""
    starts, sizes, durs, refusals, i = _batches_timeout(rep, a, until, cfg, lat_s)
    served = np.ones(i, dtype=bool)
    refused: list[tuple[int, float, bool]] = []
    for lo, hi, t in refusals:
        served[lo:hi] = False
        refused.extend((p, t, True) for p in range(lo, hi))
    return starts, sizes, durs, np.flatnonzero(served), refused, np.arange(i, len(a))


def _batches_timeout(
    rep: Replica, a: list[float], until: float, cfg: BatcherConfig, lat_s: list[float]
) -> tuple[list[float], list[int], list[float], list[tuple[int, int, float]], int]:
    """The batcher with a queue timeout only (one or more instances), a step per batch.

    Returns starts, sizes, durations, the refusals as (first, end, time) position ranges,
    and the first position not yet served or refused.
    """
    n = len(a)
    maxb = cfg.max_batch_size
    preferred = sorted(p for p in cfg.preferred_batch_sizes if p <= maxb)
    target = preferred[-1] if preferred else maxb
    delay, timeout = rep.delay_s, cfg.queue_timeout_s
    extra = cfg.overlap_slowdown - 1.0
    free = rep.free
    single = len(free) == 1
    starts: list[float] = []
    sizes: list[int] = []
    durs: list[float] = []
    refusals: list[tuple[int, int, float]] = []
    i = 0
    while i < n:
        inst = 0 if single else min(range(len(free)), key=free.__getitem__)
        ai = a[i]
        t0 = free[inst] if free[inst] > ai else ai
        if t0 > until:
            break
        if ai + timeout < t0:  # the head waited past the timeout: refused as the batcher looks
            j = bisect_left(a, t0 - timeout, i, n)
            while j < n and a[j] + timeout < t0:  # bisect on t0 - timeout may round
                j += 1
            while j > i + 1 and not a[j - 1] + timeout < t0:
                j -= 1
            refusals.append((i, j, t0))
            i = j
            continue
        j = i + target - 1
        if j < n and a[j] <= t0:
            start, size = t0, target
        else:
            deadline = ai + delay
            start = t0 if t0 >= deadline else (a[j] if j < n and a[j] < deadline else deadline)
            if start > until:
                break
            hi = i + maxb
            size = bisect_right(a, start, i, hi if hi < n else n) - i
            if size >= target:
                size = target
            elif preferred:
                size = max((p for p in preferred if p <= size), default=size)
        if single:
            dur = lat_s[size]
        else:
            others = sum(1 for k, f in enumerate(free) if k != inst and f > start)
            dur = lat_s[size] * (1.0 + extra * others)
        starts.append(start)
        sizes.append(size)
        durs.append(dur)
        free[inst] = start + dur
        i += size
    return starts, sizes, durs, refusals, i


def _batches_guarded(
    rep: Replica,
    a: list[float],
    admitted: int,
    until: float,
    cfg: BatcherConfig,
    lat_s: list[float],
) -> tuple[
    list[float], list[int], list[float], list[int], list[tuple[int, float, bool]], list[int]
]:
    """The batcher with a queue policy, one or more instances. `a` are arrival times; the
    first `admitted` are already queued (the rest arrive now and may be refused).

    Returns batch starts, sizes and durations; the positions served, batch by batch; the
    refusals as (position, time, counted by Triton); and the positions still queued.
    Slower than the unguarded paths (a Python step per arrival when the queue is bounded),
    so it runs only when a policy can refuse.
    """
    n = len(a)
    maxb = cfg.max_batch_size
    preferred = sorted(p for p in cfg.preferred_batch_sizes if p <= maxb)
    target = preferred[-1] if preferred else maxb
    delay, timeout, cap = rep.delay_s, cfg.queue_timeout_s, cfg.max_queue_size
    extra = cfg.overlap_slowdown - 1.0
    free = rep.free
    queue = list(range(admitted))  # positions waiting, queue[head:] in arrival order
    head = 0
    k = admitted  # next arrival not yet admitted or refused
    starts: list[float] = []
    sizes: list[int] = []
    durs: list[float] = []
    members: list[int] = []
    refused: list[tuple[int, float, bool]] = []

    def admit(t: float) -> None:
        """Arrivals up to t join the queue, or are refused on a full one."""
        nonlocal k
        if cap <= 0:
            hi = bisect_right(a, t, k)
            queue.extend(range(k, hi))
            k = hi
            return
        while k < n and a[k] <= t:
            if len(queue) - head >= cap:
                refused.append((k, a[k], False))
            else:
                queue.append(k)
            k += 1

    while True:
        if head == len(queue):
            if k >= n:
                break
            admit(a[k])
            continue
        inst = min(range(len(free)), key=free.__getitem__)
        t0 = max(free[inst], a[queue[head]])  # the batcher looks at the queue
        if t0 > until:
            break
        admit(t0)
        if timeout > 0:
            while head < len(queue) and a[queue[head]] + timeout < t0:
                refused.append((queue[head], t0, True))
                head += 1
            if head == len(queue):
                continue
        waiting = len(queue) - head
        if waiting >= target:
            start = t0
        else:
            deadline = a[queue[head]] + delay
            need = target - waiting  # more arrivals the batch waits for
            fits = cap <= 0 or need <= cap - waiting
            if t0 >= deadline:
                start = t0
            elif fits and k + need - 1 < n and a[k + need - 1] < deadline:
                start = a[k + need - 1]
            else:
                start = deadline
            if start > until:
                break
            admit(start)
        size = min(len(queue) - head, target)
        if size < target and preferred:
            size = max((p for p in preferred if p <= size), default=size)
        others = sum(1 for j, f in enumerate(free) if j != inst and f > start)
        dur = lat_s[size] * (1.0 + extra * others)
        starts.append(start)
        sizes.append(size)
        durs.append(dur)
        members.extend(queue[head : head + size])
        head += size
        free[inst] = start + dur
    admit(until)
    return starts, sizes, durs, members, refused, queue[head:]
