"""What the policy learned survives a restart: status.learned round-trips, and an
unreadable one leaves the model cold instead of stopping it."""

from __future__ import annotations

import json
import math

import pytest

from batchop.controller.status import status_differs
from batchop.tuning import sizing
from batchop.tuning.persist import learned, restore
from batchop.tuning.policy import decide
from batchop.tuning.types import Observation, TuningSpec, TuningState

SPEC = TuningSpec(slo_ms=50, max_batch_size=32, prior_batch_latency_ms=((1, 4.0), (32, 12.0)))


def trained(ticks: int = 40) -> TuningState:
    """A state after `ticks` of a load that doubles every fourth tick."""
    state = TuningState()
    for i in range(ticks):
        rps = 2000.0 if i % 4 == 3 else 1000.0
        obs = Observation(
            time_s=1_000_000.0 + 15.0 * i, rps=rps, avg_batch=4.0, queue_ms=1.0,
            compute_ms=5.0, p99_ms=10.0, pending=0.0, replicas=2, ready_replicas=2,
            peak_rps=rps,
        )  # fmt: skip
        state = decide(obs, SPEC, state).state
    return state


def test_what_was_learned_round_trips_through_json() -> None:
    state = trained()
    assert state.sizing.labels and state.curve
    now = 1_000_000.0 + 15.0 * 40
    back = restore(json.loads(json.dumps(learned(state, now))), now)
    assert len(back.sizing.labels) == len(state.sizing.labels)
    for a, b in zip(back.sizing.labels, state.sizing.labels, strict=True):
        assert a == pytest.approx(b, rel=1e-3, abs=0.1)
    assert back.p99_correction == pytest.approx(state.p99_correction, abs=1e-4)
    assert len(back.curve) == len(state.curve)
    # The restored sizing reads the same quantile as the one it came from.
    for load in (1000.0, 2000.0):
        old = sizing.size(state.sizing, load, 45.0, 0.95)
        new = sizing.size(back.sizing, load, 45.0, 0.95)
        assert new.rps == pytest.approx(old.rps, rel=1e-3)


def test_a_later_restart_forgets_what_is_older_than_the_evidence_window() -> None:
    state = trained()
    now = 1_000_000.0 + 15.0 * 40
    later = restore(learned(state, now), now + sizing.EVIDENCE_S)
    assert later.sizing.labels == ()
    assert not math.isfinite(later.sizing.labelled_to_s)


@pytest.mark.parametrize(
    "data",
    [
        None,
        "learned",
        {"curve": "x", "growth": 3, "p99Correction": "high"},
        {"growth": [[1, 2], ["a", 1, 0, 1, 1], [10, -5, 0, 1, 1], [10, 100, 0, 2, 1]]},
        # An older release's rows (no trend): the sizing cannot place them.
        {"growth": [[4000, 100, 1, 1.2], [4015, 100, 1, 1.2]]},
        {"curve": [[0, 1, 1], [4, float("nan"), 1]], "p99Correction": -1, "startupSeconds": -3},
    ],
)
def test_an_unreadable_record_leaves_the_model_cold(data: object) -> None:
    state = restore(data, 5000.0)  # type: ignore[arg-type]
    assert state.sizing.labels == () and state.curve == ()
    assert state.p99_correction == 1.0 and state.startup_s is None


def test_the_record_rides_on_a_status_write_but_never_causes_one() -> None:
    current = {"metrics": {"requestsPerSecond": 1.0}, "learned": {"growth": []}}
    assert not status_differs(current, {"metrics": {"requestsPerSecond": 1.0},
                                        "learned": {"growth": [[1, 2, 0, 3, 4]]}})  # fmt: skip
    assert status_differs(current, {"metrics": {"requestsPerSecond": 2.0}, "learned": {}})
