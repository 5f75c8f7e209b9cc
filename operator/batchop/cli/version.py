"""`batchop version` and `batchop --version`: the package version, and the git commit when
run from a checkout (so a bug report names the code that ran)."""

from __future__ import annotations

import argparse
import platform
from typing import Any

from batchop import __version__
from batchop.cli.output import add_output_flag, emit


def version_info() -> dict[str, Any]:
    """Version, commit (None outside a git checkout) and Python version."""
    from batchop import provenance

    commit = provenance.commit() if (provenance.REPO / ".git").exists() else None
    if commit is not None and commit.startswith("unknown"):
        commit = None
    return {"version": __version__, "commit": commit, "python": platform.python_version()}


def version_line(info: dict[str, Any]) -> str:
    line = f"batchop {info['version']}"
    if info["commit"]:
        line += f" (commit {info['commit']})"
    return line


class VersionAction(argparse.Action):
    """`--version`: like argparse's, but the commit is looked up only when asked for."""

    def __init__(
        self,
        option_strings: list[str],
        dest: str = argparse.SUPPRESS,
        default: str = argparse.SUPPRESS,
        help: str | None = None,
    ) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(version_line(version_info()))
        parser.exit()


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "version",
        help="print the version (and git commit in a checkout)",
        description="Print batchop's version, and the git commit when run from a checkout.",
    )
    add_output_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    info = version_info()
    if args.output == "text":
        print(version_line(info))
    else:
        emit(info, args.output)
    return 0
