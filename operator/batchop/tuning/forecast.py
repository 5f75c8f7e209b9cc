"""A trend forecast of the arrival rate: a floor for replicas ahead of a steady rise.

Pure. A least-squares line through the recent rate history predicts the rate `ahead_s`
from now (new replicas take that long to serve). It is trusted only when it explains the
history (R² >= MIN_R2), only upwards (a fall is the peak memory's business), and never
beyond MAX_RISE x the latest rate: a forecast raises the floor, it never invents a flood.
Off by default (spec.autotune.forecast): bursts are not trends, and on bursty traffic a
line through them mostly adds GPUs.
"""

from __future__ import annotations

HISTORY_S = 600.0  # the line is fitted to this much history
MIN_POINTS = 6
MIN_R2 = 0.6
MAX_RISE = 2.0


def trend(history: tuple[tuple[float, float], ...], now_s: float, ahead_s: float) -> float | None:
    """The rate expected at now_s + ahead_s, or None when the history shows no rising trend."""
    points = [(t, r) for t, r in history if now_s - HISTORY_S <= t <= now_s and r >= 0]
    if len(points) < MIN_POINTS:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mr = sum(r for _, r in points) / n
    stt = sum((t - mt) ** 2 for t, _ in points)
    if stt <= 0:
        return None
    slope = sum((t - mt) * (r - mr) for t, r in points) / stt
    if slope <= 0:
        return None
    srr = sum((r - mr) ** 2 for _, r in points)
    fitted = [mr + slope * (t - mt) for t, _ in points]
    residual = sum((r - f) ** 2 for (_, r), f in zip(points, fitted, strict=True))
    if srr <= 0 or 1 - residual / srr < MIN_R2:
        return None
    latest = points[-1][1]
    return min(MAX_RISE * latest, mr + slope * (now_s + ahead_s - mt))
