"""`batchop demo --model mlp`, kept: the stepped demo on the real compute model (issue 26).

Run: .venv/bin/python bench/demo_mlp.py [--report DIR] [--out bench/results/demo_mlp.md]

Runs the demo (its own local cluster; the steps 40 -> 320 -> 120 -> 40 req/s over 210 s; the
ONNX MLP with batches of up to 32, one onnxruntime thread) and keeps what its report says of
the batching: the average batch and the compute per inference on each step, the batch curve
measured on the pod after the load next to the one the operator learned under it (issue 26's
bound: within 15%), and `batchop plan` on the measured curve against each settled step
(replicas within one, p99 within 25%). Writes demo_mlp.md and .json, and copies the demo's
two plots to plots/demo_mlp.png and plots/demo_mlp_curves.png.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from batchop.provenance import Provenance
from batchop_dev.local.demo import (
    PLAN_P99_WITHIN,
    curve_gaps,
    curve_lines,
    demo_report,
    plan_lines,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "demo_mlp.md"
CURVE_WITHIN = 0.15  # issue 26: the learned curve within 15% of the measured one


def step_batching(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per step: the mean average batch and compute ms per inference over its settled
    samples (those the step verdict judged). Pure."""
    out = []
    timeline = report["timeline"]
    settle = float(report["summary"]["settle_s"])
    for step in report["summary"]["steps"]:
        inside = [
            s
            for s in timeline
            if step["start_s"] + settle <= s["t"] <= step["end_s"]
            and s.get("avg_batch")
            and s.get("compute_ms")
        ]
        batch = sum(s["avg_batch"] for s in inside) / len(inside) if inside else None
        per = (
            sum(s["compute_ms"] / s["avg_batch"] for s in inside) / len(inside) if inside else None
        )
        out.append(
            {
                "start_s": step["start_s"],
                "rps": step["offered_rps"],
                "samples": len(inside),
                "avg_batch": batch,
                "compute_ms_per_inference": per,
                "client_p99_ms": step["client_p99_ms"],
            }
        )
    return out


def markdown(prov: str, report: dict[str, Any], steps: list[dict[str, Any]]) -> str:
    summary = report["summary"]
    curves = summary["curves"]
    gaps = curve_gaps(curves)
    worst = max((abs(g) for _, g in gaps), default=None)
    plan = summary.get("plan") or []

    def num(x: float | None, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    lines = [
        "# The demo on the real compute model (bench/demo_mlp.py)",
        "",
        prov,
        "",
        "`batchop demo --model mlp`: the steps 40 -> 320 -> 120 -> 40 req/s over 210 s on the "
        "ONNX MLP (batches of up to 32, one onnxruntime thread), SLO 40 ms, a real "
        "tritonserver per pod, the operator at the demo's settings.",
        "",
        "| step from s | req/s | settled samples | average batch | compute ms per inference "
        "| clients' p99 ms |",
        "|---|---|---|---|---|---|",
        *(
            f"| {s['start_s']:g} | {s['rps']:g} | {s['samples']} | {num(s['avg_batch'], '.2f')} "
            f"| {num(s['compute_ms_per_inference'], '.2f')} | {num(s['client_p99_ms'], '.1f')} |"
            for s in steps
        ),
        "",
        f"Decisions: {len(report['decisions'])} "
        f"({summary['changes']['delay']} delay, {summary['changes']['replicas']} replica "
        "changes).",
        "",
        "Batch curves (ms per execution):",
        "",
        *(f"- {line}" for line in curve_lines(curves)),
        "",
        f"Learned within {CURVE_WITHIN:.0%} of measured at every batch size it learned: "
        + (
            "not judged (a curve is missing)"
            if worst is None
            else f"{'met' if worst <= CURVE_WITHIN else 'not met'} (worst {worst:.0%})"
        ),
        "",
        "`batchop plan` on the measured curve, against each settled step:",
        "",
        *(f"- {line.strip()}" for line in plan_lines(plan)),
        "",
        "Plan within one replica of every settled step: "
        + ("met" if plan and all(r["replicas_met"] for r in plan) else "not met")
        + f"; p99 within {PLAN_P99_WITHIN:.0%}: "
        + ("met" if plan and all(r["p99_met"] for r in plan) else "not met")
        + " (the plan predicts Triton's p99; the clients' includes their HTTP round trip).",
        "",
        "![timeline](plots/demo_mlp.png)",
        "",
        "![curves](plots/demo_mlp_curves.png)",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--report", type=Path, default=ROOT / "reports" / "demo-mlp")
    ap.add_argument("--out", type=Path, default=RESULTS, help="Markdown result file")
    args = ap.parse_args()
    provenance = Provenance.start()
    started = time.monotonic()
    try:
        report = demo_report(["--model", "mlp"], args.report, finished="curves")
    except RuntimeError as exc:
        print(f"demo_mlp: {exc}", file=sys.stderr)
        return 1
    steps = step_batching(report)
    text = markdown(provenance.finish().markdown(), report, steps)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    plots = args.out.parent / "plots"
    plots.mkdir(exist_ok=True)
    for src, name in (("report.png", "demo_mlp.png"), ("curves.png", "demo_mlp_curves.png")):
        if (args.report / src).exists():
            shutil.copy(args.report / src, plots / name)
    provenance.write_json(
        args.out.with_suffix(".json"),
        time.monotonic() - started,
        steps=steps,
        curves=report["summary"]["curves"],
        plan=report["summary"].get("plan"),
        decisions=report["decisions"],
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
