"""Load traces: request rate over time, piecewise constant.

CSV with header `second,rps`; each rate holds until the next row's second; the last row's
second is where the trace ends (its rate is ignored).
"""

from __future__ import annotations

import csv
import math
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from batchop.inputs import InputError, read_text


class TraceError(InputError):
    """A trace file that cannot be used; the message names the file, line and field."""


@dataclass(frozen=True)
class Trace:
    seconds: tuple[float, ...]  # strictly increasing; the last one is the end
    rps: tuple[float, ...]  # same length; rps[i] holds on [seconds[i], seconds[i+1])
    name: str = "trace"

    @property
    def start(self) -> float:
        return self.seconds[0]

    @property
    def end(self) -> float:
        return self.seconds[-1]

    def rate_at(self, t: float) -> float:
        """Offered rate at time t; 0 outside the trace."""
        if t < self.seconds[0] or t >= self.seconds[-1]:
            return 0.0
        return self.rps[bisect_right(self.seconds, t) - 1]

    def max_rate(self, t0: float, t1: float) -> float:
        """Highest rate anywhere in [t0, t1)."""
        best = self.rate_at(t0)
        for s, r in zip(self.seconds[:-1], self.rps[:-1], strict=True):
            if t0 <= s < t1:
                best = max(best, r)
        return best

    def mean_rate(self, t0: float, t1: float) -> float:
        """Average rate over [t0, t1)."""
        if t1 <= t0:
            return self.rate_at(t0)
        total = 0.0
        for i in range(len(self.seconds) - 1):
            lo, hi = max(t0, self.seconds[i]), min(t1, self.seconds[i + 1])
            if hi > lo:
                total += (hi - lo) * self.rps[i]
        return total / (t1 - t0)

    def segments(self) -> list[tuple[float, float, float]]:
        """(start, end, rps) for each constant piece."""
        return [
            (self.seconds[i], self.seconds[i + 1], self.rps[i])
            for i in range(len(self.seconds) - 1)
        ]


def constant_trace(rps: float, seconds: float) -> Trace:
    return Trace(seconds=(0.0, float(seconds)), rps=(float(rps), float(rps)), name=f"const-{rps}")


def load_trace(
    path: str | Path, max_requests: float | None = None, max_seconds: float | None = None
) -> Trace:
    """Read and validate a trace CSV file.

    `max_requests` and `max_seconds` bound the requests the trace offers and its length, for
    callers that allocate per request or step per second (the simulator): a trace past them
    is refused here, naming the line that crosses the limit, before anything is allocated.
    """
    path = Path(path)
    try:
        text = read_text(path, "trace")
    except InputError as exc:
        raise TraceError(str(exc)) from None
    try:
        rows = list(csv.reader(text.splitlines()))
    except csv.Error as exc:
        raise TraceError(f"{path}: not a CSV file: {exc}") from None
    if not rows:
        raise TraceError(f"{path}:1: empty trace; it needs the header `second,rps`")
    if [c.strip() for c in rows[0]] != ["second", "rps"]:
        raise TraceError(f"{path}:1: header must be `second,rps`")
    seconds: list[float] = []
    rates: list[float] = []
    offered = 0.0
    rate_line = 0  # the line of the rate in force
    for lineno, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 2:
            raise TraceError(f"{path}:{lineno}: expected 2 fields `second,rps`, got {len(row)}")
        values = []
        for field, cell in zip(("second", "rps"), row, strict=True):
            try:
                value = float(cell)
            except ValueError:
                raise TraceError(
                    f"{path}:{lineno}: field `{field}`: not a number: {cell.strip()!r}"
                ) from None
            if not math.isfinite(value):
                raise TraceError(f"{path}:{lineno}: field `{field}`: must be finite, got {cell!r}")
            values.append(value)
        second, rps = values
        if second < 0:
            raise TraceError(f"{path}:{lineno}: field `second`: must be >= 0, got {second:g}")
        if rps < 0:
            raise TraceError(f"{path}:{lineno}: field `rps`: rate must be >= 0, got {rps:g}")
        if seconds and second <= seconds[-1]:
            raise TraceError(
                f"{path}:{lineno}: field `second`: must increase, {second:g} after {seconds[-1]:g}"
            )
        if max_seconds is not None and second > max_seconds:
            raise TraceError(
                f"{path}:{lineno}: field `second`: {second:g} s is past the limit of "
                f"{max_seconds:,.0f} s"
            )
        if seconds:
            offered += rates[-1] * (second - seconds[-1])
            if max_requests is not None and offered > max_requests:
                raise TraceError(
                    f"{path}:{rate_line}: field `rps`: the trace offers {offered:.3g} requests "
                    f"by second {second:g}, past the limit of {max_requests:,.0f}; lower the "
                    "rates or shorten it"
                )
        rate_line = lineno
        seconds.append(second)
        rates.append(rps)
    if len(seconds) < 2:
        raise TraceError(f"{path}: needs at least two rows (the last row's second is the end)")
    return Trace(seconds=tuple(seconds), rps=tuple(rates), name=path.stem)
