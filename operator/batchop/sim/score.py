"""Score a run the way users count an SLO: over a span past the warm-up, and its reversals.

A model runs for weeks, so the first minutes of a cold start say little about a policy: the
bench loops a trace once and scores the second pass (`span`), reporting the cold first pass
apart. A reversal is a scale-down undone by a scale-up within two pod starts: GPUs given
back and asked for again before the pods asked for could even have been ready.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchop.sim.engine import SimRun
from batchop.sim.scrape import nearest_rank

WINDOW_S = 60.0  # window attainment counts minute windows, as `batchop simulate` does


def group_quantile(keys: np.ndarray, values: np.ndarray, q: float, n_groups: int) -> np.ndarray:
    """Nearest-rank quantile of `values` per integer key in [0, n_groups); NaN when empty.
    Keys come from sorted arrival times, so groups are usually contiguous slices already."""
    out = np.full(n_groups, np.nan)
    if len(keys) == 0:
        return out
    if np.any(keys[1:] < keys[:-1]):
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
    bounds = np.searchsorted(keys, np.arange(n_groups + 1))
    for g in range(n_groups):
        if bounds[g + 1] > bounds[g]:
            out[g] = nearest_rank(values[bounds[g] : bounds[g + 1]], q)
    return out


@dataclass(frozen=True)
class SpanScore:
    """What a run did over [start_s, end_s): requests by arrival time, GPUs by allocation."""

    start_s: float
    end_s: float
    requests: int
    slo_attainment: float  # served within the SLO / sent
    window_attainment: float  # minute windows whose p99 kept the SLO / windows with traffic
    gpu_seconds: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "requests": self.requests,
            "slo_attainment": self.slo_attainment,
            "window_attainment": self.window_attainment,
            "gpu_seconds": self.gpu_seconds,
        }


def span(run: SimRun, slo_ms: float, start_s: float, end_s: float) -> SpanScore:
    """The run's attainments and GPU-seconds over [start_s, end_s)."""
    store = run.store
    arrival = store.arrival[: store.n]
    lo = int(np.searchsorted(arrival, start_s, side="left"))
    hi = int(np.searchsorted(arrival, end_s, side="left"))
    latency = store.end[lo:hi] - arrival[lo:hi]  # inf for requests never served
    slo_s = slo_ms / 1000.0
    n = hi - lo
    met_windows = windows = 0
    if n:
        keys = ((arrival[lo:hi] - start_s) // WINDOW_S).astype(np.int64)
        win_p99 = group_quantile(keys, latency, 0.99, int(keys[-1]) + 1)
        occupied = ~np.isnan(win_p99)
        windows = int(np.count_nonzero(occupied))
        met_windows = int(np.count_nonzero(win_p99[occupied] <= slo_s))
    gpu = 0.0
    for rep in run.pods:
        stop = rep.removed_s if rep.removed_s is not None else run.end_s
        gpu += max(0.0, min(stop, end_s) - max(rep.created_s, start_s))
    return SpanScore(
        start_s=start_s,
        end_s=end_s,
        requests=n,
        slo_attainment=float(np.count_nonzero(latency <= slo_s) / n) if n else 1.0,
        window_attainment=met_windows / windows if windows else 1.0,
        gpu_seconds=gpu * run.profile.gpus_per_replica,
    )


def reversals(
    history: list[tuple[float, int, int, int]], startup_s: float, start_s: float = 0.0
) -> list[tuple[float, float]]:
    """(scale-down time, scale-up time) for each scale-down from `start_s` on that a
    scale-up followed within two pod starts. `history` is SimRun.history: (t, desired,
    ready, delay) after each change."""
    within = 2.0 * startup_s
    changes = [
        (t, n - prev)
        for (_, prev, _, _), (t, n, _, _) in zip(history, history[1:], strict=False)
        if n != prev
    ]
    found = []
    for i, (t_down, step) in enumerate(changes):
        if step >= 0 or t_down < start_s:
            continue
        for t_up, later in changes[i + 1 :]:
            if t_up - t_down > within:
                break
            if later > 0:
                found.append((t_down, t_up))
                break
    return found
