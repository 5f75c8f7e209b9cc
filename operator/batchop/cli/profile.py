"""`batchop profile`: measure a Triton model's batch-latency curve into a profile YAML."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from batchop.cli import devpart
from batchop.cli.flags import bounded_int, namespaced_name, positive_float
from batchop.cli.output import Progress, add_output_flag, dumps, emit
from batchop.inputs import InputError

MAX_REPEATS = 1000
MAX_WARMUP = 100
MAX_STARTUP_SECONDS = 86_400.0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "profile",
        help="measure a Triton model's batch-latency curve into a profile YAML",
        description="Send one request of each batch size 1..maxBatchSize at a time, --repeats "
        "times, to a Triton model (--url and --model, or a BatchedModel's Ready pod in the "
        "local cluster with --bm), read each execution's time from Triton's statistics "
        "(compute_infer: what batchop learns online), and write a profile YAML that "
        "`batchop plan` and `batchop simulate` read: the medians, made non-decreasing, with "
        "the measured spread as comments. -o yaml|json prints the BatchedModel fields "
        "(spec.model.latencyProfile) to paste into a manifest. Nothing is written unless "
        "every batch size was measured.",
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", metavar="HOST:PORT", help="Triton HTTP endpoint (with --model)")
    target.add_argument(
        "--bm",
        type=namespaced_name,
        metavar="NAMESPACE/NAME",
        help="a BatchedModel in the local cluster: measure one of its Ready pods",
    )
    p.add_argument("--model", help="Triton model name (with --url)")
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig of the local cluster (with --bm; default: $KUBECONFIG or ~/.kube/config)",
    )
    p.add_argument("--out", required=True, metavar="PROFILE", help="profile YAML to write")
    p.add_argument(
        "--max-batch-size",
        type=bounded_int(1, 65536),
        help="largest batch to measure (default: the model's max_batch_size)",
    )
    p.add_argument(
        "--repeats",
        type=bounded_int(1, MAX_REPEATS),
        default=10,
        help="timed executions per batch size",
    )
    p.add_argument(
        "--warmup",
        type=bounded_int(0, MAX_WARMUP),
        default=2,
        help="untimed executions first, per batch size",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=10.0,
        help="seconds each call to Triton may take",
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="INPUT=D1,D2",
        help="size of an input's variable dimensions, batch dimension left out (repeatable)",
    )
    p.add_argument("--name", help="the profile's name (default: the model name)")
    p.add_argument(
        "--startup-seconds",
        type=positive_float,
        help="pod start + model load time to record in the profile (the simulator's)",
    )
    add_output_flag(p)
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def _shapes(values: list[str]) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for value in values:
        name, sep, dims = value.partition("=")
        try:
            parsed = [int(d) for d in dims.split(",")]
        except ValueError:
            parsed = []
        if not sep or not name or not parsed or any(d < 1 for d in parsed):
            raise InputError(f"--shape {value}: must be INPUT=D1,D2,... with each D >= 1")
        shapes[name] = parsed
    return shapes


def _check_out(path: str) -> None:
    """Refuse an --out that could not be written before spending time measuring."""
    target = Path(path)
    if target.is_dir():
        raise InputError(f"--out {path}: is a directory; give a file name")
    parent = target.parent
    if not parent.is_dir():
        raise InputError(f"--out {path}: folder {parent} does not exist")


def run(args: argparse.Namespace) -> int:
    devpart.require("batchop profile")
    from batchop_dev.profiling import (
        ProfileFailed,
        local_endpoint,
        manifest_fields,
        measure,
        normalise_url,
        profile_document,
        write_profile,
    )

    if args.url and not args.model:
        raise InputError("--url needs --model (the Triton model name)")
    if args.bm and args.model:
        raise InputError("--model goes with --url; with --bm the model is the BatchedModel's")
    shapes = _shapes(args.shape)
    _check_out(args.out)
    try:
        url = normalise_url(args.url) if args.url else None
    except ValueError as exc:
        raise InputError(str(exc)) from None
    try:
        if args.bm:
            url, model = local_endpoint(*args.bm, args.kubeconfig)
        else:
            model = args.model
        progress = None if args.quiet else Progress(f"profiling {model} at {url}")
        try:
            m = measure(
                url,
                model,
                repeats=args.repeats,
                warmup=args.warmup,
                timeout_s=args.timeout,
                max_batch_size=args.max_batch_size,
                shapes=shapes,
                progress=progress,
            )
        finally:
            if progress is not None:
                progress.done()
    except ProfileFailed as exc:
        print(f"batchop profile: {exc}", file=sys.stderr)
        return 1
    document = profile_document(m, name=args.name, startup_seconds=args.startup_seconds)
    write_profile(args.out, document)
    fields = manifest_fields(m)
    if args.output != "text":
        emit(fields, args.output)
        return 0
    _print_text(m, args.out)
    print("\nBatchedModel fields to paste (merge into your manifest's spec):\n")
    print(dumps(fields, "yaml"), end="")
    return 0


def _print_text(m: Any, out: str) -> None:
    """The measurement for people (m: batchop_dev.profiling.Measurement)."""
    fitted = dict(m.curve_ms)
    print(
        f"model {m.model}" + (f" (version {m.version})" if m.version else "") + f" on Triton "
        f"{m.server_version} at http://{m.url}: {m.repeats} timed executions per batch size, "
        f"{m.seconds:.1f} s"
    )
    print("  batch   median ms   p10-p90 ms        per inference ms   profile ms")
    for t in m.timings:
        spread = f"{t.quantile_ms(0.1):.3f}-{t.quantile_ms(0.9):.3f}"
        print(
            f"  {t.batch:5d}   {t.median_ms:9.3f}   {spread:<17} {t.per_inference_ms:12.4f}"
            f"   {fitted[t.batch]:10.3f}"
        )
    top = m.timings[-1].batch
    for big in sorted({b for b in (32, top) if b > 1}):
        ratio = m.ratio(big)
        if ratio is not None:
            print(f"time per inference at batch {big}: {ratio:.3f} of batch 1's")
    if m.dropped:
        print(f"{m.dropped} samples dropped (other traffic of the same batch size)")
    print(f"wrote {out} (for batchop plan --profile and batchop simulate --profile)")
