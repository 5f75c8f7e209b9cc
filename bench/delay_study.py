"""What the queue delay buys, measured in the simulator (issue 4: "know when the delay
matters").

Open loop (Poisson): per delay, the most req/s one replica serves with p99 within the SLO,
and the GPU time per inference at 20% and 60% of the replica's full-batch capacity.
Closed loop (N clients sending back to back, like perf_analyzer's concurrency): per delay,
throughput, p99 and GPU time per inference.

Run: .venv/bin/python bench/delay_study.py [--out bench/results/delay_study.md]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from batchop.provenance import Provenance
from batchop.sim.baselines import oracle_table, static_policy
from batchop.sim.engine import SimConfig, SimPolicy, simulate
from batchop.sim.profile import Profile, load_profile
from batchop.sim.report import summarize
from batchop.sim.trace import constant_trace
from batchop.tuning.types import TuningSpec
from batchop_dev.bench import BENCH_DEFAULTS

SHARED = Path(__file__).resolve().parents[2] / "shared" / "profiles"
DELAYS = (0, 500, 1000, 2000, 4000, 8000)
CONCURRENCY = (4, 16, 64)


def open_loop(profile: Profile, slo_ms: float) -> list[str]:
    table = oracle_table(profile, slo_ms, 0, 20_000)
    cap = profile.capacity_rps()
    rows = [
        f"\n**{profile.name}**, SLO {slo_ms:g} ms, full-batch capacity {cap:,.0f} req/s\n",
        "| delay us | max req/s with p99 <= SLO | GPU ms/inference at 20% | at 60% |",
        "|---|---|---|---|",
    ]
    for d in DELAYS:
        j = table.delays.index(d) if d in table.delays else None
        if j is None:
            continue
        ok = [r for r, p in zip(table.rates, table.p99_ms[j], strict=True) if p <= slo_ms]
        best = max(ok, default=0.0)

        def at(frac: float, j: int = j) -> str:
            k = min(range(len(table.rates)), key=lambda i: abs(table.rates[i] - frac * cap))
            v = table.busy_ms[j][k]
            return "-" if not math.isfinite(v) else f"{v:.3f}"

        rows.append(f"| {d} | {f'{best:,.0f}' if best else 'none'} | {at(0.2)} | {at(0.6)} |")
    return rows


def closed_loop(profile: Profile, slo_ms: float, seconds: float) -> list[str]:
    rows = [
        f"\n**{profile.name}** closed loop, {seconds:g} s per point\n",
        "| clients | delay us | req/s | p99 ms | avg batch | GPU ms/inference |",
        "|---|---|---|---|---|---|",
    ]
    for n in CONCURRENCY:
        for d in DELAYS:
            spec = TuningSpec(
                slo_ms=slo_ms,
                max_batch_size=profile.max_batch_size,
                start_delay_us=d,
                interval_s=1e12,
            )
            # A huge offered rate makes think time ~0: each client resends at once.
            run = simulate(
                profile,
                constant_trace(1e9, seconds),
                spec,
                SimPolicy("static", static_policy(d, 1)),
                SimConfig(seed=3, clients=n),
            )
            s = summarize(run, slo_ms)
            gpu = s["gpu_busy_seconds"] * 1000 / max(1, s["requests"])
            rows.append(
                f"| {n} | {d} | {s['requests'] / seconds:,.0f} | {s['p99_ms']:.1f} "
                f"| {s['avg_batch_size']:.1f} | {gpu:.3f} |"
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--profiles", type=Path, default=SHARED)
    ap.add_argument("--seconds", type=float, default=5.0, help="closed-loop run length")
    ap.add_argument("--out", type=Path, default=Path("bench/results/delay_study.md"))
    args = ap.parse_args()
    provenance = Provenance.start()
    lines = ["# What the delay buys (simulated)", "", "## Open loop (Poisson)"]
    closed = ["", "## Closed loop (N clients, no think time)"]
    for path in sorted(args.profiles.glob("*.yaml")):
        profile = load_profile(path)
        slo = BENCH_DEFAULTS.get(
            profile.name, (2 * profile.latency_ms(profile.max_batch_size), 1.0)
        )[0]
        lines += open_loop(profile, slo)
        closed += closed_loop(profile, slo, args.seconds)
        print(f"{profile.name}: done", flush=True)
    head, rest = lines[:2], lines[2:]
    text = "\n".join([*head, provenance.finish().markdown(), *rest, *closed]) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
