"""Judge a bursty-trace replay on the real stack (`batchop demo --trace`, the e2e test). Pure.

Three properties, from issue 10's deliverable 6:
- No multi-second waits: in every settled 30 s window, the clients' p99 of the requests
  served is within 2x the SLO. A window is settled when it starts at least `settle_s` (60 s)
  after the last change of the replica or Ready count, the load's start counting as one (the
  model's first pod has just become Ready): after a change, new pods load the model and the
  tuner reacts; that transient is not what is judged. A change inside a window does not
  unsettle it: a burst the tuner answers with a scale-up is when the guard must keep fast.
- Rejected requests counted: every request the generator sent is served, rejected (Triton's
  queue policy refused it: the overload guard) or failed otherwise, and the windows add up.
- Replicas held between bursts: no replica is given back inside a burst gap shorter than the
  scale-down stabilization (a quiet stretch the next burst ends before the window would).

The generator's own lateness is measured (send lag: actual minus scheduled send time). A
window that fails while the generator lagged beyond `lag_tolerance_ms` (p99 over the window)
is "not judged", not failed: its client latencies include the generator's starved event loop.
A window that passes with lag passes (lag only inflates client latencies).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from batchop.sim.trace import Trace, TraceError

# The replay's default: a slice of azure-code (seconds 1060-1480: eight bursts of 10-40 s at
# up to 840 req/s after scaling, mean 87 req/s, gaps of 6-65 s) and its scale. x0.02 keeps
# the bursts within what this machine can send (the generator sustains ~500 req/s on two
# cores; the few seconds above that lag, and the lag is measured) and makes the larger bursts
# need a second or third replica of the demo model (~360 req/s each at maxBatchSize 2).
TRACE_START_S = 1060.0
TRACE_SECONDS = 420.0
TRACE_SCALE = 0.02

WINDOW_S = 30.0
SETTLE_S = 60.0
P99_FACTOR = 2.0  # "no multi-second waits": served p99 within 2x the SLO
QUIET_FRACTION = 0.05  # a second below 5% of the slice's peak rate is quiet (a burst gap)


def find_trace(name_or_path: str, repo_root: Path) -> Path:
    """A trace file: an existing path, else NAME(.csv) in a `shared/traces` folder next to
    the repository or above it (../shared/traces for a checkout beside `shared/`)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    name = path.name if path.suffix == ".csv" else f"{path.name}.csv"
    looked = []
    for parent in (repo_root, *repo_root.parents):
        candidate = parent / "shared" / "traces" / name
        looked.append(str(candidate.parent))
        if candidate.is_file():
            return candidate
    raise TraceError(
        f"--trace {name_or_path}: no such file, and no {name} in {', '.join(looked[:3])}"
    )


def trace_slice(trace: Trace, start_s: float, seconds: float, rate_scale: float) -> Trace:
    """[start_s, start_s + seconds) of `trace`, rebased to 0, rates x rate_scale."""
    if rate_scale <= 0:
        raise TraceError(f"--trace-scale: must be > 0, got {rate_scale:g}")
    if seconds <= 0:
        raise TraceError(f"--trace-seconds: must be > 0, got {seconds:g}")
    if not trace.start <= start_s < trace.end:
        raise TraceError(
            f"--trace-start: {start_s:g} is outside the trace "
            f"{trace.name} ({trace.start:g}..{trace.end:g} s)"
        )
    end = min(trace.end, start_s + seconds)
    points = [start_s] + [s for s in trace.seconds if start_s < s < end] + [end]
    return Trace(
        seconds=tuple(round(s - start_s, 6) for s in points),
        rps=tuple(trace.rate_at(s) * rate_scale for s in points[:-1])
        + (trace.rate_at(points[-2]) * rate_scale,),
        name=f"{trace.name}[{start_s:g}+{end - start_s:g}s]x{rate_scale:g}",
    )


def burst_gaps(trace: Trace, quiet_fraction: float = QUIET_FRACTION) -> list[tuple[float, float]]:
    """(start, end) of each quiet stretch between two bursts: seconds whose rate is below
    `quiet_fraction` of the trace's peak, with traffic before and after."""
    peak = max(trace.rps[:-1], default=0.0)
    if peak <= 0:
        return []
    gaps: list[tuple[float, float]] = []
    quiet_since: float | None = None
    seen_burst = False
    for start, _end, rps in trace.segments():
        if rps < quiet_fraction * peak:
            if quiet_since is None and seen_burst:
                quiet_since = start
        else:
            if quiet_since is not None:
                gaps.append((quiet_since, start))
            quiet_since = None
            seen_burst = True
    return gaps


@dataclass(frozen=True)
class Window:
    """One 30 s window of the load: what was sent, served, refused, and how fast."""

    start_s: float
    end_s: float
    sent: int
    served: int
    rejected: int
    failed_other: int
    served_p99_ms: float | None
    lag_p99_ms: float | None
    replicas_min: int | None
    replicas_max: int | None
    settled: bool
    # True/False: judged; None: not settled, nothing served, or a failure while lagging
    within: bool | None
    note: str = ""


def _changes(timeline: Sequence[Mapping[str, Any]]) -> list[float]:
    """Times (sample times) at which the replica or Ready count was seen to change."""
    out = []
    for prev, cur in zip(timeline, timeline[1:], strict=False):
        if (prev["replicas"], prev["ready"]) != (cur["replicas"], cur["ready"]):
            out.append(float(cur["t"]))
    return out


def windows(
    records: Mapping[str, Sequence[Any]],
    timeline: Sequence[Mapping[str, Any]],
    duration_s: float,
    slo_ms: float,
    *,
    window_s: float = WINDOW_S,
    settle_s: float = SETTLE_S,
    sample_s: float = 5.0,
    lag_tolerance_ms: float | None = None,
) -> list[Window]:
    """The load cut in `window_s` windows, each counted and (when settled) judged.

    `records`: the load generator's per-request lists (send_s, latency_ms, ok, rejected,
    lag_ms). `timeline`: samples with t, replicas, ready (the demo's). A change seen at a
    sample may have happened up to `sample_s` earlier, so it is taken to be that early.
    """
    tol = slo_ms if lag_tolerance_ms is None else lag_tolerance_ms
    send = np.asarray(records["send_s"], dtype=float)
    lat = np.array([math.nan if v is None else float(v) for v in records["latency_ms"]])
    ok = np.asarray(records["ok"], dtype=bool)
    rej = np.asarray(records.get("rejected") or [False] * len(ok), dtype=bool) & ~ok
    lag = np.asarray(records.get("lag_ms") or [0.0] * len(ok), dtype=float)
    changes = [c - sample_s for c in _changes(timeline)]
    out = []
    n = max(1, int(math.ceil(duration_s / window_s - 1e-9)))
    for k in range(n):
        a, b = k * window_s, min(duration_s, (k + 1) * window_s)
        sel = (send >= a) & (send < b)
        served = sel & ok
        p99 = float(np.percentile(lat[served], 99)) if served.any() else None
        lag99 = float(np.percentile(lag[sel], 99)) if sel.any() else None
        inside = [s for s in timeline if a <= float(s["t"]) <= b]
        reps = [int(s["replicas"]) for s in inside]
        settled = a >= settle_s and not any(a - settle_s < c <= a for c in changes)
        within: bool | None = None
        note = ""
        if not settled:
            note = f"not settled (a replica change in the {settle_s:g} s before)"
        elif p99 is None:
            note = "nothing served"
        else:
            within = p99 <= P99_FACTOR * slo_ms
            if not within and lag99 is not None and lag99 > tol:
                within = None
                note = (
                    f"not judged: p99 {p99:.0f} ms over {P99_FACTOR:g}x SLO while the "
                    f"generator lagged (send lag p99 {lag99:.0f} ms > {tol:g} ms)"
                )
        out.append(
            Window(
                start_s=a,
                end_s=b,
                sent=int(sel.sum()),
                served=int(served.sum()),
                rejected=int((sel & rej).sum()),
                failed_other=int((sel & ~ok & ~rej).sum()),
                served_p99_ms=None if p99 is None else round(p99, 2),
                lag_p99_ms=None if lag99 is None else round(lag99, 2),
                replicas_min=min(reps) if reps else None,
                replicas_max=max(reps) if reps else None,
                settled=settled,
                within=within,
                note=note,
            )
        )
    return out


def scale_downs_in_gaps(
    timeline: Sequence[Mapping[str, Any]],
    gaps: Sequence[tuple[float, float]],
    stabilization_s: float,
) -> tuple[list[dict[str, Any]], int]:
    """Replica decreases seen inside a burst gap shorter than `stabilization_s`, and how many
    such gaps began with more than the fewest replicas of the run (gaps where holding matters).

    A decrease seen at sample t happened in (previous sample's t, t]; it counts when that
    interval overlaps the gap."""
    short = [(a, b) for a, b in gaps if b - a < stabilization_s]
    floor = min((int(s["replicas"]) for s in timeline), default=0)
    bad = []
    held_gaps = 0
    for a, b in short:
        before = [s for s in timeline if float(s["t"]) <= a]
        if before and int(before[-1]["replicas"]) > floor:
            held_gaps += 1
        for prev, cur in zip(timeline, timeline[1:], strict=False):
            t0, t1 = float(prev["t"]), float(cur["t"])
            if int(cur["replicas"]) < int(prev["replicas"]) and t0 < b and t1 > a:
                bad.append(
                    {
                        "gap": [a, b],
                        "t": t1,
                        "from": int(prev["replicas"]),
                        "to": int(cur["replicas"]),
                    }
                )
    return bad, held_gaps


def judge(
    records: Mapping[str, Sequence[Any]],
    timeline: Sequence[Mapping[str, Any]],
    trace: Trace,
    *,
    slo_ms: float,
    stabilization_s: float,
    sample_s: float = 5.0,
    lag_tolerance_ms: float | None = None,
) -> dict[str, Any]:
    """The report's `bursty` section: the windows, the burst gaps and three verdicts.

    Each verdict is True (holds), False (broken) or None (nothing on this run could judge it).
    """
    wins = windows(
        records, timeline, trace.end, slo_ms, sample_s=sample_s, lag_tolerance_ms=lag_tolerance_ms
    )
    judged = [w for w in wins if w.within is not None]
    lagged = [w for w in wins if w.note.startswith("not judged")]
    ok = np.asarray(records["ok"], dtype=bool)
    rej = np.asarray(records.get("rejected") or [False] * len(ok), dtype=bool) & ~ok
    lat = np.array([math.nan if v is None else float(v) for v in records["latency_ms"]])
    totals = {
        "sent": int(len(ok)),
        "served": int(ok.sum()),
        # Request attainment's numerator, as the simulator and the family bench count it.
        "served_within_slo": int((ok & (lat <= slo_ms)).sum()),
        "rejected": int(rej.sum()),
        "failed_other": int((~ok & ~rej).sum()),
    }
    balanced = (
        totals["served"] + totals["rejected"] + totals["failed_other"] == totals["sent"]
        and sum(w.sent for w in wins) == totals["sent"]
        and sum(w.rejected for w in wins) == totals["rejected"]
    )
    gaps = burst_gaps(trace)
    bad, held_gaps = scale_downs_in_gaps(timeline, gaps, stabilization_s)
    return {
        "slo_ms": slo_ms,
        "window_s": WINDOW_S,
        "settle_s": SETTLE_S,
        "p99_factor": P99_FACTOR,
        "stabilization_s": stabilization_s,
        "totals": totals,
        "windows": [asdict(w) for w in wins],
        "burst_gaps": [list(g) for g in gaps],
        "short_gaps": sum(1 for a, b in gaps if b - a < stabilization_s),
        "short_gaps_above_floor": held_gaps,
        "scale_downs_in_short_gaps": bad,
        "verdicts": {
            "no_multi_second_waits": (
                False if any(w.within is False for w in judged) else (True if judged else None)
            ),
            "rejected_counted": balanced,
            "replicas_held_between_bursts": False if bad else (True if held_gaps else None),
        },
        "windows_judged": len(judged),
        "windows_lagged": len(lagged),
    }


def verdict_lines(bursty: Mapping[str, Any]) -> list[str]:
    """The verdicts as the demo prints them. Pure."""
    v = bursty["verdicts"]
    slo = bursty["slo_ms"]
    limit = bursty["p99_factor"] * slo

    def word(x: bool | None) -> str:
        return "PASS" if x else ("not judged" if x is None else "FAIL")

    judged = [w for w in bursty["windows"] if w["within"] is not None]
    worst = max((w["served_p99_ms"] for w in judged), default=None)
    t = bursty["totals"]
    lines = [
        f"no multi-second waits: {word(v['no_multi_second_waits'])} - served p99 within "
        f"{limit:g} ms ({bursty['p99_factor']:g}x SLO {slo:g} ms) in "
        f"{sum(1 for w in judged if w['within'])}/{len(judged)} settled window(s)"
        + (f", worst {worst:.1f} ms" if worst is not None else "")
        + (
            f"; {bursty['windows_lagged']} not judged (generator lagged)"
            if bursty["windows_lagged"]
            else ""
        ),
        f"rejected counted: {word(v['rejected_counted'])} - sent {t['sent']} = served "
        f"{t['served']} + rejected {t['rejected']} + other failures {t['failed_other']}"
        + (
            f" (Triton's REJECTED count, from Prometheus: ~{bursty['triton_rejected']:.0f})"
            if bursty.get("triton_rejected") is not None
            else ""
        ),
        f"replicas held between bursts: {word(v['replicas_held_between_bursts'])} - "
        f"{len(bursty['scale_downs_in_short_gaps'])} scale-down(s) in "
        f"{bursty['short_gaps']} gap(s) shorter than the {bursty['stabilization_s']:g} s "
        f"stabilization ({bursty['short_gaps_above_floor']} began above the run's fewest "
        "replicas)",
    ]
    return lines


def window_table(bursty: Mapping[str, Any]) -> list[str]:
    """One line a window: t, sent/served/rejected, served p99 vs SLO, replicas, verdict."""
    lines = [
        f"{'window(s)':>11} {'sent':>6} {'served':>6} {'rejected':>8} {'other':>5} "
        f"{'p99(ms)':>8} {'lag99':>6} {'replicas':>8}  verdict"
    ]
    for w in bursty["windows"]:
        p99 = "-" if w["served_p99_ms"] is None else f"{w['served_p99_ms']:.1f}"
        lag = "-" if w["lag_p99_ms"] is None else f"{w['lag_p99_ms']:.0f}"
        reps = (
            "-"
            if w["replicas_min"] is None
            else f"{w['replicas_min']}"
            if w["replicas_min"] == w["replicas_max"]
            else f"{w['replicas_min']}-{w['replicas_max']}"
        )
        verdict = {True: "ok", False: "OVER 2x SLO", None: w["note"] or "-"}[w["within"]]
        lines.append(
            f"{w['start_s']:5.0f}-{w['end_s']:<5.0f} {w['sent']:6d} {w['served']:6d} "
            f"{w['rejected']:8d} {w['failed_other']:5d} {p99:>8} {lag:>6} "
            f"{reps:>8}  {verdict}"
        )
    return lines
