"""The `batchop` command: one sub-command per module in this package.

Each command module defines `register(subparsers)` which adds its parser and sets
`func` (a callable taking the parsed args and returning an exit code). Modules are
imported eagerly but must keep heavy imports (kopf, tritonclient, batchop-dev's) inside
their `run` functions so that `batchop --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from batchop.cli.devpart import DevPartMissing
from batchop.cli.flags import Parser
from batchop.inputs import InputError

# Exit codes: 2 for usage and input errors (argparse's own), 1 for runtime errors.
EXIT_RUNTIME = 1
EXIT_INPUT = 2

# Sub-command modules, in the order `--help` lists them.
COMMAND_MODULES = [
    "batchop.cli.run",
    "batchop.cli.crd",
    "batchop.cli.render",
    "batchop.cli.simulate",
    "batchop.cli.plan",
    "batchop.cli.profile",
    "batchop.cli.bench",
    "batchop.cli.local",
    "batchop.cli.load",
    "batchop.cli.demo",
    "batchop.cli.explain",
    "batchop.cli.version",
    "batchop.cli.completion",
]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="batchop",
        description="Operator for batched inference on Triton: tunes the queue delay and "
        "replica count of each BatchedModel to keep p99 within its SLO with the fewest GPUs.",
    )
    from batchop.cli.version import VersionAction

    parser.add_argument(
        "--version",
        action=VersionAction,
        help="print the version (and git commit in a checkout) and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # command not built yet in this checkout
                continue
            raise
        module.register(sub)
    from batchop.cli.helptext import show_defaults

    show_defaults(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; every failure ends as one line on stderr and an exit code, never a
    traceback (BATCHOP_DEBUG=1 shows the traceback of an unexpected error)."""
    try:
        parser = build_parser()
        # Known args only, so a placeholder command (batchop-dev absent) takes any flags
        # and says what it needs; every other command still refuses unknown ones.
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "takes_any_args", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help, --version, or a usage error already reported
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        return EXIT_INPUT
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except InputError as exc:
        print(f"batchop {args.command}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except DevPartMissing as exc:
        print(f"batchop {args.command}: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except OSError as exc:
        target = f"{exc.filename}: " if exc.filename else ""
        print(f"batchop {args.command}: {target}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except Exception as exc:
        if os.environ.get("BATCHOP_DEBUG"):
            raise
        text = " ".join(str(exc).split()) or "(no message)"
        print(
            f"batchop {args.command}: internal error: {type(exc).__name__}: {text} "
            "(BATCHOP_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_RUNTIME


if __name__ == "__main__":
    sys.exit(main())
