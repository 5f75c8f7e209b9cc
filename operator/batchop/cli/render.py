"""`batchop render -f FILE`: print the objects batchop would create for each BatchedModel.

Invalid BatchedModels are refused with the same rules (and field paths) the API server
applies through the CRD; nothing is printed then, so a pipe into `kubectl apply -f -` never
applies half a file. Documents of other kinds are skipped with a note on stderr, so a file
that also holds, say, a Namespace can be rendered as is.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from batchop.cli.flags import bounded_int
from batchop.cli.output import add_output_flag, dump_manifests

if TYPE_CHECKING:
    from batchop.inputs import YamlDocument

# Both are input errors (exit 2, as for every command); kept apart for readers of the code.
EXIT_INVALID = 2
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
        type=bounded_int(0, 1000),
        metavar="N",
        help="render the Deployment at N replicas (default: spec.scaling.replicas)",
    )
    add_output_flag(parser, manifests=True)
    parser.set_defaults(func=run)


def _load(path: str, stdin: TextIO) -> list[YamlDocument]:
    """The documents of `path`; InputError (file:line: rule) for unreadable text, malformed
    YAML or a repeated key."""
    from batchop.inputs import parse_yaml, read_text

    where = "<stdin>" if path == "-" else path
    return parse_yaml(read_text(path, "manifest", stdin=stdin), where)


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

    from batchop.api.errors import SpecError
    from batchop.api.models import parse_batched_model
    from batchop.inputs import InputError
    from batchop.render import RenderOptions, render_children

    out, err = stdout or sys.stdout, stderr or sys.stderr
    where = "<stdin>" if args.filename == "-" else args.filename
    try:
        docs = _load(args.filename, sys.stdin)
    except InputError as exc:
        print(f"batchop render: {exc}", file=err)
        return EXIT_UNREADABLE

    models, failures = [], 0
    for index, document in enumerate(docs):
        doc = document.data
        at = f"{where}:{document.line}: {_label(doc, index)}"
        if doc is None:
            continue
        if not isinstance(doc, dict):
            print(f"{at}: not a Kubernetes object (a mapping)", file=err)
            failures += 1
            continue
        if not _is_batched_model(doc):
            kind = doc.get("kind", "object without kind")
            print(f"{at}: skipping {kind} (not a BatchedModel)", file=err)
            continue
        try:
            bm = parse_batched_model(doc)
        except SpecError as exc:
            failures += 1
            for violation in exc.violations:
                line = document.line_of(violation.path)
                print(f"{where}:{line}: {_label(doc, index)}: {violation}", file=err)
            continue
        scaling = bm.spec.scaling
        if args.replicas is not None and not (
            scaling.min_replicas <= args.replicas <= scaling.max_replicas
        ):
            line = document.line_of("spec.scaling")
            print(
                f"{where}:{line}: {_label(doc, index)}: --replicas {args.replicas} is outside "
                f"spec.scaling minReplicas..maxReplicas ({scaling.min_replicas}.."
                f"{scaling.max_replicas})",
                file=err,
            )
            failures += 1
            continue
        models.append(bm)
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
