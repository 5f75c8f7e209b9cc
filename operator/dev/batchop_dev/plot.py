"""Draw a simulation (or demo) timeline: load, p99 vs SLO, delay, batch size and replicas.

The axis choices are pure helpers (tested without drawing): latency ticks on a 1-2-5 ladder
printed as plain milliseconds (a log axis that reads "20, 50, 100" rather than 10^1),
whole-number replica ticks, the SLO line's label with its value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def unsupported_type(path: str | Path) -> str | None:
    """Why matplotlib cannot write `path` (its suffix), or None: checked before a run so a
    long simulation never ends in a plot that fails."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = Path(path).suffix.lstrip(".").lower()
    if suffix not in kinds:
        return (
            f"--plot {path}: unsupported image type {suffix or '(none)'!r}; "
            f"use one of {', '.join(kinds)}"
        )
    return None


def latency_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks (x 10^k) spanning [lo, hi] (ms), one below and above, for a log axis."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 or hi <= 0:
        raise ValueError(f"latency range must be finite and > 0, got {lo}..{hi}")
    lo, hi = min(lo, hi), max(lo, hi)
    ladder: list[float] = []
    for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2):
        ladder += [round(m * 10.0**k, 12) for m in (1, 2, 5)]
    first = max(i for i, v in enumerate(ladder) if v <= lo * (1 + 1e-9))
    last = min(i for i, v in enumerate(ladder) if v >= hi * (1 - 1e-9))
    if first == last:  # one value: a tick either side, so the axis has a span
        first, last = first - 1, last + 1
    ticks = ladder[first : last + 1]
    if len(ticks) > 9:  # a wide range: decades only, so the labels do not collide
        lo_k, hi_k = math.floor(math.log10(ticks[0])), math.ceil(math.log10(ticks[-1]))
        ticks = [round(10.0**k, 12) for k in range(lo_k, hi_k + 1)]
    return ticks


def format_ms(value: float) -> str:
    """A tick label in ms: "0.5", "2", "1,000" (never scientific notation)."""
    if value >= 1 and float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:g}"


def replica_ticks(top: float, most: int = 8) -> list[int]:
    """Whole-number ticks 0..top (at least 1), at most `most` of them, evenly stepped."""
    top_i = max(1, math.ceil(top))
    step = max(1, math.ceil((top_i + 1) / most))
    return list(range(0, top_i + step, step))[: most + 1]


def slo_label(slo_ms: float) -> str:
    return f"SLO {format_ms(slo_ms)} ms"


def latency_range(series: Iterable[float | None], slo_ms: float) -> tuple[float, float]:
    """The span of the finite, positive values and the SLO (what the p99 axis must show)."""
    values = [v for v in series if v is not None and math.isfinite(v) and v > 0]
    values.append(slo_ms)
    return min(values), max(values)


def _nan(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]


def plot_timeline(result: dict[str, Any], path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    rows = result["timeline"]
    slo = float(result["slo_ms"])
    t = [r["t"] / 60.0 for r in rows]
    fig, axes = plt.subplots(5, 1, figsize=(10, 11), sharex=True)
    load, lat, delay, batch, reps = axes

    load.plot(t, [r["rps"] for r in rows], color="tab:blue", label="offered")
    step = rows[1]["t"] - rows[0]["t"] if len(rows) > 1 else 1.0
    refused = [r.get("rejected", 0) / step for r in rows]
    if any(refused) or result.get("rejected"):  # the overload guard's refusals
        load.plot(t, refused, color="tab:orange", label="rejected/s")
    load.set_ylabel("load (req/s)")
    load.set_ylim(bottom=0)
    load.legend(loc="upper right")

    p99 = _nan([r["p99_ms"] for r in rows])
    lat.plot(t, p99, color="tab:red", label="p99")
    served = _nan([r.get("served_p99_ms") for r in rows])
    if any(refused):  # with refusals the p99 of all requests is undefined; of the served:
        lat.plot(t, served, color="tab:orange", linestyle=":", label="p99 of served")
    lat.axhline(slo, color="black", linestyle="--", label=slo_label(slo))
    lat.set_yscale("log")
    lo, hi = latency_range([*p99, *served], slo)
    ticks = latency_ticks(lo, hi)
    lat.set_ylim(ticks[0], ticks[-1])
    lat.yaxis.set_major_locator(FixedLocator(ticks))
    lat.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_ms(v)))
    lat.yaxis.set_minor_locator(NullLocator())
    lat.annotate(
        slo_label(slo),
        xy=(0.005, slo),
        xycoords=("axes fraction", "data"),
        xytext=(0, 3),
        textcoords="offset points",
        fontsize=9,
    )
    lat.set_ylabel("p99 (ms, log)")
    lat.grid(True, which="major", alpha=0.3)
    lat.legend(loc="lower right")

    delay.step(t, [r["delay_us"] for r in rows], where="post", color="tab:green")
    delay.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    delay.set_ylabel("delay (us)")
    delay.set_ylim(bottom=0)

    batch.plot(t, _nan([r.get("avg_batch") for r in rows]), color="tab:purple")
    batch.set_ylabel("avg batch size")
    batch.set_ylim(bottom=0)

    reps.step(t, [r["replicas"] for r in rows], where="post", label="desired")
    reps.step(t, [r["ready"] for r in rows], where="post", label="ready", linestyle="--")
    top = max([r["replicas"] for r in rows] + [r["ready"] for r in rows] + [1])
    rticks = replica_ticks(top)
    reps.yaxis.set_major_locator(FixedLocator(rticks))
    reps.set_ylim(0, rticks[-1] + 0.5)
    reps.set_ylabel("replicas")
    reps.set_xlabel("time (min)")
    reps.legend(loc="upper right")

    title = " · ".join(str(result[k]) for k in ("policy", "profile", "trace") if result.get(k))
    fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
