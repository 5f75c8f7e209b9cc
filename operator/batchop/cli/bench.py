"""`batchop bench`: registered from batchop-dev (batchop_dev.bench) where it is installed,
else a placeholder that says it needs it (the bench is dev tooling, not the operator's)."""

from __future__ import annotations

import argparse

from batchop.cli import devpart


def register(subparsers: argparse._SubParsersAction) -> None:
    module = devpart.load("batchop_dev.bench")
    if module is None:
        devpart.register_placeholder(
            subparsers, "bench", "run every policy on every profile x trace and tabulate"
        )
        return
    module.register(subparsers)
