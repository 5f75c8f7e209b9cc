"""Latency profiles: how long one execution of a batch takes on one replica.

A profile is the simulator's (and the policy's prior) model of the GPU: a few measured
(batch size, milliseconds) points, interpolated piecewise-linearly, because real curves are a
fixed cost per call plus a roughly linear cost per sample with kinks where kernels change.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchop.inputs import InputError, parse_yaml, read_text


class ProfileError(InputError):
    """A profile file that cannot be used; the message names the file, line and field."""


# The bounds of the API's latencyProfile and maxBatchSize (api/models.py), and what a profile
# could sensibly say: anything past them is a typo, and a huge max_batch_size would make the
# simulator allocate a table of that size.
MAX_BATCH_SIZE = 65536
LATENCY_CEILING_MS = 600_000.0
MAX_STARTUP_SECONDS = 86_400.0
MAX_OVERLAP_SLOWDOWN = 64.0
MAX_GPUS_PER_REPLICA = 64
KNOWN_FIELDS = (
    "name",
    "max_batch_size",
    "batch_latency_ms",
    "startup_seconds",
    "gpus_per_replica",
    "overlap_slowdown",
)


def _interp(x: float, xs: list[int], ys: list[float]) -> float:
    """numpy.interp for one point (same arithmetic: linear between points, clamped at the
    ends), in plain Python so `batchop plan` and the operator need no numpy."""
    if x <= xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1])
    i = bisect_right(xs, x)
    slope = (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])
    return float(slope * (x - xs[i - 1]) + ys[i - 1])


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
            return _interp(batch, sizes, times)
        (b0, t0), (b1, t1) = self.batch_latency_ms[-2], self.batch_latency_ms[-1]
        return t1 + (batch - b1) * (t1 - t0) / (b1 - b0)

    def latency_table_s(self) -> list[float]:
        """Seconds per execution indexed by batch size 0..max_batch_size (index 0 unused)."""
        return [0.0] + [self.latency_ms(b) / 1000.0 for b in range(1, self.max_batch_size + 1)]

    def capacity_rps(self) -> float:
        """Throughput of one instance running full batches back to back."""
        return self.max_batch_size / (self.latency_ms(self.max_batch_size) / 1000.0)


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile YAML file."""
    path = Path(path)
    try:
        text = read_text(path, "profile")
        docs = parse_yaml(text, str(path))
    except InputError as exc:
        raise ProfileError(str(exc)) from None
    if not docs or docs[0].data is None:
        raise ProfileError(f"{path}:1: empty profile; it must be a YAML mapping")
    if len(docs) > 1:
        raise ProfileError(f"{path}:{docs[1].line}: a profile is one YAML document, not several")
    doc = docs[0]
    data: Any = doc.data
    if not isinstance(data, dict):
        raise ProfileError(f"{path}:{doc.line}: a profile must be a YAML mapping")

    def fail(field: str, rule: str) -> ProfileError:
        return ProfileError(f"{path}:{doc.line_of(field)}: field `{field}`: {rule}")

    for key in data:
        if key not in KNOWN_FIELDS:
            raise fail(str(key), "unknown field (known: " + ", ".join(KNOWN_FIELDS) + ")")
    for required in ("name", "max_batch_size", "batch_latency_ms"):
        if required not in data:
            raise ProfileError(f"{path}:{doc.line}: field `{required}` is required")

    name = data["name"]
    if not isinstance(name, str) or not name:
        raise fail("name", "must be a non-empty string")
    mbs = data["max_batch_size"]
    if isinstance(mbs, bool) or not isinstance(mbs, int) or not 1 <= mbs <= MAX_BATCH_SIZE:
        raise fail("max_batch_size", f"must be an integer in 1..{MAX_BATCH_SIZE}, got {mbs!r}")

    curve = data["batch_latency_ms"]
    if not isinstance(curve, dict) or not curve:
        raise fail("batch_latency_ms", "must be a non-empty mapping of batch size to ms")
    points: list[tuple[int, float]] = []
    lines: dict[int, int] = {}
    for size, ms in curve.items():
        field = f"batch_latency_ms.{size}"
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH_SIZE:
            raise fail(field, f"batch size must be an integer in 1..{MAX_BATCH_SIZE}")
        if (
            isinstance(ms, bool)
            or not isinstance(ms, int | float)
            or not 0 < ms <= LATENCY_CEILING_MS
        ):
            raise fail(field, f"latency must be a number of ms in (0, {LATENCY_CEILING_MS:g}]")
        points.append((size, float(ms)))
        lines[size] = doc.line_of(field)
    points.sort()
    if points[0][0] != 1:
        raise fail("batch_latency_ms", "must include batch size 1 (the cost of a lone request)")
    slowest = points[0]
    for size, ms in points[1:]:
        if ms < slowest[1]:
            raise ProfileError(
                f"{path}:{lines[size]}: field `batch_latency_ms.{size}`: latency must not fall "
                f"as batch size grows: batch {size} takes {ms:g} ms, batch {slowest[0]} "
                f"takes {slowest[1]:g} ms"
            )
        slowest = (size, ms)

    def number(field: str, default: float, minimum: float, maximum: float) -> float:
        value = data.get(field, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not minimum <= value <= maximum
        ):
            raise fail(field, f"must be a number in [{minimum:g}, {maximum:g}], got {value!r}")
        return float(value)

    gpus = data.get("gpus_per_replica", 1)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= MAX_GPUS_PER_REPLICA:
        raise fail(
            "gpus_per_replica", f"must be an integer in 0..{MAX_GPUS_PER_REPLICA}, got {gpus!r}"
        )
    return Profile(
        name=name,
        max_batch_size=mbs,
        batch_latency_ms=tuple(points),
        startup_seconds=number("startup_seconds", 0.0, 0.0, MAX_STARTUP_SECONDS),
        gpus_per_replica=gpus,
        overlap_slowdown=number("overlap_slowdown", 2.0, 1.0, MAX_OVERLAP_SLOWDOWN),
    )
