"""The load replicas are sized for: a quantile of the busiest load over the next horizon
(a pod start plus one tick), learned online from the model's own history. Pure.

Why one model and not rules per shape: what a replica asked for now must cover is the load
until a replica asked for later could be ready, and how much load grows over that horizon
is a property of the traffic that the traffic itself shows. Once a tick's horizon has passed
its label is known: growth = the busiest load of the horizon / the load at the tick. The
replicas are sized for the `coverage` quantile of those growths times the load now, and the
same size decides both directions: a scale-down happens only when the lower count covers
that quantile too, so no scale-down is undone by the growth it already expected.

Growth depends on the level the load is at: a quiet spell between recurring bursts grows
by the burst, the burst itself does not, and the ticks on the way up to it grow by what is
left. So the quantile is read from the ticks whose load was near the load now (within a
factor LEVEL_WIDTH), or at a load never seen, from those near the nearest load seen. With
few of them the nearest rank is their largest: no tail is guessed below what was seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EVIDENCE_S = 3600.0  # labels older than this are forgotten: an hour of the model's traffic
# Before any label: size for this much more than the load now (as `batchop plan` sizes a
# steady rate).
COLD_GROWTH = 1.1
UNIT_RPS = 1.0  # growth is of load + this: a load that falls to nothing still has a scale
LEVEL_WIDTH = 1.15  # ticks whose load was within this factor of now's are alike


@dataclass(frozen=True)
class Memory:
    """What the sizing model has learned: kept in TuningState, persisted by the operator."""

    # (time, load) of the ticks still waiting on their label, and the last labelled one.
    loads: tuple[tuple[float, float], ...] = ()
    # (time, load, growth over one horizon, growth over two) of ticks whose two horizons
    # have passed, oldest first.
    labels: tuple[tuple[float, float, float, float], ...] = ()
    labelled_to_s: float = -math.inf  # the newest tick labelled


@dataclass(frozen=True)
class Sizing:
    """The loads to size for now, and what they were read from (for the decision's reason)."""

    rps: float  # to size for: more replicas when fewer than this needs
    hold_rps: float  # to keep: fewer replicas only when they serve this (two horizons)
    growth: float
    labels: int  # labels the quantile was read from (0: COLD_GROWTH)
    horizon_s: float
    coverage: float

    @property
    def why(self) -> str:
        if self.labels == 0:
            return f"{self.growth:.2f}x (no horizon of {self.horizon_s:.0f} s seen yet)"
        return (
            f"q{self.coverage * 100:g} of the growth over {self.horizon_s:.0f} s "
            f"({self.growth:.2f}x, from {self.labels} ticks at this load)"
        )


def _level(x: float) -> float:
    return math.log(max(0.0, x) + UNIT_RPS)


def learn(mem: Memory, t: float, load: float, horizon_s: float) -> Memory:
    """Add this tick's load; label every tick whose two horizons have now passed."""
    loads = (*mem.loads, (t, load))
    labels = list(mem.labels)
    labelled_to = mem.labelled_to_s
    for ts, x in loads:
        if ts <= labelled_to or ts + 2 * horizon_s > t:
            continue
        one = max((y for tj, y in loads if ts < tj <= ts + horizon_s), default=x)
        two = max((y for tj, y in loads if ts < tj <= ts + 2 * horizon_s), default=x)
        base = x + UNIT_RPS
        labels.append((ts, x, (one + UNIT_RPS) / base, (two + UNIT_RPS) / base))
        labelled_to = ts
    return Memory(
        loads=tuple((ts, x) for ts, x in loads if ts >= labelled_to),
        labels=tuple(lab for lab in labels if lab[0] > t - EVIDENCE_S),
        labelled_to_s=labelled_to,
    )


def _quantile(values: list[float], q: float) -> float:
    """Nearest rank: with few values, the largest (no tail is guessed below it)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def size(mem: Memory, load: float, horizon_s: float, coverage: float) -> Sizing:
    """The loads to size for and to keep replicas for now (never below the load now).

    Replicas asked for now serve from one horizon on; a scale-down counts as undone if a
    scale-up follows within two pod starts, so what is kept must cover two horizons, at
    half the risk."""
    if not mem.labels:
        cold = load * COLD_GROWTH
        return Sizing(cold, cold, COLD_GROWTH, 0, horizon_s, coverage)
    # The ticks at the load now; at a load never seen, those at the nearest load seen.
    width = math.log(LEVEL_WIDTH)
    here = _level(load)
    nearest = _level(min(mem.labels, key=lambda lab: abs(_level(lab[1]) - here))[1])
    at = here if abs(nearest - here) <= width else nearest
    pool = [lab for lab in mem.labels if abs(_level(lab[1]) - at) <= width]
    one = max(1.0, _quantile([lab[2] for lab in pool], coverage))
    # Giving a replica back must be surer than asking for one (half the risk), or a load at
    # the edge of a count would take it and give it back by turns.
    two = max(one, _quantile([lab[3] for lab in pool], (1.0 + coverage) / 2))
    # ... from the busiest load of the last two horizons (the ticks still unlabelled), not
    # only the load now: the count asked for then is given back only once that has passed.
    busiest = max([load, *(x for _, x in mem.loads)])
    return Sizing(
        (load + UNIT_RPS) * one - UNIT_RPS,
        (busiest + UNIT_RPS) * two - UNIT_RPS,
        one,
        len(pool),
        horizon_s,
        coverage,
    )
