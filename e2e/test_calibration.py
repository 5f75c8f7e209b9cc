"""Calibration: real Triton (synthetic model, cpu-demo profile) vs batchop.sim, same settings.

Three open-loop points of 8 s each: a light load without delay, a moderate load with a long
delay (the delay buys batching), and a heavier load with a short delay. Tolerances, and why:

- The real server can only be slower than the model of it: the synthetic model sleeps exactly
  the profile's time, and everything real (python-backend IPC, HTTP, the client's event loop)
  adds. So real p50 >= simulated p50 - 0.5 ms (timer slack).
- Overheads the simulator leaves out, measured here: ~1 ms per execution in the python
  backend (Triton's compute time for a batch of 1 is ~5 ms vs the profile's 4 ms), ~1-2 ms of
  HTTP and asyncio client per request, more when other processes share the two cores. So
  real p50 <= simulated p50 * 1.5 + 6 ms.
- A point is measured again (up to 3 times) when the generator's own send lag p99 exceeds
  40 ms or Triton's compute time overruns the profile by more than 2.5 ms: the cores were
  starved by other processes, which says nothing about Triton; if it never calms down the
  point is skipped with the measurement as the reason.
- p99 is the tail of scheduling noise on two shared cores; it is bounded loosely
  (4 x simulated + 40 ms + 3 x the generator's own p99 send lag, which measures how much CPU
  contention this run saw), still far below what an unbatched or mis-timed server gives at
  these rates (at 200 req/s without batching a 4-5 ms model queues without bound).
- Average batch: each real cycle is longer than the profile's execution time (python-backend
  IPC, Triton's scheduler thread, both slower when the cores are shared), so more requests
  queue per cycle and the real batch runs larger: measured 1.69-2.67 against a simulated 1.49
  at 200 req/s. So real >= sim - (0.3 + 30 % of sim) and real <= 2 x sim + 0.5.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchop.sim.profile import Profile, load_profile
from batchop_dev.local.triton import TritonProcess, write_model_repository
from batchop_dev.local.triton.calibrate import CalibrationPoint, measure_sync

pytestmark = pytest.mark.e2e

PROFILE = Path(__file__).resolve().parents[1] / "examples" / "profiles" / "cpu-demo.yaml"
MODEL = "calib"
POINTS = [(50.0, 0), (100.0, 8000), (200.0, 2000)]
# Beyond these the run measured CPU starvation, not Triton (see _measure_quiet).
MAX_SEND_LAG_MS = 40.0
MAX_COMPUTE_OVERSHOOT_MS = 2.5


def _starved(p: CalibrationPoint) -> str | None:
    """Why this measurement reflects a CPU-starved machine, or None if it does not."""
    overshoot = p.real_compute_ms - load_profile(PROFILE).latency_ms(p.real_avg_batch)
    if p.send_lag_p99_ms > MAX_SEND_LAG_MS:
        return f"load generator's send lag p99 {p.send_lag_p99_ms:.0f} ms"
    if overshoot > MAX_COMPUTE_OVERSHOOT_MS:
        return f"model executions overran the profile by {overshoot:.1f} ms on average"
    return None


def _usable(p: CalibrationPoint) -> None:
    why = _starved(p)
    if why:
        pytest.skip(
            f"{p.rps:g} req/s, {p.delay_us} us: the machine stayed too busy to "
            f"calibrate in 3 tries ({why})"
        )


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_profile(PROFILE)


@pytest.fixture(scope="module")
def points(profile: Profile, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list]:
    repo = tmp_path_factory.mktemp("calib-repo")
    write_model_repository(repo, MODEL, profile)
    with TritonProcess(repo, address="127.0.78.1", load_models=[MODEL]) as triton:
        measure_sync(triton, MODEL, profile, 50.0, 0, seconds=1.0)  # warm up the model
        results = [_measure_quiet(triton, profile, rps, delay) for rps, delay in POINTS]
    print("\ncalibration (real vs sim):")
    for p in results:
        print(json.dumps(p.as_dict()))
    yield results


def _measure_quiet(
    triton: TritonProcess, profile: Profile, rps: float, delay: int
) -> CalibrationPoint:
    """Measure a point; measure again (up to 3 times) while the machine is starved of CPU.

    Other processes on the two cores can delay every wake-up by 100s of ms; the generator's
    own send lag and the model's overrun of its profile (normally ~1 ms of python-backend
    overhead) measure that, on the client and on the server. A calibration taken then says
    nothing about Triton, so such a run is repeated, and the point is skipped (saying why)
    if the machine never calms down.
    """
    for _ in range(3):
        point = measure_sync(triton, MODEL, profile, rps, delay, seconds=8.0, seed=1)
        why = _starved(point)
        if why is None:
            return point
        print(f"machine busy ({why}): measuring again")
    return point


@pytest.mark.parametrize("index", range(len(POINTS)), ids=[f"{r:g}rps-{d}us" for r, d in POINTS])
def test_real_triton_matches_simulator(
    points: list[CalibrationPoint], index: int, profile: Profile
) -> None:
    p = points[index]
    _usable(p)
    assert p.failed == 0
    assert p.requests > 0.8 * p.rps * 8
    assert p.real_p50_ms >= p.sim_p50_ms - 0.5, p
    assert p.real_p50_ms <= 1.5 * p.sim_p50_ms + 6.0, p
    assert p.real_p99_ms <= 4.0 * p.sim_p99_ms + 40.0 + 3.0 * p.send_lag_p99_ms, p
    assert p.real_avg_batch >= p.sim_avg_batch - (0.3 + 0.3 * p.sim_avg_batch), p
    assert p.real_avg_batch <= 2.0 * p.sim_avg_batch + 0.5, p
    # the model never runs faster than its profile
    assert p.real_compute_ms >= profile.latency_ms(1) - 0.05, p


def test_delay_buys_batching_as_simulated(points: list[CalibrationPoint]) -> None:
    light, delayed, _ = points
    _usable(light)
    _usable(delayed)
    assert delayed.sim_avg_batch > light.sim_avg_batch
    assert delayed.real_avg_batch > light.real_avg_batch + 0.3
    assert delayed.real_p50_ms > light.real_p50_ms + 0.5 * delayed.delay_us / 1000
