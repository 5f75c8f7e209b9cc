"""Turn a simulation run into the result `batchop simulate --json` writes.

Latencies here are ground truth (server side: queue + compute, per request), unlike what the
controller saw. Quantiles use the nearest-rank rule; windows are by arrival time and empty
windows are left out of window_attainment.

Requests refused by the queue policy (spec.overload) count as `rejected`, never as served
or dropped; they count against slo_attainment (served within the SLO over all sent) and
against the p99s over all requests, while `served_p99_ms` is the p99 of those served.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchop.sim.engine import SimRun
from batchop.sim.score import group_quantile, reversals
from batchop.sim.scrape import nearest_rank


def gpu_seconds(run: SimRun) -> float:
    """GPUs allocated x time over the trace: every pod from creation (starting pods hold
    their GPU) until removal, times gpus_per_replica."""
    total = 0.0
    for rep in run.pods:
        stop = rep.removed_s if rep.removed_s is not None else run.end_s
        total += max(0.0, min(stop, run.end_s) - rep.created_s)
    return total * run.profile.gpus_per_replica


def summarize(run: SimRun, slo_ms: float) -> dict[str, Any]:
    store = run.store
    n = store.n
    latency = store.end[:n] - store.arrival[:n]  # inf for requests never served
    slo_s = slo_ms / 1000.0
    served = np.isfinite(latency)
    refused = np.isfinite(store.rejected[:n])
    executions = sum(r.executions for r in run.pods)
    window = 60.0
    keys = (store.arrival[:n] // window).astype(np.int64)
    n_windows = int(np.ceil(run.end_s / window)) if run.end_s > 0 else 0
    keys = np.minimum(keys, max(n_windows - 1, 0))
    win_p99 = group_quantile(keys, latency, 0.99, n_windows)
    occupied = ~np.isnan(win_p99)
    met = np.count_nonzero(win_p99[occupied] <= slo_s)
    gpus = run.profile.gpus_per_replica
    result: dict[str, Any] = {
        "policy": run.policy,
        "profile": run.profile.name,
        "trace": run.trace.name,
        "slo_ms": slo_ms,
        "seed": run.config.seed,
        "mode": f"closed({run.config.clients})" if run.config.clients else "open",
        "duration_s": run.end_s,
        "requests": int(n),
        "p50_ms": nearest_rank(latency, 0.50) * 1000.0 if n else None,
        "p99_ms": nearest_rank(latency, 0.99) * 1000.0 if n else None,
        "mean_ms": float(np.mean(latency[served])) * 1000.0 if served.any() else None,
        "slo_attainment": float(np.count_nonzero(latency <= slo_s) / n) if n else 1.0,
        "window_attainment": float(met / np.count_nonzero(occupied)) if occupied.any() else 1.0,
        "gpu_seconds": gpu_seconds(run),
        "gpu_busy_seconds": sum(r.busy_s for r in run.pods) * gpus,
        "avg_batch_size": float(np.count_nonzero(served) / executions) if executions else 0.0,
        "dropped": int(run.dropped),
        "rejected": int(np.count_nonzero(refused)),
        "served_p99_ms": nearest_rank(latency[served], 0.99) * 1000.0 if served.any() else None,
        "decisions_count": len(run.decisions),
        "max_replicas_used": max(h[1] for h in run.history),
        # scale-downs undone by a scale-up within two pod starts (batchop.sim.score)
        "reversals": len(reversals(run.history, run.profile.startup_seconds)),
    }
    for key in ("p50_ms", "p99_ms", "mean_ms"):
        if result[key] is not None and not np.isfinite(result[key]):
            result[key] = None  # JSON has no infinity: p99 of a run that dropped > 1%
    result["lost_windows"] = lost_windows(run, win_p99, slo_s, window)
    result["timeline"] = timeline(run, slo_ms)
    result["decisions"] = run.decisions
    return result


def lost_windows(
    run: SimRun, win_p99: np.ndarray, slo_s: float, window: float
) -> list[dict[str, Any]]:
    """Each window whose p99 broke the SLO, with what explains it: the arrival rate of the
    window before and its own (mean and busiest second), the replicas ready at its start and
    at most during it, and the most the policy asked for during it. A jump the ready
    replicas could not serve, answered by pods ready only later, reads off these."""
    store = run.store
    arrival = store.arrival[: store.n]
    per_second = np.bincount(arrival.astype(np.int64), minlength=int(np.ceil(run.end_s)) + 1)
    hist_t = np.array([h[0] for h in run.history])

    def at(t: float) -> tuple[float, int, int, int]:
        """(t, desired, ready, delay_us) in effect at `t`."""
        return run.history[max(0, int(np.searchsorted(hist_t, t, side="right")) - 1)]

    def mean_rps(w: int) -> float:
        lo, hi = int(w * window), int(min((w + 1) * window, run.end_s))
        return float(per_second[lo:hi].sum() / max(1, hi - lo))

    out = []
    for w in np.flatnonzero(~np.isnan(win_p99) & (win_p99 > slo_s)):
        start, end = w * window, min((w + 1) * window, run.end_s)
        inside = run.history[
            int(np.searchsorted(hist_t, start, side="right")) : int(np.searchsorted(hist_t, end))
        ]
        states = [at(start), *inside]
        p99 = float(win_p99[w])
        out.append(
            {
                "t": float(start),
                "p99_ms": p99 * 1000.0 if np.isfinite(p99) else None,
                "rps_before": mean_rps(w - 1) if w > 0 else None,
                "rps": mean_rps(w),
                "peak_rps": int(per_second[int(start) : int(np.ceil(end))].max()),
                "ready": states[0][2],
                "ready_max": max(h[2] for h in states),
                "desired_max": max(h[1] for h in states),
            }
        )
    return out


def timeline(run: SimRun, slo_ms: float) -> list[dict[str, Any]]:
    """Per step: offered rps, true p99 of requests arriving in it, and the knobs at its end."""
    store = run.store
    n = store.n
    step = run.config.timeline_step_s
    n_bins = max(1, int(np.ceil(run.end_s / step)))
    arrival = store.arrival[:n]
    keys = np.minimum((arrival // step).astype(np.int64), n_bins - 1)
    latency = store.end[:n] - arrival
    p99 = group_quantile(keys, latency, 0.99, n_bins)
    counts = np.bincount(keys, minlength=n_bins)
    refused_mask = np.isfinite(store.rejected[:n])
    refused = np.bincount(keys[refused_mask], minlength=n_bins)
    served = np.isfinite(latency)
    served_p99 = group_quantile(keys[served], latency[served], 0.99, n_bins)
    batch = store.batch[:n]
    execs = np.bincount(
        keys, weights=np.where(batch > 0, 1.0 / np.maximum(batch, 1), 0.0), minlength=n_bins
    )
    hist_t = np.array([h[0] for h in run.history])
    rows = []
    for b in range(n_bins):
        t_end = min((b + 1) * step, run.end_s)
        h = run.history[int(np.searchsorted(hist_t, t_end, side="right")) - 1]
        rows.append(
            {
                "t": round(b * step, 3),
                "rps": counts[b] / step,
                "p99_ms": None if np.isnan(p99[b]) or np.isinf(p99[b]) else p99[b] * 1000.0,
                "slo_ms": slo_ms,
                "delay_us": h[3],
                "replicas": h[1],
                "ready": h[2],
                "avg_batch": counts[b] / execs[b] if execs[b] > 0 else None,
                "rejected": int(refused[b]),
                "served_p99_ms": None if np.isnan(served_p99[b]) else served_p99[b] * 1000.0,
            }
        )
    return rows
