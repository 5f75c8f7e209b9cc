"""How far the policy's closed-form model (batchop.tuning.model) is from the simulator.

For each shared profile: one replica's steady-state p99 from short simulations over a grid of
rates (1% to 95% of full-batch capacity) and delays (0 to 16 ms), the same grid the oracle
baseline uses, against the model's prediction. Prints the ratio model / simulated p99
(above 1: the model is pessimistic, which makes the policy spend GPUs; below 1: optimistic,
which risks the SLO) and the capacity at the bench SLO both ways.

Run: .venv/bin/python bench/policy_model_check.py [--out bench/results/policy_model_check.md]
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from batchop.provenance import Provenance
from batchop.sim.baselines import oracle_table
from batchop.sim.profile import Profile, load_profile
from batchop.tuning.curve import prior_curve
from batchop.tuning.model import capacity_at_slo, predict
from batchop_dev.bench import BENCH_DEFAULTS

SHARED = Path(__file__).resolve().parents[2] / "shared" / "profiles"


def check(profile: Profile, slo_ms: float) -> list[str]:
    # A huge SLO keeps the oracle table from skipping rates beyond the SLO.
    table = oracle_table(profile, 1e6, 0, 20_000)
    lat = prior_curve(profile.batch_latency_ms)
    mbs = profile.max_batch_size
    ratios: list[float] = []
    by_load: dict[str, list[float]] = {"< 30%": [], "30-70%": [], "> 70%": []}
    cap = profile.capacity_rps()
    for j, d in enumerate(table.delays):
        for k, r in enumerate(table.rates):
            sim = table.p99_ms[j][k]
            model = predict(r, d, mbs, lat).p99_ms
            if not (math.isfinite(sim) and math.isfinite(model)) or sim <= 0:
                continue
            ratio = model / sim
            ratios.append(ratio)
            f = r / cap
            by_load["< 30%" if f < 0.3 else "30-70%" if f <= 0.7 else "> 70%"].append(ratio)
    sim_cap = max(
        (r for r, p in zip(table.rates, table.p99_ms[0], strict=True) if p <= slo_ms),
        default=0.0,
    )
    model_cap = capacity_at_slo(slo_ms, mbs, lat)
    rows = [
        f"| {profile.name} | {len(ratios)} | {min(ratios):.2f} | {statistics.median(ratios):.2f} "
        f"| {max(ratios):.2f} | "
        + " | ".join(f"{statistics.median(v):.2f}" if v else "-" for v in by_load.values())
        + f" | {slo_ms:g} | {sim_cap:,.0f} | {model_cap:,.0f} |"
    ]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", nargs="*", default=sorted(str(p) for p in SHARED.glob("*.yaml")))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    provenance = Provenance.start()
    lines = [
        "| profile | points | min model/sim | median | max | median <30% load | 30-70% "
        "| >70% | SLO ms | sim capacity at SLO (delay 0, grid) | model capacity at SLO |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in args.profiles:
        profile = load_profile(path)
        slo = BENCH_DEFAULTS.get(profile.name, (2 * profile.latency_ms(profile.max_batch_size),))[0]
        lines += check(profile, slo)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(
            "# The policy's model against the simulator (bench/policy_model_check.py)\n\n"
            f"{provenance.finish().markdown()}\n{text}\n"
        )


if __name__ == "__main__":
    main()
