"""The batch-latency curve, learned online from what Triton reports.

Each tick gives one point: the average batch (inference count / execution count) and the
compute time per execution. Points are kept in batch-size buckets (log2, half-octave wide) as
exponentially weighted means, so the curve follows a model that gets slower or faster and
forgets old load levels. The curve used for prediction is:

* with a prior (a profile's points): the prior's shape scaled by the observed / prior ratio
  (weighted over buckets, pulled towards 1 by a prior weight), because a profile measured on
  another GPU is usually off by a factor, not in shape;
* without a prior, with points spanning at least a factor 2 in batch size: a weighted
  least-squares line, fixed cost + per-sample cost;
* otherwise: a line through the one point that takes 80% of it as fixed cost, more
  cautious than typical GPU models (~90% at small batches: 4 ms + 0.25 ms/sample on the
  design's Triton measurement). A lower guess (50% was tried) over-provisions the simulated
  bench by 3x without a profile, and the fewer requests per replica, the smaller the
  batches it ever sees to learn from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Each new observation has this weight; old weights decay by DECAY per update.
DECAY = 0.9
PRIOR_WEIGHT = 2.0  # pseudo-observations backing the profile's scale of 1.0, fading
MIN_SPAN = 2.0  # batch-size ratio the data must span before a line is fitted from it alone
MIN_WEIGHT = 0.05  # buckets lighter than this are dropped
DEFAULT_FIXED_FRACTION = 0.8

Bucket = tuple[float, float, float]  # (mean batch, mean compute ms, weight)


def _bucket_key(batch: float) -> int:
    return round(2.0 * math.log2(max(1.0, batch)))


def update(buckets: Sequence[Bucket], batch: float, compute_ms: float) -> tuple[Bucket, ...]:
    """Fold one (avg batch, compute ms per execution) point into the buckets."""
    if not (batch >= 1.0 and compute_ms > 0.0 and math.isfinite(batch + compute_ms)):
        return tuple(buckets)
    key = _bucket_key(batch)
    out: list[Bucket] = []
    merged = False
    for b, y, w in buckets:
        w *= DECAY
        if _bucket_key(b) == key:
            nw = w + 1.0
            b, y, w = (b * w + batch) / nw, (y * w + compute_ms) / nw, nw
            merged = True
        if w >= MIN_WEIGHT:
            out.append((b, y, w))
    if not merged:
        out.append((batch, compute_ms, 1.0))
    return tuple(sorted(out))


@dataclass(frozen=True)
class Curve:
    """Batch size -> execution ms, piecewise linear through `points`, scaled by `scale`."""

    points: tuple[tuple[float, float], ...]
    scale: float = 1.0
    source: str = "prior"

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("a batch-latency curve needs at least one point")
        if self.points[0][0] > 1.0:
            raise ValueError(
                f"batch-latency curve must start at batch size 1, starts at {self.points[0][0]}"
            )

    def __call__(self, batch: float) -> float:
        pts = self.points
        if len(pts) == 1:
            return self.scale * pts[0][1]
        if batch <= pts[0][0]:
            return self.scale * pts[0][1]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
            if batch <= x1:
                return self.scale * (y0 + (y1 - y0) * (batch - x0) / (x1 - x0))
        (x0, y0), (x1, y1) = pts[-2], pts[-1]  # extrapolate the last segment
        return self.scale * (y1 + (y1 - y0) * (batch - x1) / (x1 - x0))

    @classmethod
    def line(cls, fixed_ms: float, per_sample_ms: float, max_batch: int, source: str) -> Curve:
        top = float(max(2, max_batch))
        return cls(
            ((1.0, fixed_ms + per_sample_ms), (top, fixed_ms + per_sample_ms * top)), 1.0, source
        )


def prior_curve(points: Sequence[tuple[float, float]]) -> Curve:
    """A curve from profile points, checked: sizes ascending from 1, times positive."""
    pts = tuple(sorted((float(b), float(ms)) for b, ms in points))
    for b, ms in pts:
        if b < 1 or ms <= 0:
            raise ValueError(f"batch-latency point ({b}, {ms}): need batch >= 1 and ms > 0")
    if len({b for b, _ in pts}) != len(pts):
        raise ValueError("batch-latency points repeat a batch size")
    return Curve(pts, 1.0, "prior")


def estimate(
    buckets: Sequence[Bucket],
    prior: Sequence[tuple[float, float]],
    max_batch: int,
) -> Curve | None:
    """The curve to predict with, or None when there is neither a prior nor data."""
    live = [(b, y, w) for b, y, w in buckets if w >= MIN_WEIGHT]
    if prior:
        base = prior_curve(prior)
        seen = sum(w for _, _, w in live)
        w_prior = PRIOR_WEIGHT / (1.0 + seen) ** 2  # the prior fades as data accumulates
        num = w_prior + sum(w * y / base(b) for b, y, w in live)
        den = w_prior + seen
        scale = min(5.0, max(0.2, num / den))
        return Curve(base.points, scale, "prior" if not live else "prior x observed")
    if not live:
        return None
    lo, hi = min(b for b, _, _ in live), max(b for b, _, _ in live)
    if hi / lo >= MIN_SPAN:
        sw = sum(w for _, _, w in live)
        mb = sum(w * b for b, _, w in live) / sw
        my = sum(w * y for _, y, w in live) / sw
        sbb = sum(w * (b - mb) ** 2 for b, _, w in live)
        sby = sum(w * (b - mb) * (y - my) for b, y, w in live)
        slope = sby / sbb if sbb > 0 else 0.0
        fixed = my - slope * mb
        if slope > 0 and fixed > 0:
            return Curve.line(fixed, slope, max_batch, "fitted")
    # One batch size (or a fit that makes no sense): take DEFAULT_FIXED_FRACTION as fixed cost.
    sw = sum(w for _, _, w in live)
    b0 = sum(w * b for b, _, w in live) / sw
    y0 = sum(w * y for _, y, w in live) / sw
    per_sample = (1.0 - DEFAULT_FIXED_FRACTION) * y0 / b0
    return Curve.line(y0 - per_sample * b0, per_sample, max_batch, "default")
