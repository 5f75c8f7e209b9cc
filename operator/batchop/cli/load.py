"""`batchop load`: open-loop Poisson load from a trace onto a BatchedModel's pods or URLs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchop.cli import devpart
from batchop.cli.flags import bounded_int, namespaced_name, positive_float

# As for the simulator: arrivals are drawn up front, one entry per request.
MAX_REQUESTS = 50_000_000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "load",
        help="open-loop Poisson load following a trace, onto real Triton (loopback only)",
        description="Send requests at Poisson arrivals whose rate follows a trace CSV (or a "
        "constant --rps for --duration seconds), spread round-robin over a BatchedModel's "
        "Ready pods (--bm) or over given Triton URLs (--url, --model). Stops at the trace "
        "end and writes a JSON report: requests, ok, failed (rejected: refused by Triton's "
        "queue policy, the overload guard; failed_other: the rest), p50_ms, p99_ms, achieved_rps, "
        "a per-second timeline and every request's send time, latency and outcome.",
    )
    rate = p.add_mutually_exclusive_group(required=True)
    rate.add_argument("--trace", help="trace CSV (second,rps)")
    rate.add_argument("--rps", type=positive_float, help="constant rate instead of a trace")
    p.add_argument(
        "--duration",
        type=positive_float,
        default=30.0,
        help="seconds of load with --rps (default 30)",
    )
    p.add_argument(
        "--time-scale",
        type=positive_float,
        default=1.0,
        help="multiply the trace's seconds (0.1: ten times faster; default 1)",
    )
    p.add_argument(
        "--rate-scale",
        type=positive_float,
        default=1.0,
        help="multiply the trace's rates (default 1)",
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--bm", type=namespaced_name, metavar="NAMESPACE/NAME", help="BatchedModel to load"
    )
    target.add_argument(
        "--url",
        action="append",
        metavar="HOST:PORT",
        help="Triton HTTP endpoint on 127.x.y.z (repeatable)",
    )
    p.add_argument("--model", help="Triton model name (with --url)")
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig of the local cluster (with --bm; default: $KUBECONFIG or ~/.kube/config)",
    )
    p.add_argument("--json", required=True, metavar="OUT", help="where to write the report")
    p.add_argument(
        "--seed", type=bounded_int(0, 2**63 - 1), default=0, help="arrival-time seed (default 0)"
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=30.0,
        help="per-request timeout in seconds (default 30)",
    )
    p.add_argument(
        "--no-records", action="store_true", help="leave the per-request records out of the JSON"
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import json

    devpart.require("batchop load")
    from batchop.sim.trace import TraceError, constant_trace, load_trace
    from batchop_dev.local.load import (
        BatchedModelPods,
        LoadError,
        StaticTargets,
        capacity_warning,
        run_load,
        scale_trace,
        stderr_progress,
    )

    try:
        if Path(args.json).is_dir():
            raise LoadError(f"--json {args.json}: is a directory; give a file name")
        if args.trace:
            trace = load_trace(args.trace, max_requests=MAX_REQUESTS)
        else:
            if args.rps <= 0 or args.duration <= 0:
                raise LoadError("--rps and --duration must be > 0")
            trace = constant_trace(args.rps, args.duration)
        if args.time_scale != 1.0 or args.rate_scale != 1.0:
            trace = scale_trace(trace, args.time_scale, args.rate_scale)
        offered = sum((t1 - t0) * rps for t0, t1, rps in trace.segments())
        if offered > MAX_REQUESTS:
            raise LoadError(
                f"the load would send {offered:.3g} requests, past the limit of "
                f"{MAX_REQUESTS:,}; lower --rps/--rate-scale or --duration/--time-scale"
            )
        if args.bm:
            namespace, name = args.bm
            source = BatchedModelPods(namespace, name, args.kubeconfig)
        else:
            if not args.model:
                raise LoadError("--url needs --model (the Triton model name)")
            source = StaticTargets(args.url, args.model)
    except (LoadError, TraceError) as exc:
        print(f"batchop load: {exc}", file=sys.stderr)
        return 2
    warning = capacity_warning(trace)
    if warning:
        print(warning, file=sys.stderr)
    try:
        report = asyncio.run(
            run_load(
                trace,
                source,
                seed=args.seed,
                timeout_s=args.timeout,
                progress=None if args.quiet else stderr_progress,
                keep_records=not args.no_records,
            )
        )
    except LoadError as exc:
        print(f"batchop load: {exc}", file=sys.stderr)
        return 2
    if warning:
        report["warning"] = warning
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f)
    print(
        f"requests={report['requests']} ok={report['ok']} failed={report['failed']} "
        f"(rejected by the overload guard {report['rejected']}) "
        f"p50={report['p50_ms']}ms p99={report['p99_ms']}ms "
        f"achieved={report['achieved_rps']}/s -> {args.json}",
        file=sys.stderr,
    )
    return 0
