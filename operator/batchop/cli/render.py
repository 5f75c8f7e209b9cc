"""`batchop render -f FILE`: print the objects batchop would create for each BatchedModel.

Invalid BatchedModels are refused with the same rules (and field paths) the API server
applies through the CRD; nothing is printed then, so a pipe into `kubectl apply -f -` never
applies half a file. Documents of other kinds are skipped with a note on stderr, so a file
that also holds, say, a Namespace can be rendered as is.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from batchop.cli.output import add_output_flag, dump_manifests

EXIT_INVALID = 1
EXIT_UNREADABLE = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "render",
        help="print the objects batchop would create for BatchedModels in a file",
        description="Validate each BatchedModel in FILE (multi-document YAML) and print the "
        "Deployment, Service, PodDisruptionBudget and PodMonitor batchop would create for it.",
    )
    parser.add_argument(
        "-f", "--filename", required=True, metavar="FILE", help="YAML file, or - for stdin"
    )
    parser.add_argument(
        "--default-image",
        metavar="IMAGE",
        help="image for BatchedModels that do not set spec.server.image "
        "(default: the operator's default)",
    )
    parser.add_argument(
        "--no-pod-monitor", action="store_true", help="omit the PodMonitor (no Prometheus Operator)"
    )
    parser.add_argument(
        "--replicas",
        type=int,
        metavar="N",
        help="render the Deployment at N replicas (default: spec.scaling.replicas)",
    )
    add_output_flag(parser, manifests=True)
    parser.set_defaults(func=run)


def _load(path: str, stdin: TextIO) -> list[Any]:
    import yaml

    if path == "-":
        return list(yaml.safe_load_all(stdin))
    with open(path, encoding="utf-8") as handle:
        return list(yaml.safe_load_all(handle))


def _label(doc: Any, index: int) -> str:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return str(name) if name else f"document {index + 1}"


def _is_batched_model(doc: dict[str, Any]) -> bool:
    from batchop.api import constants as c

    group = str(doc.get("apiVersion", "")).split("/")[0]
    return doc.get("kind") == c.KIND and group == c.GROUP


def run(
    args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    import yaml

    from batchop.api.errors import SpecError
    from batchop.api.models import parse_batched_model
    from batchop.render import RenderOptions, render_children

    out, err = stdout or sys.stdout, stderr or sys.stderr
    where = "<stdin>" if args.filename == "-" else args.filename
    try:
        docs = _load(args.filename, sys.stdin)
    except OSError as exc:
        print(f"{where}: cannot read: {exc.strerror or exc}", file=err)
        return EXIT_UNREADABLE
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        print(f"{where}: {line}not valid YAML: {getattr(exc, 'problem', None) or exc}", file=err)
        return EXIT_UNREADABLE
    if args.replicas is not None and args.replicas < 0:
        print(f"--replicas: must be >= 0, got {args.replicas}", file=err)
        return EXIT_INVALID

    models, failures = [], 0
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            print(f"{where}: {_label(doc, index)}: not a Kubernetes object (a mapping)", file=err)
            failures += 1
            continue
        if not _is_batched_model(doc):
            kind = doc.get("kind", "object without kind")
            print(f"{where}: {_label(doc, index)}: skipping {kind} (not a BatchedModel)", file=err)
            continue
        try:
            models.append(parse_batched_model(doc))
        except SpecError as exc:
            failures += 1
            for violation in exc.violations:
                print(f"{where}: {_label(doc, index)}: {violation}", file=err)
    if failures:
        return EXIT_INVALID
    if not models:
        print(f"{where}: no BatchedModel found", file=err)
        return EXIT_INVALID

    options = RenderOptions(pod_monitor=not args.no_pod_monitor)
    if args.default_image:
        options = RenderOptions(default_image=args.default_image, pod_monitor=options.pod_monitor)
    objects = [obj for bm in models for obj in render_children(bm, options, args.replicas)]
    out.write(dump_manifests(objects, getattr(args, "output", "yaml")))
    return 0
