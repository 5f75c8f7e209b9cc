"""Simulator speed: a 1-hour trace at 2,000 req/s (~7.2 M requests), timed per policy.

Run: .venv/bin/python bench/sim_speed.py [--seconds 3600] [--rps 2000] [--out FILE]
Prints seconds per run and seconds per million requests (the figure in docs/simulator.md) and
writes them, with the command, commit and machine load, to bench/results/sim_speed.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from batchop.provenance import Provenance
from batchop.sim.baselines import make_policy
from batchop.sim.engine import SimConfig, simulate
from batchop.sim.profile import load_profile
from batchop.sim.report import summarize
from batchop.sim.trace import constant_trace
from batchop.tuning.types import TuningSpec

SHARED = Path(__file__).resolve().parents[2] / "shared" / "profiles"
RESULTS = Path(__file__).resolve().parent / "results" / "sim_speed.md"

CASES = (
    # (profile, policy, start delay us, replicas, SLO ms)
    ("resnet50-like", "static", 500, 1, 10.0),
    ("resnet50-like", "nobatch", 500, 3, 10.0),
    ("bert-base-like", "hpa", 500, 1, 25.0),
    ("bert-base-like", "batchop", 500, 1, 25.0),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3600.0)
    ap.add_argument("--rps", type=float, default=2000.0)
    ap.add_argument("--profiles", type=Path, default=SHARED)
    ap.add_argument("--out", type=Path, default=RESULTS, help="Markdown result file")
    args = ap.parse_args()
    provenance = Provenance.start()
    trace = constant_trace(args.rps, args.seconds)
    rows = []
    for name, policy_name, delay, replicas, slo in CASES:
        profile = load_profile(args.profiles / f"{name}.yaml")
        spec = TuningSpec(
            slo_ms=slo,
            max_batch_size=profile.max_batch_size,
            start_delay_us=delay,
            start_replicas=replicas,
            max_replicas=16,
            prior_batch_latency_ms=profile.batch_latency_ms,
        )
        policy = make_policy(policy_name, profile, trace, spec, delay, replicas)
        started = time.perf_counter()
        run = simulate(profile, trace, spec, policy, SimConfig(seed=1))
        sim_s = time.perf_counter() - started
        result = summarize(run, slo)
        total_s = time.perf_counter() - started
        m = result["requests"] / 1e6
        print(
            f"{name:15s} {policy_name:8s} {result['requests']:>9,d} req  "
            f"sim {sim_s:6.1f} s ({sim_s / m:5.2f} s/M)  +report {total_s - sim_s:4.1f} s  "
            f"avg batch {result['avg_batch_size']:.1f}  p99 {result['p99_ms']:.1f} ms",
            flush=True,
        )
        rows.append(
            f"| {name} | {policy_name} | {result['requests']:,d} | {sim_s:.2f} | "
            f"{sim_s / m:.2f} | {total_s - sim_s:.2f} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        "# Simulator speed (bench/sim_speed.py)\n\n"
        f"{provenance.finish().markdown()}\n"
        f"A {args.seconds:g} s trace at {args.rps:g} req/s, seed 1, one process.\n\n"
        "| profile | policy | requests | simulation s | s per million requests | report s |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
