"""A seeded family of cases that nobody tunes by hand: traffic shapes x batch curves x pod
starts, every parameter drawn from the seed.

Why: a policy tuned on a dozen shared cases fits those cases. Here a case is a pure function
of its seed, so a policy is tuned on some seeds (`TUNING_SEEDS`) and reported on others it
never saw (`HELD_OUT_SEEDS`). The shapes rotate with the seed, so both sets hold every shape.

Each case is scaled so that its busiest stretch needs a drawn number of replicas: the rates
stay near 1,000 req/s whatever the profile (the batch-1 latency is drawn to fit), which keeps
a case cheap to simulate while the batch curve's shape, the SLO and the pod start vary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchop.sim.profile import Profile
from batchop.sim.trace import Trace
from batchop.tuning.model import capacity_at_slo

SHAPES = ("diurnal", "ramp", "flash-crowd", "recurring-bursts", "modulated", "azure-code")
PASS_S = 1800.0  # one pass of a case's trace; the bench loops it once (see sim.score)
STEP_S = 5.0  # the generated traces' resolution
TUNING_SEEDS = tuple(range(0, 24))
HELD_OUT_SEEDS = tuple(range(100, 124))
MAX_REPLICAS = 16


@dataclass(frozen=True)
class Case:
    seed: int
    shape: str
    trace: Trace  # one pass
    profile: Profile
    slo_ms: float
    max_replicas: int
    peak_replicas: int  # what the busiest stretch needs by the latency model, as drawn
    params: tuple[tuple[str, float], ...]  # the drawn parameters, for the report

    @property
    def name(self) -> str:
        return f"{self.seed:03d}-{self.shape}"

    def looped(self) -> Trace:
        """The pass twice over: the first warms the policy up, the second is scored."""
        secs = list(self.trace.seconds[:-1])
        rps = list(self.trace.rps[:-1])
        end = self.trace.end
        return Trace(
            seconds=(*secs, *(s + end for s in secs), 2 * end),
            rps=(*rps, *rps, rps[-1]),
            name=self.name,
        )


def _noise(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    """Multiplicative noise, smoothed over a few steps as real traffic's is."""
    raw = rng.normal(0.0, sigma, n)
    smooth = np.convolve(raw, np.ones(3) / math.sqrt(3), mode="same")
    return np.exp(smooth)


def _shape(rng: np.random.Generator, shape: str, azure: Trace | None) -> tuple[np.ndarray, dict]:
    """Relative rates per STEP_S over one pass (the busiest stretch near 1), and the draws."""
    n = int(PASS_S / STEP_S)
    t = np.arange(n) * STEP_S
    p: dict[str, float] = {}
    if shape == "diurnal":
        p["trough"] = rng.uniform(0.15, 0.5)
        p["phase"] = rng.uniform(0, 2 * math.pi)
        p["noise"] = rng.uniform(0.02, 0.12)
        day = 0.5 - 0.5 * np.cos(2 * math.pi * t / PASS_S + p["phase"])
        rel = (p["trough"] + (1 - p["trough"]) * day) * _noise(rng, n, p["noise"])
    elif shape == "ramp":
        p["jump"] = rng.uniform(2, 6)
        p["start_s"] = rng.uniform(60, 600)
        p["rise_s"] = rng.uniform(120, 900)
        p["hold_s"] = rng.uniform(120, PASS_S - p["start_s"] - p["rise_s"])
        p["fall_s"] = rng.uniform(60, 600)
        base = 1 / p["jump"]
        up = np.clip((t - p["start_s"]) / p["rise_s"], 0, 1)
        down = np.clip((t - p["start_s"] - p["rise_s"] - p["hold_s"]) / p["fall_s"], 0, 1)
        rel = (base + (1 - base) * up * (1 - down)) * _noise(rng, n, 0.03)
    elif shape == "flash-crowd":
        p["jump"] = rng.uniform(2, 8)
        p["hold_s"] = rng.uniform(120, 1200)
        p["start_s"] = rng.uniform(120, PASS_S - p["hold_s"] - 60)
        inside = (t >= p["start_s"]) & (t < p["start_s"] + p["hold_s"])
        rel = np.where(inside, 1.0, 1 / p["jump"]) * _noise(rng, n, 0.03)
    elif shape == "recurring-bursts":
        p["jump"] = rng.uniform(2, 6)
        p["period_s"] = rng.uniform(120, 600)
        p["width_s"] = rng.uniform(10, min(90, p["period_s"] / 2))
        p["phase_s"] = rng.uniform(0, p["period_s"])
        inside = ((t + p["phase_s"]) % p["period_s"]) < p["width_s"]
        rel = np.where(inside, 1.0, 1 / p["jump"]) * _noise(rng, n, 0.03)
    elif shape == "modulated":
        # Rates that jump between levels at Poisson times (a Markov-modulated process).
        p["dwell_s"] = rng.uniform(60, 300)
        p["spread"] = rng.uniform(0.3, 0.7)
        rel = np.empty(n)
        i = 0
        while i < n:
            steps = max(1, int(rng.exponential(p["dwell_s"]) / STEP_S))
            rel[i : i + steps] = math.exp(rng.normal(0.0, p["spread"]))
            i += steps
        rel *= _noise(rng, n, 0.03)
    elif shape == "azure-code":
        if azure is None:
            raise ValueError("the azure-code shape needs the shared azure-code trace")
        p["offset_s"] = float(rng.integers(0, int(azure.end - PASS_S)))
        secs = np.arange(int(PASS_S)) + p["offset_s"]
        per_s = np.array([azure.rate_at(float(s)) for s in secs])
        # The busiest 10 s is the scale's reference: the second-level spikes are the shape.
        busiest = np.convolve(per_s, np.ones(10) / 10, mode="valid").max()
        return per_s / max(busiest, 1e-9), p
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return rel / np.quantile(rel, 0.995), p


def _profile(rng: np.random.Generator, seed: int) -> tuple[Profile, float, dict]:
    """A batch curve from flat (a fixed cost per call) to steep (a cost per request), in
    units of its batch-1 latency, with an SLO of 1-3x its largest batch, and a pod start."""
    p: dict[str, float] = {}
    max_batch = int(rng.choice([16, 32, 64]))
    p["max_batch"] = max_batch
    p["per_request_share"] = 10 ** rng.uniform(math.log10(0.03), math.log10(0.8))
    p["slo_x_max_batch"] = rng.uniform(1.0, 3.0)
    p["startup_s"] = rng.uniform(5, 120)
    share = p["per_request_share"]
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64) if b <= max_batch]
    points = tuple((b, (1 - share) + share * b) for b in sizes)
    unit = Profile(
        name=f"family-{seed:03d}",
        max_batch_size=max_batch,
        batch_latency_ms=points,
        startup_seconds=p["startup_s"],
    )
    return unit, p["slo_x_max_batch"] * unit.latency_ms(max_batch), p


def case(seed: int, azure: Trace | None = None) -> Case:
    """The case of `seed`; `azure` is the shared azure-code trace (for that shape)."""
    rng = np.random.default_rng(seed)
    shape = SHAPES[seed % len(SHAPES)]
    rel, p_shape = _shape(rng, shape, azure)
    unit, unit_slo, p_prof = _profile(rng, seed)
    peak_rps = rng.uniform(600, 1500)
    need = int(rng.integers(4, 11))
    # In units of the batch-1 latency everything scales: capacity at the SLO is 1/latency.
    unit_capacity = capacity_at_slo(unit_slo, unit.max_batch_size, unit.latency_ms)
    ms = unit_capacity * need / peak_rps  # the batch-1 latency that makes `need` right
    profile = Profile(
        name=unit.name,
        max_batch_size=unit.max_batch_size,
        batch_latency_ms=tuple((b, round(v * ms, 4)) for b, v in unit.batch_latency_ms),
        startup_seconds=round(unit.startup_seconds, 1),
    )
    step = 1.0 if shape == "azure-code" else STEP_S
    rates = np.round(rel * peak_rps, 1)
    seconds = tuple(float(i * step) for i in range(len(rates))) + (PASS_S,)
    trace = Trace(seconds=seconds, rps=(*map(float, rates), float(rates[-1])), name=shape)
    params = {**p_shape, **p_prof, "peak_rps": peak_rps, "batch1_ms": ms}
    return Case(
        seed=seed,
        shape=shape,
        trace=trace,
        profile=profile,
        slo_ms=round(unit_slo * ms, 3),
        max_replicas=MAX_REPLICAS,
        peak_replicas=need,
        params=tuple(sorted((k, float(v)) for k, v in params.items())),
    )
