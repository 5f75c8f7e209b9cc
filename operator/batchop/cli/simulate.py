"""`batchop simulate`: run a policy against a latency profile and a trace in the simulator."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

POLICY_NAMES = ("batchop", "nobatch", "static", "hpa", "aimd", "oracle")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="simulate a policy on a latency profile and a load trace",
        description="Discrete-event simulation of Triton's dynamic batcher and the cluster "
        "around it (pods, Service, Prometheus scrapes, the controller) driven by a policy.",
    )
    p.add_argument("--profile", required=True, help="latency profile YAML")
    p.add_argument("--trace", required=True, help="trace CSV (second,rps)")
    p.add_argument("--slo-ms", type=float, required=True, help="p99 latency SLO (ms)")
    p.add_argument("--policy", choices=POLICY_NAMES, default="batchop")
    p.add_argument("--delay-us", type=int, default=500, help="starting (static: fixed) delay")
    p.add_argument("--replicas", type=int, default=1, help="starting (static: fixed) replicas")
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--max-replicas", type=int, default=8)
    p.add_argument("--min-delay-us", type=int, default=0)
    p.add_argument("--max-delay-us", type=int, default=20_000)
    p.add_argument("--interval", type=float, default=30.0, help="controller interval (s)")
    p.add_argument("--instances", type=int, default=1, help="model instances per replica")
    p.add_argument(
        "--overload",
        choices=("reject", "queue"),
        default="reject",
        help="Triton's queue policy (spec.overload.policy): reject refuses requests past the "
        "queue timeout or beyond the queue size; queue never refuses (default: reject, as "
        "the API)",
    )
    p.add_argument(
        "--queue-timeout-us",
        type=int,
        default=None,
        help="queue timeout with --overload reject (default: derived as the API does, the "
        "SLO minus the profile's full-batch time, at least --max-delay-us + 1 ms)",
    )
    p.add_argument(
        "--max-queue-size",
        type=int,
        default=0,
        help="most requests waiting per replica with --overload reject (0: unbounded)",
    )
    p.add_argument("--clients", type=int, default=None, help="closed loop with N clients")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", required=True, help="write the result here ('-' for stdout)")
    p.add_argument("--plot", default=None, help="write a PNG of load, p99, delay, replicas")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def build_spec(args: argparse.Namespace, profile: Any) -> Any:
    from batchop.api.tuning_spec import profile_tuning_spec

    return profile_tuning_spec(
        profile,
        args.slo_ms,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        min_delay_us=args.min_delay_us,
        max_delay_us=args.max_delay_us,
        start_delay_us=args.delay_us,
        start_replicas=args.replicas,
        interval_s=args.interval,
        overload_reject=args.overload == "reject",
        queue_timeout_us=args.queue_timeout_us or None,
        max_queue_size=args.max_queue_size,
    )


def check_args(args: argparse.Namespace) -> str | None:
    """The first rule the arguments break, or None."""
    if args.slo_ms <= 0:
        return "--slo-ms must be > 0"
    if not 1 <= args.min_replicas <= args.max_replicas:
        return "need 1 <= --min-replicas <= --max-replicas"
    if not args.min_replicas <= args.replicas <= args.max_replicas:
        return "--replicas must be within [--min-replicas, --max-replicas]"
    if not 0 <= args.min_delay_us <= args.delay_us <= args.max_delay_us:
        return "need 0 <= --min-delay-us <= --delay-us <= --max-delay-us"
    if args.instances < 1:
        return "--instances must be >= 1"
    if args.clients is not None and args.clients < 1:
        return "--clients must be >= 1"
    if args.interval <= 0:
        return "--interval must be > 0"
    return _check_overload(args)


def _check_overload(args: argparse.Namespace) -> str | None:
    """The API's spec.overload rules, for the flags."""
    timeout = args.queue_timeout_us
    if args.max_queue_size < 0 or (timeout is not None and timeout < 0):
        return "--max-queue-size and --queue-timeout-us must be >= 0"
    if args.overload == "queue" and (args.max_queue_size or timeout):
        return "--max-queue-size and --queue-timeout-us apply only with --overload reject"
    if timeout and timeout <= args.max_delay_us:
        return (
            "--queue-timeout-us must exceed --max-delay-us (a request that waited out the "
            "delay would be refused)"
        )
    if timeout and timeout >= args.slo_ms * 1000.0:
        return "--queue-timeout-us must be below the SLO (--slo-ms)"
    return None


def run(args: argparse.Namespace) -> int:
    from batchop.sim.baselines import make_policy
    from batchop.sim.engine import SimConfig, simulate
    from batchop.sim.profile import ProfileError, load_profile
    from batchop.sim.report import summarize
    from batchop.sim.trace import TraceError, load_trace

    problem = check_args(args)
    if problem:
        print(f"batchop simulate: {problem}", file=sys.stderr)
        return 2
    try:
        profile = load_profile(args.profile)
        trace = load_trace(args.trace)
    except (ProfileError, TraceError) as exc:
        print(f"batchop simulate: {exc}", file=sys.stderr)
        return 2
    spec = build_spec(args, profile)
    policy = make_policy(args.policy, profile, trace, spec, args.delay_us, args.replicas)

    from batchop.cli.output import Progress

    progress = Progress(f"simulating {args.policy}")
    config = SimConfig(
        seed=args.seed,
        clients=args.clients,
        instances=args.instances,
        progress=None if args.quiet else progress,
    )
    result = summarize(simulate(profile, trace, spec, policy, config), args.slo_ms)
    progress.done()
    text = json.dumps(result, indent=1, default=_jsonable)
    if args.json == "-":
        print(text)
    else:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    if args.plot:
        from batchop.sim.plot import plot_timeline

        plot_timeline(result, args.plot)
    if not args.quiet:
        keys = (
            "requests",
            "p50_ms",
            "p99_ms",
            "slo_attainment",
            "window_attainment",
            "gpu_seconds",
            "gpu_busy_seconds",
            "avg_batch_size",
            "dropped",
            "rejected",
            "served_p99_ms",
        )
        print("  ".join(f"{k}={_short(result[k])}" for k in keys), file=sys.stderr)
    return 0


def _short(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _jsonable(v: object) -> object:
    import numpy as np

    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")
