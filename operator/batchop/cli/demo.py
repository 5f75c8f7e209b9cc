"""`batchop demo`: the local stack, an example BatchedModel, a stepped load, a report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run the whole stack locally under a stepped load and write a report",
        description="Bring up the local cluster, Prometheus, the pod runner (a real tritonserver "
        "per pod) and the operator; apply examples/cpu-demo.yaml; drive a load that steps up "
        "and back down while printing a live table; write DIR/report.json and DIR/report.png; "
        "tear everything down (Ctrl-C included).",
    )
    p.add_argument("--duration", type=float, default=210.0, metavar="S",
                   help="seconds of load (default 210)")
    p.add_argument("--report", type=Path, default=Path("reports/demo"), metavar="DIR",
                   help="where report.json and report.png go (default reports/demo)")
    p.add_argument("--sample", type=float, default=5.0, metavar="S",
                   help="seconds between table rows / report samples (default 5)")
    p.add_argument("--name", default="batchop-demo", help="local cluster name")
    p.add_argument("--keep-cluster", action="store_true",
                   help="leave the local cluster running at the end")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from batchop.local.demo import main_exit_code, run_demo

    if args.duration < 20:
        raise SystemExit("--duration: at least 20 seconds (the load has four steps)")
    result = run_demo(duration_s=args.duration, report_dir=args.report, sample_s=args.sample,
                      cluster_name=args.name, keep_cluster=args.keep_cluster)
    return main_exit_code(result)
