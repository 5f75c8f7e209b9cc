"""Status and conditions computed from the Deployment and pods (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchop.controller.status import (
    compute_conditions,
    compute_status,
    format_time,
    merge_conditions,
    selector_string,
    status_differs,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SELECTOR = {"batchop.io/batchedmodel": "resnet"}


def bm(replicas: int = 2, gpus: int = 1, generation: int = 3, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "resnet", "namespace": "ml", "generation": generation},
        "spec": {"scaling": {"replicas": replicas}, "server": {"gpus": gpus}},
        "status": status,
    }


def deployment(
    want: int, ready: int, updated: int | None = None, current: int | None = None, **extra: Any
) -> dict[str, Any]:
    status = {
        "replicas": want if current is None else current,
        "readyReplicas": ready,
        "updatedReplicas": want if updated is None else updated,
        "observedGeneration": extra.pop("seen", 1),
        **extra,
    }
    return {"metadata": {"generation": 1}, "spec": {"replicas": want}, "status": status}


def pod(name: str, phase: str = "Running", gpus: int = 1, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
        "status": {"phase": phase, **status},
    }


def unschedulable(name: str, gpus: int = 1, message: str | None = None) -> dict[str, Any]:
    message = message or "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }
    return pod(name, "Pending", gpus, conditions=[cond])


def stored(status: dict[str, Any]) -> dict[str, Any]:
    """The BatchedModel as read back after `status` was written."""
    return {**bm(2), "status": status}


def by_type(conditions: list[Any]) -> dict[str, Any]:
    return {c.type if hasattr(c, "type") else c["type"]: c for c in conditions}


def test_all_ready_is_ready_and_stable() -> None:
    c = by_type(compute_conditions(bm(2), deployment(2, 2), [pod("a"), pod("b")]))
    assert (c["Ready"].status, c["Ready"].reason) == ("True", "AllReplicasReady")
    assert "2/2" in c["Ready"].message
    assert c["Progressing"].status == "False"
    assert c["Degraded"].status == "False"
    assert c["CapacityLimited"].status == "False"


def test_no_deployment_yet_is_progressing_not_ready() -> None:
    c = by_type(compute_conditions(bm(2), None, []))
    assert (c["Ready"].status, c["Ready"].reason) == ("False", "DeploymentMissing")
    assert (c["Progressing"].status, c["Progressing"].reason) == ("True", "Creating")


@pytest.mark.parametrize(
    ("dep", "reason"),
    [
        (deployment(3, 1), "WaitingForReplicas"),
        (deployment(3, 3, updated=1), "RollingOut"),
        (deployment(2, 2, current=4), "ScalingDown"),
        ({**deployment(2, 2), "metadata": {"generation": 5}}, "RolloutPending"),
    ],
)
def test_progressing_reasons(dep: dict[str, Any], reason: str) -> None:
    c = by_type(compute_conditions(bm(), dep, []))
    assert (c["Progressing"].status, c["Progressing"].reason) == ("True", reason)


def test_nothing_progresses_at_zero_replicas_with_none_running() -> None:
    # A new Deployment at 0 replicas, not yet seen by its controller: nothing to roll out,
    # and the controller's first status write changes nothing (no second status write).
    unseen = {"metadata": {"generation": 1}, "spec": {"replicas": 0}, "status": {}}
    seen = deployment(0, 0)
    for dep in (unseen, seen):
        c = by_type(compute_conditions(bm(0), dep, []))
        assert (c["Progressing"].status, c["Progressing"].reason) == ("False", "ScaledToZero")
        assert (c["Ready"].status, c["Ready"].reason) == ("True", "ScaledToZero")
    # Scaled to 0 with replicas still to stop: the scale-down is under way.
    down = {**deployment(0, 2, current=2), "metadata": {"generation": 2}}
    c = by_type(compute_conditions(bm(0), down, [pod("a"), pod("b")]))
    assert (c["Progressing"].status, c["Progressing"].reason) == ("True", "RolloutPending")
    c = by_type(compute_conditions(bm(0), {**unseen, "status": {"replicas": 1}}, [pod("a")]))
    assert (c["Progressing"].status, c["Progressing"].reason) == ("True", "RolloutPending")


def test_desired_comes_from_the_deployment_once_it_exists() -> None:
    # The tuner may have set the Deployment's count; readiness is judged against it.
    c = by_type(compute_conditions(bm(replicas=1), deployment(3, 1), []))
    assert c["Ready"].status == "False" and "1/3" in c["Ready"].message


def test_gpu_shortage_reports_gpus_missing() -> None:
    pods = [pod("a", gpus=2), unschedulable("b", gpus=2), unschedulable("c", gpus=2)]
    c = by_type(compute_conditions(bm(3, gpus=2), deployment(3, 1), pods))
    cap = c["CapacityLimited"]
    assert (cap.status, cap.reason) == ("True", "InsufficientGPU")
    assert cap.message.startswith("4 GPUs missing: 2 pods Pending")
    assert "Insufficient nvidia.com/gpu" in cap.message


def test_gpu_count_falls_back_to_spec_when_pod_has_no_limit() -> None:
    bare = unschedulable("b")
    bare["spec"]["containers"][0]["resources"] = {}
    cap = by_type(compute_conditions(bm(2, gpus=3), deployment(2, 1), [bare]))["CapacityLimited"]
    assert cap.message.startswith("3 GPUs missing: 1 pod Pending")


def test_other_unschedulable_reason_is_capacity_limited_without_gpu_count() -> None:
    p = unschedulable("b", message="0/2 nodes are available: 2 Insufficient cpu.")
    cap = by_type(compute_conditions(bm(2), deployment(2, 1), [p]))["CapacityLimited"]
    assert (cap.status, cap.reason) == ("True", "Unschedulable")
    assert "Insufficient cpu" in cap.message and "GPU" not in cap.message


def test_terminating_and_scheduled_pending_pods_do_not_limit_capacity() -> None:
    gone = unschedulable("x")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    starting = pod("y", "Pending")  # scheduled, pulling the image
    cap = by_type(compute_conditions(bm(2), deployment(2, 1), [gone, starting]))["CapacityLimited"]
    assert cap.status == "False"


@pytest.mark.parametrize(
    ("dep_extra", "pods", "reason"),
    [
        ({"conditions": [{"type": "ReplicaFailure", "status": "True", "message": "quota"}]}, [],
         "ReplicaFailure"),
        ({"conditions": [{"type": "Progressing", "status": "False",
                          "reason": "ProgressDeadlineExceeded", "message": "too slow"}]}, [],
         "ProgressDeadlineExceeded"),
        ({}, [pod("a", containerStatuses=[{"name": "t", "state": {"waiting": {
            "reason": "CrashLoopBackOff", "message": "back-off"}}}])], "CrashLoopBackOff"),
    ],
)  # fmt: skip
def test_degraded_reasons(dep_extra: dict[str, Any], pods: list[Any], reason: str) -> None:
    c = by_type(compute_conditions(bm(1), deployment(1, 0, **dep_extra), pods))
    assert (c["Degraded"].status, c["Degraded"].reason) == ("True", reason)


def test_apply_error_wins_as_degraded() -> None:
    c = by_type(
        compute_conditions(bm(1), deployment(1, 1), [], failure=("ApplyFailed", "HTTP 422: bad"))
    )
    assert (c["Degraded"].status, c["Degraded"].reason, c["Degraded"].message) == (
        "True",
        "ApplyFailed",
        "HTTP 422: bad",
    )


def test_status_fields_and_selector() -> None:
    s = compute_status(bm(2), SELECTOR, deployment(2, 1, current=2), [], T0)
    assert s["replicas"] == 2 and s["readyReplicas"] == 1
    assert s["selector"] == "batchop.io/batchedmodel=resnet"
    assert s["observedGeneration"] == 3
    assert all(c["observedGeneration"] == 3 for c in s["conditions"])
    assert all(c["lastTransitionTime"] == "2026-01-02T03:04:05Z" for c in s["conditions"])


def test_last_transition_time_kept_while_status_unchanged() -> None:
    first = compute_status(bm(2), SELECTOR, deployment(2, 1), [], T0)
    later = T0 + timedelta(minutes=5)
    # Nothing flipped five minutes later: the stored times stay.
    second = compute_status(stored(first), SELECTOR, deployment(2, 1), [], later)
    assert second["conditions"] == first["conditions"]
    # Ready flips: its time moves, the unchanged ones keep theirs.
    third = compute_status(stored(second), SELECTOR, deployment(2, 2), [], later)
    t = {c["type"]: c["lastTransitionTime"] for c in third["conditions"]}
    assert t["Ready"] == format_time(later) and t["Progressing"] == format_time(later)
    assert t["Degraded"] == format_time(T0) and t["CapacityLimited"] == format_time(T0)


def test_conditions_of_the_tuner_are_kept() -> None:
    slo = {
        "type": "SLOMet",
        "status": "True",
        "reason": "WithinSLO",
        "message": "p99 20ms",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    other = {"type": "Custom", "status": "True", "reason": "X", "message": "",
             "lastTransitionTime": "2025-01-01T00:00:00Z"}  # fmt: skip
    s = compute_status(bm(1, conditions=[other, slo]), SELECTOR, deployment(1, 1), [], T0)
    types = [c["type"] for c in s["conditions"]]
    assert types == ["Ready", "Progressing", "Degraded", "SLOMet", "CapacityLimited", "Custom"]
    assert slo in s["conditions"] and other in s["conditions"]


def test_status_differs_only_when_a_field_changes() -> None:
    s = compute_status(bm(1), SELECTOR, deployment(1, 1), [], T0)
    stored = {**s, "metrics": {"requestsPerSecond": 3.0}}
    assert not status_differs(stored, s)
    assert status_differs({**stored, "readyReplicas": 0}, s)
    assert status_differs(None, s)


condition_status = st.sampled_from(["True", "False"])


@given(st.lists(st.tuples(st.sampled_from(["Ready", "Degraded"]), condition_status), max_size=6))
def test_transition_time_moves_exactly_when_status_flips(steps: list[tuple[str, str]]) -> None:
    from batchop.controller.status import Condition

    conds: list[dict[str, Any]] = []
    last: dict[str, tuple[str, str]] = {}
    for i, (ctype, status) in enumerate(steps):
        now = T0 + timedelta(seconds=i)
        conds = merge_conditions(conds, [Condition(ctype, status, "R", "m")], now, None)
        if last.get(ctype, ("", ""))[0] != status:
            last[ctype] = (status, format_time(now))
        got = {c["type"]: (c["status"], c["lastTransitionTime"]) for c in conds}
        assert got == last


def test_selector_string_is_sorted_and_stable() -> None:
    assert selector_string({"b": "2", "a": "1"}) == "a=1,b=2"
