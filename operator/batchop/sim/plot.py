"""Draw a simulation (or demo) timeline: load, p99 vs SLO, delay and replicas over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_timeline(result: dict[str, Any], path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = result["timeline"]
    t = [r["t"] / 60.0 for r in rows]
    fig, axes = plt.subplots(4, 1, figsize=(10, 9), sharex=True)
    axes[0].plot(t, [r["rps"] for r in rows], color="tab:blue", label="offered")
    step = rows[1]["t"] - rows[0]["t"] if len(rows) > 1 else 1.0
    refused = [r.get("rejected", 0) / step for r in rows]
    if any(refused):  # the overload guard's refusals (spec.overload)
        axes[0].plot(t, refused, color="tab:orange", label="rejected")
        axes[0].legend(loc="upper right")
    axes[0].set_ylabel("load (req/s)")
    p99 = [r["p99_ms"] if r["p99_ms"] is not None else float("nan") for r in rows]
    axes[1].plot(t, p99, color="tab:red", label="p99")
    if any(refused):  # with refusals the p99 of all requests is undefined; of the served:
        served = [r.get("served_p99_ms") for r in rows]
        axes[1].plot(t, [float("nan") if v is None else v for v in served], color="tab:orange",
                     linestyle=":", label="p99 of served")
    axes[1].axhline(result["slo_ms"], color="black", linestyle="--", label="SLO")
    axes[1].set_ylabel("p99 (ms)")
    axes[1].set_yscale("log")
    axes[1].legend(loc="upper right")
    axes[2].step(t, [r["delay_us"] for r in rows], where="post", color="tab:green")
    axes[2].set_ylabel("delay (us)")
    axes[3].step(t, [r["replicas"] for r in rows], where="post", label="desired")
    axes[3].step(t, [r["ready"] for r in rows], where="post", label="ready", linestyle="--")
    axes[3].set_ylabel("replicas")
    axes[3].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[3].set_xlabel("time (min)")
    axes[3].legend(loc="upper right")
    title = " · ".join(str(result.get(k, "")) for k in ("policy", "profile", "trace"))
    fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
