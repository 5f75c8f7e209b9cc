"""Latency profiles: how long one execution of a batch takes on one replica.

A profile is the simulator's (and the policy's prior) model of the GPU: a few measured
(batch size, milliseconds) points, interpolated piecewise-linearly, because real curves are a
fixed cost per call plus a roughly linear cost per sample with kinks where kernels change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file, line and field."""


@dataclass(frozen=True)
class Profile:
    name: str
    max_batch_size: int
    batch_latency_ms: tuple[tuple[int, float], ...]  # sorted by batch size, starts at 1
    startup_seconds: float = 0.0
    gpus_per_replica: int = 1
    # How much one execution slows for each other instance of the same replica running at
    # the same time (2.0: concurrent executions serialise on the GPU; 1.0: perfect overlap).
    overlap_slowdown: float = 2.0

    def latency_ms(self, batch: float) -> float:
        """Execution time of a batch; linear extrapolation past the last measured point."""
        sizes = [b for b, _ in self.batch_latency_ms]
        times = [t for _, t in self.batch_latency_ms]
        if batch <= sizes[-1] or len(sizes) == 1:
            return float(np.interp(batch, sizes, times))
        (b0, t0), (b1, t1) = self.batch_latency_ms[-2], self.batch_latency_ms[-1]
        return t1 + (batch - b1) * (t1 - t0) / (b1 - b0)

    def latency_table_s(self) -> list[float]:
        """Seconds per execution indexed by batch size 0..max_batch_size (index 0 unused)."""
        return [0.0] + [self.latency_ms(b) / 1000.0 for b in range(1, self.max_batch_size + 1)]

    def capacity_rps(self) -> float:
        """Throughput of one instance running full batches back to back."""
        return self.max_batch_size / (self.latency_ms(self.max_batch_size) / 1000.0)


def _lines(node: yaml.Node) -> dict[str, tuple[int, yaml.Node]]:
    """Key -> (1-based line, value node) for a YAML mapping node."""
    out: dict[str, tuple[int, yaml.Node]] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            out[str(key.value)] = (key.start_mark.line + 1, value)
    return out


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile YAML file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc.strerror or exc}") from exc
    try:
        node = yaml.compose(text)
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ProfileError(f"{where}: malformed YAML: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(data, dict) or node is None:
        raise ProfileError(f"{path}:1: a profile must be a YAML mapping")
    lines = _lines(node)

    def fail(field: str, rule: str) -> ProfileError:
        line = lines.get(field.split(".")[0], (1, None))[0]
        return ProfileError(f"{path}:{line}: field `{field}`: {rule}")

    for required in ("name", "max_batch_size", "batch_latency_ms"):
        if required not in data:
            raise ProfileError(f"{path}:1: field `{required}` is required")

    name = data["name"]
    if not isinstance(name, str) or not name:
        raise fail("name", "must be a non-empty string")
    mbs = data["max_batch_size"]
    if isinstance(mbs, bool) or not isinstance(mbs, int) or mbs < 1:
        raise fail("max_batch_size", f"must be an integer >= 1, got {mbs!r}")

    curve = data["batch_latency_ms"]
    if not isinstance(curve, dict) or not curve:
        raise fail("batch_latency_ms", "must be a non-empty mapping of batch size to ms")
    curve_node = lines["batch_latency_ms"][1]
    entry_lines = {str(k.value): k.start_mark.line + 1 for k, _ in curve_node.value}
    points: list[tuple[int, float]] = []
    for size, ms in curve.items():
        line = entry_lines.get(str(size), lines["batch_latency_ms"][0])
        field = f"batch_latency_ms.{size}"
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ProfileError(
                f"{path}:{line}: field `{field}`: batch size must be an integer >= 1"
            )
        if isinstance(ms, bool) or not isinstance(ms, int | float) or not ms > 0:
            raise ProfileError(f"{path}:{line}: field `{field}`: latency must be a number > 0 ms")
        points.append((size, float(ms)))
    points.sort()
    if points[0][0] != 1:
        raise fail("batch_latency_ms", "must include batch size 1 (the cost of a lone request)")

    def number(field: str, default: float, minimum: float) -> float:
        value = data.get(field, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
            raise fail(field, f"must be a number >= {minimum}, got {value!r}")
        return float(value)

    gpus = data.get("gpus_per_replica", 1)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise fail("gpus_per_replica", f"must be an integer >= 0, got {gpus!r}")
    return Profile(
        name=name,
        max_batch_size=mbs,
        batch_latency_ms=tuple(points),
        startup_seconds=number("startup_seconds", 0.0, 0.0),
        gpus_per_replica=gpus,
        overlap_slowdown=number("overlap_slowdown", 2.0, 1.0),
    )
