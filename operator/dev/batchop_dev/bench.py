"""`batchop bench`: every policy on every profile x trace, one table, and batchop's ratios.

Paths default to the `shared/` folder next to the repository. The synthetic traces peak at
1,800 req/s, which a single replica of the GPU profiles serves, so each profile has a default
SLO and a load scale (the trace's rates are multiplied by it) chosen so that the peak needs
several replicas and the SLO is tight enough for the delay to matter; azure-code (a real,
bursty pattern peaking at 67,000 req/s for one second) has its own scale per profile, chosen
so that its peak second needs 9-10 replicas of the 16 allowed; see docs/simulator.md.

`hpa` (= `keda`) runs once per target fraction in `--hpa-fractions`; per case the best-tuned
one is compared with batchop (fewest GPU-s among those at batchop's window attainment or
better, else the highest attainment).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from batchop.cli.flags import positive_float
from batchop.sim.policy_names import POLICY_NAMES

POLICIES = POLICY_NAMES
# keda is the hpa rule under the name KEDA users know: the bench runs it once, as hpa.
DEFAULT_POLICIES = (
    "batchop",
    "hpa",
    "hpa-queue",
    "aimd",
    "nobatch",
    "oracle",
    "reactive-oracle",
    "static-peak",
)
# Down to 0.1: on bursty traffic only a low target buys an attainment near batchop's (on
# azure-code a rule at 0.1-0.15 of capacity holds about as well), and the comparison is at
# equal attainment where one exists. A sweep that stops short flatters batchop.
HPA_FRACTIONS = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
MAX_SIM_REQUESTS = 50_000_000  # as `batchop simulate`: arrivals are allocated up front
# profile name -> (SLO ms, load scale). Unknown profiles: SLO = 2 x latency(max batch), x1.
BENCH_DEFAULTS: dict[str, tuple[float, float]] = {
    "bert-base-like": (25.0, 4.0),
    "resnet50-like": (5.0, 4.0),
    "cpu-demo": (25.0, 2.0),
}
# (profile, trace) -> load scale, where a trace needs its own: azure-code's peak second
# (67,000 req/s) x this needs 10 (resnet50-like), 10 (bert-base-like), 9 (cpu-demo)
# replicas by the oracle's table; its busiest minute averages 12,050 req/s x this.
TRACE_SCALES: dict[tuple[str, str], float] = {
    ("resnet50-like", "azure-code"): 0.75,
    ("bert-base-like", "azure-code"): 0.4,
    ("cpu-demo", "azure-code"): 0.3,
}
MAX_REPLICAS = 16
# issue 10's targets for batchop
TARGET_ATTAINMENT = 0.99
TARGET_X_ORACLE = 1.15
TARGET_X_HPA = 0.8
RESULT_KEYS = (
    "requests",
    "p50_ms",
    "p99_ms",
    "served_p99_ms",
    "slo_attainment",
    "window_attainment",
    "gpu_seconds",
    "gpu_busy_seconds",
    "avg_batch_size",
    "dropped",
    "rejected",
    "max_replicas_used",
    "decisions_count",
    "reversals",
)
# The rows whose lost windows bench.md explains: batchop's, and the two oracles' to compare.
LOST_WINDOW_POLICIES = ("batchop", "reactive-oracle", "oracle")


def shared_dir() -> Path:
    """`<repo>/../shared`, where the example profiles and traces live."""
    here = Path(__file__).resolve()
    for parent in here.parents:  # the repository root: the one with crds/ beside pyproject
        if (parent / "pyproject.toml").is_file() and (parent / "crds").is_dir():
            return parent.parent / "shared"
    return Path.cwd().parent / "shared"


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="run every policy on every profile x trace and tabulate",
        description="Benchmark the policies in the simulator; writes markdown and JSON.",
    )
    p.add_argument("--profiles", nargs="+", default=None, help="profile YAMLs or folders")
    p.add_argument("--traces", nargs="+", default=None, help="trace CSVs or folders")
    p.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES), choices=POLICIES)
    p.add_argument(
        "--hpa-fractions",
        nargs="+",
        type=_fraction,
        default=list(HPA_FRACTIONS),
        help="hpa/keda targets to sweep, as fractions of one replica's capacity",
    )
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


def default_slo_scale(profile: Any, trace_name: str | None = None) -> tuple[float, float]:
    """The bench's SLO and load scale for a profile (and trace, where it has its own)."""
    if profile.name in BENCH_DEFAULTS:
        slo, scale = BENCH_DEFAULTS[profile.name]
    else:
        slo, scale = round(2 * profile.latency_ms(profile.max_batch_size), 1), 1.0
    return slo, TRACE_SCALES.get((profile.name, trace_name or ""), scale)


def label(row: dict[str, Any]) -> str:
    """The policy as the table names it: hpa with its target fraction."""
    if row.get("hpa_fraction") is not None:
        return f"{row['policy']} {row['hpa_fraction']:g}"
    return str(row["policy"])


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """One simulation (runs in a worker process)."""
    from dataclasses import replace

    from batchop.api.tuning_spec import profile_tuning_spec
    from batchop.sim.baselines import HPA_RPS_FRACTION, make_policy, peak_replicas
    from batchop.sim.engine import SimConfig, simulate
    from batchop.sim.profile import load_profile
    from batchop.sim.report import summarize
    from batchop.sim.trace import Trace, load_trace

    profile = load_profile(job["profile"])
    base = load_trace(job["trace"])
    trace = Trace(base.seconds, tuple(r * job["scale"] for r in base.rps), base.name)
    # What a user gets: the API's defaults (overload guard on) for all a BatchedModel leaves
    # out; max 16 replicas.
    spec = profile_tuning_spec(profile, job["slo_ms"], max_replicas=MAX_REPLICAS)
    row: dict[str, Any] = {
        k: job[k] for k in ("profile_name", "trace_name", "policy", "slo_ms", "hpa_fraction")
    }
    row["scale"] = job["scale"]
    started = time.perf_counter()
    try:
        fixed = peak_replicas(profile, trace, spec)  # static's count, as static-peak's
        if job["policy"] in ("static", "static-peak"):
            spec = replace(spec, start_replicas=fixed)
        row["label"] = label(row)
        policy = make_policy(
            job["policy"],
            profile,
            trace,
            spec,
            spec.start_delay_us,
            fixed,
            job["hpa_fraction"] or HPA_RPS_FRACTION,
        )
        result = summarize(
            simulate(profile, trace, spec, policy, SimConfig(seed=job["seed"])), job["slo_ms"]
        )
        row.update({k: result[k] for k in RESULT_KEYS})
        if job["policy"] in LOST_WINDOW_POLICIES:
            row["lost_windows"] = result["lost_windows"]
        if job.get("plot_dir"):
            from batchop_dev.plot import plot_timeline

            name = f"{job['profile_name']}-{job['trace_name']}-{row['label'].replace(' ', '-')}"
            plot_timeline(result, Path(job["plot_dir"]) / f"{name}.png")
    except Exception as exc:  # a policy bug must not sink the whole table
        row["error"] = f"{type(exc).__name__}: {exc}"
    row.setdefault("label", label(row))
    row["wall_s"] = round(time.perf_counter() - started, 2)
    return row


def make_jobs(
    loaded: list[tuple[Path, Any]],
    traces: dict[Path, str],
    policies: list[str],
    fractions: list[float],
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """One job per profile x trace x policy (x hpa fraction); keda runs as hpa."""
    names: list[str] = []
    for name in policies:
        name = "hpa" if name == "keda" else name
        if name not in names:
            names.append(name)
    jobs: list[dict[str, Any]] = []
    for path, profile in loaded:
        for trace, trace_name in traces.items():
            slo, scale = default_slo_scale(profile, trace_name)
            for policy in names:
                for fraction in fractions if policy == "hpa" else [None]:
                    jobs.append(
                        {
                            "profile": str(path),
                            "profile_name": profile.name,
                            "trace": str(trace),
                            "trace_name": trace_name,
                            "policy": policy,
                            "hpa_fraction": fraction,
                            "slo_ms": args.slo_ms or slo,
                            "scale": args.scale or scale,
                            "seed": args.seed,
                            "plot_dir": str(Path(args.out) / "plots")
                            if policy in args.plot_policies
                            or (policy == "hpa" and "keda" in args.plot_policies)
                            else None,
                        }
                    )
    return jobs


def run(args: argparse.Namespace) -> int:
    from concurrent.futures import ProcessPoolExecutor, as_completed

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
    try:
        loaded = [(p, load_profile(p)) for p in profiles]
        trace_data = {t: load_trace(t) for t in traces}
        trace_names = {t: data.name for t, data in trace_data.items()}
    except (ProfileError, TraceError) as exc:
        print(f"batchop bench: {exc}", file=sys.stderr)
        return 2
    for _, profile in loaded:
        for trace, data in trace_data.items():
            scale = args.scale or default_slo_scale(profile, data.name)[1]
            offered = scale * sum((b - a) * r for a, b, r in data.segments())
            if offered > MAX_SIM_REQUESTS:
                print(
                    f"batchop bench: {trace} at load scale {scale:g} offers {offered:.3g} "
                    f"requests, past the simulator's limit of {MAX_SIM_REQUESTS:,}; lower --scale",
                    file=sys.stderr,
                )
                return 2
    jobs = make_jobs(loaded, trace_names, args.policies, args.hpa_fractions, args)
    rows: list[dict[str, Any] | None] = [None] * len(jobs)
    started = time.perf_counter()
    done = 0
    with ProcessPoolExecutor(max_workers=max(1, min(2, args.jobs))) as pool:
        futures = {pool.submit(run_one, job): i for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            row = future.result()
            rows[futures[future]] = row
            done += 1
            # One line per finished job (a log, not a redrawn bar: readable when piped).
            print(
                f"[{done}/{len(jobs)} {time.perf_counter() - started:.0f} s] "
                f"{row['profile_name']} {row['trace_name']} {row['label']}: "
                f"{row.get('error') or 'ok'} ({row['wall_s']} s)",
                file=sys.stderr,
                flush=True,
            )
    finished = [r for r in rows if r is not None]
    summaries = add_ratios(finished)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "provenance": provenance.finish().as_dict(),
        "seed": args.seed,
        "max_replicas": MAX_REPLICAS,
        "hpa_fractions": list(args.hpa_fractions),
        "wall_s": round(time.perf_counter() - started, 1),
        "settings": {
            name: {"slo_ms": slo, "scale": scale} for name, (slo, scale) in BENCH_DEFAULTS.items()
        },
        "trace_scales": {f"{p}/{t}": s for (p, t), s in TRACE_SCALES.items()},
    }
    rules = one_rule(finished)
    lost = lost_windows(finished)
    reached = reach(finished)
    (out / "bench.json").write_text(
        json.dumps(
            {
                "meta": meta,
                "rows": finished,
                "batchop": summaries,
                "one_rule": rules,
                "lost_windows": lost,
                "reach": reached,
            },
            indent=1,
        )
        + "\n"
    )
    table = markdown(finished)
    lines = ratio_lines(summaries)
    rule_lines = one_rule_lines(rules)
    lost_lines = lost_window_lines(lost)
    reach_text = reach_lines(reached)
    (out / "bench.md").write_text(
        f"# batchop bench\n\n{provenance.markdown()}\n{table}\n## batchop vs the baselines\n\n"
        + "".join(f"- {line}\n" for line in lines)
        + TARGETS_LEGEND
        + REACH_HEAD
        + "".join(f"- {line}\n" for line in reach_text)
        + ONE_RULE_HEAD
        + "".join(f"- {line}\n" for line in rule_lines)
        + LOST_HEAD
        + "".join(f"- {line}\n" for line in lost_lines)
    )
    print(table)
    print("\n".join(lines + reach_text + rule_lines + lost_lines))
    print(f"wrote {out / 'bench.md'} and {out / 'bench.json'}", file=sys.stderr)
    return 0


def best_hpa(hpas: list[dict[str, Any]], ours: dict[str, Any] | None) -> dict[str, Any] | None:
    """The best-tuned hpa/keda row: the fewest GPU-s among those whose window attainment is
    at least batchop's; if none reaches it, the highest attainment (then fewest GPU-s)."""
    ok = [r for r in hpas if "gpu_seconds" in r]
    if not ok:
        return None
    if ours is not None and "window_attainment" in ours:
        good = [r for r in ok if r["window_attainment"] >= ours["window_attainment"]]
        if good:
            return min(good, key=lambda r: r["gpu_seconds"])
    return min(ok, key=lambda r: (-r["window_attainment"], r["gpu_seconds"]))


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if not a or not b or not b.get("gpu_seconds") or "gpu_seconds" not in a:
        return None
    return a["gpu_seconds"] / b["gpu_seconds"]


def add_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row, GPU-s relative to the oracle and to the case's best-tuned hpa/keda; per case,
    batchop's ratios to each baseline and issue 10's targets (returned, one dict per case)."""
    cases: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        cases.setdefault((row["profile_name"], row["trace_name"]), []).append(row)
    summaries = []
    for (profile, trace), case in cases.items():
        by = {r["policy"]: r for r in case if r["policy"] != "hpa"}
        ours, oracle = by.get("batchop"), by.get("oracle")
        best = best_hpa([r for r in case if r["policy"] == "hpa"], ours)
        for row in case:
            row["x_oracle"] = _ratio(row, oracle)
            row["x_best_hpa"] = _ratio(row, best)
            if best is not None:
                row["best_hpa"] = row is best
        if ours is None or "gpu_seconds" not in ours:
            continue
        summary: dict[str, Any] = {
            "profile": profile,
            "trace": trace,
            "scale": ours["scale"],
            "slo_ms": ours["slo_ms"],
            "window_attainment": ours["window_attainment"],
            "slo_attainment": ours["slo_attainment"],
            "best_hpa_fraction": best["hpa_fraction"] if best else None,
        }
        for name, ref in (
            ("oracle", oracle),
            ("reactive_oracle", by.get("reactive-oracle")),
            ("static_peak", by.get("static-peak")),
            ("best_hpa", best),
        ):
            summary[f"x_{name}"] = _ratio(ours, ref)
            if ref and "window_attainment" in ref:
                summary[f"{name}_window_attainment"] = ref["window_attainment"]
                summary[f"{name}_slo_attainment"] = ref["slo_attainment"]
        summary["targets"] = targets(ours, oracle, best, summary)
        known = [v for v in summary["targets"].values() if v is not None]
        summary["targets_met"] = all(known) if known else None
        ours["targets_met"] = summary["targets_met"]
        summaries.append(summary)
    return summaries


def targets(
    ours: dict[str, Any],
    oracle: dict[str, Any] | None,
    best: dict[str, Any] | None,
    summary: dict[str, Any],
) -> dict[str, bool | None]:
    """Issue 10's targets for batchop on one case (None: the reference did not run)."""
    win = ours["window_attainment"]
    out: dict[str, bool | None] = {
        "request_attainment": ours["slo_attainment"] >= TARGET_ATTAINMENT
    }
    if oracle and "window_attainment" in oracle:
        out["window_attainment"] = win >= window_need(oracle) - 1e-12
        out["x_oracle"] = summary["x_oracle"] <= TARGET_X_ORACLE
    else:
        out["window_attainment"] = out["x_oracle"] = None
    if best is not None and summary["x_best_hpa"] is not None:
        out["x_best_hpa"] = (
            summary["x_best_hpa"] <= TARGET_X_HPA and win >= best["window_attainment"] - 1e-12
        )
    else:
        out["x_best_hpa"] = None
    return out


def window_need(oracle: dict[str, Any]) -> float:
    """The window attainment the target asks for: the oracle's. (The issue adds "and 0.99
    where the oracle reaches it", which the oracle's own attainment then already is.)"""
    return float(oracle["window_attainment"])


def holds_slo_targets(row: dict[str, Any], oracle: dict[str, Any]) -> bool:
    """Both attainment targets: window attainment at the need, requests at 0.99."""
    return (
        row["window_attainment"] >= window_need(oracle) - 1e-12
        and row["slo_attainment"] >= TARGET_ATTAINMENT
    )


def reach(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the targets ask of a policy that does not see ahead, per case: the cheapest run in
    the bench other than the oracle that meets both attainment targets (GPU-s over the
    oracle's), and the oracle's own GPU-s over the best-tuned hpa/keda at its attainment.
    Where the first is over 1.15x, no policy here holds the SLO that well for that little;
    where the second is over 0.8x, not even foresight meets the hpa target."""
    cases: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if "gpu_seconds" in r:
            cases.setdefault((r["profile_name"], r["trace_name"]), []).append(r)
    out = []
    for (profile, trace), case in cases.items():
        oracle = next((r for r in case if r["policy"] == "oracle"), None)
        if oracle is None or not oracle["gpu_seconds"]:
            continue
        holding = sorted(
            (r for r in case if r["policy"] != "oracle" and holds_slo_targets(r, oracle)),
            key=lambda r: r["gpu_seconds"],
        )
        cheapest = holding[0] if holding else None
        ours = next((r for r in case if r["policy"] == "batchop"), None)
        best = best_hpa([r for r in case if r["policy"] == "hpa"], oracle)
        out.append(
            {
                "profile": profile,
                "trace": trace,
                "window_need": window_need(oracle),
                "cheapest_holding": cheapest["label"] if cheapest else None,
                "cheapest_x_oracle": _ratio(cheapest, oracle),
                "batchop_holds": ours is not None and holds_slo_targets(ours, oracle),
                "oracle_x_best_hpa": _ratio(oracle, best),
                "oracle_best_hpa": best["label"] if best else None,
            }
        )
    return {
        "cases": out,
        "within_x_oracle": sum(
            c["cheapest_x_oracle"] is not None and c["cheapest_x_oracle"] <= TARGET_X_ORACLE
            for c in out
        ),
        "oracle_within_x_hpa": sum(
            c["oracle_x_best_hpa"] is not None and c["oracle_x_best_hpa"] <= TARGET_X_HPA
            for c in out
        ),
    }


REACH_HEAD = (
    "\n## What the targets ask of a policy without foresight\n\n"
    "Per case, the cheapest run above other than the oracle (batchop, every hpa/keda "
    "fraction, hpa-queue, aimd, nobatch, static-peak, the reactive oracle) whose window and "
    "request attainment both meet the targets, and its GPU-s over the oracle's (target: "
    "1.15x); then the oracle's own GPU-s over the best-tuned hpa/keda at the oracle's "
    "attainment (target for batchop: 0.8x).\n\n"
)


def reach_lines(got: dict[str, Any]) -> list[str]:
    """One plain line per case (see `reach`), then one for all cases."""
    lines = []
    for c in got["cases"]:
        held = (
            f"cheapest holding both attainment targets (window >= {c['window_need']:.3f}, "
            f"requests >= {TARGET_ATTAINMENT}): "
            + (
                f"{c['cheapest_holding']} at {_x(c['cheapest_x_oracle'])} the oracle"
                if c["cheapest_holding"]
                else "none"
            )
        )
        lines.append(
            f"{c['profile']} {c['trace']}: {held}; batchop "
            f"{'holds them' if c['batchop_holds'] else 'does not'}; the oracle is "
            f"{_x(c['oracle_x_best_hpa'])} the best-tuned hpa/keda ({c['oracle_best_hpa']})"
        )
    n = len(got["cases"])
    lines.append(
        f"all cases: a run without foresight holds both attainment targets within "
        f"{TARGET_X_ORACLE}x the oracle's GPU-s on {got['within_x_oracle']} of {n}; the "
        f"oracle itself is within {TARGET_X_HPA}x the best-tuned hpa/keda on "
        f"{got['oracle_within_x_hpa']} of {n}"
    )
    return lines


ONE_RULE_HEAD = (
    "\n## One hpa/keda rule for every case\n\n"
    "Each swept fraction as the one rule a user would deploy everywhere (the best-tuned "
    "hpa/keda above is picked per case, with hindsight). GPU-s ratios are batchop's over the "
    "rule's.\n\n"
)

TARGETS_LEGEND = (
    "\nTargets (issue 10): window att. >= the oracle's (and >= 0.99 where the oracle reaches "
    "it); per-request att. >= 0.99; GPU-s <= 1.15 x the oracle's; GPU-s <= 0.8 x the best-tuned "
    "hpa/keda's with window att. >= its. Best-tuned hpa/keda: of the swept target fractions, "
    "the fewest GPU-s among those with window att. >= batchop's, else the highest att.\n"
)


def one_rule(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per hpa/keda fraction, that one rule on every case: where it holds the SLO as well as
    batchop (window and request attainment at least batchop's) and batchop's GPU-s over
    its own there. The best-tuned hpa/keda of each case is chosen with hindsight; a user
    deploys one rule for traffic not yet seen, so this is the comparison they face."""
    ours = {
        (r["profile_name"], r["trace_name"]): r
        for r in rows
        if r["policy"] == "batchop" and "gpu_seconds" in r
    }
    by_fraction: dict[float, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for r in rows:
        key = (r["profile_name"], r["trace_name"])
        if r["policy"] == "hpa" and "gpu_seconds" in r and key in ours and r["gpu_seconds"]:
            by_fraction.setdefault(r["hpa_fraction"], []).append((r, ours[key]))
    out = []
    for fraction, pairs in sorted(by_fraction.items()):
        holds = [
            (h, b)
            for h, b in pairs
            if h["window_attainment"] >= b["window_attainment"] - 1e-12
            and h["slo_attainment"] >= b["slo_attainment"] - 1e-12
        ]
        ratios = sorted(b["gpu_seconds"] / h["gpu_seconds"] for h, b in pairs)
        held = sorted(b["gpu_seconds"] / h["gpu_seconds"] for h, b in holds)
        out.append(
            {
                "hpa_fraction": fraction,
                "cases": len(pairs),
                "holds_as_well": len(holds),
                "x_all": ratios,
                "x_where_it_holds": held,
            }
        )
    return out


def one_rule_lines(rules: list[dict[str, Any]]) -> list[str]:
    """One plain line per fraction (see `one_rule`)."""

    def span(xs: list[float]) -> str:
        if not xs:
            return "-"
        return f"{min(xs):.2f}-{max(xs):.2f}x (median {statistics.median(xs):.2f}x)"

    return [
        f"hpa {r['hpa_fraction']:g} on all {r['cases']} cases: window and request att. at "
        f"least batchop's on {r['holds_as_well']}; batchop's GPU-s {span(r['x_all'])} its, "
        f"{span(r['x_where_it_holds'])} where it holds the SLO as well"
        for r in rules
    ]


LOST_HEAD = (
    "\n## batchop's lost windows, when and why\n\n"
    "Each 60 s window whose p99 broke the SLO under batchop (minute of the trace, its p99): "
    "the arrival rate of the minute before -> its own, its busiest second, the replicas "
    "ready at its start -> at most during it (the most batchop asked for during it); then "
    "whether the reactive oracle (the minute just past, exactly) and the oracle (each "
    "coming minute) lost the same window.\n\n"
)


def _count(starts: set[float] | None) -> int | None:
    return None if starts is None else len(starts)


def lost_windows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """batchop's lost windows on every case, each against the two oracles' on the same case:
    whether a policy without foresight could have kept them."""
    cases: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        if "lost_windows" in r:
            cases.setdefault((r["profile_name"], r["trace_name"]), {})[r["policy"]] = r
    out: list[dict[str, Any]] = []
    for (profile, trace), by in cases.items():
        ours = by.get("batchop")
        if ours is None:
            continue
        starts = {
            name: {w["t"] for w in by[name]["lost_windows"]}
            for name in ("reactive-oracle", "oracle")
            if name in by
        }
        windows = [
            {
                **w,
                "reactive_oracle_lost": w["t"] in starts.get("reactive-oracle", set()),
                "oracle_lost": w["t"] in starts.get("oracle", set()),
            }
            for w in ours["lost_windows"]
        ]
        out.append(
            {
                "profile": profile,
                "trace": trace,
                "scale": ours["scale"],
                "lost": len(windows),
                # None: that oracle did not run
                "reactive_oracle_lost": _count(starts.get("reactive-oracle")),
                "oracle_lost": _count(starts.get("oracle")),
                "windows": windows,
            }
        )
    every = [w for c in out for w in c["windows"]]
    return {
        "cases": out,
        "lost": len(every),
        "reactive_oracle_lost_too": sum(w["reactive_oracle_lost"] for w in every),
        "oracle_lost_too": sum(w["oracle_lost"] for w in every),
        "asked_more_during": sum(w["desired_max"] > w["ready"] for w in every),
    }


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def lost_window_lines(lost: dict[str, Any]) -> list[str]:
    """One line per case (see `lost_windows`), then one for all cases."""

    def rate(v: float | None) -> str:
        return "-" if v is None else f"{v:,.0f}"

    def one(w: dict[str, Any]) -> str:
        p99 = "-" if w["p99_ms"] is None else f"{w['p99_ms']:,.0f} ms"
        return (
            f"min {w['t'] / 60:.0f} ({p99}): {rate(w['rps_before'])} -> {rate(w['rps'])} req/s, "
            f"busiest second {w['peak_rps']:,}, ready {w['ready']} -> {w['ready_max']} "
            f"({w['desired_max']} asked); "
            f"reactive oracle {'lost it' if w['reactive_oracle_lost'] else 'held'}, "
            f"oracle {'lost it' if w['oracle_lost'] else 'held'}"
        )

    lines = []
    for c in lost["cases"]:
        head = (
            f"{c['profile']} {c['trace']} x{c['scale']:g}: batchop lost {c['lost']} "
            f"(reactive-oracle {_or_dash(c['reactive_oracle_lost'])}, "
            f"oracle {_or_dash(c['oracle_lost'])})"
        )
        lines.append(head + ("" if not c["windows"] else ": " + "; ".join(map(one, c["windows"]))))
    lines.append(
        f"all cases: windows lost by batchop {lost['lost']}; of them, lost by the reactive "
        f"oracle too {lost['reactive_oracle_lost_too']}, by the oracle too "
        f"{lost['oracle_lost_too']}, with more replicas asked for during the window than "
        f"were ready at its start {lost['asked_more_during']} (a pod starts in the "
        "profile's startup_seconds)"
    )
    return lines


def _x(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}x"


def ratio_lines(summaries: list[dict[str, Any]]) -> list[str]:
    """One plain line per case: batchop's GPU-s ratios, attainments and targets."""
    names = {
        "window_attainment": "window att",
        "request_attainment": "request att",
        "x_oracle": "<=1.15x oracle",
        "x_best_hpa": "<=0.8x hpa",
    }
    lines = []
    for s in summaries:
        fraction = s["best_hpa_fraction"]
        said = ", ".join(
            f"{names[k]} {'met' if v else 'MISSED'}"
            for k, v in s["targets"].items()
            if v is not None
        )

        def att(key: str, s: dict[str, Any] = s) -> str:
            v = s.get(f"oracle_{key}")
            return "-" if v is None else f"{v:.3f}"

        lines.append(
            f"{s['profile']} {s['trace']} x{s['scale']:g} (SLO {s['slo_ms']:g} ms): GPU-s "
            f"{_x(s['x_oracle'])} oracle, {_x(s['x_reactive_oracle'])} reactive-oracle, "
            f"{_x(s['x_static_peak'])} static-peak, {_x(s['x_best_hpa'])} best hpa/keda"
            f"{f' ({fraction:g})' if fraction is not None else ''}; window att "
            f"{s['window_attainment']:.3f} (oracle {att('window_attainment')}), request att "
            f"{s['slo_attainment']:.4f} (oracle {att('slo_attainment')}); targets: {said}"
        )
    return lines


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| profile | trace | SLO ms | policy | window att. | SLO att. | p99 ms | served p99 ms "
        "| rejected | GPU-s | busy GPU-s | avg batch | max repl. | reversals | x oracle "
        "| x best hpa | targets |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['profile_name']} | {r['trace_name']} | {r['slo_ms']:g} | {r['label']} "
                f"| error: {r['error'][:60]} ||||||||||||\n"
            )
            continue

        def f(key: str, fmt: str, r: dict[str, Any] = r) -> str:
            v = r.get(key)
            return "-" if v is None else format(v, fmt)

        target = {True: "met", False: "missed"}.get(r.get("targets_met"), "")  # type: ignore[arg-type]
        name = f"**{r['label']}**" if r.get("best_hpa") else r["label"]
        lines.append(
            f"| {r['profile_name']} | {r['trace_name']} x{r['scale']:g} | {r['slo_ms']:g} "
            f"| {name} | {f('window_attainment', '.3f')} | {f('slo_attainment', '.4f')} "
            f"| {f('p99_ms', '.1f')} | {f('served_p99_ms', '.1f')} | {r.get('rejected', '-')} "
            f"| {f('gpu_seconds', '.0f')} | {f('gpu_busy_seconds', '.0f')} "
            f"| {f('avg_batch_size', '.1f')} | {r.get('max_replicas_used', '-')} "
            f"| {r.get('reversals', '-')} | {f('x_oracle', '.2f')} "
            f"| {f('x_best_hpa', '.2f')} | {target} |\n"
        )
    legend = (
        "\nwindow att.: share of 60 s windows whose p99 <= SLO; SLO att.: share of requests "
        "sent that were served within the SLO; served p99: over served requests only; "
        "rejected: refused by the overload guard (on, the API's default); GPU-s: GPUs "
        "allocated x time (starting pods included); busy GPU-s: time executing; reversals: "
        "scale-downs undone by a scale-up within two pod starts; x oracle / "
        "x best hpa: GPU-s relative to the oracle and to the best-tuned hpa/keda (in bold) of "
        "the same profile x trace; hpa F: requests/s per replica at F x one replica's capacity.\n"
    )
    return head + "".join(lines) + legend
