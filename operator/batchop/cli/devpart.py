"""The commands that run batchop-dev's tooling, and what they say where it is absent.

`local`, `demo`, `load`, `bench` and `simulate --plot` use the local stack, plots or bench,
which live in the second distribution, batchop-dev (operator/dev): `make install` installs
it, the operator image and `pip install batchop` do not. These commands stay in the CLI and
import batchop_dev only inside their functions, after `require()`; nothing else in the runtime
package may (tests/unit/test_runtime_split.py checks the import graph).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from types import ModuleType

PACKAGE = "batchop_dev"
HINT = "needs batchop-dev (make install)"


class DevPartMissing(RuntimeError):
    """A command needs batchop-dev and it is not installed."""


def installed() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None


def require(what: str) -> None:
    """Raise DevPartMissing naming `what` (e.g. "batchop local") when batchop-dev is absent."""
    if not installed():
        raise DevPartMissing(
            f"{what} {HINT}; the operator image and `pip install batchop` carry the operator "
            "only (in a checkout: `make install`, or `pip install ./operator/dev`)"
        )


def load(module: str) -> ModuleType | None:
    """A batchop_dev module, or None when batchop-dev is absent."""
    return importlib.import_module(module) if installed() else None


def register_placeholder(subparsers: argparse._SubParsersAction, name: str, text: str) -> None:
    """`name` in --help and completion, saying what it needs; running it says so and fails."""
    parser = subparsers.add_parser(
        name, help=f"{text} ({HINT})", description=f"{text}. This command {HINT}."
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(args: argparse.Namespace) -> int:
        require(f"batchop {name}")
        return 1  # not reached: require raised

    parser.set_defaults(func=run, takes_any_args=True)
