"""`batchop simulate`: run a policy against a latency profile and a trace in the simulator."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from batchop.cli import devpart
from batchop.cli.flags import bounded_int, positive_float
from batchop.controller.autotune import INTERVAL_S
from batchop.sim.policy_names import POLICY_NAMES

# Bounds of the flags: the API's where it has them (scaling, batching), and what a simulation
# can hold: arrivals are allocated up front, 8 bytes and more per request, and the loop steps
# per scrape, so a trace past these is refused before anything is allocated.
MAX_REPLICAS = 1000
MAX_DELAY_US = 10_000_000
MAX_REQUESTS = 50_000_000
MAX_SLO_MS = 600_000
MAX_TRACE_SECONDS = 30 * 86_400.0
MIN_INTERVAL_S = 1.0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="simulate a policy on a latency profile and a load trace",
        description="Discrete-event simulation of Triton's dynamic batcher and the cluster "
        "around it (pods, Service, Prometheus scrapes, the controller) driven by a policy.",
    )
    p.add_argument("--profile", required=True, help="latency profile YAML")
    p.add_argument("--trace", required=True, help="trace CSV (second,rps)")
    p.add_argument("--slo-ms", type=positive_float, required=True, help="p99 latency SLO (ms)")
    p.add_argument("--policy", choices=POLICY_NAMES, default="batchop")
    p.add_argument(
        "--hpa-fraction",
        type=positive_float,
        default=0.7,
        help="hpa/keda target: requests/s per replica as this fraction of one replica's "
        "capacity within the SLO",
    )
    delay_us, replicas = bounded_int(0, MAX_DELAY_US), bounded_int(0, MAX_REPLICAS)
    p.add_argument("--delay-us", type=delay_us, default=500, help="starting (static: fixed) delay")
    p.add_argument("--replicas", type=replicas, default=1, help="starting (static: fixed) replicas")
    p.add_argument("--min-replicas", type=replicas, default=1)
    p.add_argument("--max-replicas", type=replicas, default=8)
    p.add_argument("--min-delay-us", type=delay_us, default=0)
    p.add_argument("--max-delay-us", type=delay_us, default=20_000)
    p.add_argument(
        "--interval",
        type=positive_float,
        default=float(INTERVAL_S),
        help="controller interval (s; default: the API's spec.autotune.intervalSeconds)",
    )
    p.add_argument(
        "--instances", type=bounded_int(1, 64), default=1, help="model instances per replica"
    )
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
        type=delay_us,
        default=None,
        help="queue timeout with --overload reject (default: derived as the API does, the "
        "SLO minus the profile's full-batch time, at least --max-delay-us + 1 ms)",
    )
    p.add_argument(
        "--max-queue-size",
        type=bounded_int(0, 1 << 30),
        default=0,
        help="most requests waiting per replica with --overload reject (0: unbounded)",
    )
    p.add_argument(
        "--clients", type=bounded_int(1, 100_000), default=None, help="closed loop with N clients"
    )
    p.add_argument("--seed", type=bounded_int(0, 2**63 - 1), default=0)
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
    if not 0 < args.slo_ms <= MAX_SLO_MS:
        return f"--slo-ms must be in (0, {MAX_SLO_MS:,}] ms (the API's bound), got {args.slo_ms:g}"
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
    if not MIN_INTERVAL_S <= args.interval <= 3600:
        return f"--interval must be in [{MIN_INTERVAL_S:g}, 3600] s, got {args.interval:g}"
    if not 0 < args.hpa_fraction <= 1:
        return "--hpa-fraction must be in (0, 1]"
    return _check_overload(args) or check_outputs(args)


def check_outputs(args: argparse.Namespace) -> str | None:
    """Refuse output paths that could only fail after the run, so nothing is half-written."""
    if args.json != "-" and Path(args.json).is_dir():
        return f"--json {args.json}: is a directory; give a file name"
    if args.plot:
        if Path(args.plot).is_dir():
            return f"--plot {args.plot}: is a directory; give a file name"
        devpart.require("batchop simulate --plot")
        from batchop_dev.plot import unsupported_type

        return unsupported_type(args.plot)
    return None


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


SIM_HINT = (
    "needs numpy: `pip install 'batchop[sim]'` (`make install` has it; the operator "
    "image leaves it out)"
)


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("numpy") is None:
        print(f"batchop simulate {SIM_HINT}", file=sys.stderr)
        return 2
    from batchop.sim.baselines import make_policy, start_replicas
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
        trace = load_trace(args.trace, max_requests=MAX_REQUESTS, max_seconds=MAX_TRACE_SECONDS)
    except (ProfileError, TraceError) as exc:
        print(f"batchop simulate: {exc}", file=sys.stderr)
        return 2
    spec = build_spec(args, profile)
    spec = replace(spec, start_replicas=start_replicas(args.policy, profile, trace, spec))
    policy = make_policy(
        args.policy, profile, trace, spec, args.delay_us, args.replicas, args.hpa_fraction
    )

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
    if args.plot:  # first: a plot that fails leaves no JSON behind
        devpart.require("batchop simulate --plot")
        from batchop_dev.plot import plot_timeline

        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        plot_timeline(result, args.plot)
    if args.json == "-":
        print(text)
    else:
        _write_whole(Path(args.json), text + "\n")
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


def _write_whole(path: Path, text: str) -> None:
    """Write through a temporary file and rename, so a reader never sees half a result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _short(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _jsonable(v: object) -> object:
    import numpy as np

    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")
