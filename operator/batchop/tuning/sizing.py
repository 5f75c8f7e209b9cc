"""The load replicas are sized for: a quantile of the busiest load over the next horizon
(a pod start plus one tick), learned online from the model's own history. Pure.

Why one model and not rules per shape: what a replica asked for now must cover is the load
until a replica asked for later could be ready, and how much load grows over that horizon
is a property of the traffic that the traffic itself shows. Once a tick's horizon has passed
its label is known: growth = the busiest load of the horizon / the load at the tick. The
replicas are sized for the `coverage` quantile of those growths times the load now, and the
same size decides both directions: a scale-down happens only when the lower count covers
that quantile too, so no scale-down is undone by the growth it already expected.

Growth depends on where the load is: a quiet spell between recurring bursts grows by the
burst, the burst itself does not, and the ticks on the way up to it grow by what is left;
a day passes each load twice, rising and falling, and only the rising side grows. So each
tick is placed by its load and its trend (the load over the load one horizon before), and
the quantile is read from the ticks alike in both (each within a factor LEVEL_WIDTH), or,
where no tick was ever alike, from those alike to the nearest tick seen. With few of them
the nearest rank is their largest: no tail is guessed below what was seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EVIDENCE_S = 3600.0  # labels older than this are forgotten: an hour of the model's traffic
# Before any label: size for this much more than the load now (as `batchop plan` sizes a
# steady rate).
COLD_GROWTH = 1.1
UNIT_RPS = 1.0  # growth is of load + this: a load that falls to nothing still has a scale
LEVEL_WIDTH = 1.15  # ticks whose load and trend were within this factor of now's are alike


@dataclass(frozen=True)
class Memory:
    """What the sizing model has learned: kept in TuningState, persisted by the operator."""

    # (time, load, trend) of the ticks still waiting on their label, and the last labelled.
    loads: tuple[tuple[float, float, float], ...] = ()
    # (time, load, trend, growth over one horizon, growth over two) of ticks whose two
    # horizons have passed, oldest first.
    labels: tuple[tuple[float, float, float, float, float], ...] = ()
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


def _trend(mem: Memory, t: float, load: float, horizon_s: float) -> float:
    """The load now over the load one horizon before (the tick nearest then), in _level's
    units; 0 (flat) with no tick that old."""
    past = [(ts, x) for ts, x, _ in mem.loads if ts <= t - horizon_s]
    if not past:
        return 0.0
    return _level(load) - _level(past[-1][1])


def learn(mem: Memory, t: float, load: float, horizon_s: float) -> Memory:
    """Add this tick's load; label every tick whose two horizons have now passed."""
    loads = (*mem.loads, (t, load, _trend(mem, t, load, horizon_s)))
    labels = list(mem.labels)
    labelled_to = mem.labelled_to_s
    for ts, x, trend in loads:
        if ts <= labelled_to or ts + 2 * horizon_s > t:
            continue
        one = max((y for tj, y, _ in loads if ts < tj <= ts + horizon_s), default=x)
        two = max((y for tj, y, _ in loads if ts < tj <= ts + 2 * horizon_s), default=x)
        base = x + UNIT_RPS
        labels.append((ts, x, trend, (one + UNIT_RPS) / base, (two + UNIT_RPS) / base))
        labelled_to = ts
    # Kept: the unlabelled ticks, and the horizon before them (the trend's reference).
    return Memory(
        loads=tuple(tick for tick in loads if tick[0] >= labelled_to - horizon_s),
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
    # The ticks alike to now in load and trend; where none is, those alike to the nearest.
    width = math.log(LEVEL_WIDTH)
    now_s = mem.loads[-1][0] if mem.loads else 0.0
    here = (_level(load), _trend(mem, now_s, load, horizon_s))

    def apart(a: tuple[float, float], lab: tuple[float, ...]) -> float:
        return max(abs(_level(lab[1]) - a[0]), abs(lab[2] - a[1]))

    def alike(a: tuple[float, float]) -> list[tuple[float, ...]]:
        nearest = min(mem.labels, key=lambda lab: apart(a, lab))
        at = a if apart(a, nearest) <= width else (_level(nearest[1]), nearest[2])
        return [lab for lab in mem.labels if apart(at, lab) <= width]

    pool = alike(here)
    one = max(1.0, _quantile([lab[3] for lab in pool], coverage))
    # Giving a replica back must be surer than asking for one (half the risk), or a load at
    # the edge of a count would take it and give it back by turns.
    two = max(one, _quantile([lab[4] for lab in pool], (1.0 + coverage) / 2))
    # ... from the busiest load of the last two horizons (the ticks still unlabelled), not
    # only the load now: the count asked for then is given back only once that has passed.
    busiest = max([load, *(x for ts, x, _ in mem.loads if ts >= mem.labelled_to_s)])
    # What is kept serves what the sizing would ask for at the load those two horizons may
    # bring: that load times the growth of the ticks alike to it (at the trend of the rise
    # the two horizons may bring, or now's), else a load at the edge of a count gives a
    # replica back and asks for it again a tick later. Not times now's growth: a burst's
    # own ticks do not grow by the burst again.
    ahead = (busiest + UNIT_RPS) * two - UNIT_RPS
    then = alike((_level(ahead), max(here[1], math.log(two))))
    return Sizing(
        (load + UNIT_RPS) * one - UNIT_RPS,
        (ahead + UNIT_RPS) * max(1.0, _quantile([lab[3] for lab in then], coverage)) - UNIT_RPS,
        one,
        len(pool),
        horizon_s,
        coverage,
    )
