"""`batchop demo`: the local stack, an example BatchedModel, a stepped or trace load, a report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from batchop.cli import devpart

HELP = "run the whole stack locally under a stepped load (or a trace) and write a report"


def register(subparsers: Any) -> None:
    bursts = devpart.load("batchop_dev.local.bursts")  # the trace slice's defaults
    if bursts is None:
        devpart.register_placeholder(subparsers, "demo", HELP)
        return
    p = subparsers.add_parser(
        "demo",
        help=HELP,
        description="Bring up the local cluster, Prometheus, the pod runner (a real tritonserver "
        "per pod) and the operator; apply examples/cpu-demo.yaml; drive a load that steps up "
        "and back down while printing a live table; write DIR/report.json and DIR/report.png; "
        "tear everything down (Ctrl-C included). With --trace, replay a scaled-down slice of a "
        "trace CSV instead (default: 7 minutes of azure-code, a real bursty production "
        "pattern, at x0.02) and judge it per 30 s window: served p99 within 2x the SLO in "
        "every settled window, rejected requests counted, replicas held between bursts.",
    )
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="seconds of the stepped load; not with --trace (default: 210)",
    )
    p.add_argument(
        "--trace",
        metavar="NAME|PATH",
        help="replay this trace CSV (a path, or a name in ../shared/traces, e.g. "
        "azure-code) instead of the steps; --trace-* apply",
    )
    p.add_argument(
        "--trace-start",
        type=float,
        default=bursts.TRACE_START_S,
        metavar="S",
        help="second of the trace where the replay starts (default %(default)g, around "
        "azure-code's bursts)",
    )
    p.add_argument(
        "--trace-seconds",
        type=float,
        default=bursts.TRACE_SECONDS,
        metavar="S",
        help="seconds of the trace to replay, in real time (default %(default)g)",
    )
    p.add_argument(
        "--trace-scale",
        type=float,
        default=bursts.TRACE_SCALE,
        metavar="X",
        help="multiply the trace's rates (azure-code peaks at 67,000 req/s; one "
        "demo replica serves ~360; default %(default)g)",
    )
    p.add_argument(
        "--report",
        type=Path,
        default=Path("reports/demo"),
        metavar="DIR",
        help="where report.json and report.png go (default %(default)s)",
    )
    p.add_argument(
        "--sample",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between table rows / report samples (default %(default)g)",
    )
    p.add_argument(
        "--model",
        choices=("sleep", "mlp"),
        default="sleep",
        help="what the pods serve: sleep, a model that sleeps the cpu-demo profile (capped at "
        "2 a batch, so that the steps need more replicas), or mlp, a real ONNX network run "
        "by onnxruntime (batches of up to 32: the delay, the batch and the compute per "
        "inference move; one replica serves the steps) (default %(default)s)",
    )
    p.add_argument(
        "--name", default="batchop-demo", help="local cluster name (default %(default)s)"
    )
    p.add_argument(
        "--keep-cluster", action="store_true", help="leave the local cluster running at the end"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    devpart.require("batchop demo")
    trace = None
    if args.trace is not None:
        from batchop.sim.trace import TraceError, load_trace
        from batchop_dev.local.bursts import find_trace, trace_slice
        from batchop_dev.local.demo import EXAMPLES

        if args.duration is not None:
            print(
                "batchop demo: --duration: not with --trace (use --trace-seconds)", file=sys.stderr
            )
            return 2
        try:
            full = load_trace(find_trace(args.trace, EXAMPLES.parent))
            trace = trace_slice(full, args.trace_start, args.trace_seconds, args.trace_scale)
        except TraceError as exc:
            print(f"batchop demo: {exc}", file=sys.stderr)
            return 2
        if trace.end < 60:
            print(
                f"batchop demo: --trace-seconds: the slice is {trace.end:g} s; at least 60 "
                "(windows are judged 60 s after a replica change)",
                file=sys.stderr,
            )
            return 2
        if max(trace.rps[:-1]) <= 0:
            print(
                f"batchop demo: --trace-start/--trace-seconds: no request in {trace.name}",
                file=sys.stderr,
            )
            return 2
    duration = 210.0 if args.duration is None else args.duration
    if duration < 20:
        print(
            "batchop demo: --duration: at least 20 seconds (the load has four steps)",
            file=sys.stderr,
        )
        return 2

    from batchop_dev.local.demo import main_exit_code, run_demo

    result = run_demo(
        duration_s=trace.end if trace is not None else duration,
        report_dir=args.report,
        sample_s=args.sample,
        cluster_name=args.name,
        keep_cluster=args.keep_cluster,
        trace=trace,
        model=args.model,
    )
    return main_exit_code(result)
