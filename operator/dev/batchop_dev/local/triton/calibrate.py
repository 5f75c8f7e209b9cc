"""Real Triton vs the simulator at the same settings: one point = (rate, delay), open loop.

The real side is a tritonserver running the synthetic model under `batchop load`'s Poisson
generator: client-side p50/p99 from the generator, average batch and server-side mean latency
from Triton's own counters. The predicted side is batchop.sim with the same profile, rate,
delay and one replica (a static policy), over a longer run so its figures are not noisy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from batchop.sim.profile import Profile
from batchop.sim.trace import constant_trace
from batchop_dev.local.load import StaticTargets, run_load
from batchop_dev.local.triton.metrics import scrape
from batchop_dev.local.triton.process import TritonProcess


@dataclass(frozen=True)
class CalibrationPoint:
    rps: float
    delay_us: int
    requests: int
    failed: int
    real_p50_ms: float
    real_p99_ms: float
    real_avg_batch: float
    real_server_mean_ms: float  # Triton's request_duration / success (queue + compute)
    real_compute_ms: float  # per execution, as Triton measures it around execute()
    send_lag_p99_ms: float  # how late the generator sent: CPU contention on this machine
    sim_p50_ms: float
    sim_p99_ms: float
    sim_avg_batch: float
    sim_mean_ms: float

    def as_dict(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def predict(
    profile: Profile, rps: float, delay_us: int, seconds: float = 120.0, seed: int = 0
) -> dict[str, Any]:
    """The simulator's summary for one replica at a fixed rate and delay."""
    from batchop.sim.baselines import make_policy
    from batchop.sim.engine import SimConfig, simulate
    from batchop.sim.report import summarize
    from batchop.tuning.types import TuningSpec

    trace = constant_trace(rps, seconds)
    spec = TuningSpec(
        slo_ms=1000.0,
        max_batch_size=profile.max_batch_size,
        start_delay_us=delay_us,
        start_replicas=1,
        min_replicas=1,
        max_replicas=1,
        tune_delay=False,
        tune_replicas=False,
    )
    policy = make_policy("static", profile, trace, spec, delay_us, 1)
    return summarize(simulate(profile, trace, spec, policy, SimConfig(seed=seed)), 1000.0)


async def measure(
    triton: TritonProcess,
    model: str,
    profile: Profile,
    rps: float,
    delay_us: int,
    seconds: float = 8.0,
    seed: int = 0,
    payload: Any = None,
) -> CalibrationPoint:
    """Set the delay live, run the load (`payload`: batchop_dev.local.load.Payload, by
    default the sleep model's), and pair the result with the simulator's."""
    from batchop.act.triton_reload import set_queue_delay

    await set_queue_delay(triton.url, model, delay_us)
    before = scrape(triton.metrics_url, model)
    report = await run_load(
        constant_trace(rps, seconds),
        StaticTargets([triton.url], model),
        seed=seed,
        keep_records=False,
        payload=payload,
    )
    gained = scrape(triton.metrics_url, model) - before
    sim = predict(profile, rps, delay_us, seed=seed)
    return CalibrationPoint(
        rps=rps,
        delay_us=delay_us,
        requests=report["requests"],
        failed=report["failed"],
        real_p50_ms=report["p50_ms"] or 0.0,
        real_p99_ms=report["p99_ms"] or 0.0,
        real_avg_batch=gained.avg_batch,
        real_server_mean_ms=gained.per_request_ms("nv_inference_request_duration_us"),
        real_compute_ms=gained.per_request_ms("nv_inference_compute_infer_duration_us"),
        send_lag_p99_ms=report["send_lag_p99_ms"],
        sim_p50_ms=sim["p50_ms"],
        sim_p99_ms=sim["p99_ms"],
        sim_avg_batch=sim["avg_batch_size"],
        sim_mean_ms=sim["mean_ms"],
    )


def measure_sync(*args: Any, **kwargs: Any) -> CalibrationPoint:
    return asyncio.run(measure(*args, **kwargs))


def measured_profile(url: str, model: str, repeats: int = 5) -> Profile:
    """The batch curve of `model` as `batchop profile` measures it (medians of Triton's own
    compute time per batch size, made non-decreasing), as a simulator profile."""
    from batchop_dev import profiling

    m = profiling.measure(url, model, repeats=repeats)
    return Profile(name=model, max_batch_size=m.max_batch_size, batch_latency_ms=m.curve_ms)


# Beyond these a measurement shows CPU starvation, not Triton (see measure_quiet).
MAX_SEND_LAG_MS = 40.0
MAX_COMPUTE_OVERSHOOT_MS = 2.5


def starved(p: CalibrationPoint, profile: Profile) -> str | None:
    """Why this measurement reflects a CPU-starved machine, or None if it does not."""
    overshoot = p.real_compute_ms - profile.latency_ms(p.real_avg_batch)
    if p.send_lag_p99_ms > MAX_SEND_LAG_MS:
        return f"load generator's send lag p99 {p.send_lag_p99_ms:.0f} ms"
    if overshoot > MAX_COMPUTE_OVERSHOOT_MS:
        return f"model executions overran the profile by {overshoot:.1f} ms on average"
    return None


def measure_quiet(
    triton: TritonProcess,
    model: str,
    profile: Profile,
    rps: float,
    delay_us: int,
    payload: Any = None,
    tries: int = 3,
    say: Callable[[str], None] = print,
) -> CalibrationPoint:
    """Measure a point (8 s, seed 1); again, up to `tries` times, while the machine is
    starved of CPU.

    Other processes on the two cores can delay every wake-up by 100s of ms; the generator's
    own send lag and the model's overrun of its profile (normally ~1 ms of python-backend
    overhead) measure that, on the client and on the server. A calibration taken then says
    nothing about Triton, so it is repeated; the last is returned either way (`starved`
    says whether to use it).
    """
    point = None
    for _ in range(tries):
        point = measure_sync(
            triton, model, profile, rps, delay_us, seconds=8.0, seed=1, payload=payload
        )
        why = starved(point, profile)
        if why is None:
            return point
        say(f"machine busy ({why}): measuring again")
    assert point is not None
    return point
