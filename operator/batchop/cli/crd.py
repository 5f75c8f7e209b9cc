"""`batchop crd`: print the BatchedModel CRD generated from the API models."""

from __future__ import annotations

import argparse
import sys

from batchop.cli.output import add_output_flag, dumps


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "crd",
        help="print the BatchedModel CRD (generated from the API models)",
        description="Print the BatchedModel CustomResourceDefinition as YAML. "
        "crds/batchedmodel.yaml is this output.",
    )
    add_output_flag(parser, manifests=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from batchop.api.crd import crd_yaml

    if args.output == "json":
        import yaml

        sys.stdout.write(dumps(yaml.safe_load(crd_yaml()), "json"))
    else:
        sys.stdout.write(crd_yaml())
    return 0
