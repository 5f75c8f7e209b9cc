"""One meaning of `-o/--output` for every command that prints objects, and progress lines.

`-o json` and `-o yaml` print the command's object (the same keys in both) on stdout;
`-o text` (the default) prints it for people. Commands that print Kubernetes manifests
(`render`, `crd`) have no text form: YAML is their default; `-o json` prints one object as
itself and several as a `v1 List`, as kubectl does. `--json`, where a command had it as a flag,
is an alias of `-o json` and nothing else. (`simulate --json FILE` and `load --json FILE`
name a result file; they are not this flag.)
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
        parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml",
                            help="print the objects as YAML documents or a JSON v1 List")
    else:
        parser.add_argument(
            "-o", "--output", choices=FORMATS, default="text",
            help="print the result as text, JSON or YAML",
        )
    if json_alias:
        parser.add_argument(
            "--json", dest="output", action="store_const", const="json",
            help="alias of -o json",
        )


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


def emit(obj: Any, fmt: str, out: TextIO | None = None) -> None:
    """Print the object in `fmt` on stdout (or `out`)."""
    (out or sys.stdout).write(dumps(obj, fmt))


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
