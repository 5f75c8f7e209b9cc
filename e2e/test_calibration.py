"""Calibration: real Triton vs batchop.sim, same settings, on two models: the synthetic model
(it sleeps the cpu-demo profile's time) and the real compute model (the ONNX MLP, whose
profile is measured first as `batchop profile` does; bench/calibration_real_model.py writes
its committed figures, docs/triton.md reports them).

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
- The real model's profile is medians of executions timed one at a time; under load the
  python backend and the load generator share the two cores with it, so its executions run a
  little longer (about 0.6 ms at batch 1, measured), like the sleep model's overhead: the
  same bounds hold, with the profile measured instead of written.
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
from batchop_dev.local.triton.calibrate import (
    CalibrationPoint,
    measure_quiet,
    measure_sync,
    measured_profile,
    starved,
)
from batchop_dev.local.triton.mlp import mlp_payload, write_mlp_repository

pytestmark = pytest.mark.e2e

PROFILE = Path(__file__).resolve().parents[1] / "examples" / "profiles" / "cpu-demo.yaml"
MODEL = "calib"
POINTS = [(50.0, 0), (100.0, 8000), (200.0, 2000)]
# The MLP runs a batch of 1 in ~1.4 ms: higher rates, within the generator's 500 req/s.
MLP_POINTS = [(50.0, 0), (150.0, 8000), (400.0, 2000)]
MLP_MAX_BATCH = 32


def _usable(p: CalibrationPoint, profile: Profile) -> None:
    why = starved(p, profile)
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
        results = [measure_quiet(triton, MODEL, profile, rps, delay) for rps, delay in POINTS]
    print("\ncalibration (real vs sim):")
    for p in results:
        print(json.dumps(p.as_dict()))
    yield results


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Profile, list]]:
    """The real model profiled, then measured at MLP_POINTS against that profile."""
    repo = tmp_path_factory.mktemp("mlp-repo")
    write_mlp_repository(repo, MODEL, max_batch_size=MLP_MAX_BATCH)
    payload = mlp_payload()
    with TritonProcess(repo, address="127.0.78.2", load_models=[MODEL]) as triton:
        profile = measured_profile(triton.url, MODEL)
        results = [
            measure_quiet(triton, MODEL, profile, rps, delay, payload) for rps, delay in MLP_POINTS
        ]
    print(f"\ncalibration on the real model, profile {profile.batch_latency_ms}:")
    for p in results:
        print(json.dumps(p.as_dict()))
    yield profile, results


@pytest.mark.parametrize("index", range(len(POINTS)), ids=[f"{r:g}rps-{d}us" for r, d in POINTS])
def test_real_triton_matches_simulator(
    points: list[CalibrationPoint], index: int, profile: Profile
) -> None:
    _check(points[index], profile)


@pytest.mark.parametrize(
    "index", range(len(MLP_POINTS)), ids=[f"mlp-{r:g}rps-{d}us" for r, d in MLP_POINTS]
)
def test_real_model_matches_simulator_with_its_measured_profile(
    mlp: tuple[Profile, list[CalibrationPoint]], index: int
) -> None:
    profile, points = mlp
    # the measured curve shows the batching gain the demo is about
    per_one = profile.latency_ms(1)
    assert profile.latency_ms(MLP_MAX_BATCH) / MLP_MAX_BATCH <= per_one / 4, profile
    _check(points[index], profile)


def _check(p: CalibrationPoint, profile: Profile) -> None:
    _usable(p, profile)
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
    _usable(light, load_profile(PROFILE))
    _usable(delayed, load_profile(PROFILE))
    assert delayed.sim_avg_batch > light.sim_avg_batch
    assert delayed.real_avg_batch > light.real_avg_batch + 0.3
    assert delayed.real_p50_ms > light.real_p50_ms + 0.5 * delayed.delay_us / 1000
