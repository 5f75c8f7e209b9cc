"""`batchop bench`: every policy on every profile x trace, one table.

Paths default to the `shared/` folder next to the repository. The shared traces peak at
1,800 req/s, which a single replica of the GPU profiles serves, so each profile has a default
SLO and a load scale (the trace's rates are multiplied by it) chosen so that the peak needs
several replicas and the SLO is tight enough for the delay to matter; see docs/simulator.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from batchop.cli.flags import positive_float

POLICIES = ("batchop", "hpa", "aimd", "nobatch", "oracle", "static")
# profile name -> (SLO ms, load scale). Unknown profiles: SLO = 2 x latency(max batch), x1.
BENCH_DEFAULTS: dict[str, tuple[float, float]] = {
    "bert-base-like": (25.0, 4.0),
    "resnet50-like": (5.0, 4.0),
    "cpu-demo": (25.0, 2.0),
}
MAX_REPLICAS = 16
MAX_SIM_REQUESTS = 50_000_000  # as `batchop simulate`: arrivals are allocated up front
RESULT_KEYS = (
    "requests",
    "p50_ms",
    "p99_ms",
    "slo_attainment",
    "window_attainment",
    "gpu_seconds",
    "gpu_busy_seconds",
    "avg_batch_size",
    "dropped",
    "max_replicas_used",
    "decisions_count",
)


def shared_dir() -> Path:
    """`<repo>/../shared`, where the example profiles and traces live."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file():
            return parent.parent / "shared"
    return Path.cwd().parent / "shared"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="run every policy on every profile x trace and tabulate",
        description="Benchmark the policies in the simulator; writes markdown and JSON.",
    )
    p.add_argument("--profiles", nargs="+", default=None, help="profile YAMLs or folders")
    p.add_argument("--traces", nargs="+", default=None, help="trace CSVs or folders")
    p.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    p.add_argument("--slo-ms", type=positive_float, default=None, help="one SLO for every profile")
    p.add_argument(
        "--scale", type=positive_float, default=None, help="one load scale for every profile"
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2, help="processes (at most 2)")
    p.add_argument("--out", default="bench/results", help="folder for bench.md and bench.json")
    p.add_argument(
        "--plot-policies",
        nargs="*",
        default=["batchop"],
        choices=POLICIES,
        help="draw OUT/plots/<profile>-<trace>-<policy>.png for these policies",
    )
    p.set_defaults(func=run)


def _expand(items: list[str] | None, default: Path, pattern: str) -> list[Path]:
    paths: list[Path] = []
    for item in items or [str(default)]:
        path = Path(item)
        paths += sorted(path.glob(pattern)) if path.is_dir() else [path]
    return paths


def default_slo_scale(profile: Any) -> tuple[float, float]:
    if profile.name in BENCH_DEFAULTS:
        return BENCH_DEFAULTS[profile.name]
    return round(2 * profile.latency_ms(profile.max_batch_size), 1), 1.0


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """One simulation (runs in a worker process)."""
    from batchop.sim.baselines import make_policy
    from batchop.sim.engine import SimConfig, simulate
    from batchop.sim.profile import load_profile
    from batchop.sim.report import summarize
    from batchop.sim.trace import Trace, load_trace
    from batchop.tuning.types import TuningSpec

    profile = load_profile(job["profile"])
    base = load_trace(job["trace"])
    trace = Trace(base.seconds, tuple(r * job["scale"] for r in base.rps), base.name)
    spec = TuningSpec(
        slo_ms=job["slo_ms"],
        max_batch_size=profile.max_batch_size,
        max_replicas=MAX_REPLICAS,
        start_replicas=job["start_replicas"],
        gpus_per_replica=profile.gpus_per_replica,
        prior_batch_latency_ms=profile.batch_latency_ms,
    )
    row: dict[str, Any] = {k: job[k] for k in ("profile_name", "trace_name", "policy", "slo_ms")}
    row["scale"] = job["scale"]
    started = time.perf_counter()
    try:
        policy = make_policy(
            job["policy"], profile, trace, spec, spec.start_delay_us, job["static_replicas"]
        )
        result = summarize(
            simulate(profile, trace, spec, policy, SimConfig(seed=job["seed"])), job["slo_ms"]
        )
        row.update({k: result[k] for k in RESULT_KEYS})
        if job.get("plot_dir"):
            from batchop.sim.plot import plot_timeline

            name = f"{job['profile_name']}-{job['trace_name']}-{job['policy']}.png"
            plot_timeline(result, Path(job["plot_dir"]) / name)
    except Exception as exc:  # a policy bug must not sink the whole table
        row["error"] = f"{type(exc).__name__}: {exc}"
    row["wall_s"] = round(time.perf_counter() - started, 2)
    return row


def _static_replicas(profile: Any, trace_path: Path, scale: float, slo_ms: float) -> int:
    """`static` runs what a one-off sizing for the trace's peak would pick: the oracle's
    replica count at peak (so it is a fair 'provision for peak' baseline)."""
    from batchop.sim.baselines import oracle_table
    from batchop.sim.trace import load_trace

    peak = max(load_trace(trace_path).rps) * scale
    table = oracle_table(profile, slo_ms, 0, 20_000)
    for n in range(1, MAX_REPLICAS + 1):
        if table.best(peak / n, slo_ms) is not None:
            return n
    return MAX_REPLICAS


def run(args: argparse.Namespace) -> int:
    from concurrent.futures import ProcessPoolExecutor

    from batchop.provenance import Provenance
    from batchop.sim.profile import ProfileError, load_profile
    from batchop.sim.trace import TraceError, load_trace

    provenance = Provenance.start(program="batchop")
    shared = shared_dir()
    profiles = _expand(args.profiles, shared / "profiles", "*.yaml")
    traces = _expand(args.traces, shared / "traces", "*.csv")
    if not profiles or not traces:
        print(f"batchop bench: no profiles or traces (looked in {shared})", file=sys.stderr)
        return 2
    jobs: list[dict[str, Any]] = []
    try:
        loaded = [(p, load_profile(p)) for p in profiles]
        trace_data = {t: load_trace(t) for t in traces}
        trace_names = {t: data.name for t, data in trace_data.items()}
    except (ProfileError, TraceError) as exc:
        print(f"batchop bench: {exc}", file=sys.stderr)
        return 2
    for path, profile in loaded:
        slo, scale = default_slo_scale(profile)
        slo = args.slo_ms or slo
        scale = args.scale or scale
        for trace in traces:
            offered = scale * sum((b - a) * r for a, b, r in trace_data[trace].segments())
            if offered > MAX_SIM_REQUESTS:
                print(
                    f"batchop bench: {trace} at load scale {scale:g} offers {offered:.3g} "
                    f"requests, past the simulator's limit of {MAX_SIM_REQUESTS:,}; lower --scale",
                    file=sys.stderr,
                )
                return 2
            static_n = (
                _static_replicas(profile, trace, scale, slo) if "static" in args.policies else 1
            )
            for policy in args.policies:
                jobs.append(
                    {
                        "profile": str(path),
                        "profile_name": profile.name,
                        "trace": str(trace),
                        "trace_name": trace_names[trace],
                        "policy": policy,
                        "slo_ms": slo,
                        "scale": scale,
                        "seed": args.seed,
                        "start_replicas": static_n if policy == "static" else 1,
                        "static_replicas": static_n,
                        "plot_dir": str(Path(args.out) / "plots")
                        if policy in args.plot_policies
                        else None,
                    }
                )
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, min(2, args.jobs))) as pool:
        for row in pool.map(run_one, jobs):
            rows.append(row)
            print(
                f"[{len(rows)}/{len(jobs)}] {row['profile_name']} {row['trace_name']} "
                f"{row['policy']}: {row.get('error') or 'ok'} ({row['wall_s']} s)",
                file=sys.stderr,
                flush=True,
            )
    add_ratios(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "provenance": provenance.finish().as_dict(),
        "seed": args.seed,
        "max_replicas": MAX_REPLICAS,
        "wall_s": round(time.perf_counter() - started, 1),
        "settings": {
            name: {"slo_ms": slo, "scale": scale} for name, (slo, scale) in BENCH_DEFAULTS.items()
        },
    }
    (out / "bench.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    table = markdown(rows)
    (out / "bench.md").write_text(f"# batchop bench\n\n{provenance.markdown()}\n{table}")
    print(table)
    print(f"wrote {out / 'bench.md'} and {out / 'bench.json'}", file=sys.stderr)
    return 0


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """GPU-seconds relative to the oracle and to hpa on the same profile x trace, and whether
    batchop met issue 4's targets there."""
    by_case: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault((row["profile_name"], row["trace_name"]), {})[row["policy"]] = row
    for case in by_case.values():
        for row in case.values():
            if "gpu_seconds" not in row:
                continue
            for ref in ("oracle", "hpa"):
                other = case.get(ref, {})
                if other.get("gpu_seconds"):
                    row[f"x_{ref}"] = row["gpu_seconds"] / other["gpu_seconds"]
        ours, hpa = case.get("batchop"), case.get("hpa")
        if ours and "window_attainment" in ours and "x_oracle" in ours:
            ok = ours["window_attainment"] >= 0.99 and ours["x_oracle"] <= 1.15
            if hpa and "window_attainment" in hpa:
                ok = ok and ours.get("x_hpa", 9) <= 0.8
                ok = ok and ours["window_attainment"] >= hpa["window_attainment"]
            ours["targets_met"] = ok


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| profile | trace | SLO ms | policy | window att. | SLO att. | p99 ms | GPU-s "
        "| busy GPU-s | avg batch | max repl. | x oracle | x hpa | targets |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['profile_name']} | {r['trace_name']} | {r['slo_ms']:g} | {r['policy']} "
                f"| error: {r['error'][:60]} |||||||||\n"
            )
            continue

        def f(key: str, fmt: str, r: dict[str, Any] = r) -> str:
            v = r.get(key)
            return "-" if v is None else format(v, fmt)

        target = {True: "met", False: "missed"}.get(r.get("targets_met"), "")  # type: ignore[arg-type]
        lines.append(
            f"| {r['profile_name']} | {r['trace_name']} x{r['scale']:g} | {r['slo_ms']:g} "
            f"| {r['policy']} | {f('window_attainment', '.3f')} | {f('slo_attainment', '.4f')} "
            f"| {f('p99_ms', '.1f')} | {f('gpu_seconds', '.0f')} | {f('gpu_busy_seconds', '.0f')} "
            f"| {f('avg_batch_size', '.1f')} | {r.get('max_replicas_used', '-')} "
            f"| {f('x_oracle', '.2f')} | {f('x_hpa', '.2f')} | {target} |\n"
        )
    legend = (
        "\nwindow att.: share of 60 s windows whose p99 <= SLO; SLO att.: share of requests "
        "within the SLO; GPU-s: GPUs allocated x time (starting pods included); busy GPU-s: "
        "time executing; x oracle / x hpa: GPU-s relative to those policies on the same row "
        "group. targets (issue 4, batchop rows): window att. >= 0.99, <= 1.15 x oracle, "
        "<= 0.8 x hpa and window att. >= hpa's.\n"
    )
    return head + "".join(lines) + legend
