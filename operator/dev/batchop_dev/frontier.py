"""The online frontier of one case, and where batchop stands against it. Pure.

A point is one run scored over the warm pass: its GPU-seconds and its two attainments. The
frontier at an attainment is the cheapest online run (static-N, the requests-per-replica
rule at any target, hpa-queue, the reactive oracle) that reaches it on both counts, windows
and requests. batchop's ratio is its GPU-s over the frontier's at batchop's own attainment:
1.00 is on the frontier, below 1 cheaper than any of them, None where none reaches it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ONLINE = ("static", "rule", "hpa-queue", "reactive-oracle")
GPU_TOLERANCE = 0.01  # a run dominates only if cheaper by more than this share


@dataclass(frozen=True)
class Point:
    family: str  # static | rule | hpa-queue | reactive-oracle | oracle | batchop
    setting: float | None  # N, the rule's target fraction, batchop's coverage
    gpu_s: float
    windows: float  # window attainment
    requests: float  # request attainment

    @property
    def label(self) -> str:
        return self.family if self.setting is None else f"{self.family} {self.setting:g}"


def reaches(p: Point, windows: float, requests: float) -> bool:
    return p.windows >= windows and p.requests >= requests


def frontier_gpu(points: Iterable[Point], windows: float, requests: float) -> Point | None:
    """The cheapest online run reaching both attainments (None: none does)."""
    ok = [p for p in points if p.family in ONLINE and reaches(p, windows, requests)]
    return min(ok, key=lambda p: p.gpu_s) if ok else None


def dominators(points: Iterable[Point], b: Point) -> list[Point]:
    """Online runs at least as good as `b` on both attainments and cheaper beyond the
    tolerance: a user would have done better with one of them."""
    return [
        p
        for p in points
        if p.family in ONLINE
        and reaches(p, b.windows, b.requests)
        and p.gpu_s < (1 - GPU_TOLERANCE) * b.gpu_s
    ]


def best_rule(points: Sequence[Point], b: Point) -> Point | None:
    """The rule a user would have tuned to match `b`: the cheapest rule run reaching its
    attainments, else the rule run with the highest attainment."""
    rules = [p for p in points if p.family == "rule"]
    if not rules:
        return None
    ok = [p for p in rules if reaches(p, b.windows, b.requests)]
    if ok:
        return min(ok, key=lambda p: p.gpu_s)
    return max(rules, key=lambda p: (p.requests, p.windows, -p.gpu_s))


def lower_envelope(points: Iterable[Point], attainment: str) -> list[tuple[float, float]]:
    """(GPU-s, attainment) of the runs no cheaper run beats on that one attainment, in
    order of cost: the frontier line a plot draws."""
    line: list[tuple[float, float]] = []
    best = -1.0
    for p in sorted(points, key=lambda p: (p.gpu_s, -getattr(p, attainment))):
        value = getattr(p, attainment)
        if value > best:
            line.append((p.gpu_s, value))
            best = value
    return line


def judge(points: Sequence[Point], b: Point) -> dict[str, object]:
    """Where one batchop run stands on its case."""
    front = frontier_gpu(points, b.windows, b.requests)
    rule = best_rule(points, b)
    beaten = dominators(points, b)
    return {
        "x_frontier": b.gpu_s / front.gpu_s if front else None,
        "frontier_run": front.label if front else None,
        "x_best_rule": b.gpu_s / rule.gpu_s if rule else None,
        "best_rule": rule.label if rule else None,
        "dominated_by": [p.label for p in sorted(beaten, key=lambda p: p.gpu_s)],
    }
