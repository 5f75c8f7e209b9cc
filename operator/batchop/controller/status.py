"""A BatchedModel's status, computed from what the cluster shows. Pure: no I/O.

The operator owns `observedGeneration`, `replicas`, `readyReplicas`, `selector` and the
conditions Ready, Progressing, Degraded and CapacityLimited. The tuning loop owns the rest
of the status (delay, metrics, lastDecision, SLOMet, MetricsAvailable), so the patch built
here carries only the operator's fields and keeps every other condition as it found it.

Conditions follow metav1.Condition: `lastTransitionTime` moves only when `status` flips, so
"Ready since" stays true across operator restarts and repeated reconciles.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from batchop.api.constants import CONDITION_TYPES

GPU_RESOURCE = "nvidia.com/gpu"
OWNED_CONDITIONS = ("Ready", "Progressing", "Degraded", "CapacityLimited")

# Container waiting reasons that will not fix themselves: the model is degraded.
_BROKEN_WAITING = {
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}
_MESSAGE_MAX = 300


@dataclass(frozen=True)
class Condition:
    """One metav1.Condition, without the transition time (that comes from history)."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str


def format_time(when: datetime) -> str:
    """metav1.Time: RFC 3339 in UTC with second precision."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def selector_string(labels: Mapping[str, str]) -> str:
    """The label selector in the string form the scale subresource and `kubectl` expect."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _get(obj: Mapping[str, Any] | None, *path: str, default: Any = None) -> Any:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping) or key not in cur:
            return default
        cur = cur[key]
    return default if cur is None else cur


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _short(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= _MESSAGE_MAX else text[: _MESSAGE_MAX - 1] + "…"


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """nvidia.com/gpu the pod asks for (limits, else requests, summed over its containers)."""
    total = 0
    for container in _get(pod, "spec", "containers", default=[]):
        res = container.get("resources") or {}
        value = (res.get("limits") or {}).get(
            GPU_RESOURCE, (res.get("requests") or {}).get(GPU_RESOURCE, 0)
        )
        try:
            total += int(str(value))
        except ValueError:
            continue
    return total


def _live(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pods if not _get(p, "metadata", "deletionTimestamp")]


def _unschedulable(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's message when the pod is Pending because no node fits, else None."""
    if _get(pod, "status", "phase") != "Pending":
        return None
    for cond in _get(pod, "status", "conditions", default=[]):
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return str(cond.get("message") or "Unschedulable")
    return None


def capacity_condition(pods: Sequence[Mapping[str, Any]], gpus_per_replica: int) -> Condition:
    """CapacityLimited: are pods Pending because the cluster has no room, and how much is short.

    The GPUs missing are the GPUs the unschedulable pods ask for: that many more free
    `nvidia.com/gpu` would let every one of them start.
    """
    stuck = [(p, msg) for p in _live(pods) if (msg := _unschedulable(p)) is not None]
    if not stuck:
        return Condition("CapacityLimited", "False", "Schedulable", "every pod fits the cluster")
    gpu_stuck = [(p, m) for p, m in stuck if GPU_RESOURCE in m]
    if gpu_stuck:
        missing = sum(pod_gpus(p) or gpus_per_replica for p, _ in gpu_stuck)
        return Condition(
            "CapacityLimited",
            "True",
            "InsufficientGPU",
            _short(
                f"{_plural(missing, 'GPU')} missing: {_plural(len(gpu_stuck), 'pod')} Pending "
                f"for lack of {GPU_RESOURCE} (scheduler: {gpu_stuck[0][1]})"
            ),
        )
    return Condition(
        "CapacityLimited",
        "True",
        "Unschedulable",
        _short(f"{_plural(len(stuck), 'pod')} Pending, unschedulable (scheduler: {stuck[0][1]})"),
    )


def _broken_pod(pods: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    for pod in _live(pods):
        statuses = list(_get(pod, "status", "containerStatuses", default=[]))
        statuses += list(_get(pod, "status", "initContainerStatuses", default=[]))
        for cs in statuses:
            waiting = _get(cs, "state", "waiting", default={})
            reason = waiting.get("reason")
            if reason in _BROKEN_WAITING:
                name = _get(pod, "metadata", "name", default="?")
                detail = waiting.get("message") or ""
                return reason, _short(f"pod {name} container {cs.get('name')}: {reason} {detail}")
    return None


def _deployment_condition(deployment: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    for cond in _get(deployment, "status", "conditions", default=[]):
        if cond.get("type") == type_:
            return cond
    return {}


def desired_replicas(bm: Mapping[str, Any], deployment: Mapping[str, Any] | None) -> int:
    """What should run: the Deployment's count once it exists, else the spec's."""
    if deployment is not None and _get(deployment, "spec", "replicas") is not None:
        return int(_get(deployment, "spec", "replicas"))
    return int(_get(bm, "spec", "scaling", "replicas", default=1))


def compute_conditions(
    bm: Mapping[str, Any],
    deployment: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    failure: tuple[str, str] | None = None,
) -> list[Condition]:
    """Ready, Progressing, Degraded and CapacityLimited for one BatchedModel.

    `failure` is the operator's own (reason, message) when its last reconcile failed.
    """
    gpus = int(_get(bm, "spec", "server", "gpus", default=1))
    want = desired_replicas(bm, deployment)
    ready = int(_get(deployment, "status", "readyReplicas", default=0))
    updated = int(_get(deployment, "status", "updatedReplicas", default=0))
    current = int(_get(deployment, "status", "replicas", default=0))
    generation = int(_get(deployment, "metadata", "generation", default=0))
    seen = int(_get(deployment, "status", "observedGeneration", default=0))

    if deployment is None:
        readiness = Condition(
            "Ready", "False", "DeploymentMissing", "the Deployment is not created yet"
        )
    elif want == 0:
        readiness = Condition("Ready", "True", "ScaledToZero", "0 replicas requested")
    elif ready >= want:
        readiness = Condition("Ready", "True", "AllReplicasReady", f"{ready}/{want} replicas ready")
    else:
        readiness = Condition(
            "Ready", "False", "ReplicasNotReady", f"{ready}/{want} replicas ready"
        )

    if deployment is None:
        progress = Condition("Progressing", "True", "Creating", "creating the Deployment")
    elif want == 0 and current == 0 and not _live(pods):
        # Nothing to roll out or to stop, whether or not the controller manager has seen
        # the Deployment's spec yet: saying RolloutPending until it has would cost every
        # new model at 0 replicas a second status write (and a watch event) for no news.
        progress = Condition("Progressing", "False", "ScaledToZero", "0 replicas, none running")
    elif seen < generation:
        progress = Condition(
            "Progressing", "True", "RolloutPending", "the Deployment's new spec is not seen yet"
        )
    elif updated < want:
        progress = Condition(
            "Progressing", "True", "RollingOut", f"{updated}/{want} replicas on the current spec"
        )
    elif current > want:
        progress = Condition(
            "Progressing", "True", "ScalingDown", f"{current} replicas, going to {want}"
        )
    elif ready < want:
        progress = Condition(
            "Progressing", "True", "WaitingForReplicas", f"{ready}/{want} replicas ready"
        )
    else:
        progress = Condition("Progressing", "False", "Stable", f"{want} replicas up to date")

    deadline = _deployment_condition(deployment or {}, "Progressing")
    replica_failure = _deployment_condition(deployment or {}, "ReplicaFailure")
    broken = _broken_pod(pods)
    if failure:
        degraded = Condition("Degraded", "True", failure[0], _short(failure[1]))
    elif replica_failure.get("status") == "True":
        message = str(replica_failure.get("message") or "")
        degraded = Condition("Degraded", "True", "ReplicaFailure", _short(message))
    elif deadline.get("reason") == "ProgressDeadlineExceeded":
        degraded = Condition(
            "Degraded",
            "True",
            "ProgressDeadlineExceeded",
            _short(str(deadline.get("message") or "")),
        )
    elif broken:
        degraded = Condition("Degraded", "True", broken[0], broken[1])
    else:
        degraded = Condition("Degraded", "False", "AsExpected", "no failure seen")

    return [readiness, progress, degraded, capacity_condition(pods, gpus)]


def merge_conditions(
    existing: Sequence[Mapping[str, Any]],
    updates: Sequence[Condition],
    now: datetime,
    generation: int | None,
) -> list[dict[str, Any]]:
    """Existing conditions with `updates` applied, metav1 style.

    A condition whose status is unchanged keeps its lastTransitionTime; conditions not in
    `updates` (owned by someone else) are kept untouched. The list is in CONDITION_TYPES
    order, then any unknown types in their original order.
    """
    by_type: dict[str, dict[str, Any]] = {
        str(c.get("type")): dict(c) for c in existing if c.get("type")
    }
    stamp = format_time(now)
    for cond in updates:
        old = by_type.get(cond.type)
        new: dict[str, Any] = {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message,
            "lastTransitionTime": stamp,
        }
        if old and old.get("status") == cond.status and old.get("lastTransitionTime"):
            new["lastTransitionTime"] = old["lastTransitionTime"]
        if generation is not None:
            new["observedGeneration"] = generation
        by_type[cond.type] = new
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    original = [str(c.get("type")) for c in existing if c.get("type")]
    return sorted(
        by_type.values(),
        key=lambda c: (
            order.get(c["type"], len(order)),
            original.index(c["type"]) if c["type"] in original else 0,
        ),
    )


def compute_status(
    bm: Mapping[str, Any],
    selector: Mapping[str, str],
    deployment: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    now: datetime,
    failure: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The status fields the operator owns, ready for a merge patch of the status subresource."""
    generation = _get(bm, "metadata", "generation")
    existing = _get(bm, "status", "conditions", default=[])
    conditions = merge_conditions(
        existing, compute_conditions(bm, deployment, pods, failure), now, generation
    )
    status: dict[str, Any] = {
        "replicas": int(_get(deployment, "status", "replicas", default=0)),
        "readyReplicas": int(_get(deployment, "status", "readyReplicas", default=0)),
        "selector": selector_string(selector),
        "conditions": conditions,
    }
    if generation is not None:
        status["observedGeneration"] = int(generation)
    return status


# Fields that ride on a status write but never cause one: status.learned changes every
# tick (the sizing labels a tick each time), and a write per tick per model is what the
# tuner avoids (no API call in a steady tick).
RIDERS = ("learned",)


# Objects a patch merges into rather than replaces (a merge patch keeps the keys it omits):
# status.handled holds kopf's progress beside the configuration the handlers write.
MERGED = ("handled",)


def status_differs(current: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> bool:
    """Whether writing `patch` would change the stored status (so a write is needed)."""
    current = current or {}
    for key, value in patch.items():
        if key in RIDERS:
            continue
        if key in MERGED and isinstance(value, Mapping):
            stored = current.get(key) or {}
            if any(stored.get(k) != v for k, v in value.items()):
                return True
        elif current.get(key) != value:
            return True
    return False
