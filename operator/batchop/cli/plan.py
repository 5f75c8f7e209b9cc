"""`batchop plan`: the delay and replicas to start a model with, from its latency profile."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from batchop.cli.flags import bounded_int, non_negative_float, positive_float
from batchop.cli.output import add_output_flag, dumps, emit

if TYPE_CHECKING:
    from batchop.sim.profile import Profile
    from batchop.tuning.policy import Plan

# Bounds of the flags: the API's for replicas, delays and the SLO; a rate past MAX_RPS is a
# typo.
MAX_REPLICAS = 1000
MAX_DELAY_US = 10_000_000
MAX_RPS = 1e9
MAX_SLO_MS = 600_000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan",
        help="recommend the starting delay and replicas for a rate and an SLO",
        description="Predict, with the policy's queueing model and a latency profile, the "
        "fewest replicas and the delay that keep p99 within the SLO margin at a steady rate.",
    )
    p.add_argument("--profile", required=True, help="latency profile YAML")
    p.add_argument(
        "--rps", required=True, type=non_negative_float, help="steady request rate (req/s)"
    )
    p.add_argument("--slo-ms", required=True, type=positive_float, help="p99 latency SLO (ms)")
    replicas, delay_us = bounded_int(0, MAX_REPLICAS), bounded_int(0, MAX_DELAY_US)
    p.add_argument("--min-replicas", type=replicas, default=1)
    p.add_argument("--max-replicas", type=replicas, default=8)
    p.add_argument("--min-delay-us", type=delay_us, default=0)
    p.add_argument("--max-delay-us", type=delay_us, default=20_000)
    add_output_flag(p, json_alias=True)
    p.set_defaults(func=run)


def snippet(profile: Profile, plan: Plan, args: argparse.Namespace) -> dict[str, Any]:
    """The BatchedModel spec fields the plan sets, to paste into a manifest: the planned
    delay and replicas, their bounds, the SLO, and the profile as the tuner's prior."""
    return {
        "spec": {
            "model": {
                "maxBatchSize": profile.max_batch_size,
                "latencyProfile": [
                    {"batchSize": b, "milliseconds": round(ms, 3)}
                    for b, ms in profile.batch_latency_ms
                ],
            },
            "scaling": {
                "replicas": plan.replicas,
                "minReplicas": args.min_replicas,
                "maxReplicas": args.max_replicas,
            },
            "batching": {
                "maxQueueDelayMicroseconds": plan.delay_us,
                "minQueueDelayMicroseconds": args.min_delay_us,
                "maxQueueDelayLimitMicroseconds": args.max_delay_us,
            },
            "slo": {"p99LatencyMilliseconds": args.slo_ms},
        }
    }


def _check(args: argparse.Namespace) -> str | None:
    if args.rps < 0:
        return f"--rps must be >= 0, got {args.rps:g}"
    if args.rps > MAX_RPS:
        return f"--rps must be <= {MAX_RPS:,.0f}, got {args.rps:g}"
    if not 0 < args.slo_ms <= MAX_SLO_MS:
        return f"--slo-ms must be in (0, {MAX_SLO_MS:,}] ms (the API's bound), got {args.slo_ms:g}"
    if not 1 <= args.min_replicas <= args.max_replicas:
        return (
            f"need 1 <= --min-replicas <= --max-replicas, got {args.min_replicas} and "
            f"{args.max_replicas}"
        )
    if not 0 <= args.min_delay_us <= args.max_delay_us:
        return (
            f"need 0 <= --min-delay-us <= --max-delay-us, got {args.min_delay_us} and "
            f"{args.max_delay_us}"
        )
    return None


def run(args: argparse.Namespace) -> int:
    from batchop.api.tuning_spec import profile_tuning_spec
    from batchop.sim.profile import ProfileError, load_profile
    from batchop.tuning.curve import prior_curve
    from batchop.tuning.policy import recommend

    problem = _check(args)
    if problem:
        print(f"batchop plan: {problem}", file=sys.stderr)
        return 2
    try:
        profile = load_profile(args.profile)
    except ProfileError as exc:
        print(f"batchop plan: {exc}", file=sys.stderr)
        return 2
    spec = profile_tuning_spec(
        profile,
        args.slo_ms,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        min_delay_us=args.min_delay_us,
        max_delay_us=args.max_delay_us,
    )
    plan = recommend(prior_curve(profile.batch_latency_ms), args.rps, spec)
    if not plan.feasible and plan.capacity_rps_per_replica <= 0:
        batch1 = profile.batch_latency_ms[0][1]
        print(
            f"batchop plan: no replica count can meet a p99 SLO of {args.slo_ms:g} ms: batch 1 "
            f"alone takes {batch1:g} ms in {args.profile} and the plan keeps p99 <= "
            f"{plan.target_ms:g} ms; raise --slo-ms",
            file=sys.stderr,
        )
        return 1
    paste = snippet(profile, plan, args)
    if args.output != "text":
        emit(
            {"profile": profile.name, **asdict(plan), "batchedModel": paste},
            args.output,
            path=getattr(args, "json_out", None),
        )
        return 0 if plan.feasible else 1
    if not plan.feasible:
        print(f"batchop plan: {_short_of_replicas(plan, args)}", file=sys.stderr)
        return 1
    gpus = plan.replicas * spec.gpus_per_replica
    print(
        f"profile {profile.name}: {args.rps:,.0f} req/s, p99 SLO {args.slo_ms:g} ms "
        f"(planning for p99 <= {plan.target_ms:g} ms)"
    )
    print(f"  replicas            {plan.replicas} ({gpus} GPU{'s' if gpus != 1 else ''})")
    print(f"  max queue delay     {plan.delay_us:,} us")
    print(f"  predicted p99       {plan.predicted_p99_ms:.1f} ms")
    print(f"  average batch       {plan.avg_batch:.1f}")
    print(
        f"  GPU busy            {plan.busy:.0%} per replica, "
        f"{plan.gpu_ms_per_inference:.3f} GPU ms per inference"
    )
    print(
        f"  throughput per GPU  {plan.rps_per_gpu:,.0f} req/s served; "
        f"{plan.capacity_rps_per_replica:,.0f} req/s per replica at the SLO margin"
    )
    print("\nBatchedModel fields to paste (merge into your manifest's spec):\n")
    print(dumps(paste, "yaml"), end="")
    return 0


def _short_of_replicas(plan: Plan, args: argparse.Namespace) -> str:
    """Why a plan failed when replicas could fix it: how many it would take."""
    from batchop.tuning.policy import HEADROOM

    need = math.ceil(args.rps * (1 + HEADROOM) / plan.capacity_rps_per_replica)
    served = plan.capacity_rps_per_replica * args.max_replicas
    advice = (
        f"raise --max-replicas to {need} or the SLO"
        if need <= MAX_REPLICAS
        else f"that needs {need:,} replicas, more than the API's {MAX_REPLICAS}: raise the SLO"
    )
    return (
        f"--max-replicas {args.max_replicas} serves about {served:,.0f} req/s within "
        f"p99 <= {plan.target_ms:g} ms, short of {args.rps:,.0f} req/s (with "
        f"{HEADROOM:.0%} headroom); {advice}"
    )
