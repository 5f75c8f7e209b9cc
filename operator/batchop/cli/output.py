"""One meaning of `-o/--output` for every command that prints objects, and progress lines.

`-o json` and `-o yaml` print the command's object (the same keys in both) on stdout;
`-o text` (the default) prints it for people. Commands that print Kubernetes manifests
(`render`, `crd`) have no text form: YAML is their default; `-o json` prints one object as
itself and several as a `v1 List`, as kubectl does.

`--json OUT` has one meaning on every command that has it: write the command's JSON result
to OUT, `-` for stdout (`simulate`, `load` and the DESIGN contract). Where a command prints
objects, OUT may be left out (`plan --json` = `plan --json -` = `plan -o json`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, TextIO

FORMATS = ("text", "json", "yaml")


def add_output_flag(
    parser: argparse.ArgumentParser, json_alias: bool = False, manifests: bool = False
) -> None:
    """Add `-o/--output text|json|yaml` (and `--json` as an alias of `-o json`);
    `manifests`: `-o yaml|json`, YAML by default (Kubernetes objects have no text form)."""
    if manifests:
        parser.add_argument(
            "-o",
            "--output",
            choices=("yaml", "json"),
            default="yaml",
            help="print the objects as YAML documents or a JSON v1 List",
        )
    else:
        parser.add_argument(
            "-o",
            "--output",
            choices=FORMATS,
            default="text",
            help="print the result as text, JSON or YAML",
        )
    if json_alias:
        parser.add_argument(
            "--json",
            dest="json_out",
            action=_JsonTo,
            nargs="?",
            const="-",
            default=None,
            metavar="OUT",
            help="write the JSON result to OUT ('-' or none: stdout, as -o json)",
        )


class _JsonTo(argparse.Action):
    """`--json [OUT]`: the JSON result, to OUT (stdout when OUT is `-` or left out)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        namespace.output = "json"
        namespace.json_out = values


def _plain(value: Any) -> Any:
    """JSON/YAML-safe: numpy scalars to Python, non-finite floats to null."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(obj: Any, fmt: str) -> str:
    """The object as `fmt` ("json" or "yaml"), ending with a newline."""
    data = _plain(obj)
    if fmt == "json":
        return json.dumps(data, indent=2, allow_nan=False) + "\n"
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    raise ValueError(f"unknown output format {fmt!r}; expected json or yaml")


def emit(obj: Any, fmt: str, out: TextIO | None = None, path: str | None = None) -> None:
    """Print the object in `fmt` on stdout (or `out`), or write it whole to `path` (a
    `--json OUT` other than `-`): a file that fails half-way is never left behind."""
    text = dumps(obj, fmt)
    if path in (None, "-"):
        (out or sys.stdout).write(text)
        return
    write_whole(path, text)


def write_whole(path: str, text: str) -> None:
    """Write `text` to `path` whole or not at all: a temporary file beside it, renamed over
    it, so a reader never sees half of it and a failure leaves the old file as it was."""
    import os
    import tempfile
    from pathlib import Path

    target = Path(path)
    fd, tmp = tempfile.mkstemp(
        dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}."
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Progress:
    """A progress line: redrawn in place with `\\r` on a terminal; elsewhere (a log, a
    pipe, CI) one plain line per step of `every` so the file holds no carriage returns."""

    def __init__(self, label: str, stream: TextIO | None = None, every: float = 0.1) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every
        self._last = -1  # the last step printed off a terminal
        self._drawn = False

    def __call__(self, frac: float) -> None:
        text = f"{self.label}: {frac:4.0%}"
        if self.tty:
            self.stream.write("\r" + text)
            self.stream.flush()
            self._drawn = True
        elif (step := math.floor(frac / self.every + 1e-6)) > self._last:
            self._last = step
            self.stream.write(text + "\n")
            self.stream.flush()

    def done(self) -> None:
        """End the redrawn line on a terminal (nothing to do elsewhere)."""
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def dump_manifests(objects: list[dict[str, Any]], fmt: str) -> str:
    """Kubernetes objects as YAML documents, or as one JSON `v1 List` (what `kubectl get -o
    json` prints for several objects; `kubectl apply -f -` takes either)."""
    if fmt == "json":
        return dumps({"apiVersion": "v1", "kind": "List", "items": objects}, "json")
    import yaml

    return yaml.safe_dump_all(_plain(objects), sort_keys=False, explicit_start=True)
