"""Where a benchmark's figures came from: the command, the commit and the machine's load.

Every result file the README quotes carries this (a `provenance` object in JSON, a list at
the top of Markdown), so a figure can be traced to the run that made it and a figure from a
busy machine reads as one. tests/unit/test_readme_figures.py counts only files that have it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def commit() -> str:
    """HEAD's short hash, marked when tracked files differ from it (the run used those)."""
    head = _git("rev-parse", "--short", "HEAD")
    if head is None:
        return "unknown (not a git checkout)"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return f"{head} + uncommitted changes" if dirty else head


def _load() -> float:
    return round(os.getloadavg()[0], 2)


@dataclass
class Provenance:
    """Started when the run starts (load then), finished when it ends (load then)."""

    command: str
    commit: str = field(default_factory=commit)
    cpus: int = field(default_factory=lambda: os.cpu_count() or 0)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    load_start: float = field(default_factory=_load)
    load_end: float | None = None

    @classmethod
    def start(cls, argv: Sequence[str] | None = None, program: str | None = None) -> Provenance:
        """`argv` defaults to this process's; `program` replaces argv[0] (e.g. 'batchop')."""
        args = list(sys.argv if argv is None else argv)
        if program is not None:
            args[0] = program
        elif args and args[0].endswith(".py"):  # a script: say how it was run
            here = os.path.relpath(args[0], REPO) if args[0].startswith(str(REPO)) else args[0]
            args[0:1] = ["python", here]
        return cls(command=shlex.join(args))

    def finish(self) -> Provenance:
        self.load_end = _load()
        return self

    def as_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "commit": self.commit,
            "machine": f"{self.cpus} CPUs",
            "load_avg_1m": {"start": self.load_start, "end": self.load_end},
            "date": self.started,
        }

    def write_json(self, path: Path, wall_s: float, **data: Any) -> None:
        """A result's JSON file: {"meta": {provenance, wall_s}, **data}, indented."""
        meta = {"provenance": self.as_dict(), "wall_s": wall_s}
        path.write_text(json.dumps({"meta": meta, **data}, indent=1) + "\n")

    def markdown(self) -> str:
        end = "not recorded" if self.load_end is None else f"{self.load_end:g}"
        return (
            f"- command: `{self.command}`\n"
            f"- commit: {self.commit}\n"
            f"- machine: {self.cpus} CPUs; load average (1 min) {self.load_start:g} at the "
            f"start, {end} at the end\n"
            f"- date: {self.started}\n"
        )
