"""What the policy has learned, as plain data the operator keeps in status.learned. Pure.

Why: the state lives in the operator's memory, so a restart (a new leader, an upgrade) began
every model cold: no batch curve, no correction, and no sizing labels, whose hour of a
model's own traffic is what the sizing's quantile is read from. Only what was learned is
kept; the rest of TuningState (windows, clocks of the last ticks) is rebuilt in minutes
and, if restored, would be stale against a new process's view.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from batchop.tuning.sizing import EVIDENCE_S, Memory
from batchop.tuning.types import TuningState


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def _rows(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def learned(state: TuningState, now_s: float) -> dict[str, Any]:
    """The learned parts of `state`, rounded (status is not the place for 17 digits); the
    labels with the times (epoch seconds) of their ticks."""
    out: dict[str, Any] = {
        "curve": [[round(b, 3), round(ms, 4), round(w, 3)] for b, ms, w in state.curve],
        "p99Correction": round(state.p99_correction, 4),
        "growth": [
            [round(t, 1), round(x, 2), round(trend, 4), round(g1, 4), round(g2, 4)]
            for t, x, trend, g1, g2 in state.sizing.labels
            if t > now_s - EVIDENCE_S
        ],
    }
    if state.startup_s is not None:
        out["startupSeconds"] = round(state.startup_s, 1)
    return out


def restore(data: Mapping[str, Any] | None, now_s: float) -> TuningState:
    """A TuningState from what `learned` wrote; whatever cannot be read is left cold (an
    unreadable status must never stop a model from being tuned)."""
    if not isinstance(data, Mapping):
        return TuningState()
    curve = []
    for row in _rows(data.get("curve")):
        vals = [_num(v) for v in row] if isinstance(row, list) and len(row) == 3 else [None]
        if None not in vals and vals[0] >= 1 and vals[1] > 0 and vals[2] > 0:  # type: ignore[operator]
            curve.append((vals[0], vals[1], vals[2]))
    labels = []
    # Rows of five (time, load, trend, growths); the four-value rows of an older release
    # lack the trend the sizing places ticks by, and are left out.
    for row in _rows(data.get("growth")):
        vals = [_num(v) for v in row] if isinstance(row, list) and len(row) == 5 else [None]
        if None in vals:
            continue
        t, load, trend, g1, g2 = vals  # type: ignore[misc]
        if now_s - EVIDENCE_S < t <= now_s and load >= 0 and 0 < g1 <= g2:
            labels.append((t, load, trend, g1, g2))
    labels.sort()
    correction = _num(data.get("p99Correction"))
    startup = _num(data.get("startupSeconds"))
    return TuningState(
        curve=tuple(curve),  # type: ignore[arg-type]
        p99_correction=correction if correction is not None and correction > 0 else 1.0,
        startup_s=startup if startup is not None and startup >= 0 else None,
        # Labelled up to now: ticks of the old process's horizons are not relabelled.
        sizing=Memory(labels=tuple(labels), labelled_to_s=now_s if labels else -math.inf),
    )
